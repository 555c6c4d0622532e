//! Why a release is being finished (what every style's finalising order is chosen by), and
//! where traffic stands at each finalising step.

use crate::api::rollout::{FinalisingStep, Phase, RolloutStatus};
use crate::rollout::names::reason;
use crate::rollout::observe::RolloutObserved;

use super::status;

/// Why a release is being finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// All steps done.
    Success,
    /// The workload template went back to the stable revision.
    Rollback,
    /// `spec.disabled` mid-release.
    Disabled,
    /// The Rollout is being deleted.
    Deleting,
    /// A third template mid-release: reset, then start again.
    Continuous,
    /// The release rolls itself back — its deadline passed (`deadline`) or its analysis
    /// failed (`analysis`); the hold stays.
    AutoRollback,
}

/// The finalising reason a status is in, if any.
pub fn reason_of(obs: &RolloutObserved, status: &RolloutStatus) -> Option<Reason> {
    if obs.rollout.metadata.deletion_timestamp.is_some() {
        return Some(Reason::Deleting);
    }
    if status.phase == Phase::Disabling {
        return Some(Reason::Disabled);
    }
    match status::progressing_reason(status) {
        reason::FINALISING => Some(Reason::Success),
        reason::CANCELLING => Some(Reason::Rollback),
        reason::ROLLED_BACK_ON_DEADLINE | reason::ANALYSIS_FAILED => Some(Reason::AutoRollback),
        reason::IN_ROLLING
            if status
                .canary_status
                .as_ref()
                .is_some_and(|c| !c.common.finalising_step.is_unset()) =>
        {
            Some(Reason::Continuous)
        }
        _ => None,
    }
}

/// What the traffic looks like at a finalising step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficStage {
    /// The current step's route (nothing finalised yet).
    Step,
    /// Everything to the stable side: the route without the split and no canary Ingress
    /// (Kruise's `RestoreGateway`), the stable Service still pinned, the canary Service still
    /// there.
    ToStable,
    /// Everything to the new side (blue-green promotion): the stable Service pinned to the
    /// second LWS's leaders and the route sending it all, from the step that switches until
    /// the step that routes back to the user's LWS.
    ToNew,
    /// The user's objects as they were.
    Restored,
}

/// The traffic stage of `step` in `order` (the style's order for `reason`). A disable or delete with no release
/// in flight (no BatchRelease) only restores.
pub fn traffic_stage(
    order: &[FinalisingStep],
    reason: Reason,
    step: &FinalisingStep,
    batch_release_exists: bool,
) -> TrafficStage {
    if matches!(reason, Reason::Disabled | Reason::Deleting) && !batch_release_exists {
        return TrafficStage::Restored;
    }
    if *step == FinalisingStep::End {
        return if reason == Reason::Continuous {
            TrafficStage::ToStable
        } else {
            TrafficStage::Restored
        };
    }
    let at = |s: &FinalisingStep| order.iter().position(|x| x == s);
    let Some(pos) = at(step) else {
        return TrafficStage::Step;
    };
    let to_stable = at(&FinalisingStep::RouteTrafficToStable);
    if at(&FinalisingStep::RouteTrafficToNew).is_some_and(|new| pos >= new)
        && to_stable.is_none_or(|back| pos < back)
    {
        return TrafficStage::ToNew;
    }
    match (to_stable, at(&FinalisingStep::RestoreStableService)) {
        (Some(route), _) if pos < route => TrafficStage::Step,
        (_, Some(restore)) if pos >= restore => TrafficStage::Restored,
        _ => TrafficStage::ToStable,
    }
}
