//! RecreateGroupOnPodRestart: a restarted or departed pod takes its whole group down
//! (foreground delete of the leader); the StatefulSets bring it back whole.
//!
//! A pod counts when it belongs to the group's current incarnation: the leader as cached, its
//! worker StatefulSet (owned by that leader's uid), and that StatefulSet's pods. Three signs:
//! - a container restarted in a live pod;
//! - a pod is terminating;
//! - a worker the group's roster recorded is no longer among the StatefulSet's pods. A worker
//!   deleted fast (a kubelet whose process exits at once, a force delete, a lost node) is
//!   replaced by the StatefulSet controller before any cache sees it terminating; only the
//!   roster — written on the StatefulSet once all its workers exist, so it survives restarts
//!   of this controller — still tells the replacement apart from the original.
//!
//! Once per incident: a leader already being deleted is left alone, and a worker from another
//! revision than its leader is part of an update, not an incident.
//!
//! `RecreateGroupAfterStart` (v0.9; also `RecreateGroupOnPodRestart` with the v0.8 annotation
//! `leaderworkerset.sigs.k8s.io/experimental-recreate-group-after-start`): a restarted or
//! terminating pod rebuilds its group only when the group has started — all `size` pods exist
//! and none is Pending — so a group whose pods are still being scheduled or pulling images is
//! not torn down in a loop. The roster of such a group is recorded only once the group has
//! started, so a recorded worker that is gone (even one whose replacement is Pending) always
//! means a started group lost a pod, and it is rebuilt: upstream, which sees only the
//! replacement, misses that case (docs/lws.md).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;

use super::{Plan, Restart, Roster, reasons};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, RestartPolicy},
    k8s::{
        apply::controller_uid,
        events::EventSpec,
        pod::{self, CachedPod, Phase},
    },
    lws::{labels, objects, observe::Observed},
};

/// The restart-policy trigger: a container restarted in a live pod, or the pod is going away.
fn restarted_or_terminating(pod: &CachedPod) -> bool {
    if pod::terminating(pod) {
        return true;
    }
    matches!(pod.phase, Phase::Running | Phase::Pending) && pod.restarts > 0
}

/// One group incarnation as the caches show it.
struct Group<'a> {
    leader: &'a Arc<CachedPod>,
    /// The worker StatefulSet owned by this leader incarnation.
    workers_sts: Option<&'a Arc<StatefulSet>>,
    /// Pods of that StatefulSet.
    workers: Vec<&'a Arc<CachedPod>>,
}

fn groups(observed: &Observed) -> Vec<Group<'_>> {
    observed
        .leaders
        .iter()
        .map(|leader| {
            let workers_sts = observed
                .worker_sts
                .get(&leader.name_any())
                .filter(|sts| controller_uid(sts.as_ref()) == leader.metadata.uid.as_deref());
            let workers = workers_sts
                .map(|sts| {
                    observed
                        .pods
                        .iter()
                        .filter(|p| {
                            controller_uid(p.as_ref()) == sts.metadata.uid.as_deref()
                                && p.labels().get(labels::WORKER_INDEX) != Some("0")
                        })
                        .collect()
                })
                .unwrap_or_default();
            Group {
                leader,
                workers_sts,
                workers,
            }
        })
        .collect()
}

fn worker_ordinal(pod: &CachedPod) -> Option<i32> {
    objects::parent_and_ordinal(&pod.name_any()).map(|(_, i)| i)
}

/// The recorded roster: worker uids in ordinal order (ordinal 1 first).
fn roster(sts: &StatefulSet) -> Option<Vec<&str>> {
    sts.annotations()
        .get(labels::WORKER_ROSTER)
        .map(|v| v.split(',').filter(|s| !s.is_empty()).collect())
}

/// Whether a group is recreated only once it has started (v0.9's policy, or v0.8's annotation).
pub fn after_start(lws: &LeaderWorkerSet) -> bool {
    lws.spec.leader_worker_template.restart_policy == Some(RestartPolicy::RecreateGroupAfterStart)
        || lws
            .annotations()
            .contains_key(labels::RECREATE_GROUP_AFTER_START)
}

