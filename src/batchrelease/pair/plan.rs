//! The pure part of a pair release: a batch's groups per role, the batch's progress read off
//! the set's LWSs of the new revision, and the plan of one reconcile. No client, no clock.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::batchrelease::{
    BatchRelease, BatchReleaseCanaryStatus, BatchReleaseStatus, FinalizingPolicy, RollingStyle,
};
use crate::batchrelease::draft::{current_batch, note, release_plan_hash};
use crate::batchrelease::names::{FINALIZER, batch_state, event, phase};
use crate::batchrelease::plan::BatchReleasePlan;
use crate::k8s::events::EventSpec;
use crate::release::groups::{batch_ready, scaled};

/// Groups of the new revision per role, in every slice (the release-groups annotation).
pub type Groups = BTreeMap<String, i32>;

/// The DisaggregatedSet a BatchRelease releases, reduced to what the plan reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetObserved {
    /// Its name.
    pub name: String,
    /// `spec.slices`.
    pub slices: i32,
    /// Its roles in spec order: (name, replicas per slice).
    pub roles: Vec<(String, i32)>,
    /// Roles with `scaling.mode: External` (their replicas are a scaler's, not the spec's).
    pub external: Vec<String>,
    /// Revision of its role templates as they are now.
    pub update_revision: String,
    /// The hold annotation (the revision it ran when the release began).
    pub hold: Option<String>,
    /// The release-groups annotation as written: `None` when absent; `Err` with the raw value
    /// when it is not a JSON object of role to groups.
    pub release_groups: Option<Result<Groups, String>>,
    /// The release-style annotation says partition style (the held pair gives up the groups).
    pub in_place: bool,
    /// Its LeaderWorkerSets (every revision).
    pub children: Vec<RoleLws>,
}

/// Where a pair release puts the new revision's groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PairStyle {
    /// Beside the held pair, which keeps every group (canary style).
    #[default]
    Beside,
    /// In place of the held pair's groups, role by role (partition style: no second copy).
    InPlace,
}

/// One LeaderWorkerSet of the set, reduced to the batch's needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleLws {
    /// Slice label (0 without one).
    pub slice: i32,
    /// Role label.
    pub role: String,
    /// Revision label.
    pub revision: String,
    /// `spec.replicas`.
    pub spec_replicas: i32,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `status.replicas` (groups that exist).
    pub replicas: i32,
    /// `status.readyReplicas` (groups with every pod ready).
    pub ready: i32,
}

/// Groups of a role a step's share asks for: the share of the role's replicas, rounded up, at
/// least one (a pair needs every role) and never more than the role has. A role without
/// replicas gets none: the caller refuses such a batch.
pub fn role_groups(share: &IntOrString, role_replicas: i32) -> i32 {
    if role_replicas <= 0 {
        return 0;
    }
    scaled(share, role_replicas)
        .unwrap_or(0)
        .clamp(1, role_replicas)
}

/// The batch's groups for every role, never below what `written` already asks (a release
/// never shrinks the new pair; a jump back keeps what is there), or why the step cannot give
/// every role a group.
pub fn batch_groups(
    share: &IntOrString,
    roles: &[(String, i32)],
    written: Option<&Groups>,
) -> Result<Groups, String> {
    let mut out = Groups::new();
    for (role, replicas) in roles {
        let groups = role_groups(share, *replicas);
        if groups == 0 {
            return Err(format!(
                "role {role} has no replicas: a prefill/decode pair release needs at least one \
                 group of every role"
            ));
        }
        let kept = written
            .and_then(|w| w.get(role))
            .copied()
            .unwrap_or(0)
            .min(*replicas);
        out.insert(role.clone(), groups.max(kept));
    }
    Ok(out)
}

/// Partition style: why batch `batch` (0-based) cannot run, when it would move every group of
/// one role but not of another — the stable pair would be left serving without that role.
pub fn half_held_pair(groups: &Groups, roles: &[(String, i32)], batch: usize) -> Option<String> {
    let (whole, part): (Vec<_>, Vec<_>) = roles
        .iter()
        .partition(|(role, replicas)| groups.get(role).copied().unwrap_or(0) >= *replicas);
    let (moved, kept) = (whole.first()?, part.first()?);
    Some(format!(
        "partition style: batch {} moves every {} group ({} of {}) but only {} of {} {} groups, \
         which would leave the stable pair without {}; use steps that move a share every \
         role keeps a group of (or 100%), or the canary style \
         (enableExtraWorkloadForCanary: true)",
        batch + 1,
        moved.0,
        moved.1,
        moved.1,
        groups.get(&kept.0).copied().unwrap_or(0),
        kept.1,
        kept.0,
        moved.0
    ))
}

