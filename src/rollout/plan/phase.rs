//! The phase machine (Kruise's `calculateRolloutStatus` and the Progressing reasons):
//! Initial → Healthy → Progressing (Initializing → InRolling ⇄ Paused → Finalising |
//! Cancelling → Completed) → Healthy; Disabling → Disabled; Terminating. Refusals are in
//! `accept`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::rollout::{
    CanaryStatus, CommonStatus, FinalisingStep, Phase, RolloutStatus, StepState,
};
use crate::k8s::events::EventSpec;
use crate::rollout::names::{self, condition, event, message, reason};
use crate::rollout::observe::StableWorkload;

use super::accept;
use super::finalise::{self, Reason};
use super::style::Style;
use super::{
    BatchReleaseAction, Draft, FinalizerAction, HoldAction, partition, routing, status, steps,
};

/// A release is under way: the webhook held the stable LWS and its template moved on.
fn in_progressing(w: &StableWorkload) -> bool {
    w.hold.as_ref().is_some_and(|h| *h != w.update_revision)
}

fn rollout_id(w: &StableWorkload, rollback: bool) -> String {
    w.rollout_id.clone().unwrap_or_else(|| {
        if rollback {
            format!("rollback-{}", w.update_revision)
        } else {
            w.update_revision.clone()
        }
    })
}

fn phase_is(status: &RolloutStatus, p: &Phase) -> bool {
    status.phase == *p
}

fn set_phase(d: &mut Draft<'_>, p: Phase, msg: &str) {
    let s = d.status();
    s.phase = p;
    s.message = Some(msg.into());
}

/// Enters a finalising phase (Disabling) from another phase: its finalising order starts from
/// the top (see [`restart_finalising_order`]).
fn start_finalising(d: &mut Draft<'_>, to: Phase, msg: &str) {
    if !phase_is(&d.plan.status, &to) {
        restart_finalising_order(d);
    }
    set_phase(d, to, msg);
}

/// A disable or delete finalises in an order of its own. A `finalisingStep` left by an earlier
/// finalise (the last release's `END`, or a success finalise cut short) names a place in a
/// different order: resuming there would skip steps — a delete arriving before the Rollout saw
/// a new template found `END` and dropped its finalizer with the new template's hold still on
/// the LWS. Every step checks the cluster, so starting again from the top is always safe.
fn restart_finalising_order(d: &mut Draft<'_>) {
    if let Some(c) = d.status().canary_status.as_mut()
        && !c.common.finalising_step.is_unset()
    {
        c.common.finalising_step = FinalisingStep::Unset;
    }
}

