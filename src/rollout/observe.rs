//! What the Rollout plan looks at: plain data the observe step fills from reflector stores.
//! Nothing here talks to the API server; tests build these structs by hand.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::batchrelease::{BatchReleaseSpec, BatchReleaseStatus};
use crate::api::rollout::Rollout;

/// Everything one Rollout reconcile decides from.
#[derive(Clone, Debug, Default)]
pub struct RolloutObserved {
    /// The Rollout as stored (metadata, spec, status).
    pub rollout: Rollout,
    /// The workload `spec.workloadRef` names, if it is a LeaderWorkerSet that exists.
    pub workload: Option<StableWorkload>,
    /// The BatchRelease this Rollout owns (same name), if it exists.
    pub batch_release: Option<BatchReleaseSummary>,
    /// Name of an older Rollout in the namespace with the same `workloadRef`: this one then
    /// must not act (one Rollout per workload). The observe step picks the oldest by
    /// creationTimestamp, then name, so exactly one Rollout wins.
    pub conflicting_rollout: Option<String>,
    /// What the traffic layer read back from the cluster.
    pub traffic: ObservedTraffic,
}

/// The stable LWS, reduced to what the plan needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StableWorkload {
    /// Name (same namespace as the Rollout).
    pub name: String,
    /// UID (owner references, events).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`: counts below are only trusted when it equals `generation`.
    pub observed_generation: Option<i64>,
    /// Revision key of the template its groups run when no release is under way (the oldest
    /// revision still in use; the held one during a release).
    pub current_revision: String,
    /// Revision key of `spec.leaderWorkerTemplate` as it is now.
    pub update_revision: String,
    /// `spec.replicas` (groups).
    pub replicas: i32,
    /// `status.readyReplicas` (groups with every pod ready).
    pub ready_replicas: i32,
    /// `status.updatedReplicas` (groups on `update_revision`).
    pub updated_replicas: i32,
    /// Value of the hold annotation `rollouts.kruise.io/stable-revision`, if set.
    pub hold: Option<String>,
    /// `rollouts.kruise.io/rollout-id`, from the label or else the annotation.
    pub rollout_id: Option<String>,
}

impl StableWorkload {
    /// Status counts describe the current spec.
    pub fn status_current(&self) -> bool {
        self.observed_generation == Some(self.generation)
    }

    /// Every group runs the current template and is ready (the stable side finished rolling).
    pub fn fully_rolled(&self) -> bool {
        self.status_current()
            && self.current_revision == self.update_revision
            && self.updated_replicas >= self.replicas
            && self.ready_replicas >= self.replicas
    }
}

/// The BatchRelease the Rollout owns, as stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchReleaseSummary {
    /// `metadata.generation`.
    pub generation: i64,
    /// Its spec (compared with the desired one: a difference means "being updated").
    pub spec: BatchReleaseSpec,
    /// Its status.
    pub status: BatchReleaseStatus,
}

/// The traffic layer's read-back for this Rollout's `trafficRoutings[0]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedTraffic {
    /// The cluster's Services/routes already match the intent the *stored* status asks for
    /// (`plan::routing::intent_for` of the stored status; `true` when that is `None`).
    pub ready: bool,
    /// When the traffic layer last changed a traffic object (grace periods count from here).
    pub last_change: Option<Time>,
    /// Objects `trafficRoutings` names that do not exist, e.g. `Service vllm`.
    pub missing: Vec<String>,
}
