//! Every name the Rollout controller writes or reads: Kruise Rollout's exact strings, so tools
//! written for Kruise (kubectl-kruise, Argo CD's health Lua, dashboards) read our objects.

/// Finalizer the controller puts on every Rollout, so finalising runs before it is gone.
pub const FINALIZER: &str = "rollouts.kruise.io/rollout";
/// Rollout annotation: hash of the strategy without pauses and failureThreshold. A change while
/// a release runs means "the plan changed".
pub const HASH_ANNOTATION: &str = "rollouts.kruise.io/hash";
/// Workload annotation (the webhook reads it) and label (the controller reads it) naming the
/// release; absent, the canary revision stands in.
pub const ROLLOUT_ID: &str = "rollouts.kruise.io/rollout-id";
/// The hold on the stable LWS: the revision key its groups stay on while a release runs. Set
/// by the LWS mutating webhook on the template change; removed by this controller to release
/// the workload (Kruise's "ResumeWorkload").
pub const STABLE_REVISION: &str = "rollouts.kruise.io/stable-revision";

/// Rollout annotation (ours, off when absent): seconds a step's batch may take to become
/// ready before the release is marked `Progressing=False` / `ProgressDeadlineExceeded`
/// (docs/rollout.md, "Deadlines"). A step paused for approval never times out.
pub const PROGRESS_DEADLINE: &str = "lws-rollout.x-k8s.io/progress-deadline-seconds";
/// Rollout annotation (ours): `"true"` rolls a release back by itself when its deadline
/// passes — traffic first, then the new side removed — and keeps the workload on its stable
/// revision until its template changes.
pub const ROLLBACK_ON_DEADLINE: &str = "lws-rollout.x-k8s.io/rollback-on-deadline";

/// Rollout annotation (ours, off when absent): the analysis run at the steps it names (every
/// step without `steps`), in Argo Rollouts' terms — `{"templates": [{"templateName": …,
/// "clusterScope": false}], "args": [{"name": …, "value": …}], "steps": [1, 2]}` (JSON). A
/// step's analysis that passes is its approval; one that fails rolls the release back as a
/// missed deadline does; an inconclusive one, or one whose metrics cannot be read, pauses for a
/// person (docs/analysis.md).
pub const STEP_ANALYSIS: &str = "lws-rollout.x-k8s.io/analysis";
/// Rollout annotation (ours, off when absent): an analysis over the whole release from its
/// `startingStep` on (default 1, once that step's traffic has moved) to its end, in Argo
/// Rollouts' terms — `{"templates": [...], "args": [...], "startingStep": 1}` (JSON). Failing
/// rolls the release back at whatever step it is; inconclusive, or unreadable metrics, holds the
/// release at its current step until a person approves, after which it starts over.
pub const BACKGROUND_ANALYSIS: &str = "lws-rollout.x-k8s.io/background-analysis";
/// Label on every AnalysisRun a Rollout creates: the Rollout's name.
pub const ANALYSIS_ROLLOUT_LABEL: &str = "lws-rollout.x-k8s.io/rollout";
/// Label on every AnalysisRun: the revision it analyses.
pub const ANALYSIS_REVISION_LABEL: &str = "lws-rollout.x-k8s.io/revision";
/// Label on a step's AnalysisRun: the step (1-based).
pub const ANALYSIS_STEP_LABEL: &str = "lws-rollout.x-k8s.io/step";

pub use crate::api::rollout::{LWS_API_VERSION, LWS_KIND};

/// Condition types.
pub mod condition {
    /// A release is under way (Kruise).
    pub const PROGRESSING: &str = "Progressing";
    /// The last release succeeded (`True`) or was cancelled (`False`) (Kruise).
    pub const SUCCEEDED: &str = "Succeeded";
    /// The Rollout is being deleted (Kruise).
    pub const TERMINATING: &str = "Terminating";
    /// Ours, Gateway API's spelling: `False` when this controller will not run the Rollout
    /// (unsupported workload or style, or a second Rollout for one workload). Absent otherwise.
    pub const ACCEPTED: &str = "Accepted";
}