/// Runs the phase machine.
pub fn run(d: &mut Draft<'_>) {
    let obs = d.obs;
    let has_finalizer = obs
        .rollout
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == names::FINALIZER);
    let refusal = accept::not_accepted(obs);
    let releasing = accept::releasing(&d.plan.status);
    if obs.rollout.metadata.deletion_timestamp.is_some() {
        if has_finalizer {
            if refusal.is_some() && !releasing {
                // A refused Rollout ran no release: nothing of its own to finish, and the
                // workload's hold and traffic belong to the Rollout that does run.
                d.plan.finalizer = FinalizerAction::Remove;
            } else {
                terminating(d);
            }
        }
        return;
    }
    if !has_finalizer {
        d.plan.finalizer = FinalizerAction::Add;
    }
    if let Some((why, msg)) = refusal {
        // Never leave a release half done: finish it as a disable would, then refuse.
        if releasing {
            start_finalising(d, Phase::Disabling, message::DISABLING);
            if !finalise::run(d, Reason::Disabled) {
                return;
            }
        }
        accept::refuse(d, why, &msg);
        return;
    }
    status::remove_condition(d.status(), condition::ACCEPTED);
    if obs.rollout.spec.disabled
        && !phase_is(&d.plan.status, &Phase::Disabled)
        && !phase_is(&d.plan.status, &Phase::Disabling)
    {
        if phase_is(&d.plan.status, &Phase::Progressing) {
            start_finalising(d, Phase::Disabling, message::DISABLING);
        } else {
            set_phase(d, Phase::Disabled, message::DISABLED);
        }
    }
    if phase_is(&d.plan.status, &Phase::Disabling) {
        if finalise::run(d, Reason::Disabled) {
            set_phase(d, Phase::Disabled, message::DISABLED);
            d.event(EventSpec::normal(
                event::DISABLED,
                "Rollout is disabled; the workload was released and traffic restored",
            ));
        }
        return;
    }
    match d.plan.status.phase.clone() {
        Phase::Unset => d.status().phase = Phase::Initial,
        Phase::Unknown(value) => {
            // Hand-edited, or written by another controller: say so, and start from Kruise's
            // first phase (a release in flight is picked up again from the workload's hold).
            d.event(EventSpec::warning(
                event::UNKNOWN_STATE,
                format!(
                    "status.phase \"{value}\" is not a phase this controller knows; starting \
                     again from Initial"
                ),
            ));
            d.status().phase = Phase::Initial;
        }
        Phase::Initial
        | Phase::Healthy
        | Phase::Progressing
        | Phase::Terminating
        | Phase::Disabling
        | Phase::Disabled => {}
    }
    let Some(workload) = obs.workload.as_ref() else {
        if !obs.rollout.spec.disabled {
            workload_not_found(d);
        }
        return;
    };
    if phase_is(&d.plan.status, &Phase::Disabled) {
        if obs.rollout.spec.disabled {
            // A disabled Rollout holds nothing, whatever set the hold.
            if workload.hold.is_some() {
                d.plan.hold = HoldAction::Release;
            }
            return;
        }
        // Re-enabled: the release the disable interrupted is over (its canary gone, the
        // workload rolled by itself), so nothing of its step may linger in canaryStatus —
        // Argo CD's health reads a stale StepPaused as a release in progress. The status
        // starts again as Kruise's first sight of a workload: completed on its last step.
        set_phase(d, Phase::Healthy, message::HEALTHY);
        if workload.status_current() {
            d.plan.status.canary_status = Some(completed_status(d, workload, false));
            d.status().message = Some(message::WORKLOAD_COMPLETED.into());
        } else {
            d.plan.status.canary_status = Some(CanaryStatus::default());
        }
    }
    if !workload.status_current() {
        // The LWS controller has not caught up with the LWS's spec: its counts are stale.
        return;
    }
    let s = d.status();
    if let Some(c) = s.canary_status.as_mut()
        && !c.canary_revision.is_empty()
        && c.canary_revision == workload.update_revision
    {
        c.common.observed_rollout_id = Some(rollout_id(workload, false));
        c.common.observed_workload_generation = Some(workload.generation);
    }
    if phase_is(&d.plan.status, &Phase::Initial) {
        set_phase(d, Phase::Healthy, message::HEALTHY);
    }
    if phase_is(&d.plan.status, &Phase::Healthy) {
        if in_progressing(workload) {
            d.status().phase = Phase::Progressing;
            let now = d.now;
            status::set_condition(
                d.status(),
                condition::PROGRESSING,
                "True",
                reason::INITIALIZING,
                message::IN_PROGRESSING,
                now,
            );
            d.status().message = Some(message::IN_PROGRESSING.into());
            status::remove_condition(d.status(), condition::SUCCEEDED);
        } else {
            healthy(d, workload);
            return;
        }
    }
    if phase_is(&d.plan.status, &Phase::Progressing) {
        progressing(d, workload);
    }
}

