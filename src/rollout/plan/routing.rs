//! Where traffic should be for a given Rollout status, and whether it got there.
//!
//! The intent is a function of the status alone (plus what was observed), never of memory, so
//! the plan asks "do the objects match what the *stored* status wants?" ([`observed`], from the
//! objects `deref` read) and only moves on once that answer is yes and `gracePeriodSeconds`
//! have passed since the stored step last changed; it then plans the writes for the new status
//! ([`writes`]), which `apply` carries out. Safety rules: no weight to a canary with no ready
//! group; while a step's groups are being added the canary keeps the previous step's route
//! only if the groups that route was given for are still ready; in partition style a step that
//! moves every stable group sends everything to the new side before its groups move; a step
//! without traffic or matches routes nothing through the split (Kruise restores the Services
//! first).

use crate::api::rollout::{
    CanaryStep, FinalisingStep, Phase, RolloutStatus, StepState, TrafficRoutingRef,
};
use crate::k8s::events::EventSpec;
use crate::release::{names::canary_name, progress::CanaryCounts};
use crate::rollout::observe::owner;
use crate::rollout::observe::{RolloutObserved, WorkloadKind};
use crate::traffic::{
    intent::{CanaryRoute, Leaders, TrafficIntent},
    plan::TrafficPlan,
    write::{Problem, Write},
};

use super::Draft;
use super::reason::{self as finalise, Reason, TrafficStage};
use super::share::StableSize;
use super::status;
use super::style::Style;

/// What the traffic objects say about the traffic the *stored* status asks for, worked out once
/// per plan from the objects `rollout::deref` read.
#[derive(Clone, Debug, PartialEq)]
pub struct TrafficState {
    /// The objects already match what the stored status asks for (`true` when it asks
    /// nothing, or there is nothing to read).
    pub ready: bool,
    /// Objects `trafficRoutings` names that do not exist, e.g. `Service vllm`.
    pub missing: Vec<String>,
    /// Why the Service a pair's `trafficRoutings` names is not a role Service of the set
    /// ([`super::pair_service`]): nothing is written to it and the release does not move.
    pub invalid: Option<String>,
    /// The stored status's intent and the traffic plan for it, reused when the new status asks
    /// the same.
    stored: Option<(TrafficIntent, TrafficPlan)>,
}

impl Default for TrafficState {
    fn default() -> Self {
        Self {
            ready: true,
            missing: Vec::new(),
            invalid: None,
            stored: None,
        }
    }
}

impl TrafficState {
    /// An object is missing or the pair's Service is not one of the set's: the release waits.
    pub fn blocked(&self) -> bool {
        !self.missing.is_empty() || self.invalid.is_some()
    }
}

/// The [`TrafficState`] of the objects in `obs`.
pub fn observed(obs: &RolloutObserved) -> TrafficState {
    let (Some(routing_ref), Some(objects)) = (routing(obs), obs.traffic.as_ref()) else {
        return TrafficState::default();
    };
    let invalid = pair_service_problem(obs, objects);
    let stored = obs.rollout.status.clone().unwrap_or_default();
    let Some(intent) = intent_for(obs, &stored) else {
        // Nothing asked yet (a release about to start): what a release needs must exist.
        return TrafficState {
            missing: named_but_absent(routing_ref, objects),
            invalid,
            ..TrafficState::default()
        };
    };
    let plan = crate::traffic::plan::plan(routing_ref, &intent, objects, &owner(&obs.rollout));
    TrafficState {
        invalid,
        ready: plan.in_place,
        missing: plan
            .problems
            .iter()
            .filter_map(|p| match p {
                Problem::Missing(t) => Some(format!("{} {}", t.kind, t.name)),
                _ => None,
            })
            .collect(),
        stored: Some((intent, plan)),
    }
}

/// Why the Service in `objects` is not a role Service of the DisaggregatedSet `obs` releases
/// (`None` for an LWS, or without the set or the Service).
fn pair_service_problem(
    obs: &RolloutObserved,
    objects: &crate::traffic::observe::TrafficObserved,
) -> Option<String> {
    let set = obs
        .workload
        .as_ref()
        .filter(|w| w.kind == WorkloadKind::DisaggregatedSet)?;
    super::pair_service::problem(objects.stable_service.as_ref()?, &set.name, &set.roles)
}

