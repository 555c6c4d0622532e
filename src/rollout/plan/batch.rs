//! The BatchRelease a Rollout asks for, whatever its style: one batch per step, run up to a
//! partition, owned by the Rollout. The style says what goes in ([`Shape`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use crate::api::batchrelease::{
    BatchRelease, BatchReleaseSpec, FinalizingPolicy, ReleaseBatch, ReleasePlan, RollingStyle,
};
use crate::api::rollout::{CanaryStep, PatchPodTemplateMetadata, Rollout};

use super::Draft;

/// What a style puts in its BatchRelease.
pub struct Shape<'a> {
    /// The Rollout's steps: one batch each.
    pub steps: &'a [CanaryStep],
    /// Groups of a batch that may be not ready.
    pub failure_threshold: Option<IntOrString>,
    /// Labels and annotations for the second LWS's pod template.
    pub patch_pod_template_metadata: Option<PatchPodTemplateMetadata>,
    /// `releasePlan.rollingStyle`.
    pub rolling_style: RollingStyle,
    /// `releasePlan.enableExtraWorkloadForCanary`.
    pub extra_workload: bool,
}

/// The BatchRelease of `shape`, run up to batch `partition` (0-based; `None` = finish) and
/// finalised by `policy`.
pub fn batch_release(
    d: &Draft<'_>,
    shape: Shape<'_>,
    partition: Option<i32>,
    policy: Option<FinalizingPolicy>,
) -> BatchRelease {
    let rollout = &d.obs.rollout;
    let rollout_id = d
        .plan
        .status
        .canary_status
        .as_ref()
        .and_then(|c| c.common.observed_rollout_id.clone());
    BatchRelease {
        metadata: ObjectMeta {
            name: Some(rollout.name_any()),
            namespace: rollout.namespace(),
            owner_references: Some(vec![OwnerReference {
                api_version: Rollout::api_version(&()).into_owned(),
                kind: Rollout::kind(&()).into_owned(),
                name: rollout.name_any(),
                uid: rollout.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: BatchReleaseSpec {
            workload_ref: rollout.spec.workload_ref.clone(),
            release_plan: ReleasePlan {
                batches: Some(
                    shape
                        .steps
                        .iter()
                        .map(|s| ReleaseBatch {
                            canary_replicas: s.replicas.clone().unwrap_or(IntOrString::Int(0)),
                        })
                        .collect(),
                ),
                batch_partition: partition,
                rollout_id,
                failure_threshold: shape.failure_threshold,
                finalizing_policy: policy,
                patch_pod_template_metadata: shape.patch_pod_template_metadata,
                rolling_style: Some(shape.rolling_style),
                enable_extra_workload_for_canary: shape.extra_workload,
            },
        },
        status: None,
    }
}