/// Kruise resets the status to `{observedGeneration, phase: Initial, message}`; we keep an
/// empty canaryStatus (Argo CD) and clean up what a release may have left.
fn workload_not_found(d: &mut Draft<'_>) {
    let stored = d
        .obs
        .rollout
        .status
        .as_ref()
        .and_then(|s| s.message.clone());
    if stored.as_deref() != Some(message::WORKLOAD_NOT_FOUND) {
        d.event(EventSpec::warning(
            event::WORKLOAD_NOT_FOUND,
            format!(
                "LeaderWorkerSet {} not found",
                d.obs.rollout.spec.workload_ref.name
            ),
        ));
    }
    if d.obs.batch_release.is_some() {
        d.plan.batch_release = BatchReleaseAction::Delete;
    }
    d.plan.status = RolloutStatus {
        observed_generation: d.obs.rollout.metadata.generation,
        phase: Phase::Initial,
        message: Some(message::WORKLOAD_NOT_FOUND.into()),
        canary_status: Some(CanaryStatus::default()),
        ..RolloutStatus::default()
    };
}

/// No release: clean a stale hold, and fill the status as "completed" on first sight so
/// tools can tell "done" without a release (Kruise).
fn healthy(d: &mut Draft<'_>, w: &StableWorkload) {
    if w.hold.is_some() {
        d.plan.hold = HoldAction::Release;
    }
    let empty = d
        .plan
        .status
        .canary_status
        .as_ref()
        .is_none_or(|c| c.canary_revision.is_empty() && c.common.current_step_state.is_unset());
    if empty {
        d.plan.status.canary_status = Some(completed_status(d, w, false));
        d.status().message = Some(message::WORKLOAD_COMPLETED.into());
    }
}

/// A canary status that reads "completed at the last step" for the workload as it is.
fn completed_status(d: &Draft<'_>, w: &StableWorkload, rollback: bool) -> CanaryStatus {
    let n = routing::steps(d.obs).len();
    let last = i32::try_from(n).unwrap_or(0);
    CanaryStatus {
        common: CommonStatus {
            observed_rollout_id: Some(rollout_id(w, rollback)),
            observed_workload_generation: Some(w.generation),
            pod_template_hash: w.update_revision.clone(),
            stable_revision: Some(w.current_revision.clone()),
            current_step_index: last,
            next_step_index: steps::natural_next(last, n),
            current_step_state: StepState::Completed,
            rollout_hash: Some(d.hash.clone()),
            ..CommonStatus::default()
        },
        canary_revision: w.update_revision.clone(),
        ..CanaryStatus::default()
    }
}

/// Dispatches on the Progressing reason until a handler has to wait.
fn progressing(d: &mut Draft<'_>, w: &StableWorkload) {
    for _ in 0..6 {
        let now = d.now;
        match status::progressing_reason(&d.plan.status)
            .to_string()
            .as_str()
        {
            reason::INITIALIZING if !in_progressing(w) => {
                // The template went back to the stable revision (or the hold went away) before
                // the release got going, e.g. during a reset: cancel what is left.
                let c = status::canary(d.status());
                if c.canary_revision.is_empty() {
                    c.canary_revision = w.update_revision.clone();
                }
                status::progressing(
                    d.status(),
                    "True",
                    reason::CANCELLING,
                    message::ROLLED_BACK,
                    now,
                );
            }
            reason::INITIALIZING => {
                if !initializing(d, w) {
                    return;
                }
                status::progressing(
                    d.status(),
                    "True",
                    reason::IN_ROLLING,
                    message::IN_PROGRESSING,
                    now,
                );
            }
            // A missed deadline without automatic rollback: the release goes on (the batch
            // may still get ready), so does the dispatch.
            reason::IN_ROLLING | reason::DEADLINE_EXCEEDED => {
                if !in_rolling(d, w) {
                    return;
                }
            }
            reason::ROLLED_BACK_ON_DEADLINE | reason::ANALYSIS_FAILED => {
                if !rolled_back_on_deadline(d, w) {
                    return;
                }
            }
            reason::PAUSED => {
                if d.obs.rollout.spec.strategy.paused {
                    return;
                }
                status::progressing(d.status(), "True", reason::IN_ROLLING, "", now);
            }
            reason::FINALISING => {
                if finalise::run(d, Reason::Success) {
                    status::progressing(
                        d.status(),
                        "False",
                        reason::COMPLETED,
                        message::COMPLETED,
                        now,
                    );
                    status::set_condition(d.status(), condition::SUCCEEDED, "True", "", "", now);
                    d.status().phase = Phase::Healthy;
                    d.event(EventSpec::normal(event::SUCCEEDED, message::COMPLETED));
                }
                return;
            }
            reason::CANCELLING => {
                if finalise::run(d, Reason::Rollback) {
                    status::progressing(
                        d.status(),
                        "False",
                        reason::COMPLETED,
                        message::CANCELED,
                        now,
                    );
                    status::set_condition(d.status(), condition::SUCCEEDED, "False", "", "", now);
                    d.status().phase = Phase::Healthy;
                    // Kruise leaves the stale step state (#339): Argo CD would then show
                    // a cancelled release as progressing forever.
                    let done = completed_status(d, w, true);
                    d.plan.status.canary_status = Some(done);
                    d.event(EventSpec::normal(event::CANCELLED, message::CANCELED));
                }
                return;
            }
            reason::COMPLETED => {
                d.status().phase = Phase::Healthy;
                return;
            }
            _ => {
                status::progressing(
                    d.status(),
                    "True",
                    reason::INITIALIZING,
                    message::IN_PROGRESSING,
                    now,
                );
            }
        }
    }
}

