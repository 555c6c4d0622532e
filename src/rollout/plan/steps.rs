//! The per-step state machine of a canary release, Kruise's: BeforeStepUpgrade → StepUpgrade
//! (BatchRelease scales the canary LWS, waits until the batch is ready) → StepTrafficRouting
//! (the step's weight/matches, then its grace period) → StepMetricsAnalysis (a no-op, as
//! upstream) → StepPaused (a duration, or approval: the status patch
//! `kubectl-kruise rollout approve` sends, StepPaused → StepReady) → StepReady → next step, or
//! Completed. Also user-written `nextStepIndex` jumps and a changed plan (strategy hash).
//!
//! One reconcile runs as many states as the observed state allows; it stops where it must
//! wait for the cluster (a BatchRelease to apply or get ready, traffic to settle) or time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::batchrelease::RollingStyle;
use crate::api::rollout::{CanaryStep, StepState};
use crate::release::{
    groups::desired_groups,
    progress::{BatchProgress, batch_state, progress},
};
use crate::rollout::names::event;
use crate::rollout::observe::{BatchReleaseSummary, WorkloadKind};

use super::analysis::{self, StepVerdict};
use super::share::StableSize;
use super::{BatchReleaseAction, Draft, routing, status};
use crate::k8s::events::EventSpec;

/// Kruise's `NextBatchIndex`: the step after `current`, or -1 after the last.
pub fn natural_next(current: i32, steps: usize) -> i32 {
    if usize::try_from(current).unwrap_or(0) >= steps {
        -1
    } else {
        current + 1
    }
}

/// Groups a step asks for against the stable side, counted as the canary's groups are (a
/// set's share is taken in each slice: [`StableSize`]).
pub fn step_groups(step: &CanaryStep, stable: StableSize) -> i32 {
    stable.step_groups(step)
}

pub(super) fn stable_replicas(d: &Draft<'_>) -> i32 {
    d.obs.workload.as_ref().map_or(0, |w| w.replicas)
}

/// Puts an out-of-range `nextStepIndex` (hand-edited) back to the natural next step.
pub fn correct_next(d: &mut Draft<'_>) {
    let steps = routing::steps(d.obs).len();
    let c = &mut status::canary(d.status()).common;
    let n = i32::try_from(steps).unwrap_or(i32::MAX);
    if c.next_step_index <= 0 || c.next_step_index > n {
        c.next_step_index = natural_next(c.current_step_index, steps);
    }
}

/// A user-written `nextStepIndex` other than the natural next: go there. The state is
/// StepTrafficRouting if the canary already has the target step's groups, else
/// BeforeStepUpgrade. Jumping back never removes groups (the BatchRelease never shrinks).
pub fn jump(d: &mut Draft<'_>) -> bool {
    let steps = routing::steps(d.obs);
    let n = steps.len();
    let stable = StableSize::observed(d.obs);
    let now = d.now;
    let c = status::canary(d.status());
    let target = c.common.next_step_index;
    let in_range = target > 0 && usize::try_from(target).is_ok_and(|t| t <= n);
    if !in_range || target == natural_next(c.common.current_step_index, n) {
        return false;
    }
    let idx = usize::try_from(target - 1).unwrap_or(0);
    c.common.current_step_index = target;
    c.common.next_step_index = natural_next(target, n);
    c.common.current_step_state = if step_groups(&steps[idx], stable) == c.canary_replicas {
        StepState::StepTrafficRouting
    } else {
        StepState::BeforeStepUpgrade
    };
    c.common.last_update_time = Some(Time(now));
    true
}

/// The strategy changed mid-release: go to the first step (the current one first) whose
/// groups cover what the BatchRelease's current batch already has.
pub fn plan_changed(d: &mut Draft<'_>) {
    let steps = routing::steps(d.obs);
    let stable = StableSize::observed(d.obs);
    let have = d.obs.batch_release.as_ref().map(|br| {
        let plan = &br.spec.release_plan;
        let batches = plan.batches.clone().unwrap_or_default();
        let at = usize::try_from(plan.batch_partition.unwrap_or(0)).unwrap_or(0);
        batches
            .get(at.min(batches.len().saturating_sub(1)))
            .map_or(0, |b| stable.groups(&b.canary_replicas))
    });
    let hash = d.hash.clone();
    let now = d.now;
    let c = status::canary(d.status());
    let target = match have {
        None => 1,
        Some(have) => {
            let current = usize::try_from(c.common.current_step_index - 1).ok();
            let order = current
                .filter(|i| *i < steps.len())
                .into_iter()
                .chain((0..steps.len()).filter(|i| Some(*i) != current));
            let mut target = i32::try_from(steps.len()).unwrap_or(1);
            for i in order {
                target = i32::try_from(i + 1).unwrap_or(1);
                if have <= step_groups(&steps[i], stable) {
                    break;
                }
            }
            target
        }
    };
    c.common.rollout_hash = Some(hash);
    c.common.last_update_time = Some(Time(now));
    if c.common.next_step_index == target {
        c.common.current_step_state = StepState::StepReady;
        return;
    }
    c.common.next_step_index = target;
    jump(d);
}

