//! The partition style (Kruise's `partitionstyle/`, `enableExtraWorkloadForCanary: false`):
//! no second LWS. Each batch lets its groups move to the new template inside the user's LWS,
//! highest ordinals first as the LWS rolls, by writing the release partition annotation
//! (`replicas − groups of the batch`) that our LWS controller honours on top of the hold
//! (`lws::plan::revisions`); the user's `rolloutStrategy` is never written. Progress is the
//! groups whose leader runs the released revision (updated) and whose every pod does and is
//! ready (ready), read off the pods. Kruise's `rollback-in-batch` starts the release again for
//! a reverted template, the groups already on it needing no update. `patchPodTemplateMetadata`
//! goes on the moved groups' leader pods (a merge patch: the LWS's template is the user's) and
//! comes off them before the release is finalised. Finalising: WaitResume waits for the user's LWS to have
//! rolled every group (the Rollout removes the annotation with the hold, and the LWS rolls the
//! rest by its own strategy); Immediate ends at once (rollback, disable, delete: the Rollout
//! lifts the annotation after moving traffic, and the moved groups roll back by the LWS's own
//! strategy).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::canary::{not_ready_message, record};
use super::draft::{BatchReleasePlan, canary_names, current_batch, note};
use super::names::{batch_state, event, phase};
use super::observe::{BatchReleaseObserved, GroupReadiness, LeaderPod, StableLws};
use crate::api::batchrelease::{BatchReleaseCanaryStatus, BatchReleaseStatus, FinalizingPolicy};
use crate::api::rollout::PatchPodTemplateMetadata;
use crate::k8s::events::EventSpec;
use crate::release::groups::desired_groups;
use crate::release::names::ROLLBACK_IN_BATCH;
use crate::release::progress::{CanaryCounts, progress};

/// Plans the release of `released` for the stable LWS `stable` (see the module).
pub fn control(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    released: &str,
    now: Timestamp,
) {
    let rp = &obs.br.spec.release_plan;
    // No second LWS in this style: one left from an earlier style of the same release goes.
    out.delete_canaries = canary_names(&obs.canaries);
    if rp.batch_partition.is_none() {
        finalizing(obs, stable, out, stored);
        return;
    }
    out.status.phase = Some(phase::PROGRESSING.into());
    let reverted = rolling_back_in_batches(obs, stable, released);
    if reverted {
        prepare_rollback(stable, out);
    }
    let released = if reverted {
        stable.update_revision.as_str()
    } else {
        released
    };
    if stable.update_revision != released {
        // The LWS webhook froze every group where it is (partition = replicas) in the same
        // admission as the template change; the Rollout moves traffic and restarts.
        let msg = format!(
            "the workload's template changed during the release (now revision {}, releasing {}); \
             every group stays where it is until the Rollout restarts or rolls back the release",
            stable.update_revision, released
        );
        note(out, stored, false, event::PROGRESSING, msg);
        return;
    }
    let Some((batch, size)) = current_batch(out, stored, rp) else {
        return;
    };
    let replicas = stable.replicas();
    // Rolling back in batches, the groups already on the template need no update: the
    // batch's share is of the groups that moved (Kruise's noNeedUpdateReplicas).
    let no_need_update = out
        .status
        .canary_status
        .as_ref()
        .and_then(|c| c.no_need_update_replicas)
        .unwrap_or(0)
        .clamp(0, replicas);
    let desired = desired_groups(&size, replicas - no_need_update);
    let partition = (replicas - desired).max(0);
    if stable.release_partition != Some(partition) {
        out.release_partition = Some(partition);
    }
    if let Some(patch) = rp.patch_pod_template_metadata.as_ref() {
        out.leader_patches = stable
            .on_update
            .iter()
            .filter(|g| g.index >= partition && g.leader)
            .filter_map(|g| g.leader_pod.as_ref())
            .filter_map(|pod| put_on(pod, patch))
            .collect();
    }
    let size = stable.lws.spec.leader_worker_template.size.unwrap_or(1);
    let counts = counts(stable, partition, size);
    let p = progress(desired, Some(&counts), rp.failure_threshold.as_ref());
    let waiting = (p.state == batch_state::VERIFYING).then(|| {
        let not_ready = not_ready_groups(stable, partition, size);
        not_ready_message(
            batch + 1,
            &format!(
                "the groups of LeaderWorkerSet {} from ordinal {partition} up to move in place",
                stable.lws.metadata.name.as_deref().unwrap_or_default()
            ),
            &not_ready,
            desired,
            p.ready,
        )
    });
    record(obs, stable, out, stored, (batch, desired), p, waiting, now);
}

