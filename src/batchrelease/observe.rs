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
