//! Names the BatchRelease controller writes: Kruise Rollout's exact strings, so tools that
//! find Kruise's canary workloads find ours.

pub use crate::release::names::CANARY_LABEL;
/// Annotation on the canary LWS: the BatchRelease's controller ownerReference as JSON.
pub const CONTROL_INFO: &str = "batchrelease.rollouts.kruise.io/control-info";
/// Kruise's BatchRelease finalizer. We never add it (owner references clean up the canary);
/// a BatchRelease taken over from Kruise may carry it, and it is removed on deletion.
pub const FINALIZER: &str = "rollouts.kruise.io/batch-release-finalizer";

/// `status.phase` values.
pub use crate::release::names::batch_release_phase as phase;

pub use crate::release::progress::batch_state;

/// Event reasons.
pub mod event {
    /// A batch changed state.
    pub const PROGRESSING: &str = "Progressing";
    /// Groups of the batch are not ready; the message names them.
    pub const CANARY_NOT_READY: &str = "CanaryNotReady";
    /// The plan cannot run (wrong style or kind).
    pub const UNSUPPORTED: &str = "Unsupported";
    /// A role of the new pair lost its last ready group: the pair is out of traffic.
    pub const PAIR_INCOMPLETE: &str = "PairIncomplete";
    /// A role of a released pair is scaled externally: the release holds (ours).
    pub const ROLE_SCALED_EXTERNALLY: &str = "RoleScaledExternally";
    /// Finished.
    pub const COMPLETED: &str = "Completed";
    /// The workload was scaled mid-release (a user or an HPA): batch sizes follow.
    pub const WORKLOAD_SCALED: &str = "WorkloadScaled";
}