/// A fresh sub-status for this revision; waits for the traffic objects to exist (a pair's
/// Service to select one role of the set) and for Kruise's 3 seconds (the Rollout spec may
/// trail the workload change by a moment).
fn initializing(d: &mut Draft<'_>, w: &StableWorkload) -> bool {
    let now = d.now;
    let n = routing::steps(d.obs).len();
    let fresh = d.plan.status.canary_status.as_ref().is_none_or(|c| {
        c.canary_revision != w.update_revision
            || c.common.current_step_index != 1
            || c.common.current_step_state != StepState::BeforeStepUpgrade
    });
    if fresh {
        d.plan.status.canary_status = Some(CanaryStatus {
            common: CommonStatus {
                observed_workload_generation: Some(w.generation),
                rollout_hash: Some(d.hash.clone()),
                observed_rollout_id: Some(rollout_id(w, false)),
                stable_revision: w.hold.clone(),
                current_step_index: 1,
                next_step_index: steps::natural_next(1, n),
                current_step_state: StepState::BeforeStepUpgrade,
                last_update_time: Some(Time(now)),
                ..CommonStatus::default()
            },
            canary_revision: w.update_revision.clone(),
            ..CanaryStatus::default()
        });
    }
    if let Some(r) = routing::routing(d.obs)
        && d.traffic.blocked()
    {
        routing::report_blocked(d);
        // Users' traffic objects are not watched: look again after a grace period, or the
        // release never notices the object being created.
        let grace = r
            .grace_period_seconds
            .unwrap_or(routing::DEFAULT_GRACE_SECONDS);
        d.requeue(std::time::Duration::from_secs(
            u64::try_from(grace.max(1)).unwrap_or(1),
        ));
        return false;
    }
    let since = status::condition(&d.plan.status, condition::PROGRESSING)
        .and_then(|c| c.last_update_time.clone());
    match status::remaining(
        since.as_ref(),
        i64::from(routing::DEFAULT_GRACE_SECONDS),
        now,
    ) {
        Some(left) => {
            d.requeue(left);
            false
        }
        None => true,
    }
}