/// A pair batch's state and counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairProgress {
    /// One of `batch_state`.
    pub state: &'static str,
    /// Complete pairs of the new revision that exist: per slice, the fewest groups any role
    /// has, summed over slices.
    pub updated: i32,
    /// Complete pairs that are ready: per slice, the fewest ready groups any role has.
    pub ready: i32,
    /// A role of the new revision without a ready group in any slice, while another role has
    /// one: the pair is incomplete and gets no traffic.
    pub incomplete_role: Option<String>,
    /// Why a Verifying batch is not ready (the first LWS short of its groups).
    pub waiting: Option<String>,
}

/// The progress of the batch asking `groups` of `revision`: Upgrading while an LWS of the new
/// revision is missing, asks fewer groups or its status trails its spec; Ready when in every
/// slice every role has the batch's groups ready (failure threshold counted per LWS);
/// Verifying in between.
pub fn pair_progress(
    set: &SetObserved,
    revision: &str,
    groups: &Groups,
    threshold: Option<&IntOrString>,
) -> PairProgress {
    let mut upgrading = false;
    let mut waiting = None;
    let (mut updated, mut ready) = (0, 0);
    let mut ready_by_role: BTreeMap<&str, i32> = BTreeMap::new();
    for slice in 0..set.slices.max(1) {
        let (mut slice_updated, mut slice_ready) = (i32::MAX, i32::MAX);
        for (role, _) in &set.roles {
            let want = groups.get(role).copied().unwrap_or(0);
            let lws = set
                .children
                .iter()
                .find(|c| c.slice == slice && c.role == *role && c.revision == revision);
            let (exists, up) = lws.map_or((0, 0), |l| (l.replicas, l.ready));
            *ready_by_role.entry(role).or_default() += up;
            slice_updated = slice_updated.min(exists);
            slice_ready = slice_ready.min(up);
            match lws {
                Some(l)
                    if l.observed_generation == Some(l.generation) && l.spec_replicas >= want =>
                {
                    if !batch_ready(want, l.replicas, l.ready, threshold) && waiting.is_none() {
                        waiting = Some(format!(
                            "slice {slice}, role {role}: {}/{want} groups ready",
                            l.ready
                        ));
                    }
                }
                _ => upgrading = true,
            }
        }
        if !set.roles.is_empty() {
            updated += slice_updated;
            ready += slice_ready;
        }
    }
    let any_ready = ready_by_role.values().any(|r| *r > 0);
    let incomplete_role = any_ready
        .then(|| ready_by_role.iter().find(|(_, r)| **r == 0))
        .flatten()
        .map(|(role, _)| role.to_string());
    let state = if upgrading {
        batch_state::UPGRADING
    } else if waiting.is_some() {
        batch_state::VERIFYING
    } else {
        batch_state::READY
    };
    PairProgress {
        state,
        updated,
        ready,
        incomplete_role,
        waiting: (state == batch_state::VERIFYING)
            .then_some(waiting)
            .flatten(),
    }
}

/// What one reconcile of a pair BatchRelease decides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairPlan {
    /// The status, events and finalizer, as for an LWS release.
    pub common: BatchReleasePlan,
    /// Write this release-groups annotation on the set (with the style's annotation).
    pub release_groups: Option<Groups>,
    /// The release's style (written with the release-groups).
    pub style: PairStyle,
}