/// The BatchRelease's current batch as its canary LWS shows it (`release::progress`, the
/// rule the BatchRelease controller publishes), with the batch's 0-based index; `None` while
/// there is no batch to run or no canary for the revision this Rollout releases.
pub fn batch_progress(d: &Draft<'_>, br: &BatchReleaseSummary) -> Option<(i32, BatchProgress)> {
    let plan = &br.spec.release_plan;
    let batches = plan.batches.as_deref().unwrap_or_default();
    let last = batches.len().checked_sub(1)?;
    let batch = usize::try_from(plan.batch_partition?)
        .unwrap_or(0)
        .min(last);
    let releasing = d
        .plan
        .status
        .canary_status
        .as_ref()
        .map(|c| c.canary_revision.as_str());
    if br.status.update_revision.as_deref() != releasing {
        return None;
    }
    let desired = desired_groups(&batches[batch].canary_replicas, stable_replicas(d));
    let batch = i32::try_from(batch).unwrap_or(0);
    // A pair release has no canary LWS either: its BatchRelease reads the set's LWSs of the
    // new revision and says how many complete pairs are ready.
    if br.spec.workload_ref.is_disaggregated_set()
        || (!plan.enable_extra_workload_for_canary
            && matches!(plan.rolling_style, None | Some(RollingStyle::Partition)))
    {
        return Some((batch, moved_in_place(br, batch)));
    }
    let p = progress(desired, br.canary.as_ref(), plan.failure_threshold.as_ref());
    Some((batch, p))
}

/// Partition style has no canary LWS to read: the batch's progress is the BatchRelease's own
/// (read off the moved groups' pods). Its state counts once its status describes the current
/// spec and batch; its counts are the new revision's groups, whatever the batch: a batch's
/// spec just written does not make the groups moved before unready (the traffic share they
/// carry stays with them while the next batch moves).
fn moved_in_place(br: &BatchReleaseSummary, batch: i32) -> BatchProgress {
    let brs = br.status.canary_status.clone().unwrap_or_default();
    let current =
        br.status.observed_generation == Some(br.generation) && brs.current_batch == batch;
    let state = match brs.current_batch_state.as_deref() {
        Some(batch_state::READY) if current => batch_state::READY,
        Some(batch_state::VERIFYING) if current => batch_state::VERIFYING,
        _ => batch_state::UPGRADING,
    };
    BatchProgress {
        state,
        updated: brs.updated_replicas,
        ready: brs.updated_ready_replicas,
    }
}

/// Copies the batch's progress into the canary status (Kruise's `syncBatchRelease`): read off
/// the canary LWS when it exists, else the BatchRelease's own status.
fn sync_batch_release(d: &mut Draft<'_>) {
    let Some(br) = d.obs.batch_release.as_ref() else {
        return;
    };
    let brs = br.status.canary_status.clone().unwrap_or_default();
    let (state, batch, updated, ready) = match batch_progress(d, br) {
        Some((batch, p)) => (p.state.to_string(), batch, p.updated, p.ready),
        None => (
            brs.current_batch_state.unwrap_or_default(),
            brs.current_batch,
            brs.updated_replicas,
            brs.updated_ready_replicas,
        ),
    };
    let mut message = format!(
        "BatchRelease is at state {state}, rollout-id {}, step {}",
        br.spec.release_plan.rollout_id.clone().unwrap_or_default(),
        batch + 1
    );
    // A pair's BatchRelease says which role keeps the new pair incomplete (and so out of
    // traffic), or which slice and role the batch waits for.
    if br.spec.workload_ref.is_disaggregated_set()
        && let Some(why) = br.status.message.as_deref().filter(|m| !m.is_empty())
    {
        message = format!("{message}: {why}");
    }
    let c = status::canary(d.status());
    c.canary_replicas = updated;
    c.canary_ready_replicas = ready;
    c.common.message = Some(message);
}

