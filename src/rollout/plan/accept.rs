//! What makes a Rollout unacceptable here (a workload that is not a LeaderWorkerSet, partition
//! style or blue-green, a second Rollout for one workload), and how it is refused.

use crate::rollout::names::{self, condition, event, reason};
use crate::rollout::observe::RolloutObserved;

use super::{Draft, HoldAction, PlannedEvent, status};
use crate::api::rollout::phase;

/// Why this controller will not run the Rollout, as (reason, message).
pub fn not_accepted(obs: &RolloutObserved) -> Option<(&'static str, String)> {
    let r = &obs.rollout.spec;
    if r.workload_ref.api_version != names::LWS_API_VERSION
        || r.workload_ref.kind != names::LWS_KIND
    {
        return Some((
            reason::UNSUPPORTED_WORKLOAD,
            format!(
                "workloadRef {} {} is not supported: only {} {} can be released",
                r.workload_ref.api_version,
                r.workload_ref.kind,
                names::LWS_API_VERSION,
                names::LWS_KIND
            ),
        ));
    }
    match (&r.strategy.canary, &r.strategy.blue_green) {
        (None, Some(_)) => {
            return Some((
                reason::UNSUPPORTED_STRATEGY,
                "blue-green releases of a LeaderWorkerSet are not supported yet".into(),
            ));
        }
        (Some(c), _) if !c.enable_extra_workload_for_canary => {
            return Some((
                reason::UNSUPPORTED_STRATEGY,
                "partition-style canary releases (enableExtraWorkloadForCanary: false) of a \
                 LeaderWorkerSet are not supported yet; set enableExtraWorkloadForCanary: true"
                    .into(),
            ));
        }
        (None, None) => {
            return Some((
                reason::UNSUPPORTED_STRATEGY,
                "strategy has no canary".into(),
            ));
        }
        _ => {}
    }
    obs.conflicting_rollout.as_ref().map(|other| {
        (
            reason::WORKLOAD_CONFLICT,
            format!(
                "LeaderWorkerSet {} is already released by Rollout {other}; only one Rollout may \
                 reference a workload",
                r.workload_ref.name
            ),
        )
    })
}

/// Accepted=False, phase Initial, and a Warning event when that is news.
pub fn refuse(d: &mut Draft<'_>, why: &'static str, msg: &str) {
    let stored = d
        .obs
        .rollout
        .status
        .as_ref()
        .and_then(|s| status::condition(s, condition::ACCEPTED).cloned());
    if stored.as_ref().is_none_or(|c| c.message != msg) {
        d.event(PlannedEvent::warning(event::NOT_ACCEPTED, msg));
    }
    // A Rollout this controller does not run must not keep the workload held; with a
    // conflict the hold belongs to the Rollout that does run.
    if why != reason::WORKLOAD_CONFLICT && d.obs.workload.as_ref().is_some_and(|w| w.hold.is_some())
    {
        d.plan.hold = HoldAction::Release;
    }
    let now = d.now;
    status::set_condition(d.status(), condition::ACCEPTED, "False", why, msg, now);
    let s = d.status();
    s.phase = Some(phase::INITIAL.into());
    s.message = Some(msg.into());
}
