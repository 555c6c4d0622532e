//! `BatchRelease` (`rollouts.kruise.io/v1beta1`): the per-release child of a Rollout that
//! scales or partitions the workload batch by batch. Same JSON names as Kruise Rollout v0.6.

// `printcolumn(...)` entries repeat keys like `type_`; that is the derive's syntax, not a mistake.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Time, util::intstr::IntOrString};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rollout::{ObjectRef, PatchPodTemplateMetadata, RolloutCondition};

/// The batches of one release of one workload.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "rollouts.kruise.io",
    version = "v1beta1",
    kind = "BatchRelease",
    plural = "batchreleases",
    namespaced,
    status = "BatchReleaseStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(name = "KIND", type_ = "string", json_path = ".spec.workloadRef.kind"),
    printcolumn(name = "PHASE", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "BATCH",
        type_ = "integer",
        json_path = ".status.canaryStatus.currentBatch"
    ),
    printcolumn(
        name = "BATCH-STATE",
        type_ = "string",
        json_path = ".status.canaryStatus.batchState"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BatchReleaseSpec {
    /// The workload being released (copied from the Rollout).
    pub workload_ref: ObjectRef,
    /// The batches and how to run them.
    pub release_plan: ReleasePlan,
}

/// Batches, the batch to run up to, and how to finish.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePlan {
    /// One batch per Rollout step; `canaryReplicas` is cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub batches: Option<Vec<ReleaseBatch>>,
    /// 0-based index of the last batch to run; absent means release everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("batchPartition must not be negative"))]
    pub batch_partition: Option<i32>,
    /// A change restarts labelling from batch 0.
    #[serde(default, rename = "rolloutID", skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Updated pods that may be not ready before a batch counts as ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<IntOrString>,
    /// `WaitResume` or `Immediate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizing_policy: Option<FinalizingPolicy>,
    /// Labels and annotations for the canary pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_pod_template_metadata: Option<PatchPodTemplateMetadata>,
    /// `Canary`, `Partition` or `BlueGreen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_style: Option<RollingStyle>,
    /// Deprecated: read only when `rollingStyle` is empty.
    #[serde(default)]
    pub enable_extra_workload_for_canary: bool,
}

/// One batch.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseBatch {
    /// New replicas that should exist after this batch: a number or a percentage.
    pub canary_replicas: IntOrString,
}

/// How the release finishes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FinalizingPolicy {
    /// Let the workload roll the rest, then finish.
    WaitResume,
    /// Finish at once.
    #[default]
    Immediate,
}

/// How new pods are introduced.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RollingStyle {
    /// An extra canary workload beside the stable one.
    #[default]
    Canary,
    /// The stable workload's own partition.
    Partition,
    /// A full-size second workload.
    BlueGreen,
}

impl RollingStyle {
    /// The release style a Rollout's strategy asks for, as Kruise reads it: `blueGreen` is
    /// blue-green; `canary` with `enableExtraWorkloadForCanary` a canary workload beside the
    /// stable one, without it the stable workload's own partition; neither, none.
    pub fn of(strategy: &crate::api::rollout::RolloutStrategy) -> Option<Self> {
        match (&strategy.canary, &strategy.blue_green) {
            (_, Some(_)) => Some(Self::BlueGreen),
            (Some(c), None) if c.enable_extra_workload_for_canary => Some(Self::Canary),
            (Some(_), None) => Some(Self::Partition),
            (None, None) => None,
        }
    }
}

/// Observed state of a BatchRelease.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BatchReleaseStatus {
    /// Conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<RolloutCondition>>,
    /// Progress of the current batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_status: Option<BatchReleaseCanaryStatus>,
    /// Revision of the stable workload at the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// Revision being released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The rollout id this status belongs to.
    #[serde(
        default,
        rename = "observedRolloutID",
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_rollout_id: Option<String>,
    /// Workload replicas seen at the start; -1 when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_workload_replicas: Option<i32>,
    /// Avoids name collisions of created objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// sha256 of the release plan this status was computed against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_release_plan_hash: Option<String>,
    /// `Preparing`, `Progressing`, `Finalizing` or `Completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Human-readable state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Progress of the current batch.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BatchReleaseCanaryStatus {
    /// `Upgrading`, `Verifying` or `Ready`.
    #[serde(
        default,
        rename = "batchState",
        skip_serializing_if = "Option::is_none"
    )]
    pub current_batch_state: Option<String>,
    /// 0-based index of the current batch.
    #[serde(default)]
    pub current_batch: i32,
    /// When the batch became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_ready_time: Option<Time>,
    /// New replicas that exist.
    #[serde(default)]
    pub updated_replicas: i32,
    /// New replicas that are ready.
    #[serde(default)]
    pub updated_ready_replicas: i32,
    /// Rollback-in-batch bookkeeping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_need_update_replicas: Option<i32>,
}