/// Runs the step machine. Returns `true` when it reached Completed in this reconcile.
pub fn run_canary(d: &mut Draft<'_>) -> bool {
    sync_batch_release(d);
    let update_revision = d
        .obs
        .workload
        .as_ref()
        .map(|w| w.update_revision.clone())
        .unwrap_or_default();
    {
        let c = status::canary(d.status());
        if c.common.pod_template_hash.is_empty() {
            c.common.pod_template_hash = update_revision.clone();
        }
    }
    if jump(d) {
        return false;
    }
    let steps = routing::steps(d.obs).to_vec();
    let n = steps.len();
    match analysis::background(d) {
        analysis::Background::Quiet => {}
        analysis::Background::Failed(why) => {
            d.analysis_failed = Some(why);
            return false;
        }
        analysis::Background::NeedsPerson(why) => d.background_hold = Some(why),
    }
    for _ in 0..8 {
        let now = d.now;
        let c = status::canary(d.status());
        let index = c
            .common
            .current_step_index
            .clamp(1, i32::try_from(n).unwrap_or(1));
        c.common.current_step_index = index;
        let step = &steps[usize::try_from(index - 1).unwrap_or(0)];
        let state = c.common.current_step_state.clone();
        d.visited.push((index, state.clone()));
        // A step without traffic first takes the split down (Kruise: FinalisingTrafficRouting).
        if !d.style.routes(step) && !routing::settled(d) {
            return false;
        }
        let next_state = match &state {
            StepState::BeforeStepUpgrade => {
                if d.style.routes(step) && !routing::settled(d) {
                    return false;
                }
                StepState::StepUpgrade
            }
            StepState::StepUpgrade => {
                if !upgrade(d, index, n) {
                    return false;
                }
                status::canary(d.status()).common.pod_template_hash = update_revision.clone();
                StepState::StepTrafficRouting
            }
            StepState::StepTrafficRouting => {
                if !routing::settled(d) {
                    return false;
                }
                StepState::StepMetricsAnalysis
            }
            // Kruise leaves lastUpdateTime alone here, so a pause counts from the end of
            // traffic routing (and a step's run older than that is an earlier release's).
            StepState::StepMetricsAnalysis => match analysis::step(d, index, n) {
                StepVerdict::NotAnalysed => {
                    status::canary(d.status()).common.current_step_state = StepState::StepPaused;
                    continue;
                }
                StepVerdict::Wait => return false,
                StepVerdict::Passed => {
                    // A passed analysis is the step's approval; a pause duration still runs.
                    let timed = step.pause.as_ref().and_then(|p| p.duration).is_some();
                    let held = d.background_hold.is_some();
                    let c = status::canary(d.status());
                    if timed || held {
                        c.common.current_step_state = StepState::StepPaused;
                        continue;
                    }
                    StepState::StepReady
                }
                StepVerdict::Failed(why) => {
                    d.analysis_failed = Some(why);
                    return false;
                }
                StepVerdict::NeedsPerson(why) => {
                    analysis::paused(d, index, n, &why);
                    status::canary(d.status()).common.current_step_state = StepState::StepPaused;
                    return false;
                }
            },
            StepState::StepPaused => {
                if !pause_over(d, step, index, n) {
                    return false;
                }
                StepState::StepReady
            }
            StepState::StepReady => {
                if d.background_hold.take().is_some() {
                    // Approved over a held background analysis: it starts over.
                    let name = analysis::background_name(
                        &d.obs.rollout.metadata.name.clone().unwrap_or_default(),
                        &status::canary(d.status()).canary_revision,
                    );
                    d.plan.analysis.delete.push(name);
                }
                let c = status::canary(d.status());
                c.common.last_update_time = Some(Time(now));
                if usize::try_from(index).unwrap_or(0) < n {
                    c.common.current_step_index = index + 1;
                    c.common.next_step_index = natural_next(index + 1, n);
                    c.common.current_step_state = StepState::BeforeStepUpgrade;
                    continue;
                }
                c.common.current_step_state = StepState::Completed;
                return true;
            }
            StepState::Completed => return true,
            // No state (a hand-edited status) or one this version does not know: start the
            // step again, and say so.
            other @ (StepState::Unset | StepState::Unknown(_)) => {
                d.event(EventSpec::warning(
                    event::UNKNOWN_STATE,
                    format!(
                        "currentStepState \"{other}\" is not a step state this controller \
                         knows; starting step {index} again"
                    ),
                ));
                StepState::BeforeStepUpgrade
            }
        };
        let c = status::canary(d.status());
        c.common.current_step_state = next_state;
        c.common.last_update_time = Some(Time(now));
    }
    false
}

/// How long a batch may take before the Rollout's message names what it waits for (the
/// BatchRelease's message: the canary LWS and each group not ready) and a Warning Event
/// `CanaryNotReady` is published. Until then the message is Kruise's plain "upgrade workload
/// to new version", so a release whose groups come up in time writes no status for them.
pub const STALL_SECONDS: i64 = 10;

