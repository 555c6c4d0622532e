//! Apply: carries a [`Plan`] out — the only LWS code that writes to the API server. It decides
//! nothing: what each answer means (an event to publish, a refusal that becomes the
//! `ReplicaFailure` condition, whether the rest may go on) is written in the plan.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{
        apps::v1::{ControllerRevision, StatefulSet},
        core::v1::{Pod, Service},
        scheduling::v1alpha2::PodGroup,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::ResourceExt;
use serde_json::json;

use super::{
    error::{Error, Failure},
    labels,
    plan::{Delete, How, Plan, Write},
    status,
};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, LeaderWorkerSetStatus},
    k8s::{
        apply::{ApiError, Applier, Created, Deleted, Failure as ApiFailure, Object, Propagation},
        events::Events,
    },
};

/// Worker StatefulSets written at once by one reconcile (over one HTTP/2 connection, they
/// cost streams, not connections: src/k8s/client.rs).
const PARALLEL_WRITES: usize = 8;

/// What carrying the plan out found.
#[derive(Debug, Default)]
pub struct Applied {
    /// A write the API server refused, for the `ReplicaFailure` condition.
    pub failure: Option<Failure>,
    /// That refusal stopped the rest of the plan.
    pub blocked: bool,
    /// A transient error after which the rest still went ahead; the reconcile reports it at
    /// the end so it is retried.
    pub deferred: Option<ApiError>,
    /// A worker StatefulSet was created or a group restarted: the status planned from what
    /// was observed before is already out of date (see [`write_status`]).
    pub groups_changed: bool,
    /// The worker StatefulSets this apply created, by name, with their uids: a leader found
    /// stale afterwards (`plan::groups::stale_workers`) has its StatefulSet taken back.
    pub created_workers: BTreeMap<String, String>,
    /// An object the plan took for absent on the cache's word exists (`How::ApplyUnseen`,
    /// `How::CreateUnseen`): nothing after it was written, and the reconcile reads the name
    /// fresh and plans again.
    pub recheck: bool,
    /// The Services this apply created, by name.
    pub created_services: Vec<String>,
    /// The group restarts this apply carried out: leader name and its version as cached.
    pub restarted: Vec<(String, String)>,
}

/// How one write ended.
enum Written {
    /// Created by this write (its uid), with its events published.
    Created(Option<String>),
    /// Written (or already there), with its events published.
    Done,
    /// Refused as invalid: the plan says what that means.
    Refused(Failure, bool),
    /// Planned as absent on the cache's word, and the name is taken (or, for an apply, the
    /// object refused): read it fresh and plan again.
    Recheck,
}

async fn write<K: Object>(
    applier: &Applier,
    events: &Events,
    lws: &LeaderWorkerSet,
    w: &Write<K>,
) -> Result<Written, ApiError> {
    let result = match w.how {
        How::CreateIfAbsent | How::CreateUnseen => applier.create_if_absent(&w.object).await,
        How::Apply => applier
            .apply(&w.object)
            .await
            .map(|_| Created::Created(None)),
        How::ApplyUnseen => match applier.apply_unforced(&w.object).await {
            Ok(_) => Ok(Created::Created(None)),
            // 409: fields someone else set (or the cache is behind ours, which never
            // conflicts with ourselves: this is someone else's); 422: e.g. a second
            // controller reference. Either way, only a fresh read tells.
            Err(err) if matches!(err.failure(), ApiFailure::Conflict | ApiFailure::Refused(_)) => {
                return Ok(Written::Recheck);
            }
            Err(err) => Err(err),
        },
    };
    match result {
        Ok(Created::Created(uid)) => {
            events.publish_all(lws, &w.on_success).await;
            Ok(match w.how {
                How::CreateIfAbsent | How::CreateUnseen => Written::Created(uid),
                How::Apply | How::ApplyUnseen => Written::Done,
            })
        }
        Ok(Created::AlreadyExists) if w.how == How::CreateUnseen => Ok(Written::Recheck),
        Ok(Created::AlreadyExists) => Ok(Written::Done),
        Err(err) => {
            events.publish_all(lws, &w.on_failure).await;
            match (err.failure(), &w.on_refusal) {
                (ApiFailure::Refused(message), Some(refusal)) => Ok(Written::Refused(
                    Failure::spec(refusal.reason, format!("{}: {message}", refusal.what)),
                    refusal.blocks,
                )),
                _ => Err(err),
            }
        }
    }
}

