//! The BatchRelease controller's decisions (canary style): from the BatchRelease, the stable
//! LWS and the canary LWS(es) to the canary LWS wanted, what to delete, the status and events.
//!
//! Stateless by construction: the batch run is `batchPartition` (the Rollout only raises it
//! after the previous batch was ready), and the batch state is read off the canary LWS —
//! Upgrading while it lacks the batch's groups (or its status trails its spec), Verifying
//! while too few groups are ready, Ready otherwise. A restart computes the same answer.

use sha1::{Digest, Sha1};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::canary::{desired_canary, keep_kueue_labels};
use super::names::{FINALIZER, batch_state, event, phase};
use super::observe::{BatchReleaseObserved, CanaryLws};
use crate::api::batchrelease::{
    BatchReleaseCanaryStatus, BatchReleaseStatus, FinalizingPolicy, RollingStyle,
};
use crate::api::leaderworkerset::LeaderWorkerSet;
use crate::api::rollout::{LWS_API_VERSION, LWS_KIND};
use crate::k8s::events::EventSpec;
use crate::release::groups::desired_groups;
use crate::release::names::canary_name;
use crate::release::progress::{BatchProgress, progress};

/// What the apply step should do for one BatchRelease.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchReleasePlan {
    /// The new status.
    pub status: BatchReleaseStatus,
    /// The canary LWS as it should be (server-side applied unless `canary_in_place`).
    pub apply_canary: Option<LeaderWorkerSet>,
    /// The observed canary already carries every field of `apply_canary`: applying it would
    /// change nothing, so it is not written (a release step would otherwise repeat it for every
    /// event of the canary's groups).
    pub canary_in_place: bool,
    /// Delete these canary LWSes (by name).
    pub delete_canaries: Vec<String>,
    /// Remove Kruise's BatchRelease finalizer (only ever present on objects Kruise wrote).
    pub remove_finalizer: bool,
    /// Events to publish on the BatchRelease.
    pub events: Vec<EventSpec>,
}

