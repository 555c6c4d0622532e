//! The Rollout controller's decisions as one pure function: observed state and `now` in, a
//! [`RolloutPlan`] of plain data out. No client, no clock, no memory between reconciles: every
//! decision derives from the observed cluster and the Rollout's stored status (where the
//! finalising step is persisted), so a restarted manager continues where the last one stopped.
//!
//! - [`style`]: the one place the release style is picked; [`canary`] is the canary style
//!   (its BatchRelease, its finalising orders).
//! - [`phase`]: Initial / Healthy / Progressing / Terminating / Disabling / Disabled.
//! - [`accept`]: what makes a Rollout unacceptable (workload kind, style, a second Rollout).
//! - [`events`]: Events for every phase, step and finalising-step change.
//! - [`steps`]: the per-step state machine, approval, pauses, jumps, `paused`, plan changes.
//! - [`finalise`]: finishing, cancelling and resetting orders (`finalisingStep`).
//! - [`routing`]: the traffic intent each state asks for and whether it has settled.
//! - [`status`]: conditions and messages with Kruise's strings.

pub mod accept;
pub mod analysis;
pub mod batch;
pub mod bluegreen;
pub mod canary;
pub mod deadline;
pub mod events;
pub mod finalise;
pub mod hash;
pub mod pair_service;
pub mod partition;
pub mod phase;
pub mod reason;
pub mod routing;
pub mod share;
pub mod status;
pub mod steps;
pub mod style;
pub mod substatus;

#[cfg(test)]
mod tests;

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::batchrelease::BatchRelease;
use crate::api::rollout::RolloutStatus;
use crate::k8s::events::EventSpec;
use crate::rollout::observe::RolloutObserved;
use crate::traffic::intent::TrafficIntent;

/// What the apply step should do, decided by [`plan`].
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutPlan {
    /// The whole new status (`status.observedGeneration` always set).
    pub status: RolloutStatus,
    /// The BatchRelease this Rollout owns.
    pub batch_release: BatchReleaseAction,
    /// Where traffic should be; `None` leaves traffic objects alone (no `trafficRoutings`, or
    /// no release under way).
    pub traffic: Option<TrafficIntent>,
    /// The writes that bring the traffic objects there, in order (`traffic::plan`).
    pub traffic_writes: Vec<crate::traffic::write::Write>,
    /// The hold on the stable LWS.
    pub hold: HoldAction,
    /// The Rollout's own finalizer.
    pub finalizer: FinalizerAction,
    /// New value for the `rollouts.kruise.io/hash` annotation, when it differs.
    pub hash_annotation: Option<String>,
    /// AnalysisRuns to create, and stale ones to delete.
    pub analysis: AnalysisActions,
    /// Events to publish on the Rollout.
    pub events: Vec<EventSpec>,
    /// Reconcile again after this long (pause durations and grace periods only; everything
    /// else is woken by watch events).
    pub requeue_after: Option<Duration>,
}

/// What to do with this Rollout's AnalysisRuns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnalysisActions {
    /// Create these (if absent).
    pub create: Vec<crate::api::analysis::AnalysisRun>,
    /// Delete these, by name (stale runs of an earlier release, a background run to start
    /// over).
    pub delete: Vec<String>,
    /// Stop measuring these, by name (a background run at the end of its release).
    pub terminate: Vec<String>,
}

/// What to do with the BatchRelease.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum BatchReleaseAction {
    /// Leave it as it is (or absent).
    #[default]
    Keep,
    /// Server-side apply this object (name = the Rollout's, controller owner = the Rollout).
    Apply(Box<BatchRelease>),
    /// Delete it (its canary LWS goes with it through the owner reference).
    Delete,
}

/// What to do with the hold annotation `rollouts.kruise.io/stable-revision` on the stable LWS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HoldAction {
    /// Leave it.
    #[default]
    Keep,
    /// Remove it (and a partition-style release partition): the stable LWS rolls to its
    /// template by its own rolloutStrategy.
    Release,
    /// Partition style, rolled back after a missed deadline: remove only the release
    /// partition, so the groups moved in place go back to the held revision. A pair
    /// restarted on a third template: remove only the release-groups.
    ReturnMoved,
}

/// What to do with the Rollout's finalizer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FinalizerAction {
    /// Nothing.
    #[default]
    Keep,
    /// Add `rollouts.kruise.io/rollout`.
    Add,
    /// Remove it (finalising before deletion is done).
    Remove,
}

