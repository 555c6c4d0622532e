//! The partition style (`strategy.canary` without `enableExtraWorkloadForCanary`, Kruise's
//! default): no second LWS. Each step's groups move to the new template inside the user's LWS,
//! highest ordinals first, through the release partition the BatchRelease writes on top of the
//! hold (`batchrelease::partition`); the user's `rolloutStrategy` is never written, so
//! Argo CD sees no drift. What differs from the canary style is the BatchRelease it asks for,
//! the success order, the finalising after a missed deadline, and the traffic sides: both are
//! the user's LWS, so the stable Service is pinned to the stable template revision and the
//! canary Service selects the new one (`routing::intent_for`).
//!
//! | reason | order |
//! |---|---|
//! | success | RestoreStableService (the stable Service serves every leader, both revisions, while the route still splits) → RouteTrafficToStable (the user's objects as written) → ResumeWorkload (hold and release partition removed in one write: the LWS rolls the rest by its own rolloutStrategy; waits until every group is updated and ready) → RemoveCanaryService → ReleaseWorkloadControl |
//! | rollback (template reverted) with Kruise's `rollback-in-batch: "true"` and no `trafficRoutings` | not a finalise: the release restarts at step 1 for the old template, and each step moves its share of the moved groups back (the groups already on it need no update), then the success order |
//! | rollback (template reverted) | the LWS webhook froze every group in the revert's admission; RouteTrafficToStable → ResumeWorkload (both annotations removed: the moved groups roll back by the LWS's own strategy) → ReleaseWorkloadControl → … |
//! | disable, delete | as rollback, but the stable Service serves every leader from RouteTrafficToStable on: the LWS rolls every group to the template its spec has |
//! | third template mid-release | RouteTrafficToStable → ReleaseWorkloadControl, then a new release from step 1 (the groups moved to the middle template stay on it until the new partition reaches them) |
//! | deadline, automatic rollback | RouteTrafficToStable → ReleaseWorkloadControl (the release partition removed, the hold kept: the moved groups go back to the held revision) → … |
//!
//! Kruise's success order for partition style also restores the stable Service first: with
//! the canary style's order the stable Service, pinned to the stable revision, would lose its
//! leaders one by one while the LWS rolls them.

use crate::api::batchrelease::{BatchRelease, FinalizingPolicy};
use crate::api::rollout::FinalisingStep;

use super::reason::Reason;
use super::{Draft, canary};
use crate::release::names::ROLLBACK_IN_BATCH;
use crate::rollout::observe::RolloutObserved;

static SUCCESS_ORDER: [FinalisingStep; 5] = [
    FinalisingStep::RestoreStableService,
    FinalisingStep::RouteTrafficToStable,
    FinalisingStep::ResumeWorkload,
    FinalisingStep::RemoveCanaryService,
    FinalisingStep::ReleaseWorkloadControl,
];

/// The order of finalising steps for a reason.
pub fn finalising_order(reason: Reason) -> &'static [FinalisingStep] {
    match reason {
        Reason::Success => &SUCCESS_ORDER,
        other => canary::finalising_order(other),
    }
}

/// The BatchRelease the Rollout wants: one batch per step, the user's groups moved in place,
/// run up to `partition` (0-based; `None` = finish), owned by the Rollout; marked with Kruise's
/// rollback-in-batch annotation while it rolls a reverted template back in batches.
pub fn batch_release(
    d: &Draft<'_>,
    partition: Option<i32>,
    policy: Option<FinalizingPolicy>,
) -> BatchRelease {
    let mut br = canary::of_strategy(d, partition, policy, false);
    let reverted = d.plan.status.canary_status.as_ref().is_some_and(|c| {
        !c.canary_revision.is_empty()
            && c.common.stable_revision.as_deref() == Some(c.canary_revision.as_str())
    });
    if reverted && rolls_back_in_batches(d.obs) {
        br.metadata.annotations = Some(std::collections::BTreeMap::from([(
            ROLLBACK_IN_BATCH.to_string(),
            "true".to_string(),
        )]));
    }
    br
}

/// Kruise's rollback-in-batch policy: the Rollout says `rollouts.kruise.io/rollback-in-batch:
/// "true"` and routes no traffic (Kruise honours it only without `trafficRoutings`, for
/// partition-style workloads). A reverted template then restarts the release at step 1 for
/// the old template, and the moved groups go back step by step (`batchrelease::
/// partition`), instead of all at once.
pub fn rolls_back_in_batches(obs: &RolloutObserved) -> bool {
    use kube::ResourceExt;
    // Partition style is `strategy.canary`: its trafficRoutings are the only ones.
    let routes = obs
        .rollout
        .spec
        .strategy
        .canary
        .as_ref()
        .and_then(|c| c.traffic_routings.as_ref())
        .is_some_and(|r| !r.is_empty());
    !routes
        && obs
            .rollout
            .annotations()
            .get(ROLLBACK_IN_BATCH)
            .is_some_and(|v| v == "true")
}
