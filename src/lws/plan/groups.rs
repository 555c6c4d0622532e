//! One worker StatefulSet per leader pod, created once and never updated: a group changes
//! template only by being rebuilt. It runs the revision its leader runs (so a group that the
//! rolling update has not reached yet keeps its old workers), and it belongs to the live
//! incarnation of the leader only.
//!
//! The pod cache can be a moment behind the StatefulSet cache: it may still show a leader that
//! was just replaced, next to the deletion of that leader's worker StatefulSet. A StatefulSet
//! made for it would be garbage-collected (its owner is gone), taking the workers it started
//! with it. So every leader a StatefulSet is created for is read fresh — but the read runs
//! beside the create instead of before it, so a group coming up waits one round trip, not two;
//! a leader the read finds replaced, gone or deleting has the StatefulSet just made for it
//! taken back at once ([`stale_workers`]).

use std::{collections::BTreeMap, time::Duration};

use kube::ResourceExt;

use super::{Delete, How, OnRefusal, Plan, Write, reasons};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{events::EventSpec, expected},
    lws::{
        deref::{Dereferenced, LiveLeader},
        error::Failure,
        gang, labels, objects,
        observe::Observed,
    },
};

/// How soon to look again when the revision a leader runs is not in the cache yet.
const REVISION_NOT_CACHED: Duration = Duration::from_secs(1);

pub use super::candidates::{Candidate, wanting_workers};

/// Plans the worker StatefulSets.
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, deref: &Dereferenced, plan: &mut Plan) {
    if !observed.pending_workers.is_empty() {
        // Our creates on their way to the cache: their watch events normally bring the next
        // reconcile; this one is in case they never do.
        plan.requeue_within(Some(expected::PATIENCE));
    }
    for candidate in wanting_workers(lws, observed) {
        let leader = &candidate.leader;
        let leader_name = leader.name_any();
        let Some(revision) = &candidate.revision else {
            plan.requeue_within(Some(REVISION_NOT_CACHED));
            continue;
        };
        // A gang's leader is bound only together with its workers, and its PodGroup's
        // topology constraint keeps the group in one domain: no pinning to the leader's node.
        let pinned = lws
            .annotations()
            .get(labels::EXCLUSIVE_TOPOLOGY)
            .filter(|_| !gang::requested(lws));
        let node_selector = match pinned {
            None => None,
            Some(topology) => {
                // Not scheduled yet: its binding will trigger us again.
                let Some(node) = leader.node_name.clone() else {
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

/// What the leader lane (`lws::leader_lane`) carries out of `plan` for leader pod `leader`:
/// the worker StatefulSet the plan wants for it, alone. Nothing when the plan is blocked or
/// wants none for it (its revision not cached, its node not known yet, its workers already
/// there): the LWS's own reconcile then decides, and says why.
pub fn for_leader(plan: Plan, leader: &str) -> Option<Plan> {
    if plan.blocked.is_some() {
        return None;
    }
    let write = plan
        .worker_sts
        .into_iter()
        .find(|w| w.object.metadata.name.as_deref() == Some(leader))?;
    Some(Plan {
        worker_sts: vec![write],
        ..Default::default()
    })
}

/// The leaders to read fresh beside the creates of `plan`: those its worker StatefulSets are
/// for (a worker StatefulSet is named after its leader pod).
pub fn leaders_to_verify(plan: &Plan) -> Vec<String> {
    plan.worker_sts
        .iter()
        .map(|w| w.object.name_any())
        .collect()
}

/// The worker StatefulSets `created` (name → uid) whose leader, as read fresh (`live`), is not
/// the incarnation the StatefulSet belongs to — replaced, gone or being deleted — to be taken
/// back. The owning incarnation is the StatefulSet's controller reference.
pub fn stale_workers(
    plan: &Plan,
    created: &BTreeMap<String, String>,
    live: &BTreeMap<String, LiveLeader>,
) -> Vec<Delete> {
    plan.worker_sts
        .iter()
        .filter_map(|w| {
            let name = w.object.name_any();
            let uid = created.get(&name)?;
            let owner = w
                .object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.as_str());
            let is_live = live
                .get(&name)
                .is_some_and(|l| Some(l.uid.as_str()) == owner && !l.deleting);
            (!is_live).then(|| Delete {
                name,
                uid: Some(uid.clone()),
            })
        })
        .collect()
}
