//! The canary style (Kruise's `canarystyle/`): a canary LWS beside the stable one, grown batch
//! by batch to the groups the current batch asks for and never shrunk during a release; its
//! progress read off the canary LWS; finalised by removing it at once (Immediate), or
//! (WaitResume) by giving back one canary group for each stable group that is ready on the
//! new template, down to what the stable LWS's rolling update may take out of service at once,
//! until the stable LWS has rolled. `object` builds the canary LWS.

pub mod object;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::draft::{
    BatchReleasePlan, canary_names, current_batch, hold_progress, note, release_plan_hash,
};
use super::names::{batch_state, event, phase};
use super::observe::{BatchReleaseObserved, CanaryLws, GroupReadiness, StableLws};
use crate::api::batchrelease::{BatchReleaseCanaryStatus, BatchReleaseStatus, FinalizingPolicy};
use crate::k8s::events::EventSpec;
use crate::release::groups::desired_groups;
use crate::release::names::canary_name;
use crate::release::progress::{BatchProgress, progress};
use object::{desired_canary, keep_kueue_labels};

/// Plans the release of `released` (the revision the release is about) for the stable LWS
/// `stable`, once the generic part of the plan has set the phase up.
pub fn control(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    released: &str,
    now: Timestamp,
) {
    let br = &obs.br;
    let rp = &br.spec.release_plan;
    let name = canary_name(&stable.lws.name_any(), released);
    out.delete_canaries = canary_names(&obs.canaries)
        .into_iter()
        .filter(|n| *n != name)
        .collect();
    let canary = obs.canaries.iter().find(|c| c.lws.name_any() == name);

    if rp.batch_partition.is_none() {
        finalizing(obs, out, stored, canary, released);
        return;
    }
    out.status.phase = Some(phase::PROGRESSING.into());
    if stable.update_revision != released {
        let msg = format!(
            "the workload's template changed during the release (now revision {}, releasing {}); \
             waiting for the Rollout to restart the release",
            stable.update_revision, released
        );
        note(out, stored, false, event::PROGRESSING, msg);
        return;
    }
    let Some((batch, size)) = current_batch(out, stored, rp) else {
        return;
    };
    let desired = desired_groups(&size, stable.replicas());
    grow(obs, stable, out, canary, &name, desired);
    let counts = canary.map(|c| crate::release::progress::CanaryCounts::of(&c.lws));
    let p = progress(desired, counts.as_ref(), rp.failure_threshold.as_ref());
    let waiting = match (p.state, canary) {
        (batch_state::VERIFYING, Some(c)) => Some(not_ready_message(
            batch + 1,
            &format!("LeaderWorkerSet {name}"),
            &c.not_ready_groups,
            desired,
            p.ready,
        )),
        _ => None,
    };
    record(obs, stable, out, stored, (batch, desired), p, waiting, now);
}

/// Writes a batch's progress `p` (batch `batch.0`, 0-based, of `batch.1` groups) into the
/// status, with an Event when its state changes, one when the user's LWS was scaled, and
/// `waiting` (why a Verifying batch is not ready) as the message. Shared by every style.
#[allow(clippy::too_many_arguments)]
pub fn record(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    (batch, desired): (usize, i32),
    p: BatchProgress,
    waiting: Option<String>,
    now: Timestamp,
) {
    let br = &obs.br;
    let rp = &br.spec.release_plan;
    let BatchProgress {
        state,
        updated,
        ready,
    } = p;
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
        // Set when a rollback in batches starts (`partition`), kept for its batches.
        no_need_update_replicas: out
            .status
            .canary_status
            .as_ref()
            .and_then(|c| c.no_need_update_replicas),
    });
    out.status.observed_rollout_id = rp.rollout_id.clone();
    if let Some(was) = stored.observed_workload_replicas
        && was != stable.replicas()
    {
        // Followed, not fought: every size is a share of the replicas as they are now.
        out.events.push(EventSpec::normal(
            event::WORKLOAD_SCALED,
            format!(
                "LeaderWorkerSet {} was scaled from {was} to {} groups mid-release: batch {} \
                 now asks {desired} groups",
                stable.lws.name_any(),
                stable.replicas(),
                batch + 1
            ),
        ));
    }
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
    match waiting {
        Some(m) => note(out, stored, true, event::CANARY_NOT_READY, m),
        None => out.status.message = None,
    }
    hold_progress(stored, &mut out.status);
}

/// Asks for the canary LWS `name` with at least `groups` groups (Kruise never scales a canary
/// down during a release: a jump back keeps its groups).
pub fn grow(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    canary: Option<&CanaryLws>,
    name: &str,
    groups: i32,
) {
    let have_spec = canary.and_then(|c| c.lws.spec.replicas).unwrap_or(0);
    let mut wanted = desired_canary(
        &obs.br,
        &stable.lws,
        name,
        groups.max(have_spec),
        obs.br
            .spec
            .release_plan
            .patch_pod_template_metadata
            .as_ref(),
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
}

/// `batchPartition` is null: Immediate removes the canary at once; WaitResume keeps it (it
/// still serves the canary share of traffic), giving its groups back as the stable LWS's
/// groups become ready on the new template ([`shrink_as_stable_rolls`]), until the stable LWS
/// has rolled every group to its template, then the release is Completed (the Rollout deletes this BatchRelease, and the
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
        FinalizingPolicy::WaitResume => {
            if let (Some(stable), Some(c)) = (obs.stable.as_ref(), canary) {
                shrink_as_stable_rolls(obs, stable, out, c, released);
            }
            obs.stable.as_ref().is_some_and(StableLws::fully_rolled)
        }
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
            "waiting for the stable LeaderWorkerSet to roll every group to its template".to_string()
        }
    });
}

