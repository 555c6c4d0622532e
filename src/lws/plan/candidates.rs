//! The leaders whose groups lack a worker StatefulSet: read by the dereference step (their
//! nodes, for exclusive topology) and by the plan of the worker StatefulSets.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::ResourceExt;

use super::revisions;
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, StartupPolicy},
    k8s::pod::{self, CachedPod},
    lws::{labels, objects, observe::Observed},
};

/// A leader whose group needs its worker StatefulSet now.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The leader pod, as cached.
    pub leader: Arc<CachedPod>,
    /// Its group index.
    pub index: i32,
    /// The revision it runs.
    pub key: String,
    /// That revision, when cached.
    pub revision: Option<Arc<ControllerRevision>>,
}

/// Leaders whose groups lack a worker StatefulSet and may get one now. The dereference step
/// reads their nodes (exclusive topology) before planning; the leaders themselves are read
/// fresh beside the creates (`groups::leaders_to_verify`, `groups::stale_workers`).
pub fn wanting_workers(lws: &LeaderWorkerSet, observed: &Observed) -> Vec<Candidate> {
    if objects::size(lws) == 1 {
        return Vec::new();
    }
    let leader_ready_first =
        lws.spec.startup_policy.unwrap_or_default() == StartupPolicy::LeaderReady;
    observed
        .leaders
        .iter()
        .filter(|l| !pod::terminating(l))
        .filter(|l| {
            let name = l.name_any();
            !observed.worker_sts.contains_key(&name) && !observed.pending_workers.contains(&name)
        })
        .filter(|l| !leader_ready_first || pod::ready(l))
        .filter_map(|leader| {
            let index = objects::group_index(leader)?;
            let key = leader.labels().get(labels::REVISION)?.to_string();
            let revision = revisions::with_key(observed, &key).cloned();
            Some(Candidate {
                leader: leader.clone(),
                index,
                key,
                revision,
            })
        })
        .collect()
}
