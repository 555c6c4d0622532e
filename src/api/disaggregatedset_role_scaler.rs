//! `DisaggregatedSetRoleScaler` (`disaggregatedset.x-k8s.io/v1`, upstream LWS v0.10.0): the
//! scale subresource of one role of a DisaggregatedSet, so an HPA (or KEDA, or `kubectl scale`)
//! can scale that role alone. The DisaggregatedSet controller creates one, named
//! `<set>-<role>`, for each role with `scaling.mode: External`, controlled by the set and
//! labelled with its name and role; it reads `spec.replicas` as the role's replicas and writes
//! the groups it observes (every revision) and a leader-pod selector to the status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

/// Condition type: the scaler is bound to a role of a live set.
pub const READY: &str = "Ready";

/// Desired replicas of the role, written through the scale subresource.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "disaggregatedset.x-k8s.io",
    version = "v1",
    kind = "DisaggregatedSetRoleScaler",
    plural = "disaggregatedsetrolescalers",
    shortname = "dsrs",
    namespaced,
    status = "DisaggregatedSetRoleScalerStatus",
    derive = "Default",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DisaggregatedSetRoleScalerSpec {
    /// The role's replicas (groups). Seeded by the controller: the role's current groups, or 1
    /// for a role without any (an HPA reading 0 would never scale up).
    #[serde(default)]
    #[schemars(extend("default" = 0, "minimum" = 0))]
    pub replicas: i32,
}

/// What the DisaggregatedSet controller observed for the role.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisaggregatedSetRoleScalerStatus {
    /// The role's groups, every revision counted (the HPA's "current").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Selector of the role's leader pods, every revision (one pod per group, so per-pod
    /// metrics average per group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The generation this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<Condition>>,
}

/// `<set>-<role>`.
pub fn name(set: &str, role: &str) -> String {
    format!("{set}-{role}")
}

/// The CRD.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    DisaggregatedSetRoleScaler::crd()
}