/// The objects `routing_ref` names that are not there (`Service vllm`, `HTTPRoute vllm`).
fn named_but_absent(
    routing_ref: &TrafficRoutingRef,
    objects: &crate::traffic::observe::TrafficObserved,
) -> Vec<String> {
    let mut out = Vec::new();
    if objects.stable_service.is_none() {
        out.push(format!("Service {}", routing_ref.service));
    }
    if let Some(name) = routing_ref
        .gateway
        .as_ref()
        .and_then(|g| g.http_route_name.as_deref())
        && objects.http_route.is_none()
    {
        out.push(format!("HTTPRoute {name}"));
    }
    if let Some(ing) = &routing_ref.ingress
        && objects.ingress.is_none()
    {
        out.push(format!("Ingress {}", ing.name));
    }
    out
}

/// The writes that bring the traffic objects in `obs` to `intent` (the stored intent's plan
/// when it asks the same; nothing without an intent or objects).
pub fn writes(
    obs: &RolloutObserved,
    state: &TrafficState,
    intent: Option<&TrafficIntent>,
) -> Vec<Write> {
    let (Some(intent), Some(routing_ref), Some(objects)) =
        (intent, routing(obs), obs.traffic.as_ref())
    else {
        return Vec::new();
    };
    if state.invalid.is_some() && *intent != TrafficIntent::Restored {
        // Never pin or copy a Service that is not the set's: it may be another set's entry.
        return Vec::new();
    }
    match &state.stored {
        Some((stored, plan)) if stored == intent => plan.writes.clone(),
        _ => crate::traffic::plan::plan(routing_ref, intent, objects, &owner(&obs.rollout)).writes,
    }
}

/// Kruise's default `gracePeriodSeconds`.
pub const DEFAULT_GRACE_SECONDS: i32 = 3;

/// The Rollout's `trafficRoutings[0]` (CEL allows at most one), from either strategy.
pub fn routing(obs: &RolloutObserved) -> Option<&TrafficRoutingRef> {
    let strategy = &obs.rollout.spec.strategy;
    let routings = match (&strategy.canary, &strategy.blue_green) {
        (Some(c), _) => c.traffic_routings.as_ref(),
        (None, Some(b)) => b.traffic_routings.as_ref(),
        (None, None) => None,
    };
    routings.and_then(|r| r.first())
}

/// The steps of whichever strategy is set.
pub fn steps(obs: &RolloutObserved) -> &[CanaryStep] {
    let strategy = &obs.rollout.spec.strategy;
    match (&strategy.canary, &strategy.blue_green) {
        (Some(c), _) => &c.steps,
        (None, Some(b)) => &b.steps,
        (None, None) => &[],
    }
}

