//! Plan: everything the LWS controller decides, as a pure function from what it observed to
//! the writes, events and status it wants. No client, no clock (the time comes in as `now`);
//! table-tested without a cluster. Split by concern:
//!
//! - [`revisions`]: which template revision the groups should run, and which
//!   ControllerRevisions to record;
//! - [`leader_sts`]: the leader StatefulSet's partition and replicas (the rolling update);
//! - [`services`]: the shared headless Service, or one Service per group;
//! - [`groups`]: one worker StatefulSet per leader pod;
//! - [`restarts`]: which groups to take down and rebuild (RecreateGroupOnPodRestart,
//!   RecreateGroupAfterStart);
//! - [`progress`]: a group that cannot come up within its deadline (ours);
//! - [`gangs`]: one PodGroup per group for native gang scheduling (ours).
//!
//! [`super::apply`] carries the plan out without deciding anything; [`super::status`] turns the
//! observation and the apply's outcome into the status.

pub mod candidates;
pub mod gangs;
pub mod groups;
pub mod leader_sts;
pub mod progress;
pub mod restarts;
pub mod revisions;
pub mod services;
#[cfg(test)]
mod tests;
pub mod volcano;

use std::time::Duration;

use k8s_openapi::{
    api::{
        apps::v1::{ControllerRevision, StatefulSet},
        core::v1::Service,
        scheduling::v1alpha2::PodGroup,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::ResourceExt;

use super::{
    admission,
    deref::Dereferenced,
    error::Failure,
    observe::Observed,
    status::{self, StatusOutcome},
};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, RestartPolicy},
    k8s::{apply::controller_uid, error::BLOCKED_RECHECK, events::EventSpec},
};

/// Event reasons (upstream's, so tools that watch for them keep working).
pub mod reasons {
    /// A ControllerRevision was recorded.
    pub const CREATING_REVISION: &str = "CreatingRevision";
    /// Groups are being created or recovering.
    pub const GROUPS_PROGRESSING: &str = "GroupsProgressing";
    /// The rolling update moved.
    pub const GROUPS_UPDATING: &str = "GroupsUpdating";
    /// A group is rebuilt because one of its pods restarted or went away (v0.9's reason; v0.8
    /// said `RecreateGroupOnPodRestart`).
    pub const RECREATE_GROUP: &str = "RecreateGroup";
    /// An object could not be created.
    pub const FAILED_CREATE: &str = "FailedCreate";
}

/// How one object is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// Created once, never updated: an existing object of that name is left as it is.
    CreateIfAbsent,
    /// Server-side applied with our field manager.
    Apply,
    /// Not in the cache, and not read fresh ([`Dereferenced::verified`] false): applied
    /// without taking over anyone's fields. If the API server has an object of that name (ours
    /// the cache has not shown yet, or someone else's), it answers 409 (or 422, two
    /// controllers) and the reconcile reads the name fresh and plans again. A new LWS so costs
    /// no read of a name that is almost always free.
    ApplyUnseen,
    /// The same for what is created once: `AlreadyExists` means read it and plan again.
    CreateUnseen,
}

/// What a refusal (the API server calls the object invalid) of one write means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnRefusal {
    /// The `ReplicaFailure` reason.
    pub reason: &'static str,
    /// What failed, before the API server's message (e.g. "the API server refused leader
    /// StatefulSet vllm").
    pub what: String,
    /// The rest of the plan cannot go on without this object.
    pub blocks: bool,
}

/// One object to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Write<K> {
    /// The object.
    pub object: K,
    /// Create once, or apply.
    pub how: How,
    /// Published once the write took effect (not when the object was already there).
    pub on_success: Vec<EventSpec>,
    /// Published when it failed.
    pub on_failure: Vec<EventSpec>,
    /// What a refusal means (None: a refusal is an error like any other).
    pub on_refusal: Option<OnRefusal>,
}

/// A leader pod to delete (foreground), so its whole group is rebuilt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restart {
    /// Leader pod name.
    pub leader: String,
    /// The incarnation decided on: a successor of the same name is never deleted.
    pub uid: String,
    /// The leader's version as cached when decided: until the cache moves past it, the
    /// delete's own watch event has not arrived ([`crate::k8s::written`]).
    pub version: String,
    /// Published once the leader is being deleted.
    pub event: EventSpec,
}