/// Carries out the writes of `plan` in order: revisions, Services (before the leader
/// StatefulSet, so a group's Service exists before its ordinal does), PodGroups (the same),
/// leader StatefulSet, PodGroup and Service deletions, worker StatefulSets, rosters, group restarts, old revisions, then the
/// plan's own events.
pub async fn apply(
    applier: &Applier,
    events: &Events,
    lws: &LeaderWorkerSet,
    plan: &Plan,
) -> Result<Applied, Error> {
    let ns = lws.namespace().unwrap_or_default();
    let mut applied = Applied::default();
    if plan.blocked.is_some() {
        return Ok(applied);
    }
    let refused = |applied: &mut Applied, failure: Failure, blocks: bool| {
        applied.failure = Some(failure);
        applied.blocked = blocks;
        blocks
    };
    for rev in &plan.revisions {
        if let Written::Refused(f, blocks) = write(applier, events, lws, rev).await?
            && refused(&mut applied, f, blocks)
        {
            return Ok(applied);
        }
    }
    // A Service failure (typically a name the user already owns) is reported but does not
    // hold back the groups or the status.
    for svc in &plan.services {
        match write(applier, events, lws, svc).await {
            Ok(Written::Refused(f, blocks)) => {
                if refused(&mut applied, f, blocks) {
                    return Ok(applied);
                }
            }
            Ok(Written::Recheck) => {
                applied.recheck = true;
                return Ok(applied);
            }
            Ok(Written::Created(_)) => applied.created_services.push(svc.object.name_any()),
            Ok(Written::Done) => {}
            Err(err) => applied.deferred = Some(err),
        }
    }
    // A group's PodGroup before the leader StatefulSet makes (or moves) its pods.
    for pg in &plan.pod_groups {
        if let Written::Refused(f, blocks) = write(applier, events, lws, pg).await?
            && refused(&mut applied, f, blocks)
        {
            return Ok(applied);
        }
    }
    // A group's Volcano PodGroup once its leader exists, before its workers (as upstream).
    for pg in &plan.volcano_pod_groups {
        if let Written::Refused(f, blocks) = write(applier, events, lws, pg).await?
            && refused(&mut applied, f, blocks)
        {
            return Ok(applied);
        }
    }
    if let Some(sts) = &plan.leader_sts {
        let written = write(applier, events, lws, sts).await?;
        if matches!(written, Written::Recheck) {
            applied.recheck = true;
            return Ok(applied);
        }
        if let Written::Refused(f, blocks) = written
            && refused(&mut applied, f, blocks)
        {
            return Ok(applied);
        }
    }
    for pg in &plan.delete_pod_groups {
        applier
            .delete::<PodGroup>(&ns, &pg.name, pg.uid.as_deref(), Propagation::Default)
            .await?;
    }
    for svc in &plan.delete_services {
        applier
            .delete::<Service>(&ns, &svc.name, svc.uid.as_deref(), Propagation::Default)
            .await?;
    }
    // Groups are independent: their worker StatefulSets are written side by side, so a group
    // coming up never waits for another group's round trip. The answers are read in plan
    // order; an error stops the chunks after its own (an API server answering 429 or 5xx is
    // not sent the rest only to refuse it too), and a refusal that blocks stops everything
    // after the worker StatefulSets.
    let mut written = Vec::with_capacity(plan.worker_sts.len());
    for chunk in plan.worker_sts.chunks(PARALLEL_WRITES) {
        let writes = chunk.iter().map(|sts| write(applier, events, lws, sts));
        written.extend(futures::future::join_all(writes).await);
        if written.iter().any(Result::is_err) {
            break;
        }
    }
    for (result, sts) in written.into_iter().zip(&plan.worker_sts) {
        match result? {
            Written::Created(uid) => {
                applied.groups_changed = true;
                if let Some(uid) = uid {
                    applied.created_workers.insert(sts.object.name_any(), uid);
                }
            }
            // Worker StatefulSets are never planned unseen.
            Written::Done | Written::Recheck => {}
            Written::Refused(f, blocks) => {
                if refused(&mut applied, f, blocks) {
                    return Ok(applied);
                }
            }
        }
    }
    for roster in &plan.rosters {
        // The uid in the body makes the patch fail on any other incarnation of that name.
        let patch = json!({"metadata": {
            "uid": roster.uid,
            "annotations": {labels::WORKER_ROSTER: roster.value},
        }});
        match applier
            .merge_patch::<StatefulSet>(&ns, &roster.worker_sts, &patch)
            .await
        {
            Ok(()) => {}
            Err(err) if err.failure() != ApiFailure::Transient => {}
            Err(err) => return Err(err.into()),
        }
    }
    for restart in &plan.restarts {
        let deleted = applier
            .delete::<Pod>(
                &ns,
                &restart.leader,
                Some(&restart.uid),
                Propagation::Foreground,
            )
            .await?;
        if deleted == Deleted::Deleted {
            applied.groups_changed = true;
            applied
                .restarted
                .push((restart.leader.clone(), restart.version.clone()));
            events.publish(lws, &restart.event).await;
        }
    }
    for rev in &plan.truncate_revisions {
        applier
            .delete::<ControllerRevision>(&ns, &rev.name, rev.uid.as_deref(), Propagation::Default)
            .await?;
    }
    events.publish_all(lws, &plan.events).await;
    Ok(applied)
}