/// The plan being built: the new status plus the actions decided so far.
#[derive(Clone, Debug)]
pub struct Draft<'a> {
    /// What was observed.
    pub obs: &'a RolloutObserved,
    /// The clock, as an argument.
    pub now: Timestamp,
    /// The strategy hash of the Rollout's current spec.
    pub hash: String,
    /// The release style (of the release in flight, when the Rollout is refused mid-release).
    pub style: style::Style,
    /// What the traffic objects say about the stored status's traffic.
    pub traffic: routing::TrafficState,
    /// The plan so far.
    pub plan: RolloutPlan,
    /// Step states this reconcile passed through on its way to the new status (index, state):
    /// one reconcile may run several states, and each still gets its Event.
    pub visited: Vec<(i32, crate::api::rollout::StepState)>,
    /// The current batch missed the Rollout's deadline (`deadline`): what it waits for.
    pub deadline_missed: Option<String>,
    /// The current step's analysis failed (`analysis`): why.
    pub analysis_failed: Option<String>,
    /// The background analysis holds the release for a person (`analysis::background`): why.
    pub background_hold: Option<String>,
}

impl Draft<'_> {
    /// The status being built.
    pub fn status(&mut self) -> &mut RolloutStatus {
        &mut self.plan.status
    }

    /// Adds an event.
    pub fn event(&mut self, event: EventSpec) {
        self.plan.events.push(event);
    }

    /// Requeue no later than `after`.
    pub fn requeue(&mut self, after: Duration) {
        self.plan.requeue_after = Some(match self.plan.requeue_after {
            Some(current) => current.min(after),
            None => after,
        });
    }
}

/// Decides one reconcile of a Rollout.
pub fn plan(obs: &RolloutObserved, now: Timestamp) -> RolloutPlan {
    let style = style::in_flight(&obs.rollout);
    let field = style.status_field();
    // The plan reads and builds the status in one shape (`substatus`); a blue-green Rollout's
    // stored status is seen in it, and the new status goes back to `blueGreenStatus`.
    let mut plan = if field == style::StatusField::Canary {
        plan_in(obs, now, style)
    } else {
        let mut view = obs.clone();
        view.rollout.status = view
            .rollout
            .status
            .take()
            .map(|s| substatus::working(s, field));
        plan_in(&view, now, style)
    };
    plan.status = substatus::stored(std::mem::take(&mut plan.status), field);
    plan
}

fn plan_in(obs: &RolloutObserved, now: Timestamp, style: style::Style) -> RolloutPlan {
    let mut status = obs.rollout.status.clone().unwrap_or_default();
    status.observed_generation = obs.rollout.metadata.generation;
    let hash = hash::strategy_hash(&obs.rollout.spec.strategy);
    let stored_hash = obs
        .rollout
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::rollout::names::HASH_ANNOTATION));
    let mut draft = Draft {
        obs,
        now,
        plan: RolloutPlan {
            status,
            batch_release: BatchReleaseAction::Keep,
            traffic: None,
            traffic_writes: Vec::new(),
            hold: HoldAction::Keep,
            finalizer: FinalizerAction::Keep,
            hash_annotation: (stored_hash != Some(&hash)).then(|| hash.clone()),
            analysis: AnalysisActions::default(),
            events: Vec::new(),
            requeue_after: None,
        },
        hash,
        style,
        traffic: routing::observed(obs),
        visited: Vec::new(),
        deadline_missed: None,
        analysis_failed: None,
        background_hold: None,
    };
    phase::run(&mut draft);
    // Argo CD's health Lua indexes status.canaryStatus unguarded: never leave it out (a
    // blue-green status is written to blueGreenStatus, always present too).
    status::canary(draft.status());
    status::mirror_step(draft.status());
    status::hold_progress(obs.rollout.status.as_ref(), draft.status());
    // A refused Rollout with no release of its own in flight routes nothing: the traffic
    // objects it names may carry the release of the Rollout that runs on the same workload.
    let hands_off = accept::not_accepted(obs).is_some() && !accept::releasing(&draft.plan.status);
    draft.plan.traffic = if hands_off {
        None
    } else {
        routing::intent_for(obs, &draft.plan.status)
    };
    draft.plan.traffic_writes = routing::writes(obs, &draft.traffic, draft.plan.traffic.as_ref());
    draft.plan.events.extend(events::transition_events(
        obs.rollout.status.as_ref(),
        &draft.visited,
        &draft.plan.status,
        routing::steps(obs).len(),
    ));
    draft.plan
}