/// The traffic `status` asks for; `None` means "leave traffic objects alone".
pub fn intent_for(obs: &RolloutObserved, status: &RolloutStatus) -> Option<TrafficIntent> {
    routing(obs)?;
    let Some(workload) = obs.workload.as_ref() else {
        // Workload gone: whatever a release left behind goes back to the user's shape.
        return Some(TrafficIntent::Restored);
    };
    let canary = status.canary_status.as_ref()?;
    if canary.canary_revision.is_empty() {
        return None;
    }
    let style = super::style::in_flight(&obs.rollout);
    let (stage, reason) = match status.phase {
        Phase::Progressing | Phase::Disabling | Phase::Terminating => {
            match finalise::reason_of(obs, status) {
                Some(reason) => (
                    finalise::traffic_stage(
                        style.finalising_order(reason),
                        reason,
                        &canary.common.finalising_step,
                        obs.batch_release.is_some(),
                    ),
                    Some(reason),
                ),
                None => (TrafficStage::Step, None),
            }
        }
        _ => return None,
    };
    let lws = obs.rollout.spec.workload_ref.name.clone();
    let second: Leaders = if workload.kind == WorkloadKind::DisaggregatedSet {
        // Blue-green of a pair: the new side is the set's new revision, not a second LWS.
        Leaders::of_set(lws.clone(), Some(canary.canary_revision.clone()))
    } else {
        canary_name(&lws, &canary.canary_revision).into()
    };
    let (stable, new_side): (Leaders, Leaders) = if workload.kind == WorkloadKind::DisaggregatedSet
    {
        // The user's Service selects the set's prefill leaders (the pair's routable entry):
        // both sides are the set's, told apart by the set's revision label. The stable side
        // is pinned to the held revision while the new pair must get only its share; once the
        // release succeeds (or is disabled or deleted) it serves every revision, since the
        // set's own rolling update moves the pair over to the template in the spec.
        let pinned = matches!(
            reason,
            None | Some(Reason::Rollback | Reason::AutoRollback | Reason::Continuous)
        );
        (
            Leaders::of_set(
                lws.clone(),
                canary.common.stable_revision.clone().filter(|_| pinned),
            ),
            Leaders::of_set(lws.clone(), Some(canary.canary_revision.clone())),
        )
    } else if style == Style::Partition {
        // Both sides are the user's LWS: told apart by the template revision. The stable
        // side stays pinned to the stable revision while the moved groups must get nothing
        // (a step's split, a rollback, a deadline, a third template); once the release
        // succeeds, or is disabled or deleted with the spec's template on the moved groups,
        // it serves every leader of the LWS, since its remaining groups roll to that template.
        let pinned = matches!(
            reason,
            None | Some(Reason::Rollback | Reason::AutoRollback | Reason::Continuous)
        );
        (
            Leaders {
                lws: lws.clone(),
                revision: canary.common.stable_revision.clone().filter(|_| pinned),
                set: false,
            },
            Leaders::at(lws.clone(), canary.canary_revision.clone()),
        )
    } else {
        (lws.clone().into(), second.clone())
    };
    let release = |route| TrafficIntent::Release {
        stable_lws: stable.clone(),
        canary_lws: new_side.clone(),
        route,
    };
    let switching = canary.common.finalising_step == FinalisingStep::RouteTrafficToNew;
    // A canary finishing successfully gives its groups back while the user's LWS rolls
    // (`batchrelease::canary`): its share follows the groups it still has ready.
    let live = (style == Style::Canary && reason == Some(Reason::Success))
        .then(|| obs.batch_release.as_ref().and_then(|b| b.canary.as_ref()))
        .flatten();
    Some(match stage {
        TrafficStage::Restored => TrafficIntent::Restored,
        // The switch waits until the new side can serve what the user's LWS serves.
        TrafficStage::ToNew if switching && !new_side_whole(obs, workload.replicas) => {
            step_intent(obs, status, StableSize::of(workload), live, &release)
        }
        TrafficStage::ToNew => TrafficIntent::Release {
            stable_lws: second.clone(),
            canary_lws: second.clone(),
            route: CanaryRoute::all(),
        },
        // A step that already runs without the split stays without it.
        TrafficStage::ToStable
            if step_intent(obs, status, StableSize::of(workload), live, &release)
                == TrafficIntent::Restored =>
        {
            TrafficIntent::Restored
        }
        TrafficStage::ToStable => TrafficIntent::ToStable {
            stable_lws: stable.clone(),
        },
        TrafficStage::Step => step_intent(obs, status, StableSize::of(workload), live, &release),
    })
}

/// Whether the second LWS has every group the user's LWS has (`replicas`), all ready: the
/// condition for sending it everything.
pub fn new_side_whole(obs: &RolloutObserved, replicas: i32) -> bool {
    // A pair is whole when every role of its new revision is, not when the pair count is.
    if let Some(set) = obs
        .workload
        .as_ref()
        .filter(|w| w.kind == WorkloadKind::DisaggregatedSet)
    {
        return set.pair_whole;
    }
    obs.batch_release
        .as_ref()
        .and_then(|br| br.canary.as_ref())
        .is_some_and(|c| {
            c.observed_generation == Some(c.generation)
                && c.spec_replicas >= replicas
                && c.ready >= replicas
        })
}

