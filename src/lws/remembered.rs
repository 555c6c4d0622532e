//! What an earlier reconcile of an LWS found that a later one may reuse instead of computing
//! again: two comparisons that every reconcile would otherwise repeat although their inputs
//! rarely change (reconciles follow every pod event). Each answer carries the exact versions
//! (uid and `resourceVersion`, or `generation`) it was computed from, and the plan reuses it
//! only when the versions it sees now are the same, so a reused answer is what computing it
//! again would give. The controller keeps them in memory only (`k8s::memo`): a restart
//! computes them again.

/// An object version: its uid and `resourceVersion`.
pub type Version = (String, String);

/// The observed leader StatefulSet was found to be as desired: applying the desired one
/// would change nothing. The desired StatefulSet is a function of the LWS (held at a revision
/// recorded in a ControllerRevision while a Rollout holds it), the revision key and the step,
/// so these name the whole comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInSync {
    /// The LWS.
    pub lws: Version,
    /// The ControllerRevision whose template the groups run while held, if held.
    pub held_revision: Option<Version>,
    /// The observed leader StatefulSet.
    pub sts: Version,
    /// The revision key, partition, replicas and `maxUnavailable` of the desired StatefulSet.
    pub key: String,
    pub partition: i32,
    pub replicas: i32,
    pub max_unavailable: i32,
}

/// Whether a recorded ControllerRevision holds the spec's template (v0.9's
/// `SetMatchesRevision`, a re-encoding of the whole recorded template).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionMatch {
    /// The LWS's uid and `metadata.generation`, which fix its spec and so its revision data.
    pub lws: (String, i64),
    /// The ControllerRevision compared.
    pub revision: Version,
    /// Whether it matched.
    pub matches: bool,
}

/// The reusable answers of one LWS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remembered {
    /// The leader StatefulSet was as desired.
    pub leader_in_sync: Option<LeaderInSync>,
    /// The running revision's comparison with the spec.
    pub revision_match: Option<RevisionMatch>,
}

/// `(uid, resourceVersion)` of an object that has both.
pub fn version_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<Version> {
    meta.uid.clone().zip(meta.resource_version.clone())
}