/// Takes back worker StatefulSets this reconcile created for leaders that turned out not to be
/// live (`plan::groups::stale_workers`). Each delete names the uid the create returned, so it
/// never reaches another StatefulSet of that name; one the garbage collector took first is
/// simply gone.
pub async fn remove_stale_workers(
    applier: &Applier,
    lws: &LeaderWorkerSet,
    stale: &[Delete],
) -> Result<(), ApiError> {
    let ns = lws.namespace().unwrap_or_default();
    for sts in stale {
        tracing::debug!(worker_sts = %sts.name, "its leader was replaced meanwhile: deleting it");
        applier
            .delete::<StatefulSet>(&ns, &sts.name, sts.uid.as_deref(), Propagation::Background)
            .await?;
    }
    Ok(())
}

/// The statuses this manager wrote and the LWS version each was computed from, by LWS uid.
///
/// A reconcile that runs before the LWS watch has delivered our last status write (the pod and
/// StatefulSet events that trigger it travel on other streams) compares against the status as
/// cached, sees a difference and writes the very same status again, with its condition event
/// again (a measurable share of all status patches in a rolling update).
/// An entry lives until a reconcile finds the cache at a newer LWS or already showing
/// that status (normally the very next one, woken by the write); after a restart it is gone
/// and the status is simply written once more.
///
/// It also remembers when each LWS's status was last written, for [`counters_wait`], and the
/// resourceVersion each write made, for [`WrittenStatuses::is_echo`].
#[derive(Debug, Default)]
pub struct WrittenStatuses {
    from: Mutex<HashMap<String, (String, LeaderWorkerSetStatus)>>,
    at: Mutex<HashMap<String, Instant>>,
    made: Mutex<HashMap<String, (String, Instant)>>,
}

/// How long the version a status write made is remembered for [`WrittenStatuses::is_echo`];
/// its watch event comes within a second unless the watch is down, and a forgotten entry costs
/// one reconcile that changes nothing.
const ECHO_PATIENCE: Duration = Duration::from_secs(30);

impl WrittenStatuses {
    /// Whether `next` was already written from this very version of `lws`.
    fn repeats(&self, lws: &LeaderWorkerSet, next: &LeaderWorkerSetStatus) -> bool {
        let (Some(uid), Some(version)) = (&lws.metadata.uid, &lws.metadata.resource_version) else {
            return false;
        };
        let mut written = self.from.lock().unwrap_or_else(|e| e.into_inner());
        let repeats = written
            .get(uid)
            .is_some_and(|(from, status)| same_write(from, status, version, next));
        if !repeats {
            // The cache has moved past that write (or there was none): forget it.
            written.remove(uid);
        }
        repeats
    }

    /// The cache shows what we want: nothing to remember.
    fn forget(&self, lws: &LeaderWorkerSet) {
        if let Some(uid) = &lws.metadata.uid {
            let mut written = self.from.lock().unwrap_or_else(|e| e.into_inner());
            written.remove(uid);
        }
    }

