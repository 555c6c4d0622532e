//! `LeaderWorkerSet` (`leaderworkerset.x-k8s.io/v1`): the same API as upstream LWS v0.9, field
//! for field and with the same JSON names, so existing manifests, Kueue (docs/kueue.md) and HPA
//! work unchanged.
//!
//! Differences from upstream's CRD are deliberate and listed in `docs/lws.md`: validations that
//! upstream only checks in its webhook are also CEL rules here, the defaults upstream's
//! defaulting webhook fills in are CRD defaults.

// `printcolumn(...)` entries repeat keys like `type_`; that is the derive's syntax, not a mistake.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::{
    api::{
        apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy,
        core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PodTemplateSpec},
    },
    apimachinery::pkg::{
        apis::meta::v1::{Condition, ObjectMeta},
        util::intstr::IntOrString,
    },
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// API group of LeaderWorkerSet.
pub const GROUP: &str = "leaderworkerset.x-k8s.io";

/// Desired state of a LeaderWorkerSet: `replicas` groups of `size` pods, one leader each.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "leaderworkerset.x-k8s.io",
    version = "v1",
    kind = "LeaderWorkerSet",
    plural = "leaderworkersets",
    shortname = "lws",
    namespaced,
    status = "LeaderWorkerSetStatus",
    derive = "Default",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.hpaPodSelector"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Up-to-date", type_ = "integer", json_path = ".status.updatedReplicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new(
        "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    ).message(
        "metadata.name must be a DNS-1035 label (at most 63 lowercase letters, digits or '-', starting with a letter): it names the headless Service"
    ),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "!has(self.replicas) || !has(self.leaderWorkerTemplate.size) || self.replicas * self.leaderWorkerTemplate.size <= 2147483647"
    ).message("the product of replicas and worker replicas must not exceed 2147483647"),
    validation = Rule::new(
        "!has(self.rolloutStrategy) || !has(self.rolloutStrategy.rollingUpdateConfiguration) || (has(self.replicas) && self.replicas == 0) || \
         (has(self.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable) && \
            (type(self.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable) == int \
              ? self.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable > 0 \
              : int(string(self.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable).replace('%', '')) * (has(self.replicas) ? self.replicas : 1) >= 100)) || \
         (has(self.rolloutStrategy.rollingUpdateConfiguration.maxSurge) && \
            (type(self.rolloutStrategy.rollingUpdateConfiguration.maxSurge) == int \
              ? self.rolloutStrategy.rollingUpdateConfiguration.maxSurge > 0 \
              : int(string(self.rolloutStrategy.rollingUpdateConfiguration.maxSurge).replace('%', '')) > 0))"
    ).message(
        "rolloutStrategy.rollingUpdateConfiguration: maxUnavailable must not be 0 when maxSurge is 0 (after scaling percentages against replicas), unless replicas is 0"
    )
)]
pub struct LeaderWorkerSetSpec {
    /// Number of groups, 0 to 1,000,000. Defaults to 1; the scale subresource writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1, "minimum" = 0, "maximum" = 1000000))]
    #[x_kube(
        validation = Rule::new("self >= 0").message("replicas must be equal or greater than 0"),
        validation = Rule::new("self <= 1000000").message("replicas must be equal or less than 1000000")
    )]
    pub replicas: Option<i32>,

    /// Templates of the leader and the workers of one group.
    pub leader_worker_template: LeaderWorkerTemplate,

    /// How the groups are updated when the template changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"type": "RollingUpdate"}))]
    pub rollout_strategy: Option<RolloutStrategy>,

    /// When worker pods are created: with the leader pod, or once it is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "LeaderCreated"))]
    pub startup_policy: Option<StartupPolicy>,

    /// How pods get their DNS subdomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"subdomainPolicy": "Shared"}))]
    pub network_config: Option<NetworkConfig>,
}

/// The pod templates and the shape of one group.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "!has(self.subGroupPolicy) || !has(self.subGroupPolicy.subGroupSize) || self.subGroupPolicy.subGroupSize < 1 || \
         (has(self.size) ? self.size : 1) % self.subGroupPolicy.subGroupSize == 0 || \
         ((has(self.size) ? self.size : 1) - 1) % self.subGroupPolicy.subGroupSize == 0"
    ).message("size or size - 1 must be divisible by subGroupSize"),
    validation = Rule::new(
        "!has(self.subGroupPolicy) || !has(self.subGroupPolicy.subGroupSize) || self.subGroupPolicy.subGroupSize <= (has(self.size) ? self.size : 1)"
    ).message("subGroupSize cannot be larger than size"),
    validation = Rule::new(
        "!has(self.subGroupPolicy) || !has(self.subGroupPolicy.subGroupSize) || self.subGroupPolicy.subGroupSize < 1 || \
         !has(self.subGroupPolicy.subGroupPolicyType) || self.subGroupPolicy.subGroupPolicyType != 'LeaderExcluded' || \
         ((has(self.size) ? self.size : 1) - 1) % self.subGroupPolicy.subGroupSize == 0"
    ).message("size-1 must be divisible by subGroupSize when using LeaderExcluded"),
    validation = Rule::new("has(self.subGroupPolicy) || !has(oldSelf.subGroupPolicy)")
        .message("cannot remove subGroupSize after enabled"),
    validation = Rule::new("!has(self.subGroupPolicy) || has(oldSelf.subGroupPolicy)")
        .message("cannot enable subGroupSize after the lws is already created"),
)]
pub struct LeaderWorkerTemplate {
    /// Template of the leader pod; the worker template is used when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::pod_template_spec")]
    pub leader_template: Option<PodTemplateSpec>,