/// Kruise's `rollouts.kruise.io/rollback-in-batch` on this BatchRelease (the Rollout sets it
/// when its template went back with the policy on) and the template is back on the revision
/// the hold keeps: the release starts again for that revision, moving the moved groups back
/// batch by batch instead of all at once.
fn rolling_back_in_batches(obs: &BatchReleaseObserved, stable: &StableLws, released: &str) -> bool {
    let annotated = obs
        .br
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLBACK_IN_BATCH))
        .is_some_and(|v| !v.is_empty());
    annotated
        && stable.update_revision != released
        && stable.hold.as_deref() == Some(stable.update_revision.as_str())
}

/// Starts the release again for the template the LWS went back to, counting the groups that
/// are on it already (the webhook froze every group in the revert's admission, so this count
/// is the same after a restart).
fn prepare_rollback(stable: &StableLws, out: &mut BatchReleasePlan) {
    let already = stable.on_update.iter().filter(|g| g.leader).count();
    let already = i32::try_from(already).unwrap_or(i32::MAX);
    out.status.update_revision = Some(stable.update_revision.clone());
    out.status.canary_status = Some(BatchReleaseCanaryStatus {
        current_batch_state: Some(batch_state::UPGRADING.into()),
        no_need_update_replicas: Some(already),
        ..BatchReleaseCanaryStatus::default()
    });
    out.events.push(EventSpec::normal(
        event::PROGRESSING,
        format!(
            "the template went back to revision {}: rolling back in batches the {} groups \
             that moved ({already} need no update)",
            stable.update_revision,
            stable.replicas() - already
        ),
    ));
}

/// The batch's counts as a canary LWS would give them: the groups the release partition lets
/// move (`spec_replicas`, only once the annotation says `partition`), the groups on the
/// released revision (their leader runs it) and those whole and ready on it.
fn counts(stable: &StableLws, partition: i32, size: i32) -> CanaryCounts {
    let generation = stable.lws.metadata.generation.unwrap_or_default();
    let observed = stable
        .lws
        .status
        .as_ref()
        .and_then(|s| s.observed_generation);
    let allowed = match stable.release_partition {
        Some(p) if p == partition => stable.replicas() - partition,
        _ => 0,
    };
    CanaryCounts {
        spec_replicas: allowed,
        generation,
        observed_generation: observed,
        replicas: stable
            .on_update
            .iter()
            .filter(|g| g.index >= partition && g.leader)
            .count() as i32,
        ready: stable
            .on_update
            .iter()
            .filter(|g| g.index >= partition && g.leader && g.ready_pods >= size)
            .count() as i32,
    }
}

/// The groups the batch moves (ordinal ≥ `partition`) that are not whole and ready on the
/// released revision.
fn not_ready_groups(stable: &StableLws, partition: i32, size: i32) -> Vec<GroupReadiness> {
    stable
        .on_update
        .iter()
        .filter(|g| g.index >= partition && !(g.leader && g.ready_pods >= size))
        .map(|g| GroupReadiness {
            index: g.index,
            ready_pods: g.ready_pods,
            pods: size,
            kueue: None,
            gang: stable.gang_waits.get(&g.index).cloned(),
        })
        .collect()
}