    /// `next` was written from `lws` as cached; the write made version `made`.
    fn record(&self, lws: &LeaderWorkerSet, next: &LeaderWorkerSetStatus, made: Option<String>) {
        let now = Instant::now();
        if let (Some(uid), Some(version)) = (&lws.metadata.uid, &lws.metadata.resource_version) {
            let mut written = self.from.lock().unwrap_or_else(|e| e.into_inner());
            written.insert(uid.clone(), (version.clone(), next.clone()));
        }
        if let (Some(uid), Some(made)) = (&lws.metadata.uid, made) {
            let mut echoes = self.made.lock().unwrap_or_else(|e| e.into_inner());
            echoes.retain(|_, (_, at)| now.saturating_duration_since(*at) < ECHO_PATIENCE);
            echoes.insert(uid.clone(), (made, now));
        }
        self.wrote_at(lws, now);
    }

    /// Whether `lws` (from a watch event) is the very version one of our status writes made,
    /// and so holds nothing a reconcile has not already acted on: that reconcile computed the
    /// status from everything else it read, and any change since came in its own watch event,
    /// which starts a reconcile of its own. So the echo of a status write starts none (such
    /// reconciles ended with nothing to do). Only the write's own version counts, once; the Rollout
    /// controllers, which act on an LWS's status, get every event as before.
    pub fn is_echo(&self, lws: &LeaderWorkerSet) -> bool {
        let (Some(uid), Some(version)) = (&lws.metadata.uid, &lws.metadata.resource_version) else {
            return false;
        };
        let mut echoes = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let echo = echoes.get(uid).is_some_and(|(made, _)| made == version);
        if echo {
            echoes.remove(uid);
        }
        echo
    }

    /// How long ago this LWS's status was last written, if within [`STATUS_PACE`].
    fn since_last_write(&self, lws: &LeaderWorkerSet, now: Instant) -> Option<Duration> {
        let at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        let since = now.saturating_duration_since(*at.get(lws.metadata.uid.as_ref()?)?);
        (since < STATUS_PACE).then_some(since)
    }

    fn wrote_at(&self, lws: &LeaderWorkerSet, now: Instant) {
        if let Some(uid) = &lws.metadata.uid {
            let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
            // Only writes within the pace matter: the map holds the LWSs written lately.
            at.retain(|_, t| now.saturating_duration_since(*t) < STATUS_PACE);
            at.insert(uid.clone(), now);
        }
    }
}

/// At most one status write per LWS within this time when only the group counters change
/// ([`counters_wait`]). Creating, scaling or replacing a group moves the counters several
/// times over some seconds (its leader goes, the StatefulSet controller recreates it, its
/// workers are created, it comes back ready); what anyone acts on is written at once (the
/// conditions, the generation), so the counters in between are for people reading `kubectl
/// get`, and ten seconds merge most of them.
pub const STATUS_PACE: Duration = Duration::from_secs(10);

/// How long a status write waits, if it does: the write changes only the group counters
/// (ready, updated, replicas), this LWS's status was written less than [`STATUS_PACE`] ago, and
/// either a rolling update runs (before and after) or no other controller owns the LWS. An
/// owned LWS coming up or scaling writes its counters at once: its owner may act on a count
/// short of all (a DisaggregatedSet waits for one ready group per role; a release's canary
/// LWS is read off its pods, but nothing is gained by guessing which owner reads what). Written one by one, the counters cost about twice upstream's status writes per group,
/// whose single-worker queue merges them by being slow. The write that
/// waits is made by the reconcile the requeue brings (or an earlier one), from the world as it
/// is then, so it is never lost, only merged. Everything a reader acts on is written at once:
/// conditions (Argo CD health, `kubectl wait`, the condition events; the end of a creation, a
/// scale or a rolling update flips them, and that is what the Rollout controllers wait for on
/// an LWS's status — a canary's group readiness they read from its pods), a new
/// `observedGeneration` (a scale, a template change), and the HPA selector. A restart forgets
/// the pace and writes at once.
fn counters_wait(
    current: &LeaderWorkerSetStatus,
    next: &LeaderWorkerSetStatus,
    since_last_write: Option<Duration>,
    owned: bool,
) -> Option<Duration> {
    let since = since_last_write.filter(|s| *s < STATUS_PACE)?;
    let updating = |s: &LeaderWorkerSetStatus| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == status::UPDATE_IN_PROGRESS && c.status == "True")
    };
    if owned && !(updating(current) && updating(next)) {
        return None;
    }
    let counters_only = LeaderWorkerSetStatus {
        ready_replicas: current.ready_replicas,
        updated_replicas: current.updated_replicas,
        replicas: current.replicas,
        ..next.clone()
    };
    (without_times(&counters_only) == without_times(current)).then(|| STATUS_PACE - since)
}

