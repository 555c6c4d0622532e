//! What the BatchRelease plan looks at: plain data the observe step fills from reflector
//! stores. No API calls here.

use crate::api::batchrelease::BatchRelease;
use crate::api::leaderworkerset::LeaderWorkerSet;

/// Everything one BatchRelease reconcile decides from.
#[derive(Clone, Debug, Default)]
pub struct BatchReleaseObserved {
    /// The BatchRelease as stored.
    pub br: BatchRelease,
    /// The workload `spec.workloadRef` names, if it is a LeaderWorkerSet that exists.
    pub stable: Option<StableLws>,
    /// Every LWS this BatchRelease controls (normally zero or one; more only after an
    /// interrupted change, and the plan deletes all but the one it wants).
    pub canaries: Vec<CanaryLws>,
}

/// The stable LWS and what the observe step derived from it.
#[derive(Clone, Debug, Default)]
pub struct StableLws {
    /// The object (its spec is the new template during a release).
    pub lws: LeaderWorkerSet,
    /// Revision key of its current `spec` (the template being released).
    pub update_revision: String,
    /// The hold annotation `rollouts.kruise.io/stable-revision` (the revision its groups keep).
    pub hold: Option<String>,
}

impl StableLws {
    /// `spec.replicas` (groups).
    pub fn replicas(&self) -> i32 {
        self.lws.spec.replicas.unwrap_or(1)
    }

    /// Every group runs `revision` and is ready, by a status that describes the current spec.
    pub fn rolled_to(&self, revision: &str) -> bool {
        let status = self.lws.status.clone().unwrap_or_default();
        let replicas = self.replicas();
        status.observed_generation == self.lws.metadata.generation
            && self.update_revision == revision
            && status.updated_replicas.unwrap_or(0) >= replicas
            && status.ready_replicas.unwrap_or(0) >= replicas
    }
}

/// A canary LWS and the readiness of its groups.
#[derive(Clone, Debug, Default)]
pub struct CanaryLws {
    /// The object.
    pub lws: LeaderWorkerSet,
    /// Groups (by index) that exist but are not whole and ready, with pod counts.
    pub not_ready_groups: Vec<GroupReadiness>,
}

/// Readiness of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupReadiness {
    /// Group index (`leaderworkerset.sigs.k8s.io/group-index`).
    pub index: i32,
    /// Ready pods of the group.
    pub ready_pods: i32,
    /// Pods the group should have (`size`).
    pub pods: i32,
}

/// The reflector stores the BatchRelease controller reads (shared with the other controllers).
#[derive(Clone)]
pub struct Stores {
    /// BatchReleases.
    pub batch_releases: kube::runtime::reflector::Store<BatchRelease>,
    /// LeaderWorkerSets (stable and canary).
    pub lws: kube::runtime::reflector::Store<LeaderWorkerSet>,
    /// Pods of LWSes by LWS name (group readiness of the canary).
    pub pods: crate::k8s::label_index::LabelIndex<crate::k8s::pod::CachedPod>,
}

/// Fills the observed state of `br` from the stores.
pub fn observe(stores: &Stores, br: &BatchRelease) -> BatchReleaseObserved {
    use crate::lws::{labels, revision};
    use kube::{ResourceExt, runtime::reflector::ObjectRef};
    let ns = br.namespace().unwrap_or_default();
    let w = &br.spec.workload_ref;
    let stable = (w.kind == crate::api::rollout::LWS_KIND)
        .then(|| stores.lws.get(&ObjectRef::new(&w.name).within(&ns)))
        .flatten()
        .map(|lws| StableLws {
            update_revision: revision::spec_key(&lws.spec).unwrap_or_default(),
            hold: lws
                .annotations()
                .get(labels::HELD_REVISION)
                .filter(|v| !v.is_empty())
                .cloned(),
            lws: lws.as_ref().clone(),
        });
    let canaries = stores
        .lws
        .state()
        .into_iter()
        .filter(|l| {
            l.namespace().as_deref() == Some(ns.as_str())
                && l.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && Some(&o.uid) == br.metadata.uid.as_ref())
        })
        .map(|lws| CanaryLws {
            not_ready_groups: not_ready_groups(stores, &lws),
            lws: lws.as_ref().clone(),
        })
        .collect();
    BatchReleaseObserved {
        br: br.clone(),
        stable,
        canaries,
    }
}

/// Groups of `lws` (up to its replicas) whose pods are not all there and ready.
fn not_ready_groups(stores: &Stores, lws: &LeaderWorkerSet) -> Vec<GroupReadiness> {
    use crate::lws::labels;
    use kube::ResourceExt;
    let size = lws.spec.leader_worker_template.size.unwrap_or(1);
    let replicas = lws.spec.replicas.unwrap_or(1);
    let mut ready = vec![0; usize::try_from(replicas.max(0)).unwrap_or(0)];
    let pods = stores.pods.get(
        lws.metadata.namespace.as_deref().unwrap_or_default(),
        lws.metadata.name.as_deref().unwrap_or_default(),
    );
    for pod in pods {
        if !crate::k8s::pod::ready(&pod) {
            continue;
        }
        let Some(index) = pod
            .labels()
            .get(labels::GROUP_INDEX)
            .and_then(|v| v.parse::<usize>().ok())
        else {
            continue;
        };
        if let Some(count) = ready.get_mut(index) {
            *count += 1;
        }
    }
    ready
        .into_iter()
        .enumerate()
        .filter(|(_, n)| *n < size)
        .map(|(index, n)| GroupReadiness {
            index: i32::try_from(index).unwrap_or(i32::MAX),
            ready_pods: n,
            pods: size,
        })
        .collect()
}