/// Decides one reconcile of a BatchRelease of a DisaggregatedSet in `style` (the set's own
/// controller scales the new revision's LWSs to the release-groups annotation this writes and,
/// in place, the held revision's down by as many).
pub fn plan(
    br: &BatchRelease,
    style: PairStyle,
    set: Option<&SetObserved>,
    now: Timestamp,
) -> PairPlan {
    let stored = br.status.clone().unwrap_or_default();
    let mut out = PairPlan {
        common: BatchReleasePlan {
            status: stored.clone(),
            ..BatchReleasePlan::default()
        },
        release_groups: None,
        style,
    };
    let common = &mut out.common;
    common.status.observed_generation = br.metadata.generation;
    if br.metadata.deletion_timestamp.is_some() {
        common.remove_finalizer = br.finalizers().iter().any(|f| f == FINALIZER);
        return out;
    }
    let Some(set) = set else {
        common.status.phase = Some(phase::COMPLETED.into());
        common.status.message = Some(format!(
            "DisaggregatedSet {} has gone",
            br.spec.workload_ref.name
        ));
        return out;
    };
    if matches!(
        common.status.phase.as_deref(),
        None | Some("") | Some(phase::PREPARING)
    ) {
        common.status.phase = Some(phase::PROGRESSING.into());
        common.status.stable_revision = set.hold.clone();
        common.status.update_revision = Some(set.update_revision.clone());
        common.status.canary_status = Some(BatchReleaseCanaryStatus {
            current_batch_state: Some(batch_state::UPGRADING.into()),
            ..BatchReleaseCanaryStatus::default()
        });
    }
    let rp = &br.spec.release_plan;
    let released = common.status.update_revision.clone().unwrap_or_default();
    // Blue-green's promotion: the new pair grows to every group of every role and stays so
    // while the set is held — the Rollout switches traffic to it once it is whole, then lifts
    // the hold, and the set's own rolling update finds it whole and drains the held pair.
    let promoting = rp.batch_partition.is_none()
        && rp.rolling_style == Some(RollingStyle::BlueGreen)
        && rp.finalizing_policy.unwrap_or_default() == FinalizingPolicy::WaitResume
        && set.hold.as_deref().is_some_and(|h| h != released);
    if rp.batch_partition.is_none() && !promoting {
        // Finalising: the Rollout lifts the hold and the release-groups in one write, and the
        // set's own rolling update takes the pair from there: nothing is left to undo here.
        common.status.phase = Some(phase::COMPLETED.into());
        return out;
    }
    if set.update_revision != released {
        let msg = format!(
            "the set's template changed during the release (now revision {}, releasing \
             {released}); waiting for the Rollout to restart the release",
            set.update_revision
        );
        note(common, &stored, false, event::PROGRESSING, msg);
        return out;
    }
    let Some((batch, share)) = current_batch(common, &stored, rp) else {
        return out;
    };
    let (batch, share) = if promoting {
        let last = rp.batches.as_deref().unwrap_or_default().len().max(1) - 1;
        (last, IntOrString::String("100%".into()))
    } else {
        (batch, share)
    };
    // Groups written by an earlier release (a third template restarts the release with a new
    // BatchRelease) are not this release's: only a batch this BatchRelease has recorded keeps
    // the groups it wrote.
    let ours = stored.update_revision.as_deref() == Some(released.as_str())
        && stored.canary_status.is_some();
    let written = match &set.release_groups {
        Some(Ok(groups)) if ours => Some(groups),
        Some(Ok(_)) => None,
        Some(Err(raw)) => {
            // Ours to write: an unreadable value is replaced, and said once.
            let msg = format!(
                "annotation {} on DisaggregatedSet {} is not a JSON object of role to groups \
                 ({raw}); rewriting it",
                crate::api::disaggregatedset::RELEASE_GROUPS_ANNOTATION,
                set.name
            );
            common
                .events
                .push(EventSpec::warning(event::PROGRESSING, msg));
            None
        }
        None => None,
    };
    if !set.external.is_empty() {
        hold_for_external_roles(br, common, &stored, set, &released, written, now);
        return out;
    }
    let groups = match batch_groups(&share, &set.roles, written) {
        Ok(groups) => groups,
        Err(msg) => {
            note(common, &stored, true, event::UNSUPPORTED, msg);
            return out;
        }
    };
    if style == PairStyle::InPlace
        && let Some(msg) = half_held_pair(&groups, &set.roles, batch)
    {
        note(common, &stored, true, event::UNSUPPORTED, msg);
        return out;
    }
    let held = set.hold.as_deref().is_some_and(|h| h != released);
    if !held {
        // The set's controller scales the new revision by this annotation only while held: a
        // write before the hold would be ignored, and one after it was lifted would be stale.
        let msg = format!(
            "waiting for the hold on DisaggregatedSet {} (annotation {})",
            set.name,
            crate::api::disaggregatedset::HELD_REVISION_ANNOTATION
        );
        note(common, &stored, false, event::PROGRESSING, msg);
        return out;
    }
    // The style rides with the groups: a set that lost its style annotation (or a release
    // that changed style) gets both written again.
    if written != Some(&groups) || set.in_place != (style == PairStyle::InPlace) {
        out.release_groups = Some(groups.clone());
    }
    let mut p = pair_progress(set, &released, &groups, rp.failure_threshold.as_ref());
    if out.release_groups.is_some() {
        // Counts read off LWSs the annotation has not scaled yet describe the last batch.
        p.state = batch_state::UPGRADING;
    }
    record(br, &mut out.common, &stored, batch, &groups, &p, now);
    out
}