/// Remembering which worker pods make up a group's current incarnation (see [`restarts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roster {
    /// Worker StatefulSet name.
    pub worker_sts: String,
    /// Its uid (the annotation is written only on that incarnation).
    pub uid: String,
    /// The annotation value.
    pub value: String,
}

/// An object of ours to delete by name and uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// Name.
    pub name: String,
    /// Uid of the incarnation decided on.
    pub uid: Option<String>,
}

/// Everything one reconcile of one LWS should do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The LWS cannot be built as written, or something is in the way: nothing below is
    /// written; only the `ReplicaFailure` condition says why.
    pub blocked: Option<Failure>,
    /// ControllerRevisions to record.
    pub revisions: Vec<Write<ControllerRevision>>,
    /// The leader StatefulSet, when it would change. Boxed: the plan lives across the
    /// reconcile's awaits, and mostly there is none.
    pub leader_sts: Option<Box<Write<StatefulSet>>>,
    /// Services to create or apply.
    pub services: Vec<Write<Service>>,
    /// PodGroups to create (gang scheduling), before the leader StatefulSet grows.
    pub pod_groups: Vec<Write<PodGroup>>,
    /// PodGroups no group needs any more, or whose policy is out of date.
    pub delete_pod_groups: Vec<Delete>,
    /// Volcano PodGroups to create (Volcano gang scheduling), before worker StatefulSets.
    pub volcano_pod_groups: Vec<Write<crate::api::volcano::VolcanoPodGroup>>,
    /// Per-group Services whose group is gone.
    pub delete_services: Vec<Delete>,
    /// Worker StatefulSets to create.
    pub worker_sts: Vec<Write<StatefulSet>>,
    /// Group rosters to record.
    pub rosters: Vec<Roster>,
    /// Groups to rebuild.
    pub restarts: Vec<Restart>,
    /// ControllerRevisions no longer needed (the update is done).
    pub truncate_revisions: Vec<Delete>,
    /// A failure found while planning (a foreign object, a missing node label), for the
    /// `ReplicaFailure` condition; the rest of the plan still goes ahead.
    pub failure: Option<Failure>,
    /// Events that belong to no write.
    pub events: Vec<EventSpec>,
    /// The status from what was observed (conditions without `ReplicaFailure`).
    pub status: Option<StatusOutcome>,
    /// Look again after this long (something we need is not in the caches yet).
    pub requeue: Option<Duration>,
    /// What the next reconcile may reuse ([`super::remembered`]).
    pub remember: super::remembered::Remembered,
}

impl Plan {
    fn blocked(failure: Failure) -> Self {
        Self {
            requeue: failure.category.requeue_after(1),
            blocked: Some(failure),
            ..Default::default()
        }
    }

    fn requeue_within(&mut self, wait: Option<Duration>) {
        if let Some(wait) = wait {
            self.requeue = Some(self.requeue.map_or(wait, |w| w.min(wait)));
        }
    }
}

/// What every plan of `lws` starts from, or the failure that blocks it: the LWS as its groups
/// run it (the held template while a Rollout holds it), its revisions, and its leader
/// StatefulSet as observed (or read fresh).
struct Basis<'a> {
    lws: std::borrow::Cow<'a, LeaderWorkerSet>,
    revisions: revisions::Revisions,
    leader_sts: Option<&'a StatefulSet>,
}

fn basis<'a>(
    lws: &'a LeaderWorkerSet,
    observed: &'a Observed,
    deref: &'a Dereferenced,
) -> Result<Basis<'a>, Failure> {
    if let Some(problem) = admission::name_too_long(lws) {
        return Err(Failure::spec("NameTooLong", problem));
    }
    let leader_sts = observed
        .leader_sts
        .as_deref()
        .or(deref.leader_sts.as_deref());
    if let Some(sts) = leader_sts
        && controller_uid(sts) != lws.metadata.uid.as_deref()
    {
        // Server-side apply with force would silently take someone else's StatefulSet over.
        return Err(Failure::blocked(
            "ObjectConflict",
            format!(
                "StatefulSet {} already exists and is not controlled by this LeaderWorkerSet; \
                 delete or rename it",
                lws.name_any()
            ),
        ));
    }
    let revisions = revisions::plan(lws, observed, leader_sts)?;
    let lws = revisions::effective(lws, observed, &revisions)?;
    Ok(Basis {
        lws,
        revisions,
        leader_sts,
    })
}

