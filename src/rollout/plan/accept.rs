//! Which Rollouts are ours at all, what makes one of ours unacceptable (a style this controller
//! does not run, see [`super::style`]; a second Rollout for one workload), and how it is refused.
//!
//! A refused Rollout never acts on the workload another Rollout releases: it holds nothing,
//! routes nothing and finalises nothing of its own unless a release of its own is in flight
//! (one it ran before it was refused, finished first as a disable would).

use crate::api::rollout::{Rollout, RolloutStatus};
use crate::rollout::names::{condition, event, reason};
use crate::rollout::observe::RolloutObserved;

use super::{Draft, HoldAction, status};
use crate::api::rollout::Phase;
use crate::k8s::events::EventSpec;

/// Whether this controller looks at `rollout` at all: only Rollouts of a LeaderWorkerSet or a
/// DisaggregatedSet are ours. Any other was stored under Kruise Rollout's CRD before ours replaced it and belongs to
/// another controller: it gets no finalizer, no status, no Event and no traffic write from us.
pub fn ours(rollout: &Rollout) -> bool {
    rollout.spec.workload_ref.is_leader_worker_set()
        || rollout.spec.workload_ref.is_disaggregated_set()
}

/// Whether `status` shows a release of this Rollout in flight (started, not yet finalised).
pub fn releasing(status: &RolloutStatus) -> bool {
    matches!(
        status.phase,
        Phase::Progressing | Phase::Disabling | Phase::Terminating
    )
}

/// Why this controller will not run the Rollout, as (reason, message).
pub fn not_accepted(obs: &RolloutObserved) -> Option<(&'static str, String)> {
    let r = &obs.rollout.spec;
    if let Err(why) = super::style::of(&obs.rollout) {
        return Some((reason::UNSUPPORTED_STRATEGY, why));
    }
    obs.conflicting_rollout.as_ref().map(|other| {
        (
            reason::WORKLOAD_CONFLICT,
            format!(
                "{} {} is already released by Rollout {other}; only one Rollout may reference a \
                 workload",
                r.workload_ref.kind, r.workload_ref.name
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
        d.event(EventSpec::warning(event::NOT_ACCEPTED, msg));
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
    s.phase = Phase::Initial;
    s.message = Some(msg.into());
}