/// Condition reasons (Kruise's, plus ours for `Accepted`).
pub mod reason {
    /// Progressing: the release is starting.
    pub const INITIALIZING: &str = "Initializing";
    /// Progressing: steps are running.
    pub const IN_ROLLING: &str = "InRolling";
    /// Progressing: all steps done, closing work running.
    pub const FINALISING: &str = "Finalising";
    /// Progressing / Terminating: done.
    pub const COMPLETED: &str = "Completed";
    /// Progressing: a rollback is being undone.
    pub const CANCELLING: &str = "Cancelling";
    /// Progressing: `spec.strategy.paused`.
    pub const PAUSED: &str = "Paused";
    /// Terminating: finalising before the finalizer goes.
    pub const IN_TERMINATING: &str = "InTerminating";
    /// Progressing=False (ours): a batch was not ready within the Rollout's deadline.
    pub const DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// Progressing=False (ours): the deadline passed and the release rolled itself back; the
    /// workload stays on its stable revision until its template changes.
    pub const ROLLED_BACK_ON_DEADLINE: &str = "RolledBackOnDeadline";
    /// Progressing=False (ours): a step's analysis failed and the release rolled itself back;
    /// the workload stays on its stable revision until its template changes.
    pub const ANALYSIS_FAILED: &str = "AnalysisFailed";
    /// Accepted=False: a style this controller does not run (partition style).
    pub const UNSUPPORTED_STRATEGY: &str = "UnsupportedStrategy";
    /// Accepted=False: another Rollout already releases this workload.
    pub const WORKLOAD_CONFLICT: &str = "WorkloadConflict";
}

/// Event reasons.
pub mod event {
    /// Kruise's reason for every step transition.
    pub const PROGRESSING: &str = "Progressing";
    /// The release finished (success).
    pub const SUCCEEDED: &str = "Succeeded";
    /// The release was cancelled by a rollback.
    pub const CANCELLED: &str = "Cancelled";
    /// The Rollout was disabled and released the workload.
    pub const DISABLED: &str = "Disabled";
    /// Finalising before deletion finished.
    pub const TERMINATED: &str = "Terminated";
    /// A batch was not ready within the deadline (ours).
    pub const DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// The release rolled itself back after its deadline (ours).
    pub const ROLLED_BACK_ON_DEADLINE: &str = "RolledBackOnDeadline";
    /// A step's analysis failed and the release rolled itself back (ours).
    pub const ANALYSIS_FAILED: &str = "AnalysisFailed";
    /// A step's analysis cannot start (a template missing, an argument without value) or
    /// needs a person (inconclusive, metrics unreadable) (ours).
    pub const ANALYSIS_WAITING: &str = "AnalysisWaiting";
    /// The canary is not ready; the message names the groups.
    pub const CANARY_NOT_READY: &str = "CanaryNotReady";
    /// A trafficRoutings object does not exist.
    pub const TRAFFIC_ROUTING_NOT_FOUND: &str = "TrafficRoutingNotFound";
    /// A pair's trafficRoutings Service does not select one role of the set (ours).
    pub const TRAFFIC_ROUTING_INVALID: &str = "TrafficRoutingInvalid";
    /// The referenced workload does not exist.
    pub const WORKLOAD_NOT_FOUND: &str = "WorkloadNotFound";
    /// Unsupported workload, style, or a second Rollout for one workload.
    pub const NOT_ACCEPTED: &str = "NotAccepted";
    /// The stored status holds a phase, step state or finalising step this version does not
    /// know (hand-edited, or written by another controller); the message says what was done.
    pub const UNKNOWN_STATE: &str = "UnknownState";
}

/// Status messages, Kruise's exact text (`kubectl get rollout` shows them).
pub mod message {
    /// Phase Healthy.
    pub const HEALTHY: &str = "rollout is healthy";
    /// Healthy with no release ever run: status pre-populated as completed.
    pub const WORKLOAD_COMPLETED: &str = "workload deployment is completed";
    /// The workload does not exist.
    pub const WORKLOAD_NOT_FOUND: &str = "Workload Not Found";
    /// Progressing / Initializing.
    pub const IN_PROGRESSING: &str = "Rollout is in Progressing";
    /// spec.strategy.paused.
    pub const PAUSED: &str = "Rollout has been paused, you can resume it by kube-cli";
    /// Rollback detected.
    pub const ROLLED_BACK: &str =
        "The workload has been rolled back and the rollout process will be canceled";
    /// Third template mid-release.
    pub const CONTINUOUS_RELEASE: &str = "Workload is continuous release";
    /// All steps done.
    pub const FINALISING: &str = "Rollout has been completed and some closing work is being done";
    /// Success finalising done.
    pub const COMPLETED: &str = "Rollout progressing has been completed";
    /// Cancel finalising done.
    pub const CANCELED: &str = "Rollout progressing has been canceled";
    /// Disabled mid-release.
    pub const DISABLING: &str = "Disabling rollout, release resources";
    /// Disabled.
    pub const DISABLED: &str = "Rollout is disabled";
    /// Terminating condition.
    pub const TERMINATING: &str = "Rollout is in terminating";
}