/// The worker StatefulSets [`plan`] would create, alone: the same basis and the same checks of
/// the rolling update's settings, without planning the leader StatefulSet, Services, restarts
/// or status (the leader lane's part, `plan::groups::for_leader`, run once per new leader).
pub fn worker_statefulsets(
    lws: &LeaderWorkerSet,
    observed: &Observed,
    deref: &Dereferenced,
) -> Plan {
    let basis = match basis(lws, observed, deref) {
        Ok(basis) => basis,
        Err(failure) => return Plan::blocked(failure),
    };
    let lws = basis.lws.as_ref();
    if let Err(failure) = leader_sts::sts_max_unavailable(lws) {
        return Plan::blocked(failure);
    }
    if let Some(failure) = volcano::blocked(lws, observed) {
        return Plan::blocked(failure);
    }
    let mut plan = Plan::default();
    // A group's Volcano PodGroup comes before its workers: while one is missing, the
    // reconcile (which writes it first) makes the workers.
    volcano::plan(lws, observed, &mut plan);
    if !plan.volcano_pod_groups.is_empty() {
        return Plan::default();
    }
    groups::plan(lws, observed, deref, &mut plan);
    plan
}

/// Plans one reconcile of `lws`.
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, deref: &Dereferenced, now: &Time) -> Plan {
    let Basis {
        lws,
        revisions,
        leader_sts,
    } = match basis(lws, observed, deref) {
        Ok(basis) => basis,
        Err(failure) => return Plan::blocked(failure),
    };
    let lws = lws.as_ref();
    if let Some(failure) = gangs::blocked(lws, observed) {
        return Plan::blocked(failure);
    }
    if let Some(failure) = volcano::blocked(lws, observed) {
        return Plan::blocked(failure);
    }
    let leader = match leader_sts::plan(lws, observed, leader_sts, &revisions) {
        Ok(leader) => leader,
        Err(failure) => return Plan::blocked(failure),
    };
    let mut plan = Plan {
        revisions: revisions.writes.clone(),
        leader_sts: leader.write.clone().map(|mut w| {
            if leader_sts.is_none() && !deref.verified {
                w.how = How::ApplyUnseen;
            }
            Box::new(w)
        }),
        remember: super::remembered::Remembered {
            leader_in_sync: leader.in_sync.clone(),
            revision_match: revisions.matched.clone(),
        },
        ..Default::default()
    };
    services::plan(lws, observed, deref, leader.step.replicas, &mut plan);
    gangs::plan(lws, observed, &leader.step, &revisions.key, &mut plan);
    volcano::plan(lws, observed, &mut plan);
    groups::plan(lws, observed, deref, &mut plan);
    match lws
        .spec
        .leader_worker_template
        .restart_policy
        .unwrap_or_default()
    {
        RestartPolicy::RecreateGroupOnPodRestart | RestartPolicy::RecreateGroupAfterStart => {
            restarts::plan(lws, observed, &mut plan);
        }
        RestartPolicy::Default | RestartPolicy::None => {}
    }
    progress::plan(lws, observed, now, &mut plan);
    let outcome = status::observed_status(
        lws,
        observed,
        &revisions.key,
        &revisions.spec_key,
        leader_sts,
        now,
    );
    if outcome.update_done {
        plan.truncate_revisions = revisions::obsolete(observed, &revisions.key);
    }
    plan.status = Some(outcome);
    plan
}

/// Requeue for a blocked object whose obstacle we do not watch.
pub const RECHECK: Duration = BLOCKED_RECHECK;

/// Deep-merges `extra` into `target` (test fixtures).
#[cfg(test)]
pub(crate) fn merge_json(target: &mut serde_json::Value, extra: serde_json::Value) {
    match (target, extra) {
        (serde_json::Value::Object(t), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge_json(t.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (t, e) => *t = e,
    }
}