/// The route the current step and state ask for. With `live` counts of a canary giving its
/// groups back, the step's weight is scaled to the groups it still has ready, so each of them
/// keeps the load it had.
fn step_intent(
    obs: &RolloutObserved,
    status: &RolloutStatus,
    stable: StableSize,
    live: Option<&CanaryCounts>,
    release: &dyn Fn(CanaryRoute) -> TrafficIntent,
) -> TrafficIntent {
    let Some(canary) = status.canary_status.as_ref() else {
        return TrafficIntent::Restored;
    };
    let steps = steps(obs);
    let index = usize::try_from(canary.common.current_step_index.max(1)).unwrap_or(1);
    let Some(step) = steps.get(index - 1) else {
        return release(CanaryRoute::none());
    };
    let style = super::style::in_flight(&obs.rollout);
    if !style.routes(step) {
        return TrafficIntent::Restored;
    }
    let ready = canary.canary_ready_replicas;
    let route = match canary.common.current_step_state {
        // Partition style: a step that moves every stable group (the pair's or the LWS's)
        // leaves the stable side nothing to serve with. Everything goes to the new side's
        // ready groups from the moment the step starts, so the last stable groups move only
        // once no request is sent to them (the step waits for this route and its grace
        // before its batch), and no share is left to an empty stable side after. A set's
        // step takes its share of each slice ([`StableSize`]): `replicas: 2` of two slices of
        // two pairs moves all four.
        _ if style == Style::Partition && stable.emptied_by(step) => CanaryRoute::all(),
        StepState::BeforeStepUpgrade | StepState::StepUpgrade => index
            .checked_sub(2)
            .and_then(|prev| steps.get(prev))
            .filter(|prev| style.routes(prev))
            .filter(|prev| stable.step_groups(prev) <= ready)
            .map_or_else(CanaryRoute::none, CanaryRoute::for_step),
        _ => CanaryRoute::for_step(step),
    };
    let (route, ready) = match live {
        Some(counts) => {
            let serving = counts.ready.min(counts.spec_replicas).max(0);
            (route.scaled_to(serving, stable.step_groups(step)), serving)
        }
        None => (route, ready),
    };
    release(if ready == 0 {
        CanaryRoute::none()
    } else {
        route
    })
}

/// Whether the traffic the status being built asks for is in place and has had its grace
/// period. Requeues for the rest of the grace period, or a whole one while waiting.
pub fn settled(d: &mut Draft<'_>) -> bool {
    let Some(routing) = routing(d.obs) else {
        return true;
    };
    let grace = routing
        .grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0);
    let wait = std::time::Duration::from_secs(u64::try_from(grace.max(1)).unwrap_or(1));
    if d.traffic.blocked() {
        report_blocked(d);
        d.requeue(wait);
        return false;
    }
    let stored = d.obs.rollout.status.clone().unwrap_or_default();
    let wanted = intent_for(d.obs, &d.plan.status);
    if wanted != intent_for(d.obs, &stored) || !d.traffic.ready {
        d.requeue(wait);
        return false;
    }
    // The grace counts from the stored step's lastUpdateTime: the plan sets it whenever it
    // moves to a state with new traffic, in the same reconcile that writes that traffic.
    let since = stored
        .canary_status
        .as_ref()
        .and_then(|c| c.common.last_update_time.clone());
    match status::remaining(since.as_ref(), i64::from(grace), d.now) {
        Some(left) => {
            d.requeue(left);
            false
        }
        None => true,
    }
}

/// Condition message and Warning event for trafficRoutings objects that do not exist, or for
/// a pair's Service that is not a role Service of the set.
pub fn report_blocked(d: &mut Draft<'_>) {
    let (reason, message) = match &d.traffic.invalid {
        Some(why) => (
            crate::rollout::names::event::TRAFFIC_ROUTING_INVALID,
            format!("trafficRoutings: {why}"),
        ),
        None => (
            crate::rollout::names::event::TRAFFIC_ROUTING_NOT_FOUND,
            format!(
                "trafficRoutings: {} not found",
                d.traffic.missing.join(", ")
            ),
        ),
    };
    let stored = d
        .obs
        .rollout
        .status
        .as_ref()
        .and_then(|s| s.message.clone());
    if stored.as_deref() != Some(message.as_str()) {
        d.event(EventSpec::warning(reason, message.clone()));
    }
    let now = d.now;
    status::progressing_message(d.status(), message, now);
}
