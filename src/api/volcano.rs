//! Volcano's `PodGroup` (`scheduling.volcano.sh/v1beta1`), as far as the LWS controller writes
//! and reads it: upstream LWS's Volcano gang scheduling (docs/lws.md, "Gang scheduling") makes
//! one per group incarnation, and Volcano's scheduler binds a group's pods only once
//! `minMember` of them (and `minResources`) fit. Volcano serves the CRD; this project never
//! installs it (`schema = "disabled"`: no CRD is generated from this type).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The API group of Volcano's scheduling kinds.
pub const GROUP: &str = "scheduling.volcano.sh";
/// The version of [`VolcanoPodGroup`] upstream LWS writes.
pub const VERSION: &str = "v1beta1";
/// Pod annotation naming the Volcano PodGroup a pod belongs to (Volcano's
/// `KubeGroupNameAnnotationKey`).
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// LWS annotation naming the Volcano queue of its groups' PodGroups (Volcano's
/// `QueueNameAnnotationKey`).
pub const QUEUE_NAME_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// LWS annotations with this prefix are copied onto its PodGroups.
pub const ANNOTATION_PREFIX: &str = "volcano.sh/";

/// `spec` of a Volcano PodGroup: the fields upstream LWS sets (Volcano defaults the others).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "PodGroup",
    root = "VolcanoPodGroup",
    plural = "podgroups",
    namespaced,
    schema = "disabled",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupSpec {
    /// Pods that must be schedulable together before any of them binds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_member: i32,
    /// The Volcano queue (empty: Volcano's default queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Resources the whole group needs before any pod binds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// Priority class of the group (not set by LWS; kept when read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}