/// Whether this reconcile leaves the status to the next one. A reconcile that created a
/// worker StatefulSet or restarted a group planned the status from the groups as they were
/// before: the counters it would write (the new group not counted yet, the restarted one still
/// ready) are out of date at once, and the watch event of that very write (the StatefulSet
/// added, the leader pod deleting) brings the next reconcile, which writes them right: without
/// this, every group replaced cost one such status write. A blocked LWS writes its condition
/// at once.
fn status_waits(blocked: bool, groups_changed: bool) -> bool {
    groups_changed && !blocked
}

/// The status with every condition's `lastTransitionTime` cleared: the clock of the reconcile
/// that saw a transition, which two computations of the same status may disagree on.
fn without_times(s: &LeaderWorkerSetStatus) -> LeaderWorkerSetStatus {
    let mut s = s.clone();
    for c in s.conditions.iter_mut().flatten() {
        c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    }
    s
}

/// A status computed from LWS version `version` repeats the one written from version `from`:
/// same version, same status. A condition's `lastTransitionTime` is the clock of the reconcile
/// that saw the transition, so a transition seen twice from the same stale cache differs only
/// there.
fn same_write(
    from: &str,
    written: &LeaderWorkerSetStatus,
    version: &str,
    next: &LeaderWorkerSetStatus,
) -> bool {
    from == version && without_times(written) == without_times(next)
}

