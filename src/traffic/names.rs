//! Names the traffic layer writes: object names, labels, annotations and its field manager.

use crate::lws::labels;

/// On the stable Service during a release: its selector before we pinned it (JSON object), so
/// the restore is exact even after a crash. Removed when the selector is restored.
pub const ORIGINAL_SELECTOR: &str = "lws-rollout.x-k8s.io/original-selector";

/// On the HTTPRoute while canary weights are set: the weights every changed rule's backendRefs
/// had before (JSON object: rule index → weights, `null` for an absent weight).
pub const ORIGINAL_WEIGHTS: &str = "lws-rollout.x-k8s.io/original-backend-weights";

/// On the canary Service and canary Ingress: the name of the user's object it is a canary of.
pub const CANARY_OF: &str = "lws-rollout.x-k8s.io/canary-of";

/// The leader-pod label keys a pinned selector may add (re-exported for docs and tests).
pub const LWS_NAME: &str = labels::NAME;
/// The template revision of a pod: a partition-style release tells its two sides apart by it.
pub const REVISION: &str = labels::REVISION;
/// A DisaggregatedSet's pods: the set they belong to.
pub const SET_NAME: &str = crate::api::disaggregatedset::SET_NAME_LABEL;
/// A DisaggregatedSet's pods: the revision of the set's role templates they run.
pub const SET_REVISION: &str = crate::api::disaggregatedset::REVISION_LABEL;
/// `"0"` on leader pods: the worker index every Service we touch restricts to.
pub const WORKER_INDEX: &str = labels::WORKER_INDEX;

/// Longest Service name (an RFC 1035 label).
pub const MAX_SERVICE_NAME: usize = 63;

/// The canary Service beside Service `stable` (Kruise's name).
pub fn canary_service(stable: &str) -> String {
    format!("{stable}-canary")
}

/// The canary Ingress beside Ingress `stable` (Kruise's name).
pub fn canary_ingress(stable: &str) -> String {
    format!("{stable}-canary")
}

/// Labels and annotations never copied from a user's object to our canary copy: copying them
/// would make Argo CD (tracking label / annotation) or `kubectl apply` (last-applied) treat our
/// object as part of the user's application, show it as out of sync, or prune it.
pub fn is_tracking_key(key: &str) -> bool {
    key == "kubectl.kubernetes.io/last-applied-configuration"
        || key == "app.kubernetes.io/instance"
        || key.starts_with("argocd.argoproj.io/")
}