    /// Template of the worker pods.
    #[schemars(schema_with = "schema::pod_template_spec")]
    pub worker_template: PodTemplateSpec,

    /// Pods per group, the leader included. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    #[x_kube(validation = Rule::new("self >= 1").message("size must be equal or greater than 1"))]
    pub size: Option<i32>,

    /// What happens to a group when one of its pods restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "RecreateGroupOnPodRestart"))]
    pub restart_policy: Option<RestartPolicy>,

    /// Splits a group into subgroups for placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_policy: Option<SubGroupPolicy>,

    /// Volume claims added to both the leader and the worker StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::volume_claim_templates")]
    pub volume_claim_templates: Option<Vec<PersistentVolumeClaimTemplate>>,

    /// Retention of the claims above, copied into both StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_retention_policy:
        Option<StatefulSetPersistentVolumeClaimRetentionPolicy>,
}

/// A PVC as it appears in a template: like `PersistentVolumeClaim`, but `apiVersion` and `kind`
/// stay absent unless the user wrote them (k8s-openapi's type always emits them), so manifests
/// round-trip unchanged.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimTemplate {
    /// Usually absent in templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Usually absent in templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name (the volume name pods mount), labels and annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
    /// Ignored in templates; kept so nothing a user wrote is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PersistentVolumeClaimStatus>,
}

/// What the controller does when a pod of a group restarts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// Recreate the whole group when any of its pods restarts or is deleted.
    #[default]
    RecreateGroupOnPodRestart,
    /// Like `RecreateGroupOnPodRestart`, but only once every pod of the group has started (none
    /// is Pending), so a group still pulling images is not recreated in a loop (v0.9).
    RecreateGroupAfterStart,
    /// Deprecated alias of `None`.
    Default,
    /// Leave restarts to the StatefulSet.
    None,
}

/// Subgroups within a group.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "(has(self.subGroupSize) == has(oldSelf.subGroupSize)) && (!has(self.subGroupSize) || self.subGroupSize == oldSelf.subGroupSize)"
).message("subGroupSize is immutable"))]
pub struct SubGroupPolicy {
    /// Whether the leader counts towards the first subgroup.
    #[serde(
        default,
        rename = "subGroupPolicyType",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = "LeaderWorker"))]
    pub type_: Option<SubGroupPolicyType>,

    /// Pods per subgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("subGroupSize must be equal or greater than 1"))]
    pub sub_group_size: Option<i32>,
}

/// Whether the leader belongs to a subgroup.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SubGroupPolicyType {
    /// The leader is part of subgroup 0.
    #[default]
    LeaderWorker,
    /// The leader is in no subgroup.
    LeaderExcluded,
}

/// How groups are replaced when the template changes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Only `RollingUpdate` exists (the default when a manifest leaves it out, as upstream's
    /// CRD defaults it).
    #[serde(rename = "type")]
    #[schemars(extend("default" = "RollingUpdate"))]
    pub type_: RolloutStrategyType,

    /// Parameters of the rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub rolling_update_configuration: Option<RollingUpdateConfiguration>,
}

/// The update strategy kind.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RolloutStrategyType {
    /// Replace groups a few at a time, highest index first.
    #[default]
    RollingUpdate,
}

/// Partition, maxUnavailable and maxSurge, in groups.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateConfiguration {
    /// Groups with an index below the partition keep the old template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    #[x_kube(validation = Rule::new("self >= 0").message("partition must be greater than or equal to 0"))]
    pub partition: Option<i32>,

    /// Groups that may be unavailable during the update (a percentage rounds down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    #[x_kube(validation = Rule::new(schema::INT_OR_PERCENT_RULE).message(
        "maxUnavailable must be an integer >= 0 or a percentage like '25%' no greater than 100%"
    ))]
    pub max_unavailable: Option<IntOrString>,

    /// Extra groups that may be created during the update (a percentage rounds up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    #[x_kube(validation = Rule::new(schema::INT_OR_PERCENT_RULE).message(
        "maxSurge must be an integer >= 0 or a percentage like '25%' no greater than 100%"
    ))]
    pub max_surge: Option<IntOrString>,
}

/// When workers are created.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StartupPolicy {
    /// Workers are created as soon as the leader pod exists.
    #[default]
    LeaderCreated,
    /// Workers are created once the leader pod is Ready.
    LeaderReady,
}

/// DNS naming of the group's pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// One headless Service for all groups, or one per group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Shared"))]
    pub subdomain_policy: Option<SubdomainPolicy>,
}

/// Headless Service layout.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SubdomainPolicy {
    /// One Service named after the LWS.
    #[default]
    Shared,
    /// One Service per group.
    UniquePerReplica,
}

/// Observed state of a LeaderWorkerSet.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetStatus {
    /// `Available`, `Progressing` and `UpdateInProgress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<Condition>>,

    /// Groups whose leader and every worker are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Groups on the current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,

    /// Groups that exist, surge groups included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Label selector of the leader pods, for the scale subresource and HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa_pod_selector: Option<String>,

    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