/// InRolling, in Kruise's priority: rollback, paused, a third template, a changed plan, the
/// step machine. `true` when the Progressing reason changed and dispatch should go on.
fn in_rolling(d: &mut Draft<'_>, w: &StableWorkload) -> bool {
    let now = d.now;
    let Some(c) = d
        .plan
        .status
        .canary_status
        .clone()
        .filter(|c| !c.canary_revision.is_empty())
    else {
        status::progressing(
            d.status(),
            "True",
            reason::INITIALIZING,
            message::IN_PROGRESSING,
            now,
        );
        return true;
    };
    let rolled_back = c.common.stable_revision.as_deref() == Some(w.update_revision.as_str())
        && c.canary_revision != w.update_revision;
    if rolled_back
        && c.common.finalising_step.is_unset()
        && d.style == Style::Partition
        && partition::rolls_back_in_batches(d.obs)
    {
        restart_in_batches(d, w);
        return true;
    }
    if rolled_back && c.common.finalising_step.is_unset() {
        super::analysis::end_background(d);
        d.event(EventSpec::normal(
            event::PROGRESSING,
            "workload has been rollback, then rollout is canceled",
        ));
        status::progressing(
            d.status(),
            "True",
            reason::CANCELLING,
            message::ROLLED_BACK,
            now,
        );
        return true;
    }
    if d.obs.rollout.spec.strategy.paused {
        status::progressing(d.status(), "True", reason::PAUSED, message::PAUSED, now);
        return false;
    }
    if c.canary_revision != w.update_revision {
        if c.common.finalising_step.is_unset() {
            d.event(EventSpec::normal(
                event::PROGRESSING,
                "workload continuous publishing canaryRevision, then restart publishing",
            ));
        }
        if finalise::run(d, Reason::Continuous) {
            d.plan.status.canary_status = Some(CanaryStatus::default());
            status::progressing(
                d.status(),
                "True",
                reason::INITIALIZING,
                message::CONTINUOUS_RELEASE,
                now,
            );
            return true;
        }
        return false;
    }
    if c.common
        .rollout_hash
        .as_deref()
        .is_some_and(|h| !h.is_empty() && *h != d.hash)
    {
        steps::plan_changed(d);
        return false;
    }
    if c.common.current_step_state == StepState::Completed {
        status::progressing(
            d.status(),
            "True",
            reason::FINALISING,
            message::FINALISING,
            now,
        );
        return true;
    }
    steps::correct_next(d);
    let completed = steps::run_canary(d);
    if completed || d.analysis_failed.is_some() {
        super::analysis::end_background(d);
    }
    if let Some(why) = d.analysis_failed.take() {
        return analysis_failed(d, &why);
    }
    if let Some(why) = d.deadline_missed.take() {
        return deadline_missed(d, &why);
    }
    if status::progressing_reason(&d.plan.status) == reason::DEADLINE_EXCEEDED {
        // The late batch got ready after all (or the step moved on): the release is rolling.
        status::progressing(d.status(), "True", reason::IN_ROLLING, "", now);
    }
    if completed {
        status::progressing(
            d.status(),
            "True",
            reason::FINALISING,
            message::FINALISING,
            now,
        );
        return true;
    }
    false
}

/// Kruise's rollback in batches: the release starts again at step 1 with the reverted template
/// as the one released (the stable revision stays); the BatchRelease counts the groups
/// already on it as needing no update, so each step moves its share of the moved groups back.
fn restart_in_batches(d: &mut Draft<'_>, w: &StableWorkload) {
    let now = d.now;
    let n = routing::steps(d.obs).len();
    let hash = d.hash.clone();
    let c = status::canary(d.status());
    c.canary_revision = w.update_revision.clone();
    c.canary_replicas = 0;
    c.canary_ready_replicas = 0;
    c.common.current_step_index = 1;
    c.common.next_step_index = steps::natural_next(1, n);
    c.common.current_step_state = StepState::BeforeStepUpgrade;
    c.common.last_update_time = Some(Time(now));
    c.common.rollout_hash = Some(hash);
    d.event(EventSpec::normal(
        event::PROGRESSING,
        "workload has been rolled back in batches, then restart from beginning",
    ));
}

