//! One worker StatefulSet per leader pod, created once and never updated: a group changes
//! template only by being rebuilt. It runs the revision its leader runs (so a group that the
//! rolling update has not reached yet keeps its old workers), and it is created only for the
//! live incarnation of the leader (a StatefulSet made for a leader that was just replaced would
//! be garbage-collected at once, taking fresh workers with it).

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{apps::v1::ControllerRevision, core::v1::Pod};
use kube::ResourceExt;

use super::{How, OnRefusal, Plan, Write, reasons, revisions};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, StartupPolicy},
    k8s::{events::EventSpec, pod},
    lws::{deref::Dereferenced, error::Failure, labels, objects, observe::Observed},
};

/// How soon to look again when the revision a leader runs is not in the cache yet.
const REVISION_NOT_CACHED: Duration = Duration::from_secs(1);

/// A leader whose group needs its worker StatefulSet now.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The leader pod, as cached.
    pub leader: Arc<Pod>,
    /// Its group index.
    pub index: i32,
    /// The revision it runs.
    pub key: String,
    /// That revision, when cached.
    pub revision: Option<Arc<ControllerRevision>>,
}

/// Leaders whose groups lack a worker StatefulSet and may get one now. The dereference step
/// reads these leaders (and their nodes) fresh before anything is created for them.
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
        .filter(|l| !observed.worker_sts.contains_key(&l.name_any()))
        .filter(|l| !leader_ready_first || pod::ready(l))
        .filter_map(|leader| {
            let index = objects::group_index(leader)?;
            let key = leader.labels().get(labels::REVISION)?.clone();
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

/// Plans the worker StatefulSets.
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, deref: &Dereferenced, plan: &mut Plan) {
    for candidate in wanting_workers(lws, observed) {
        let leader = &candidate.leader;
        let leader_name = leader.name_any();
        let Some(revision) = &candidate.revision else {
            plan.requeue_within(Some(REVISION_NOT_CACHED));
            continue;
        };
        // Only the live incarnation; its successor's own events bring us back otherwise.
        match deref.live_leaders.get(&leader_name) {
            Some(live) if Some(&live.uid) == leader.metadata.uid.as_ref() && !live.deleting => {}
            _ => continue,
        }
        let node_selector = match lws.annotations().get(labels::EXCLUSIVE_TOPOLOGY) {
            None => None,
            Some(topology) => {
                // Not scheduled yet: its binding will trigger us again.
                let Some(node) = leader.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                    continue;
                };
                match deref.node_labels.get(&node).and_then(|l| l.get(topology)) {
                    Some(value) => Some((topology.clone(), value.clone())),
                    None => {
                        plan.failure = Some(Failure::blocked(
                            "TopologyLabelMissing",
                            format!(
                                "node {node} of leader pod {leader_name} has no label \
                                 {topology} (exclusive-topology)"
                            ),
                        ));
                        continue;
                    }
                }
            }
        };
        let template = match objects::revision_worker_template(revision) {
            Ok(template) => template,
            Err(e) => {
                plan.failure = Some(Failure::spec(
                    "InvalidSpec",
                    format!(
                        "revision {} holds no usable worker template: {e}",
                        candidate.key
                    ),
                ));
                continue;
            }
        };
        let sts = objects::worker_statefulset(
            lws,
            leader,
            candidate.index,
            &candidate.key,
            template,
            node_selector,
        );
        plan.worker_sts.push(Write {
            object: sts,
            how: How::CreateIfAbsent,
            on_success: vec![EventSpec::normal(
                reasons::GROUPS_PROGRESSING,
                format!("Created worker statefulset for leader pod {leader_name}"),
            )],
            on_failure: vec![EventSpec::warning(
                reasons::FAILED_CREATE,
                format!("Failed to create worker statefulset for leader pod {leader_name}"),
            )],
            on_refusal: Some(OnRefusal {
                reason: reasons::FAILED_CREATE,
                what: format!("the API server refused worker StatefulSet {leader_name}"),
                blocks: false,
            }),
        });
    }
}