/// Why a release holds while roles of the set are scaled externally (`external`, at least
/// one), holding at `batch` (0-based).
pub fn external_roles_message(external: &[String], batch: usize) -> String {
    let (noun, verb) = if external.len() == 1 {
        ("role", "is")
    } else {
        ("roles", "are")
    };
    format!(
        "{noun} {} {verb} scaled externally (scaling.mode: External): a pair's step is a share \
         of every role's spec.replicas, which an External role does not follow (its \
         DisaggregatedSetRoleScaler, driven by an HPA, counts the new pair's groups too), so \
         the release holds at batch {} with the groups it has; set scaling.mode: Static on the \
         role to go on, or roll back",
        external.join(", "),
        batch + 1
    )
}

/// A role scaled externally mid-release: no new batch is written, the batch already written
/// keeps being read (a role of the new pair losing its last ready group still takes the pair
/// out of traffic), and the status and a Warning name the roles.
fn hold_for_external_roles(
    br: &BatchRelease,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    set: &SetObserved,
    released: &str,
    written: Option<&Groups>,
    now: Timestamp,
) {
    let held = stored.canary_status.as_ref().map_or(0, |c| c.current_batch);
    let held = usize::try_from(held).unwrap_or(0);
    let why = external_roles_message(&set.external, held);
    let progress = written.map(|groups| {
        let p = pair_progress(
            set,
            released,
            groups,
            br.spec.release_plan.failure_threshold.as_ref(),
        );
        record(br, out, stored, held, groups, &p, now);
        out.status.message.take().unwrap_or_default()
    });
    if !stored
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with(why.as_str()))
    {
        out.events.push(EventSpec::warning(
            event::ROLE_SCALED_EXTERNALLY,
            why.clone(),
        ));
    }
    out.status.message = Some(match progress {
        Some(p) if !p.is_empty() => format!("{why}; {p}"),
        _ => why,
    });
}

/// Writes the batch's progress into the status (Kruise's canaryStatus shape), with an Event
/// when its state changes and a Warning when the new pair loses a role.
fn record(
    br: &BatchRelease,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    batch: usize,
    groups: &Groups,
    p: &PairProgress,
    now: Timestamp,
) {
    let old = stored.canary_status.clone().unwrap_or_default();
    let batch_i32 = i32::try_from(batch).unwrap_or(0);
    let was_ready = old.current_batch == batch_i32
        && old.current_batch_state.as_deref() == Some(batch_state::READY);
    out.status.canary_status = Some(BatchReleaseCanaryStatus {
        current_batch_state: Some(p.state.into()),
        current_batch: batch_i32,
        batch_ready_time: match (p.state == batch_state::READY, was_ready) {
            (true, true) => old.batch_ready_time.clone(),
            (true, false) => Some(Time(now)),
            (false, _) => None,
        },
        updated_replicas: p.updated,
        updated_ready_replicas: p.ready,
        no_need_update_replicas: None,
    });
    out.status.phase = Some(phase::PROGRESSING.into());
    out.status.observed_rollout_id = br.spec.release_plan.rollout_id.clone();
    out.status.observed_release_plan_hash = Some(release_plan_hash(br));
    let shown = groups
        .iter()
        .map(|(role, g)| format!("{role} {g}"))
        .collect::<Vec<_>>()
        .join(", ");
    let message = match (&p.incomplete_role, &p.waiting) {
        (Some(role), _) => {
            let msg = format!(
                "the new pair is incomplete: role {role} has no ready group, so it gets no \
                 traffic (batch {}: {shown})",
                batch + 1
            );
            // A pair that served and lost a role is news; one still coming up is not.
            let lost = old.updated_ready_replicas > 0 && p.ready == 0;
            if lost && stored.message.as_deref() != Some(msg.as_str()) {
                out.events
                    .push(EventSpec::warning(event::PAIR_INCOMPLETE, msg.clone()));
            }
            msg
        }
        (None, Some(why)) => format!("batch {} ({shown}) is not ready: {why}", batch + 1),
        (None, None) => format!("batch {} ({shown}) is {}", batch + 1, p.state),
    };
    if old.current_batch_state.as_deref() != Some(p.state) || old.current_batch != batch_i32 {
        out.events.push(EventSpec::normal(
            event::PROGRESSING,
            format!("batch {} ({shown}) is {}", batch + 1, p.state),
        ));
    }
    out.status.message = Some(message);
}
