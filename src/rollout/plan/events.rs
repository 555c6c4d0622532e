//! Events derived from what changed between the stored and the new status, so they need no
//! memory of earlier reconciles.

use crate::api::rollout::{RolloutStatus, StepState};
use crate::rollout::names::event;

use crate::k8s::events::EventSpec;

/// Events for what changed between the stored and the new status: phase, finalising step, and
/// one per step-state move, through the states `visited` in between (a reconcile that runs
/// StepUpgrade → StepTrafficRouting → StepMetricsAnalysis → StepPaused writes the status once
/// and publishes three Events).
pub fn transition_events(
    stored: Option<&RolloutStatus>,
    visited: &[(i32, StepState)],
    new: &RolloutStatus,
    steps: usize,
) -> Vec<EventSpec> {
    let default = RolloutStatus::default();
    let old = stored.unwrap_or(&default);
    let mut events = Vec::new();
    let phase_of = |s: &RolloutStatus| s.phase.clone();
    if phase_of(old) != phase_of(new) {
        events.push(EventSpec::normal(
            event::PROGRESSING,
            format!("phase {} -> {}", phase_of(old), phase_of(new)),
        ));
    }
    let sub = |s: &RolloutStatus| {
        s.canary_status
            .as_ref()
            .map(|c| {
                (
                    c.common.current_step_index,
                    c.common.current_step_state.clone(),
                    c.common.finalising_step.clone(),
                )
            })
            .unwrap_or_default()
    };
    let (oi, os, of) = sub(old);
    let (ni, ns, nf) = sub(new);
    if (oi, &os) != (ni, &ns) && !ns.is_unset() {
        let mut path: Vec<(i32, &StepState)> = vec![(oi, &os)];
        path.extend(visited.iter().map(|(i, s)| (*i, s)));
        path.push((ni, &ns));
        path.dedup();
        for hop in path.windows(2) {
            let ((fi, fs), (ti, ts)) = (hop[0], hop[1]);
            events.push(EventSpec::normal(
                event::PROGRESSING,
                format!("step({fi}/{steps}) {fs} -> step({ti}/{steps}) {ts}"),
            ));
        }
    }
    if of != nf && !nf.is_unset() {
        events.push(EventSpec::normal(
            event::PROGRESSING,
            format!(
                "finalising step {} -> {nf}",
                if of.is_unset() { "(none)" } else { of.as_str() }
            ),
        ));
    }
    events
}