/// WaitResume: the stable LWS rolls to the released template by its own strategy while the
/// canary still serves its share. Each stable group whole and ready on the released template
/// gives back one canary group, so the release holds no more than the last step's groups (plus
/// the LWS's own surge) and less and less of that; the canary keeps as many groups as the
/// stable LWS may take out of service at once (its `maxUnavailable`, at least one), so the
/// groups serving never drop below the stable replica count while it rolls. The Rollout scales
/// the canary's traffic share with its ready groups (`rollout::plan::routing`) and sends it
/// back to the stable Service once every stable group is updated and ready.
fn shrink_as_stable_rolls(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    canary: &CanaryLws,
    released: &str,
) {
    let have = canary.lws.spec.replicas.unwrap_or(1);
    let replicas = stable.replicas();
    let last_step = obs
        .br
        .spec
        .release_plan
        .batches
        .as_ref()
        .and_then(|b| b.last())
        .map_or(have, |b| desired_groups(&b.canary_replicas, replicas));
    let size = stable.lws.spec.leader_worker_template.size.unwrap_or(1);
    let moved = if stable.update_revision == released {
        stable
            .on_update
            .iter()
            .filter(|g| g.leader && g.ready_pods >= size)
            .count()
    } else {
        0
    };
    let keep = keep_while_stable_rolls(
        have,
        last_step,
        i32::try_from(moved).unwrap_or(i32::MAX),
        stable_may_be_unavailable(&stable.lws),
    );
    if keep >= have {
        return;
    }
    let mut wanted = desired_canary(
        &obs.br,
        &stable.lws,
        &canary.lws.name_any(),
        keep,
        obs.br
            .spec
            .release_plan
            .patch_pod_template_metadata
            .as_ref(),
    );
    keep_kueue_labels(&mut wanted, &canary.lws);
    out.apply_canary = Some(wanted);
    out.events.push(EventSpec::normal(
        event::PROGRESSING,
        format!(
            "{moved} of {replicas} groups of LeaderWorkerSet {} are ready on the new template: \
             LeaderWorkerSet {} gives back {} of its {have} groups",
            stable.lws.name_any(),
            canary.lws.name_any(),
            have - keep
        ),
    ));
}

/// Canary groups to keep while the stable LWS rolls: the last step's `last_step` groups less
/// one per stable group `moved` to the new template and ready, never fewer than `floor`
/// (capped at the last step's groups, at least one) and never more than it `has` now (a
/// canary given back is not grown again when a stable group fails later).
pub fn keep_while_stable_rolls(has: i32, last_step: i32, moved: i32, floor: i32) -> i32 {
    let floor = floor.clamp(1, last_step.max(1));
    has.min((last_step - moved).max(floor)).max(0)
}

/// How many groups the stable LWS's rolling update may take out of service at once: its
/// `maxUnavailable` (default 1) against its replicas, rounded down as the LWS does.
fn stable_may_be_unavailable(lws: &crate::api::leaderworkerset::LeaderWorkerSet) -> i32 {
    let max_unavailable = lws
        .spec
        .rollout_strategy
        .as_ref()
        .and_then(|s| s.rolling_update_configuration.as_ref())
        .and_then(|r| r.max_unavailable.clone())
        .unwrap_or(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    crate::lws::rolling::scaled(&max_unavailable, lws.spec.replicas.unwrap_or(1), false)
        .unwrap_or(1)
}

/// "batch 2 waits for LeaderWorkerSet vllm-canary-x: 1/2 groups ready; not ready: group 1".
/// Groups, not pods: the message (and so the status) changes when a group's readiness does,
/// not with every pod that starts. A group whose Kueue Workload is not admitted adds Kueue's
/// reason: "…; canary group 1 waits for Kueue admission in queue gpu-team: couldn't assign
/// flavors to pod set main: insufficient quota …" (docs/kueue.md). A gang group the scheduler
/// could not place whole adds its PodGroup and the scheduler's reason: "…; group 1 cannot be
/// scheduled whole (PodGroup vllm-canary-x-1-y): 0/5 nodes are available: …" (docs/lws.md,
/// "Gang scheduling").
pub fn not_ready_message(
    batch: usize,
    what: &str,
    not_ready: &[GroupReadiness],
    desired: i32,
    ready: i32,
) -> String {
    let groups: Vec<String> = not_ready
        .iter()
        .map(|g| format!("group {}", g.index))
        .collect();
    let mut m = format!("batch {batch} waits for {what}: {ready}/{desired} groups ready");
    if !groups.is_empty() {
        m.push_str("; not ready: ");
        m.push_str(&groups.join(", "));
    }
    for g in not_ready {
        if let Some(k) = &g.kueue {
            m.push_str(&format!(
                "; canary group {} waits for Kueue admission in queue {}: {}",
                g.index, k.queue, k.why
            ));
        }
        if let Some(gang) = &g.gang {
            m.push_str(&format!(
                "; group {} cannot be scheduled whole (PodGroup {}): {}",
                g.index, gang.pod_group, gang.why
            ));
        }
    }
    m
}
