//! Dereference: the few fresh reads a plan needs beyond the caches — facts a cache does not
//! hold (someone else's StatefulSet or Service with our name, read only once a write says the
//! name is taken; a node's labels) or may hold a
//! moment stale where acting on it would do harm (whether a leader pod is still the
//! incarnation we build workers for: read beside the create, see `plan::groups`). Reads only;
//! no decisions.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{Node, Pod, Service},
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PartialObjectMeta},
};

use super::{labels, objects, observe::Observed, plan::candidates};
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

/// What the fresh reads found. The objects are boxed: a reconcile keeps this across its awaits,
/// and absent (as nearly always) they then take a pointer's room in its state, not a whole
/// StatefulSet's and Service's.
#[derive(Clone, Debug, Default)]
pub struct Dereferenced {
    /// The StatefulSet named like the LWS, read when the cache has none (a foreign one, or
    /// ours with the cache behind).
    pub leader_sts: Option<Box<StatefulSet>>,
    /// The Service named like the LWS (Shared policy), read when the cache has none.
    pub shared_service: Option<Box<Service>>,
    /// Labels of the nodes those leaders run on (exclusive topology only).
    pub node_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// The leader StatefulSet and the shared Service were read fresh when the cache had none.
    /// Not at first: the plan then writes them so that an existing object of that name is
    /// reported by the API server (`plan::How::ApplyUnseen`), and only then are they read.
    pub verified: bool,
}

/// Reads what the plan for `lws` needs beyond `observed`; with `verify`, also the leader
/// StatefulSet and the shared Service the cache does not show.
pub async fn dereference(
    applier: &Applier,
    lws: &LeaderWorkerSet,
    observed: &Observed,
    verify: bool,
) -> Result<Dereferenced, ApiError> {
    let ns = lws.namespace().unwrap_or_default();
    let name = lws.name_any();
    let mut deref = Dereferenced {
        verified: verify,
        ..Default::default()
    };
    if verify && observed.leader_sts.is_none() {
        deref.leader_sts = applier.get_opt(&ns, &name).await?.map(Box::new);
    }
    if verify
        && objects::subdomain_policy(lws) == SubdomainPolicy::Shared
        && !observed.services.iter().any(|s| s.name_any() == name)
    {
        deref.shared_service = applier.get_opt(&ns, &name).await?.map(Box::new);
    }
    let exclusive = lws.annotations().contains_key(labels::EXCLUSIVE_TOPOLOGY);
    let candidates: Vec<_> = candidates::wanting_workers(lws, observed)
        .into_iter()
        .filter(|c| c.revision.is_some())
        .collect();
    for candidate in candidates {
        let node = candidate.leader.node_name.clone();
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

/// The metadata of every leader pod of LWS `ns/name` (`name=<lws>,worker-index=0`), from one
/// consistent LIST: newer than any cache.
pub async fn leader_pods(
    applier: &Applier,
    ns: &str,
    name: &str,
) -> Result<Vec<PartialObjectMeta<Pod>>, ApiError> {
    let selector = format!("{}={name},{}=0", labels::NAME, labels::WORKER_INDEX);
    Api::<Pod>::namespaced(applier.client().clone(), ns)
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map(|list| list.items)
        .map_err(|source| ApiError {
            action: format!("listing leader pods of LeaderWorkerSet {ns}/{name}"),
            source,
        })
}

/// Reads the leaders `names` of LWS `ns/name` fresh (a missing name is gone): a GET for one,
/// one LIST of the LWS's leader pods for more (a reconcile of a group coming up often has
/// several). Both are consistent reads from the API server, newer than any cache, and metadata
/// (uid, deletion) is all that is compared, so only metadata is fetched.
///
/// The reads are not skipped when the caches look current: telling that the pod cache is at
/// least as new as the StatefulSet cache would mean comparing resourceVersions across kinds,
/// which the API treats as opaque (and which an API server storing pods in an etcd of their
/// own, `--etcd-servers-overrides`, does not order). That comparison is exactly what the
/// stale-leader bug needs (docs/lws.md), so a read stays the proof; it runs beside the create
/// it checks, not before it.
pub async fn live_leaders(
    applier: &Applier,
    ns: &str,
    name: &str,
    names: &[String],
) -> Result<BTreeMap<String, LiveLeader>, ApiError> {
    let api = Api::<Pod>::namespaced(applier.client().clone(), ns);
    let found: Vec<PartialObjectMeta<Pod>> = match names {
        [] => Vec::new(),
        [one] => api
            .get_metadata_opt(one)
            .await
            .map_err(|source| ApiError {
                action: format!("reading Pod {ns}/{one}"),
                source,
            })?
            .into_iter()
            .collect(),
        // A pod without our labels is not the leader we cached: missing counts as gone.
        _ => leader_pods(applier, ns, name).await?,
    };
    Ok(found
        .into_iter()
        .filter(|p| names.iter().any(|n| Some(n) == p.metadata.name.as_ref()))
        .map(|p| {
            (
                p.name_any(),
                LiveLeader {
                    uid: p.metadata.uid.clone().unwrap_or_default(),
                    deleting: p.metadata.deletion_timestamp.is_some(),
                },
            )
        })
        .collect())
}
