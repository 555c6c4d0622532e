//! A group that cannot come up (ours, not upstream's): upstream leaves such an LWS Progressing
//! forever, so a GitOps dashboard cannot tell a slow start from a broken one. Like a
//! Deployment's `progressDeadlineSeconds`, a group that is still not ready a deadline after the
//! newest of its pods was created — nothing about it has changed for that long — makes the
//! `ReplicaFailure` condition True with reason `ProgressDeadlineExceeded` (Argo CD's health
//! check then says Degraded, docs/argocd.md). It clears itself once the group is ready or
//! replaced. The deadline is 1800 s — a Deployment's default is 600 s, but a multi-host model
//! server pulling a large image and loading its weights often takes longer — or the LWS
//! annotation `lws-rollout.x-k8s.io/progress-deadline-seconds`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::{Plan, leader_sts};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{apply::controller_uid, pod},
    lws::{error::Failure, labels, objects, observe::Observed},
};

/// The deadline when the LWS names none.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1800);

/// The reason of the `ReplicaFailure` condition.
pub const REASON: &str = "ProgressDeadlineExceeded";

/// The deadline of `lws`: its annotation (whole seconds, at least 1) or the default.
pub fn deadline(lws: &LeaderWorkerSet) -> Duration {
    lws.annotations()
        .get(labels::PROGRESS_DEADLINE)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_DEADLINE, Duration::from_secs)
}

/// Plans the progress check: a failure for the first group past its deadline, or a look again
/// when the earliest unready group reaches it. Another failure found earlier in the plan wins.
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, now: &Time, plan: &mut Plan) {
    let deadline = deadline(lws);
    let size = objects::size(lws);
    let mut late: Vec<(i32, String, Duration)> = Vec::new();
    let mut next_check: Option<Duration> = None;
    let ready_workers = leader_sts::ready_workers(observed);
    for leader in &observed.leaders {
        if pod::terminating(leader) {
            continue;
        }
        let workers = observed
            .worker_sts
            .get(&leader.name_any())
            .filter(|sts| controller_uid(sts.as_ref()) == leader.metadata.uid.as_deref());
        let ready = pod::ready(leader)
            && (size == 1
                || workers.is_some_and(|sts| leader_sts::workers_ready(sts, &ready_workers, size)));
        if ready {
            continue;
        }
        // The newest pod of the group's current incarnation: the group changed then.
        let worker_uid = workers.and_then(|sts| sts.metadata.uid.as_deref());
        let newest = observed
            .pods
            .iter()
            .filter(|p| {
                p.metadata.uid == leader.metadata.uid
                    || (worker_uid.is_some() && controller_uid(p.as_ref()) == worker_uid)
            })
            .filter_map(|p| p.metadata.creation_timestamp.as_ref())
            .max_by_key(|t| t.0);
        let Some(newest) = newest else { continue };
        let age = now.0.duration_since(newest.0);
        let age = Duration::try_from(age).unwrap_or_default();
        if age >= deadline {
            let index = objects::group_index(leader).unwrap_or(-1);
            late.push((index, leader.name_any(), age));
        } else {
            let left = deadline - age;
            next_check = Some(next_check.map_or(left, |n| n.min(left)));
        }
    }
    late.sort();
    if let Some((index, leader, _)) = late.first()
        && plan.failure.is_none()
    {
        let others = late.len() - 1;
        plan.failure = Some(Failure::blocked(
            REASON,
            format!(
                "group {index} (leader {leader}) is not ready {}s after its newest pod was created{}",
                deadline.as_secs(),
                if others > 0 {
                    format!(", and {others} more group(s)")
                } else {
                    String::new()
                }
            ),
        ));
    }
    // Look again when the next group reaches its deadline (a second late, so it has).
    plan.requeue_within(next_check.map(|d| d + Duration::from_secs(1)));
}
