//! The patches of `rollout approve|pause|resume|undo`, byte-for-byte what kubectl-kruise sends
//! where kubectl-kruise has the command, so either tool can drive the same Rollout.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::Refusal;
use crate::api::{LeaderWorkerSet, Rollout, rollout::CanaryStep, rollout::StepState};

/// `rollout approve`: the status merge patch kubectl-kruise sends (no resourceVersion, so it
/// never conflicts), refused unless the step waits for approval (`StepPaused`).
pub fn approve_patch(rollout: &Rollout) -> Result<Value, Refusal> {
    let status = rollout.status.as_ref();
    // Kruise's order: a canaryStatus is approved, else a blueGreenStatus.
    let (field, state) = match (
        status.and_then(|s| s.canary_status.as_ref()),
        status.and_then(|s| s.blue_green_status.as_ref()),
    ) {
        (Some(c), _) => ("canaryStatus", &c.common.current_step_state),
        (None, Some(b)) => ("blueGreenStatus", &b.common.current_step_state),
        (None, None) => {
            return Err(Refusal::State(
                "cannot approve: the Rollout has no release status yet".into(),
            ));
        }
    };
    if *state != StepState::StepPaused {
        return Err(Refusal::State(format!(
            "cannot approve: the current step is {}, not {} (nothing waits for approval)",
            if state.is_unset() {
                "<none>"
            } else {
                state.as_str()
            },
            StepState::StepPaused
        )));
    }
    Ok(json!({"status": {field: {"currentStepState": StepState::StepReady}}}))
}

/// `rollout pause`: `spec.strategy.paused: true` (merge patch, as kubectl-kruise).
pub fn pause_patch() -> Value {
    json!({"spec": {"strategy": {"paused": true}}})
}

/// `rollout resume`: `spec.strategy.paused: null` (merge patch, as kubectl-kruise).
pub fn resume_patch() -> Value {
    json!({"spec": {"strategy": {"paused": null}}})
}

/// The steps of whichever strategy the Rollout has.
pub fn steps(rollout: &Rollout) -> &[CanaryStep] {
    let strategy = &rollout.spec.strategy;
    match (&strategy.canary, &strategy.blue_green) {
        (Some(c), _) => &c.steps,
        (None, Some(b)) => &b.steps,
        (None, None) => &[],
    }
}

/// `rollout undo --fast [--to-step N]`: kubectl-kruise's fast rollback. It reads the top-level
/// `status.currentStepIndex` and jumps back through `nextStepIndex` to `to_step`, or, without
/// one, to the previous step with no traffic and the most replicas (percentages counted out of
/// 100, integers as they are — kubectl-kruise's arithmetic, kept so both tools pick the same
/// step). Returns the status merge patch and the chosen 1-based step.
pub fn fast_undo_patch(rollout: &Rollout, to_step: Option<i32>) -> Result<(Value, i32), Refusal> {
    let steps = steps(rollout);
    let current = rollout
        .status
        .as_ref()
        .and_then(|s| s.current_step_index)
        .unwrap_or(0);
    if current as usize > steps.len() {
        return Err(Refusal::Data(format!(
            "has {} steps, but the current step {current} is beyond them",
            steps.len()
        )));
    }
    if current <= 1 {
        return Err(Refusal::State("already at the first step".into()));
    }
    let target = match to_step {
        Some(t) => t,
        None => previous_step_without_traffic(steps, current).ok_or_else(|| {
            Refusal::State(format!(
                "no step before step {current} sends no traffic; name one with --to-step"
            ))
        })?,
    };
    if target < 1 || target >= current {
        return Err(Refusal::State(format!(
            "step {target} is not a previous step (the current step is {current})"
        )));
    }
    let field =
        if rollout.spec.strategy.canary.is_none() && rollout.spec.strategy.blue_green.is_some() {
            "blueGreenStatus"
        } else {
            "canaryStatus"
        };
    Ok((
        json!({"status": {field: {"nextStepIndex": target}}}),
        target,
    ))
}

fn previous_step_without_traffic(steps: &[CanaryStep], current: i32) -> Option<i32> {
    let mut best: Option<(i32, i32)> = None;
    for i in (0..(current - 1) as usize).rev() {
        let step = &steps[i];
        if traffic_percent(step) != 0 {
            continue;
        }
        let replicas = match &step.replicas {
            Some(IntOrString::Int(n)) => *n,
            Some(IntOrString::String(s)) => percent(s).unwrap_or(0),
            None => 0,
        };
        // Strictly greater, scanning backwards: on a tie the later step wins (as upstream).
        if replicas > best.map_or(0, |(_, r)| r) {
            best = Some((i as i32 + 1, replicas));
        }
    }
    best.map(|(step, _)| step)
}

fn traffic_percent(step: &CanaryStep) -> i32 {
    step.traffic.as_deref().and_then(percent).unwrap_or(0)
}

fn percent(s: &str) -> Option<i32> {
    s.strip_suffix('%')?.parse().ok()
}

/// `rollout undo` (without `--fast`): put the LWS template back to the stable revision the
/// release holds (`rollouts.kruise.io/stable-revision`), from the LWS's ControllerRevision with
/// that key. The Rollout controller sees its template equal the held revision again and cancels
/// the release (Kruise's rollback). A JSON patch with a resourceVersion test, so it never
/// overwrites a template change made after the read.
pub fn template_revert_patch(
    lws: &LeaderWorkerSet,
    revision_data: &Value,
) -> Result<Value, Refusal> {
    let rv = lws
        .resource_version()
        .ok_or_else(|| Refusal::Data("the LWS has no resourceVersion".into()))?;
    let spec = revision_data
        .get("spec")
        .ok_or_else(|| Refusal::Data("the ControllerRevision has no spec in its data".into()))?;
    let template = spec
        .get("leaderWorkerTemplate")
        .map(without_patch_directive)
        .ok_or_else(|| {
            Refusal::Data("the ControllerRevision has no leaderWorkerTemplate".into())
        })?;
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        json!({"op": "replace", "path": "/spec/leaderWorkerTemplate", "value": template}),
    ];
    if let Some(network) = spec.get("networkConfig") {
        // `add` replaces an existing member and creates a missing one.
        ops.push(json!({"op": "add", "path": "/spec/networkConfig", "value": without_patch_directive(network)}));
    }
    Ok(Value::Array(ops))
}

/// The revision key the release holds the stable groups on, or why there is none.
pub fn held_revision(lws: &LeaderWorkerSet) -> Result<String, Refusal> {
    lws.annotations()
        .get(crate::rollout::names::STABLE_REVISION)
        .filter(|k| !k.is_empty())
        .cloned()
        .ok_or_else(|| {
            Refusal::State(format!(
                "no release of LeaderWorkerSet {} is in progress (it has no {} annotation): nothing to undo",
                lws.name_any(),
                crate::rollout::names::STABLE_REVISION
            ))
        })
}

/// ControllerRevision data is stored as a strategic merge patch (`"$patch": "replace"` on each
/// part); the template itself is the object without that directive.
fn without_patch_directive(v: &Value) -> Value {
    let mut v = v.clone();
    if let Value::Object(map) = &mut v {
        map.remove("$patch");
    }
    v
}

#[cfg(test)]
mod tests;