/// The group has started: all `size` pods exist and none is Pending (upstream's
/// `pendingPodsInGroup`, negated, over the group's current incarnation).
fn started(group: &Group<'_>, size: i32) -> bool {
    let pods = std::iter::once(group.leader).chain(group.workers.iter().copied());
    usize::try_from(size).is_ok_and(|n| n == 1 + group.workers.len())
        && pods.into_iter().all(|p| p.phase != Phase::Pending)
}

/// Why the group must be rebuilt, naming the pod: `None` when it is whole (or, with
/// `after_start`, when it has not started yet and only a restart or a terminating pod says so).
fn incident(group: &Group<'_>, size: i32, after_start: bool) -> Option<String> {
    let leader = group.leader;
    let may_restart = !after_start || started(group, size);
    if may_restart && restarted_or_terminating(leader) && !pod::terminating(leader) {
        return Some(leader.name_any());
    }
    let leader_revision = leader.labels().get(labels::REVISION);
    for worker in &group.workers {
        if may_restart
            && worker.labels().get(labels::REVISION) == leader_revision
            && restarted_or_terminating(worker)
        {
            return Some(worker.name_any());
        }
    }
    let sts = group.workers_sts?;
    let recorded = roster(sts)?;
    if recorded.len() != usize::try_from(size - 1).unwrap_or(0) {
        return None; // not a roster of this shape: ignore rather than guess
    }
    let present: Vec<&str> = group
        .workers
        .iter()
        .filter_map(|w| w.metadata.uid.as_deref())
        .collect();
    recorded
        .iter()
        .position(|uid| !present.contains(uid))
        .map(|i| format!("{}-{}", leader.name_any(), i + 1))
}

/// The roster to record for a group whose workers all exist and none is recorded yet (with
/// `after_start`: once the group has started).
fn new_roster(group: &Group<'_>, size: i32, after_start: bool) -> Option<Roster> {
    let sts = group.workers_sts?;
    if roster(sts).is_some()
        || sts.metadata.deletion_timestamp.is_some()
        || (after_start && !started(group, size))
    {
        return None;
    }
    let mut workers: Vec<(i32, &str)> = group
        .workers
        .iter()
        .filter(|w| !pod::terminating(w))
        .filter_map(|w| Some((worker_ordinal(w)?, w.metadata.uid.as_deref()?)))
        .collect();
    workers.sort();
    let expected: Vec<i32> = (1..size).collect();
    if workers.iter().map(|(i, _)| *i).collect::<Vec<_>>() != expected {
        return None;
    }
    Some(Roster {
        worker_sts: sts.name_any(),
        uid: sts.metadata.uid.clone()?,
        value: workers
            .iter()
            .map(|(_, uid)| *uid)
            .collect::<Vec<_>>()
            .join(","),
    })
}

/// Plans group restarts and rosters.
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, plan: &mut Plan) {
    let size = objects::size(lws);
    let after_start = after_start(lws);
    for group in groups(observed) {
        let leader = group.leader;
        // Already going, or our delete of it a moment ago has not reached the cache yet: a
        // second delete would succeed too (the pod still exists while its workers go) and
        // report the incident twice.
        if pod::terminating(leader) || observed.restarting_leaders.contains(&leader.name_any()) {
            continue;
        }
        if let Some(pod_name) = incident(&group, size, after_start) {
            let Some(uid) = leader.metadata.uid.clone() else {
                continue;
            };
            plan.restarts.push(Restart {
                leader: leader.name_any(),
                uid,
                version: leader.resource_version().unwrap_or_default(),
                event: EventSpec::normal(
                    reasons::RECREATE_GROUP,
                    format!(
                        "Worker pod {pod_name} failed, deleted leader pod {} to recreate group {}",
                        leader.name_any(),
                        leader.labels().get(labels::GROUP_INDEX).unwrap_or("")
                    ),
                ),
            });
        } else if let Some(roster) = new_roster(&group, size, after_start) {
            plan.rosters.push(roster);
        }
    }
}
