//! Conditions, messages and timers of a Rollout status, with Kruise's exact strings and its
//! condition bookkeeping (`lastTransitionTime` only moves when the status flips).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::rollout::{CanaryStatus, RolloutCondition, RolloutStatus, StepState};
use crate::rollout::names::condition;

/// The condition of `type_`, if present.
pub fn condition<'a>(status: &'a RolloutStatus, type_: &str) -> Option<&'a RolloutCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

/// Reason of the Progressing condition ("" when absent).
pub fn progressing_reason(status: &RolloutStatus) -> &str {
    condition(status, condition::PROGRESSING).map_or("", |c| c.reason.as_str())
}

/// Sets a condition as Kruise's `SetRolloutCondition` does: nothing changes when status,
/// reason and message are the same; `lastTransitionTime` is kept while the status is.
pub fn set_condition(
    status: &mut RolloutStatus,
    type_: &str,
    cond_status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status == cond_status
            && existing.reason == reason
            && existing.message == message
        {
            return;
        }
        if existing.status != cond_status {
            existing.last_transition_time = Some(Time(now));
        }
        existing.status = cond_status.to_string();
        existing.reason = reason.to_string();
        existing.message = message.to_string();
        existing.last_update_time = Some(Time(now));
        return;
    }
    conditions.push(RolloutCondition {
        type_: type_.to_string(),
        status: cond_status.to_string(),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: reason.to_string(),
        message: message.to_string(),
    });
}