/// StepUpgrade: the BatchRelease runs up to this step's batch; done when the batch is ready
/// for the spec we want — read off the canary LWS (`batch_progress`), so the reconcile the
/// canary's status change starts moves on without waiting for the BatchRelease's status.
fn upgrade(d: &mut Draft<'_>, index: i32, steps: usize) -> bool {
    let now = d.now;
    let mut message = status::upgrading(index, steps);
    let desired = d.style.batch_release(d, Some(index - 1), None);
    let ready = match d.obs.batch_release.as_ref() {
        Some(br) if br.is(&desired) => {
            let ready = batch_progress(d, br)
                .is_some_and(|(batch, p)| batch + 1 >= index && p.state == batch_state::READY);
            let since = status::canary(d.status()).common.last_update_time.clone();
            let current = br.status.observed_generation == Some(br.generation);
            if !ready {
                missed_deadline(d, since.as_ref(), br, index, steps);
                match status::remaining(since.as_ref(), STALL_SECONDS, now) {
                    Some(left) => d.requeue(left),
                    None => {
                        if current
                            && let Some(why) =
                                br.status.message.as_deref().filter(|m| !m.is_empty())
                        {
                            message = format!("{message}; {why}");
                            let stored = d
                                .obs
                                .rollout
                                .status
                                .as_ref()
                                .and_then(|s| s.message.as_deref());
                            if stored != Some(message.as_str()) {
                                d.event(EventSpec::warning(event::CANARY_NOT_READY, why));
                            }
                        }
                    }
                }
            }
            ready
        }
        _ => {
            d.plan.batch_release = BatchReleaseAction::Apply(Box::new(desired));
            false
        }
    };
    status::progressing_message(d.status(), message, now);
    if ready {
        d.event(EventSpec::normal(
            event::PROGRESSING,
            format!("upgrade step({index}) canary pods with new versions done"),
        ));
    }
    ready
}

/// Records in the draft that this step's batch missed the Rollout's deadline (if it has one),
/// with what the batch waits for; requeues at the deadline while it has not passed.
fn missed_deadline(
    d: &mut Draft<'_>,
    since: Option<&Time>,
    br: &BatchReleaseSummary,
    index: i32,
    steps: usize,
) {
    let Ok(Some(deadline)) = super::deadline::of(&d.obs.rollout) else {
        return;
    };
    if let Some(left) = status::remaining(since, deadline.seconds, d.now) {
        d.requeue(left);
        return;
    }
    let why = br
        .status
        .message
        .as_deref()
        .filter(|m| !m.is_empty())
        .map_or_else(|| format!("batch {index} is not ready"), str::to_string);
    d.deadline_missed = Some(format!(
        "step {index}/{steps}: the batch was not ready within {}s: {why}",
        deadline.seconds
    ));
}

/// StepPaused: approval (no duration) or the duration since the step's last change. The last
/// canary step with `replicas: "100%"` does not pause (Kruise; a blue-green one does).
fn pause_over(d: &mut Draft<'_>, step: &CanaryStep, index: i32, steps: usize) -> bool {
    if let Some(why) = d.background_hold.clone() {
        analysis::paused(d, index, steps, &why);
        return false;
    }
    let last = usize::try_from(index).is_ok_and(|i| i == steps);
    if last
        && d.style.skips_last_full_pause()
        && step.replicas == Some(IntOrString::String("100%".into()))
    {
        return true;
    }
    let now = d.now;
    if let Some(why) = analysis::needs_person(d, index) {
        analysis::paused(d, index, steps, &why);
        return false;
    }
    let hold = external_hold(d);
    let held = |message: String| match &hold {
        Some(why) => format!("{message}; {why}"),
        None => message,
    };
    let Some(seconds) = step.pause.as_ref().and_then(|p| p.duration) else {
        let message = held(status::needs_approval(index, steps));
        status::progressing_message(d.status(), message, now);
        return false;
    };
    let message = held(status::waiting_duration(index, steps, seconds));
    status::progressing_message(d.status(), message, now);
    let since = status::canary(d.status()).common.last_update_time.clone();
    match status::remaining(since.as_ref(), i64::from(seconds), now) {
        Some(left) => {
            d.requeue(left);
            false
        }
        None => true,
    }
}

/// A pair release holds while a role of the set is scaled externally (its BatchRelease writes
/// no new batch, `batchrelease::pair`): what the Rollout's message adds at a paused step or a
/// blue-green switch, where nothing else would name it — approving the step only reaches the
/// next batch, which holds too. `None` for an LWS or a set without an External role.
pub fn external_hold(d: &Draft<'_>) -> Option<String> {
    let w = d
        .obs
        .workload
        .as_ref()
        .filter(|w| w.kind == WorkloadKind::DisaggregatedSet)?;
    let (noun, verb) = match w.external_roles.as_slice() {
        [] => return None,
        [_] => ("role", "is"),
        _ => ("roles", "are"),
    };
    Some(format!(
        "the release holds: {noun} {} {verb} scaled externally (scaling.mode: External), so \
         no new batch is written until scaling.mode is Static again",
        w.external_roles.join(", ")
    ))
}
