//! Dereference: the few fresh reads a plan needs beyond the caches — facts a cache does not
//! hold (someone else's StatefulSet or Service with our name, a node's labels) or may hold a
//! moment stale where acting on it would do harm (whether a leader pod is still the
//! incarnation we are about to build workers for). Reads only; no decisions.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{Node, Pod, Service},
};
use kube::{Api, ResourceExt};

use super::{objects, observe::Observed, plan::groups};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, SubdomainPolicy},
    k8s::apply::{ApiError, Applier},
};

/// A leader pod as the API server has it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveLeader {
    /// Its uid.
    pub uid: String,
    /// It is being deleted.
    pub deleting: bool,
}

/// What the fresh reads found.
#[derive(Clone, Debug, Default)]
pub struct Dereferenced {
    /// The StatefulSet named like the LWS, read when the cache has none (a foreign one, or
    /// ours with the cache behind).
    pub leader_sts: Option<StatefulSet>,
    /// The Service named like the LWS (Shared policy), read when the cache has none.
    pub shared_service: Option<Service>,
    /// Leaders about to get worker StatefulSets, by name; a missing name is gone.
    pub live_leaders: BTreeMap<String, LiveLeader>,
    /// Labels of the nodes those leaders run on (exclusive topology only).
    pub node_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// Reads what the plan for `lws` needs beyond `observed`.
pub async fn dereference(
    applier: &Applier,
    lws: &LeaderWorkerSet,
    observed: &Observed,
) -> Result<Dereferenced, ApiError> {
    let ns = lws.namespace().unwrap_or_default();
    let name = lws.name_any();
    let mut deref = Dereferenced::default();
    if observed.leader_sts.is_none() {
        deref.leader_sts = applier.get_opt(&ns, &name).await?;
    }
    if objects::subdomain_policy(lws) == SubdomainPolicy::Shared
        && !observed.services.iter().any(|s| s.name_any() == name)
    {
        deref.shared_service = applier.get_opt(&ns, &name).await?;
    }
    let exclusive = lws
        .annotations()
        .contains_key(crate::lws::labels::EXCLUSIVE_TOPOLOGY);
    for candidate in groups::wanting_workers(lws, observed) {
        if candidate.revision.is_none() {
            continue;
        }
        let leader_name = candidate.leader.name_any();
        if let Some(live) = applier.get_opt::<Pod>(&ns, &leader_name).await? {
            deref.live_leaders.insert(
                leader_name,
                LiveLeader {
                    uid: live.metadata.uid.clone().unwrap_or_default(),
                    deleting: live.metadata.deletion_timestamp.is_some(),
                },
            );
        }
        let node = candidate
            .leader
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone());
        if exclusive
            && let Some(node) = node
            && !deref.node_labels.contains_key(&node)
        {
            let found = Api::<Node>::all(applier.client().clone())
                .get_opt(&node)
                .await
                .map_err(|source| ApiError {
                    action: format!("reading Node {node}"),
                    source,
                })?;
            deref
                .node_labels
                .insert(node, found.map(|n| n.labels().clone()).unwrap_or_default());
        }
    }
    Ok(deref)
}