/// The current batch missed the Rollout's deadline (`deadline`): `Progressing=False` with what
/// it waits for and a Warning Event once; with automatic rollback, the rollback starts (`true`:
/// dispatch on).
fn deadline_missed(d: &mut Draft<'_>, why: &str) -> bool {
    let now = d.now;
    let rollback =
        super::deadline::of(&d.obs.rollout).is_ok_and(|dl| dl.is_some_and(|dl| dl.rollback));
    let stored = d
        .obs
        .rollout
        .status
        .as_ref()
        .map(|s| status::progressing_reason(s).to_string())
        .unwrap_or_default();
    if stored != reason::DEADLINE_EXCEEDED && stored != reason::ROLLED_BACK_ON_DEADLINE {
        d.event(EventSpec::warning(event::DEADLINE_EXCEEDED, why));
    }
    if !rollback {
        status::progressing(d.status(), "False", reason::DEADLINE_EXCEEDED, why, now);
        return false;
    }
    restart_finalising_order(d);
    super::analysis::end_background(d);
    let msg = format!(
        "{why}; rolling back: traffic to the stable side, the new side removed; the \
         workload stays on its stable revision until its template changes"
    );
    d.event(EventSpec::warning(
        event::ROLLED_BACK_ON_DEADLINE,
        msg.clone(),
    ));
    status::progressing(
        d.status(),
        "False",
        reason::ROLLED_BACK_ON_DEADLINE,
        &msg,
        now,
    );
    true
}

/// The current step's analysis failed: a Warning Event, `Progressing=False` /
/// `AnalysisFailed` naming the metric, its value and condition, and the rollback starts —
/// traffic to the stable side first, then the new side removed; the workload stays on its
/// stable revision until its template changes (as after a missed deadline). `true`: dispatch on.
fn analysis_failed(d: &mut Draft<'_>, why: &str) -> bool {
    let now = d.now;
    restart_finalising_order(d);
    let msg = format!(
        "{why}; rolling back: traffic to the stable side, the new side removed; the workload \
         stays on its stable revision until its template changes"
    );
    d.event(EventSpec::warning(event::ANALYSIS_FAILED, msg.clone()));
    status::progressing(d.status(), "False", reason::ANALYSIS_FAILED, &msg, now);
    true
}

/// Rolled back after a missed deadline or a failed analysis: finish the rollback, then stay — until the template
/// changes: back to the stable revision is a cancel (the hold is released, no group moves), a
/// new one starts a new release. `true` when the Progressing reason changed.
fn rolled_back_on_deadline(d: &mut Draft<'_>, w: &StableWorkload) -> bool {
    let now = d.now;
    let c = status::canary(d.status()).clone();
    if c.canary_revision != w.update_revision {
        restart_finalising_order(d);
        let reverted = c.common.stable_revision.as_deref() == Some(w.update_revision.as_str());
        let (why, msg) = if reverted {
            (reason::CANCELLING, message::ROLLED_BACK)
        } else {
            (reason::IN_ROLLING, message::CONTINUOUS_RELEASE)
        };
        status::progressing(d.status(), "True", why, msg, now);
        return true;
    }
    finalise::run(d, Reason::AutoRollback);
    false
}

/// Deletion: Terminating, finalise, then drop the finalizer.
fn terminating(d: &mut Draft<'_>) {
    let now = d.now;
    if !phase_is(&d.plan.status, &Phase::Terminating) {
        restart_finalising_order(d);
        d.status().phase = Phase::Terminating;
        status::set_condition(
            d.status(),
            condition::TERMINATING,
            "True",
            reason::IN_TERMINATING,
            message::TERMINATING,
            now,
        );
    }
    let done_before = status::condition(&d.plan.status, condition::TERMINATING)
        .is_some_and(|c| c.reason == reason::COMPLETED);
    if done_before || finalise::run(d, Reason::Deleting) {
        status::set_condition(
            d.status(),
            condition::TERMINATING,
            "False",
            reason::COMPLETED,
            message::TERMINATING,
            now,
        );
        d.plan.finalizer = FinalizerAction::Remove;
        if !done_before {
            d.event(EventSpec::normal(
                event::TERMINATED,
                "finalising done; the workload was released and traffic restored",
            ));
        }
    }
}
