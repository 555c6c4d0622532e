//! The canary style with a canary LWS beside the stable one (`enableExtraWorkloadForCanary:
//! true`): what differs from another style is the BatchRelease it asks for (one batch per
//! step, a canary LWS of that many groups) and the orders it finishes in.
//!
//! | reason | order |
//! |---|---|
//! | success | ResumeWorkload (hold released, stable LWS rolls; waits until every stable group is updated and ready) → RouteTrafficToStable → RestoreStableService → RemoveCanaryService → ReleaseWorkloadControl (BatchRelease, and so the canary LWS, deleted) |
//! | rollback, disable, delete | RouteTrafficToStable → ResumeWorkload → ReleaseWorkloadControl → RestoreStableService → RemoveCanaryService |
//! | third template mid-release | RouteTrafficToStable → ReleaseWorkloadControl, then a new release from step 1 (stable Service stays pinned) |
//!
//! Kruise's success order restores the stable Service first and resumes the workload last;
//! for an LWS that would send traffic to stable groups while they roll, so ours resumes first
//! and moves traffic only when the stable side is whole. Disable and delete use the rollback
//! order (traffic off the canary before anything else) and do not wait for the stable LWS to
//! roll: it rolls by its own rolloutStrategy, and a Rollout being deleted must not hang on it.

use crate::api::batchrelease::{BatchRelease, FinalizingPolicy, RollingStyle};
use crate::api::rollout::FinalisingStep;

use super::reason::Reason;
use super::{Draft, batch};

static SUCCESS_ORDER: [FinalisingStep; 5] = [
    FinalisingStep::ResumeWorkload,
    FinalisingStep::RouteTrafficToStable,
    FinalisingStep::RestoreStableService,
    FinalisingStep::RemoveCanaryService,
    FinalisingStep::ReleaseWorkloadControl,
];
/// Rollback, disable, delete: traffic off the new side first (blue-green shares it).
pub static CANCEL_ORDER: [FinalisingStep; 5] = [
    FinalisingStep::RouteTrafficToStable,
    FinalisingStep::ResumeWorkload,
    FinalisingStep::ReleaseWorkloadControl,
    FinalisingStep::RestoreStableService,
    FinalisingStep::RemoveCanaryService,
];
/// A third template mid-release (blue-green shares it).
pub static CONTINUOUS_ORDER: [FinalisingStep; 2] = [
    FinalisingStep::RouteTrafficToStable,
    FinalisingStep::ReleaseWorkloadControl,
];

/// The order of finalising steps for a reason.
pub fn finalising_order(reason: Reason) -> &'static [FinalisingStep] {
    match reason {
        Reason::Success => &SUCCESS_ORDER,
        Reason::Rollback | Reason::Disabled | Reason::Deleting => &CANCEL_ORDER,
        Reason::Continuous => &CONTINUOUS_ORDER,
        Reason::AutoRollback => &super::deadline::ROLLBACK_ORDER,
    }
}

/// The BatchRelease the Rollout wants: one batch per step, run up to `partition` (0-based;
/// `None` = finish), owned by the Rollout.
pub fn batch_release(
    d: &Draft<'_>,
    partition: Option<i32>,
    policy: Option<FinalizingPolicy>,
) -> BatchRelease {
    of_strategy(d, partition, policy, true)
}

/// The BatchRelease of `strategy.canary`: with a canary LWS (`extra_workload`), or, partition
/// style, the user's groups moved in place (`patchPodTemplateMetadata` then goes on their
/// leader pods).
pub fn of_strategy(
    d: &Draft<'_>,
    partition: Option<i32>,
    policy: Option<FinalizingPolicy>,
    extra_workload: bool,
) -> BatchRelease {
    let canary = d
        .obs
        .rollout
        .spec
        .strategy
        .canary
        .clone()
        .unwrap_or_default();
    batch::batch_release(
        d,
        batch::Shape {
            steps: &canary.steps,
            failure_threshold: canary.failure_threshold,
            // The canary LWS's leader template, or (partition style) the moved leaders.
            patch_pod_template_metadata: canary.patch_pod_template_metadata,
            rolling_style: if extra_workload {
                RollingStyle::Canary
            } else {
                RollingStyle::Partition
            },
            extra_workload,
        },
        partition,
        policy,
    )
}