/// `batchPartition` is null: WaitResume is done once the user's LWS has rolled every group to
/// its template ([`StableLws::fully_rolled`]); Immediate at once (the Rollout lifts the
/// release partition).
fn finalizing(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
) {
    let policy = obs
        .br
        .spec
        .release_plan
        .finalizing_policy
        .unwrap_or_default();
    let patch = obs
        .br
        .spec
        .release_plan
        .patch_pod_template_metadata
        .as_ref();
    if let Some(patch) = patch {
        let own = own_leader_metadata(&stable.lws);
        out.leader_patches = stable
            .on_update
            .iter()
            .filter_map(|g| g.leader_pod.as_ref())
            .filter_map(|pod| take_off(pod, patch, &own))
            .collect();
    }
    let ends = out.leader_patches.is_empty()
        && match policy {
            FinalizingPolicy::Immediate => true,
            FinalizingPolicy::WaitResume => stable.fully_rolled(),
        };
    // The end is for good (the Rollout deletes a Completed BatchRelease), so the leaders it
    // believes clean are read fresh once: one LIST per release.
    out.confirm_leaders = ends
        && patch.is_some()
        && !stable.leaders_confirmed
        && stored.phase.as_deref() != Some(phase::COMPLETED);
    let done = ends && !out.confirm_leaders;
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
    out.status.message = (!done).then(|| {
        "waiting for the stable LeaderWorkerSet to roll every group to its template".to_string()
    });
}

/// The merge patch that puts `patchPodTemplateMetadata` on a moved group's leader, unless it
/// carries all of it already.
fn put_on(pod: &LeaderPod, patch: &PatchPodTemplateMetadata) -> Option<(String, Value)> {
    let labels = patch.labels.clone().unwrap_or_default();
    let annotations = patch.annotations.clone().unwrap_or_default();
    let missing = |want: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
        want.iter().any(|(k, v)| have.get(k) != Some(v))
    };
    (missing(&labels, &pod.labels) || missing(&annotations, &pod.annotations)).then(|| {
        (
            pod.name.clone(),
            json!({"metadata": {"labels": labels, "annotations": annotations}}),
        )
    })
}

/// The merge patch that takes `patchPodTemplateMetadata` off a leader when the release ends
/// (its group stays on the new template, or will), keeping what the LWS's own leader template
/// sets (`own`): a key and value the user's template has is the user's.
fn take_off(
    pod: &LeaderPod,
    patch: &PatchPodTemplateMetadata,
    own: &(BTreeMap<String, String>, BTreeMap<String, String>),
) -> Option<(String, Value)> {
    let gone = |want: &Option<BTreeMap<String, String>>,
                have: &BTreeMap<String, String>,
                own: &BTreeMap<String, String>| {
        want.iter()
            .flatten()
            .filter(|(k, v)| have.get(*k) == Some(*v) && own.get(*k) != Some(*v))
            .map(|(k, _)| (k.clone(), Value::Null))
            .collect::<serde_json::Map<String, Value>>()
    };
    let labels = gone(&patch.labels, &pod.labels, &own.0);
    let annotations = gone(&patch.annotations, &pod.annotations, &own.1);
    (!labels.is_empty() || !annotations.is_empty()).then(|| {
        (
            pod.name.clone(),
            json!({"metadata": {"labels": labels, "annotations": annotations}}),
        )
    })
}

/// The labels and annotations the LWS's own leader template gives its leaders (the worker
/// template's when it has no leader template).
fn own_leader_metadata(
    lws: &crate::api::leaderworkerset::LeaderWorkerSet,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let lwt = &lws.spec.leader_worker_template;
    let meta = lwt
        .leader_template
        .as_ref()
        .unwrap_or(&lwt.worker_template)
        .metadata
        .clone()
        .unwrap_or_default();
    (
        meta.labels.unwrap_or_default(),
        meta.annotations.unwrap_or_default(),
    )
}