/// Hash of the release plan (`status.observedReleasePlanHash`; opaque, like Kruise's).
pub fn release_plan_hash(br: &crate::api::batchrelease::BatchRelease) -> String {
    let data = serde_json::to_string(&br.spec.release_plan).unwrap_or_default();
    Sha1::digest(data.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn canary_names(canaries: &[CanaryLws]) -> Vec<String> {
    canaries.iter().map(|c| c.lws.name_any()).collect()
}

/// Decides one reconcile of a BatchRelease.
pub fn plan(obs: &BatchReleaseObserved, now: Timestamp) -> BatchReleasePlan {
    let br = &obs.br;
    let stored = br.status.clone().unwrap_or_default();
    let mut out = BatchReleasePlan {
        status: stored.clone(),
        ..BatchReleasePlan::default()
    };
    out.status.observed_generation = br.metadata.generation;
    if br.metadata.deletion_timestamp.is_some() {
        out.delete_canaries = canary_names(&obs.canaries);
        out.remove_finalizer = br.finalizers().iter().any(|f| f == FINALIZER);
        return out;
    }
    let rp = &br.spec.release_plan;
    let style = rp
        .rolling_style
        .unwrap_or(if rp.enable_extra_workload_for_canary {
            RollingStyle::Canary
        } else {
            RollingStyle::Partition
        });
    let w = &br.spec.workload_ref;
    if style != RollingStyle::Canary || w.api_version != LWS_API_VERSION || w.kind != LWS_KIND {
        let msg = format!(
            "only canary-style releases of a {LWS_API_VERSION} {LWS_KIND} are supported yet \
             (rollingStyle {style:?}, workload {} {})",
            w.api_version, w.kind
        );
        note(&mut out, &stored, true, event::UNSUPPORTED, msg);
        out.status.phase = Some(phase::PREPARING.into());
        return out;
    }
    let Some(stable) = obs.stable.as_ref() else {
        // Workload gone: nothing left to release; the canary goes too.
        out.delete_canaries = canary_names(&obs.canaries);
        out.status.phase = Some(
            if obs.canaries.is_empty() {
                phase::COMPLETED
            } else {
                phase::FINALIZING
            }
            .into(),
        );
        out.status.message = Some(format!("workload {} has gone", w.name));
        return out;
    };
    if matches!(
        out.status.phase.as_deref(),
        None | Some("") | Some(phase::PREPARING)
    ) {
        out.status.phase = Some(phase::PROGRESSING.into());
        out.status.stable_revision = stable.hold.clone();
        out.status.update_revision = Some(stable.update_revision.clone());
        out.status.observed_workload_replicas = Some(stable.replicas());
        out.status.canary_status = Some(BatchReleaseCanaryStatus {
            current_batch_state: Some(batch_state::UPGRADING.into()),
            ..BatchReleaseCanaryStatus::default()
        });
    }
    let released = out.status.update_revision.clone().unwrap_or_default();
    let name = canary_name(&stable.lws.name_any(), &released);
    out.delete_canaries = canary_names(&obs.canaries)
        .into_iter()
        .filter(|n| *n != name)
        .collect();
    let canary = obs.canaries.iter().find(|c| c.lws.name_any() == name);

    if rp.batch_partition.is_none() {
        finalizing(obs, &mut out, &stored, canary, &released);
        return out;
    }
    out.status.phase = Some(phase::PROGRESSING.into());
    if stable.update_revision != released {
        let msg = format!(
            "the workload's template changed during the release (now revision {}, releasing {}); \
             waiting for the Rollout to restart the release",
            stable.update_revision, released
        );
        note(&mut out, &stored, false, event::PROGRESSING, msg);
        return out;
    }
    let batches = rp.batches.clone().unwrap_or_default();
    let Some(last) = batches.len().checked_sub(1) else {
        note(
            &mut out,
            &stored,
            true,
            event::UNSUPPORTED,
            "releasePlan has no batches".into(),
        );
        return out;
    };
    let batch = usize::try_from(rp.batch_partition.unwrap_or(0))
        .unwrap_or(0)
        .min(last);
    let desired = desired_groups(&batches[batch].canary_replicas, stable.replicas());
    // Kruise never scales a canary down during a release (a jump back keeps its groups).
    let have_spec = canary.and_then(|c| c.lws.spec.replicas).unwrap_or(0);
    let target = desired.max(have_spec);
    let mut wanted = desired_canary(
        br,
        &stable.lws,
        &name,
        target,
        rp.patch_pod_template_metadata.as_ref(),
    );
    if let Some(c) = canary {
        keep_kueue_labels(&mut wanted, &c.lws);
    }
    out.canary_in_place = canary.is_some_and(|c| {
        match (serde_json::to_value(&wanted), serde_json::to_value(&c.lws)) {
            (Ok(want), Ok(have)) => crate::k8s::apply::already_applied(&want, &have),
            _ => false,
        }
    });
    out.apply_canary = Some(wanted);
    let counts = canary.map(|c| crate::release::progress::CanaryCounts::of(&c.lws));
    let BatchProgress {
        state,
        updated,
        ready,
    } = progress(desired, counts.as_ref(), rp.failure_threshold.as_ref());
    let old = stored.canary_status.clone().unwrap_or_default();
    let batch_i32 = i32::try_from(batch).unwrap_or(0);
    let was_ready = old.current_batch == batch_i32
        && old.current_batch_state.as_deref() == Some(batch_state::READY);
    out.status.canary_status = Some(BatchReleaseCanaryStatus {
        current_batch_state: Some(state.into()),
        current_batch: batch_i32,
        batch_ready_time: match (state == batch_state::READY, was_ready) {
            (true, true) => old.batch_ready_time.clone(),
            (true, false) => Some(Time(now)),
            (false, _) => None,
        },
        updated_replicas: updated,
        updated_ready_replicas: ready,
        no_need_update_replicas: None,
    });
    out.status.observed_rollout_id = rp.rollout_id.clone();
    out.status.observed_workload_replicas = Some(stable.replicas());
    out.status.observed_release_plan_hash = Some(release_plan_hash(br));
    if old.current_batch_state.as_deref() != Some(state) || old.current_batch != batch_i32 {
        out.events.push(EventSpec::normal(
            event::PROGRESSING,
            format!(
                "batch {} ({desired} of {} groups): {state}",
                batch + 1,
                stable.replicas()
            ),
        ));
    }
    let msg = match (state, canary) {
        (batch_state::VERIFYING, Some(c)) => {
            Some(not_ready_message(batch + 1, &name, c, desired, ready))
        }
        _ => None,
    };
    match msg {
        Some(m) => note(&mut out, &stored, true, event::CANARY_NOT_READY, m),
        None => out.status.message = None,
    }
    hold_progress(&stored, &mut out.status);
    out
}

/// Keeps the stored `updatedReplicas` when it is all that changed: a canary group being
/// created is no news to a reader (the state, the ready count and the message are, and the
/// count is written along with them), and written on its own it cost a status patch a group.
fn hold_progress(stored: &BatchReleaseStatus, new: &mut BatchReleaseStatus) {
    let (Some(was), Some(now)) = (stored.canary_status.as_ref(), new.canary_status.as_ref()) else {
        return;
    };
    if was.updated_replicas == now.updated_replicas {
        return;
    }
    let mut held = new.clone();
    if let Some(c) = held.canary_status.as_mut() {
        c.updated_replicas = was.updated_replicas;
    }
    if held == *stored {
        *new = held;
    }
}

/// `batchPartition` is null: Immediate removes the canary at once; WaitResume keeps it (it
/// still serves the canary share of traffic) until the stable LWS has rolled to the released
/// revision, then the release is Completed (the Rollout deletes this BatchRelease, and the
/// canary with it, once traffic is back on the stable Service).
fn finalizing(
    obs: &BatchReleaseObserved,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    canary: Option<&CanaryLws>,
    released: &str,
) {
    let policy = obs
        .br
        .spec
        .release_plan
        .finalizing_policy
        .unwrap_or_default();
    let done = match policy {
        FinalizingPolicy::Immediate => {
            if let Some(c) = canary {
                out.delete_canaries.push(c.lws.name_any());
            }
            obs.canaries.is_empty()
        }
        FinalizingPolicy::WaitResume => obs.stable.as_ref().is_some_and(|s| s.rolled_to(released)),
    };
    out.status.phase = Some(
        if done {
            phase::COMPLETED
        } else {
            phase::FINALIZING
        }
        .into(),
    );
    if done && stored.phase.as_deref() != Some(phase::COMPLETED) {
        out.events
            .push(EventSpec::normal(event::COMPLETED, "release finalized"));
    }
    out.status.message = (!done).then(|| match policy {
        FinalizingPolicy::Immediate => "removing the canary LeaderWorkerSet".to_string(),
        FinalizingPolicy::WaitResume => {
            "waiting for the stable LeaderWorkerSet to roll to the released revision".to_string()
        }
    });
}

/// "batch 2 waits for LeaderWorkerSet vllm-canary-x: 1/2 groups ready; not ready: group 1".
/// Groups, not pods: the message (and so the status) changes when a group's readiness does,
/// not with every pod that starts. A group whose Kueue Workload is not admitted adds Kueue's
/// reason: "…; canary group 1 waits for Kueue admission in queue gpu-team: couldn't assign
/// flavors to pod set main: insufficient quota …" (docs/kueue.md).
fn not_ready_message(batch: usize, name: &str, c: &CanaryLws, desired: i32, ready: i32) -> String {
    let groups: Vec<String> = c
        .not_ready_groups
        .iter()
        .map(|g| format!("group {}", g.index))
        .collect();
    let mut m =
        format!("batch {batch} waits for LeaderWorkerSet {name}: {ready}/{desired} groups ready");
    if !groups.is_empty() {
        m.push_str("; not ready: ");
        m.push_str(&groups.join(", "));
    }
    for g in &c.not_ready_groups {
        if let Some(k) = &g.kueue {
            m.push_str(&format!(
                "; canary group {} waits for Kueue admission in queue {}: {}",
                g.index, k.queue, k.why
            ));
        }
    }
    m
}

/// Sets the status message and, when it is news, publishes it as an event.
fn note(
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    warning: bool,
    reason: &'static str,
    message: String,
) {
    if stored.message.as_deref() != Some(message.as_str()) {
        out.events.push(if warning {
            EventSpec::warning(reason, message.clone())
        } else {
            EventSpec::normal(reason, message.clone())
        });
    }
    out.status.message = Some(message);
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