/// Removes a condition.
pub fn remove_condition(status: &mut RolloutStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// Kruise's `progressingStateTransition`: an empty message keeps the condition's message; the
/// status message mirrors the condition's.
pub fn progressing(
    status: &mut RolloutStatus,
    cond_status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let message = if message.is_empty() {
        condition(status, condition::PROGRESSING).map_or(String::new(), |c| c.message.clone())
    } else {
        message.to_string()
    };
    set_condition(
        status,
        condition::PROGRESSING,
        cond_status,
        reason,
        &message,
        now,
    );
    status.message = Some(message);
}

/// Sets the Progressing condition's message (keeping status and reason) and the status message.
pub fn progressing_message(status: &mut RolloutStatus, message: String, now: Timestamp) {
    let (cond_status, reason) = condition(status, condition::PROGRESSING)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_else(|| ("True".into(), String::new()));
    set_condition(
        status,
        condition::PROGRESSING,
        &cond_status,
        &reason,
        &message,
        now,
    );
    status.message = Some(message);
}

/// "Rollout is in step(i/N), and upgrade workload to new version".
pub fn upgrading(index: i32, steps: usize) -> String {
    format!("Rollout is in step({index}/{steps}), and upgrade workload to new version")
}

/// "Rollout is in step(i/N), and you need manually confirm to enter the next step".
pub fn needs_approval(index: i32, steps: usize) -> String {
    format!(
        "Rollout is in step({index}/{steps}), and you need manually confirm to enter the next step"
    )
}

/// "Rollout is in step(i/N), and wait duration(X seconds) to enter the next step".
pub fn waiting_duration(index: i32, steps: usize, seconds: i32) -> String {
    format!(
        "Rollout is in step({index}/{steps}), and wait duration({seconds} seconds) to enter the next step"
    )
}

/// Copies the sub-status step fields to the top-level mirrors `kubectl get` shows.
pub fn mirror_step(status: &mut RolloutStatus) {
    if let Some(c) = status.canary_status.as_ref() {
        status.current_step_index = Some(c.common.current_step_index);
        status.current_step_state = Some(c.common.current_step_state.clone());
    }
}

/// Keeps the stored `canaryReplicas` and `canaryStatus.message` when they are all that changed
/// while a step's batch comes up (StepUpgrade): then they follow the canary LWS group by group
/// (`steps::sync_batch_release`), and written on their own they were a status patch for every
/// group created. They are written with the next change a reader acts on — a step or state,
/// the phase, a condition or message, a group becoming ready (`canaryReadyReplicas` is never
/// held back) — so `kubectl get` shows them fresh at every step state, and a stalled batch
/// shows them with the message naming its groups. At any other state the batch is not coming
/// up, so a new `canaryStatus.message` is the BatchRelease saying something new — a pair
/// release holding on a role scaled externally while the Rollout waits at a paused step — and
/// is written at once; only a lone `canaryReplicas` change is still held back.
pub fn hold_progress(stored: Option<&RolloutStatus>, new: &mut RolloutStatus) {
    let Some(stored) = stored else {
        return;
    };
    let (Some(was), Some(now)) = (stored.canary_status.as_ref(), new.canary_status.as_ref()) else {
        return;
    };
    if was.canary_ready_replicas != now.canary_ready_replicas {
        return;
    }
    let upgrading = now.common.current_step_state == StepState::StepUpgrade;
    let mut held = new.clone();
    if let Some(c) = held.canary_status.as_mut() {
        c.canary_replicas = was.canary_replicas;
        if upgrading {
            c.common.message = was.common.message.clone();
        }
    }
    if held == *stored {
        *new = held;
    }
}

/// The canary sub-status, created empty when absent (Argo CD's health Lua indexes
/// `status.canaryStatus` without a nil check, so a canary Rollout always has one).
pub fn canary(status: &mut RolloutStatus) -> &mut CanaryStatus {
    status
        .canary_status
        .get_or_insert_with(CanaryStatus::default)
}

/// How long until `since + seconds`; `None` once it has passed (or `since` is unknown).
pub fn remaining(since: Option<&Time>, seconds: i64, now: Timestamp) -> Option<Duration> {
    let since = since?.0;
    let deadline = since.checked_add(SignedDuration::from_secs(seconds)).ok()?;
    let left = now.duration_until(deadline);
    (left > SignedDuration::ZERO).then(|| left.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored status at `state` with 1 group of the canary, ready.
    fn at(state: StepState) -> RolloutStatus {
        let mut s = RolloutStatus::default();
        let c = canary(&mut s);
        c.common.current_step_index = 1;
        c.common.current_step_state = state;
        c.common.message = Some("BatchRelease is at state Ready, rollout-id r, step 1".into());
        c.canary_replicas = 1;
        c.canary_ready_replicas = 1;
        s
    }

    #[test]
    fn progress_is_held_back_only_while_a_batch_comes_up() {
        let holds = "BatchRelease is at state Ready, rollout-id r, step 1: role decode is scaled \
                     externally";
        // (step state, a new sub-status message, new canaryReplicas, new ready ones,
        //  what is written: (canaryReplicas, message is the new one))
        type Case = (StepState, Option<&'static str>, i32, i32, (i32, bool));
        let table: [Case; 8] = [
            // A batch coming up: a group created, or the message following it, waits.
            (StepState::StepUpgrade, None, 2, 1, (1, false)),
            (StepState::StepUpgrade, Some(holds), 2, 1, (1, false)),
            // ... until a group is ready: all of it is written.
            (StepState::StepUpgrade, Some(holds), 2, 2, (2, true)),
            // Paused at a step: the BatchRelease saying something new is written at once
            // (with the count beside it), a lone count still waits.
            (StepState::StepPaused, Some(holds), 1, 1, (1, true)),
            (StepState::StepPaused, Some(holds), 2, 1, (2, true)),
            (StepState::StepPaused, None, 2, 1, (1, false)),
            (StepState::StepReady, Some(holds), 1, 1, (1, true)),
            (StepState::Completed, Some(holds), 1, 1, (1, true)),
        ];
        for (state, message, replicas, ready, (want_replicas, new_message)) in table {
            let stored = at(state.clone());
            let mut new = stored.clone();
            let c = canary(&mut new);
            if let Some(m) = message {
                c.common.message = Some(m.into());
            }
            c.canary_replicas = replicas;
            c.canary_ready_replicas = ready;
            hold_progress(Some(&stored), &mut new);
            let c = new.canary_status.clone().unwrap();
            let case = format!("{state} {message:?} {replicas}/{ready}");
            assert_eq!(c.canary_replicas, want_replicas, "{case}");
            assert_eq!(
                c.common.message.as_deref() == Some(holds),
                new_message,
                "{case}: {:?}",
                c.common.message
            );
            // Nothing held back means nothing to write: the status is the stored one.
            if want_replicas == 1 && !new_message && ready == 1 {
                assert_eq!(new, stored, "{case}");
            }
        }
    }
}
