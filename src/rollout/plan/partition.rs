//! The partition style (`strategy.canary` without `enableExtraWorkloadForCanary`, Kruise's
//! default): no second LWS. Each step's groups move to the new template inside the user's LWS,
//! highest ordinals first, through the release partition the BatchRelease writes on top of the
//! hold (`batchrelease::partitionstyle`); the user's `rolloutStrategy` is never written, so
//! Argo CD sees no drift. What differs from the canary style is the BatchRelease it asks for
//! and the finalising after a missed deadline; the success and cancel orders are the canary's.
//!
//! | reason | order |
//! |---|---|
//! | success | ResumeWorkload (hold and release partition removed in one write: the LWS rolls the rest by its own rolloutStrategy; waits until every group is updated and ready) → … → ReleaseWorkloadControl |
//! | rollback (template reverted) | the LWS webhook froze every group in the revert's admission; RouteTrafficToStable → ResumeWorkload (both annotations removed: the moved groups roll back by the LWS's own strategy) → ReleaseWorkloadControl → … |
//! | disable, delete | as rollback: the moved groups stay on the new template, the LWS's spec has it |
//! | third template mid-release | RouteTrafficToStable → ReleaseWorkloadControl, then a new release from step 1 (the groups moved to the middle template stay on it until the new partition reaches them) |
//! | deadline, automatic rollback | RouteTrafficToStable → ReleaseWorkloadControl (the release partition removed, the hold kept: the moved groups go back to the held revision) → … |
//!
//! No traffic routing yet: requests reach the moved groups through the user's own Service, in
//! proportion to the groups (admission refuses `trafficRoutings` with this style).

use crate::api::batchrelease::{BatchRelease, FinalizingPolicy, RollingStyle};

use super::{Draft, batch};

/// The BatchRelease the Rollout wants: one batch per step, the user's groups moved in place,
/// run up to `partition` (0-based; `None` = finish), owned by the Rollout.
pub fn batch_release(
    d: &Draft<'_>,
    partition: Option<i32>,
    policy: Option<FinalizingPolicy>,
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
            patch_pod_template_metadata: None,
            rolling_style: RollingStyle::Partition,
            extra_workload: false,
        },
        partition,
        policy,
    )
}