/// Writes the status: the one the plan computed, with the `ReplicaFailure` condition from the
/// plan or the apply (a blocked LWS gets only that condition). Publishes the condition events.
/// A status already written from the same cached LWS is not written (nor announced) again.
/// A write of counters only may wait ([`counters_wait`]): then it returns when to reconcile
/// again to make it.
pub async fn write_status(
    applier: &Applier,
    events: &Events,
    written: &WrittenStatuses,
    lws: &LeaderWorkerSet,
    plan: &Plan,
    applied: &Applied,
    now: &Time,
) -> Result<Option<Duration>, ApiError> {
    let current = lws.status.clone().unwrap_or_default();
    let blocked = plan
        .blocked
        .as_ref()
        .or(applied.failure.as_ref().filter(|_| applied.blocked));
    if status_waits(blocked.is_some(), applied.groups_changed) {
        return Ok(None);
    }
    let (mut next, condition_event) = match (blocked, &plan.status) {
        (None, Some(outcome)) => (outcome.status.clone(), outcome.event.clone()),
        _ => (current.clone(), None),
    };
    let failure = blocked
        .or(applied.failure.as_ref())
        .or(plan.failure.as_ref());
    let failure_event = status::with_failure(&mut next, failure, lws.metadata.generation, now);
    if next == current {
        written.forget(lws);
    } else if written.repeats(lws, &next) {
        return Ok(None);
    } else if let Some(wait) = counters_wait(
        &current,
        &next,
        written.since_last_write(lws, Instant::now()),
        crate::k8s::apply::controller_uid(lws).is_some(),
    ) {
        return Ok(Some(wait));
    }
    if next != current {
        let (ns, name) = (lws.namespace().unwrap_or_default(), lws.name_any());
        let body = if blocked.is_some() {
            // Only the conditions: what was observed is not looked at while blocked.
            json!({"status": {"conditions": next.conditions}})
        } else {
            json!({ "status": next })
        };
        let made = applier
            .merge_patch_status::<LeaderWorkerSet>(&ns, &name, &body)
            .await?;
        written.record(lws, &next, made.resource_version);
    }
    if let Some(event) = failure_event {
        tracing::warn!(reason = %event.reason, problem = %event.note, "LeaderWorkerSet cannot be realised");
        events.publish(lws, &event).await;
    }
    if let Some((reason, note)) = condition_event {
        events
            .publish(lws, &crate::k8s::events::EventSpec::normal(&reason, note))
            .await;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;

    fn status(ready: i32, condition: &str, at: i64) -> LeaderWorkerSetStatus {
        LeaderWorkerSetStatus {
            ready_replicas: Some(ready),
            conditions: Some(vec![Condition {
                type_: condition.into(),
                status: "True".into(),
                reason: "r".into(),
                message: "m".into(),
                last_transition_time: Time(
                    k8s_openapi::jiff::Timestamp::from_second(1_795_327_200 + at).unwrap(),
                ),
                observed_generation: Some(1),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn a_status_repeats_only_from_the_same_lws_version() {
        // (written from, written, computed from, next, repeats)
        let cases = [
            (
                "7",
                status(3, "Progressing", 0),
                "7",
                status(3, "Progressing", 0),
                true,
            ),
            // the same transition seen again from the stale cache, a moment later
            (
                "7",
                status(3, "Progressing", 0),
                "7",
                status(3, "Progressing", 2),
                true,
            ),
            // the cache moved on: whatever it shows is compared afresh
            (
                "7",
                status(3, "Progressing", 0),
                "8",
                status(3, "Progressing", 0),
                false,
            ),
            // something else changed since that write
            (
                "7",
                status(3, "Progressing", 0),
                "7",
                status(4, "Progressing", 0),
                false,
            ),
            (
                "7",
                status(3, "Progressing", 0),
                "7",
                status(3, "Available", 0),
                false,
            ),
        ];
        for (i, (from, written, version, next, repeats)) in cases.into_iter().enumerate() {
            assert_eq!(
                same_write(from, &written, version, &next),
                repeats,
                "case {i}"
            );
        }
    }

    #[test]
    fn the_status_waits_for_the_reconcile_after_a_group_change() {
        // (blocked, groups changed, waits)
        let cases = [
            (false, false, false),
            (false, true, true),
            (true, false, false),
            (true, true, false),
        ];
        for (blocked, changed, waits) in cases {
            assert_eq!(status_waits(blocked, changed), waits, "{blocked} {changed}");
        }
    }

    #[test]
    fn only_a_counters_only_write_soon_after_the_last_one_waits() {
        let ms = Duration::from_millis;
        let rolling = |s: &mut LeaderWorkerSetStatus| {
            let mut c = s.conditions.as_ref().unwrap()[0].clone();
            c.type_ = status::UPDATE_IN_PROGRESS.into();
            s.conditions.as_mut().unwrap().push(c);
        };
        let with = |f: fn(&mut LeaderWorkerSetStatus)| {
            let mut s = status(3, "Progressing", 0);
            rolling(&mut s);
            s.updated_replicas = Some(1);
            s.replicas = Some(4);
            s.observed_generation = Some(2);
            f(&mut s);
            s
        };
        let current = with(|_| {});
        // (name, next, since the last write, waits for)
        let cases: [(
            &str,
            LeaderWorkerSetStatus,
            Option<Duration>,
            Option<Duration>,
        ); 9] = [
            (
                "ready moved, written 300 ms ago",
                with(|s| s.ready_replicas = Some(2)),
                Some(ms(300)),
                Some(STATUS_PACE - ms(300)),
            ),
            (
                "all three counters moved",
                with(|s| {
                    s.ready_replicas = Some(4);
                    s.updated_replicas = Some(2);
                    s.replicas = Some(3);
                }),
                Some(ms(10)),
                Some(STATUS_PACE - ms(10)),
            ),
            (
                "no write lately",
                with(|s| s.ready_replicas = Some(2)),
                None,
                None,
            ),
            (
                "the last write is a pace ago",
                with(|s| s.ready_replicas = Some(2)),
                Some(STATUS_PACE),
                None,
            ),
            (
                "the rolling update ended",
                with(|s| {
                    s.ready_replicas = Some(4);
                    s.conditions.as_mut().unwrap()[1].status = "False".into();
                }),
                Some(ms(10)),
                None,
            ),
            (
                "a condition changed",
                {
                    let mut s = status(3, "Available", 0);
                    rolling(&mut s);
                    s.updated_replicas = Some(1);
                    s.replicas = Some(4);
                    s.observed_generation = Some(2);
                    s
                },
                Some(ms(10)),
                None,
            ),
            (
                "a new generation",
                with(|s| {
                    s.ready_replicas = Some(2);
                    s.observed_generation = Some(3);
                }),
                Some(ms(10)),
                None,
            ),
            (
                "the HPA selector",
                with(|s| s.hpa_pod_selector = Some("x=y".into())),
                Some(ms(10)),
                None,
            ),
            (
                "a condition's time only (the same transition)",
                {
                    let mut s = with(|s| s.ready_replicas = Some(2));
                    s.conditions.as_mut().unwrap()[0].last_transition_time =
                        Time(k8s_openapi::jiff::Timestamp::from_second(1_795_327_300).unwrap());
                    s
                },
                Some(ms(10)),
                Some(STATUS_PACE - ms(10)),
            ),
        ];
        for (name, next, since, waits) in cases {
            assert_eq!(
                counters_wait(&current, &next, since, false),
                waits,
                "{name}"
            );
            assert_eq!(
                counters_wait(&current, &next, since, true),
                waits,
                "{name}, owned"
            );
        }
        // Outside a rolling update too (an LWS coming up or scaling): counters wait, unless
        // another controller owns the LWS and may act on them.
        let scaling = status(3, "Progressing", 0);
        let mut more_ready = scaling.clone();
        more_ready.ready_replicas = Some(4);
        assert_eq!(
            counters_wait(&scaling, &more_ready, Some(ms(10)), false),
            Some(STATUS_PACE - ms(10))
        );
        assert_eq!(
            counters_wait(&scaling, &more_ready, Some(ms(10)), true),
            None
        );
        // Coming up whole flips the conditions: written at once.
        let mut available = status(4, "Available", 0);
        available.ready_replicas = Some(4);
        assert_eq!(
            counters_wait(&scaling, &available, Some(ms(10)), false),
            None
        );
    }

    #[test]
    fn the_pace_counts_from_the_last_write_of_the_same_lws() {
        let written = WrittenStatuses::default();
        let lws = |uid: &str| {
            let mut lws = LeaderWorkerSet::new("a", Default::default());
            lws.metadata.uid = Some(uid.into());
            lws
        };
        let t0 = Instant::now();
        assert_eq!(written.since_last_write(&lws("a"), t0), None);
        written.wrote_at(&lws("a"), t0);
        let later = t0 + Duration::from_millis(400);
        assert_eq!(
            written.since_last_write(&lws("a"), later),
            Some(Duration::from_millis(400))
        );
        assert_eq!(written.since_last_write(&lws("b"), later), None);
        assert_eq!(written.since_last_write(&lws("a"), t0 + STATUS_PACE), None);
        // Entries older than the pace are dropped on the next write.
        written.wrote_at(&lws("b"), t0 + STATUS_PACE * 2);
        assert_eq!(written.at.lock().unwrap().len(), 1);
    }

    #[test]
    fn only_the_version_a_status_write_made_is_its_echo_and_only_once() {
        let written = WrittenStatuses::default();
        let lws = |uid: &str, version: &str| {
            let mut lws = LeaderWorkerSet::new("a", Default::default());
            lws.metadata.uid = Some(uid.into());
            lws.metadata.resource_version = Some(version.into());
            lws
        };
        assert!(!written.is_echo(&lws("u", "8")), "nothing written");
        written.record(
            &lws("u", "7"),
            &status(3, "Progressing", 0),
            Some("8".into()),
        );
        assert!(!written.is_echo(&lws("u", "7")), "the version written from");
        assert!(!written.is_echo(&lws("v", "8")), "another LWS");
        assert!(written.is_echo(&lws("u", "8")));
        assert!(!written.is_echo(&lws("u", "8")), "once");
        // A write whose answer carried no version has no echo to skip.
        written.record(&lws("u", "8"), &status(4, "Available", 0), None);
        assert!(!written.is_echo(&lws("u", "9")));
    }

    #[test]
    fn a_write_is_remembered_until_the_cache_shows_a_newer_lws() {
        let written = WrittenStatuses::default();
        let mut lws = LeaderWorkerSet::new("a", Default::default());
        lws.metadata.uid = Some("u".into());
        lws.metadata.resource_version = Some("7".into());
        let next = status(3, "Progressing", 0);
        assert!(!written.repeats(&lws, &next), "nothing written yet");
        written.record(&lws, &next, Some("8".into()));
        assert!(written.repeats(&lws, &next), "cache still at version 7");
        lws.metadata.resource_version = Some("9".into());
        assert!(!written.repeats(&lws, &next), "cache moved on");
        lws.metadata.resource_version = Some("7".into());
        assert!(
            !written.repeats(&lws, &next),
            "forgotten once the cache moved on"
        );
        written.record(&lws, &next, Some("10".into()));
        written.forget(&lws);
        assert!(
            !written.repeats(&lws, &next),
            "forgotten once the cache showed it"
        );
    }
}
