//! A batch's progress read off its canary LWS: Upgrading, Verifying or Ready, with the group
//! counts. One pure function for both controllers: the BatchRelease controller publishes it in
//! its status, and the Rollout controller decides "batch ready" from the canary LWS itself, in
//! the reconcile the canary's own status change starts, instead of one watch hop later from the
//! BatchRelease's status. Both read the same object with the same rule, so they never disagree
//! for longer than a watch event takes to arrive.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::groups::batch_ready;
use crate::api::leaderworkerset::LeaderWorkerSet;

/// What of a canary LWS the batch state depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CanaryCounts {
    /// `spec.replicas` (groups asked for).
    pub spec_replicas: i32,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`: the counts describe the spec only when it equals
    /// `generation`.
    pub observed_generation: Option<i64>,
    /// `status.replicas` (groups that exist).
    pub replicas: i32,
    /// `status.readyReplicas` (groups with every pod ready).
    pub ready: i32,
}

impl CanaryCounts {
    /// The counts of `lws`.
    pub fn of(lws: &LeaderWorkerSet) -> Self {
        let status = lws.status.clone().unwrap_or_default();
        Self {
            spec_replicas: lws.spec.replicas.unwrap_or(1),
            generation: lws.metadata.generation.unwrap_or_default(),
            observed_generation: status.observed_generation,
            replicas: status.replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
        }
    }
}

/// A batch's state and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchProgress {
    /// One of `batch_state`.
    pub state: &'static str,
    /// Canary groups that exist (`updatedReplicas`).
    pub updated: i32,
    /// Canary groups that are ready (`updatedReadyReplicas`).
    pub ready: i32,
}

/// The state of a batch that wants `desired` groups: Upgrading while the canary is missing,
/// asks for fewer groups, or its status trails its spec; Ready once Kruise's predicate holds
/// (failure threshold included); Verifying in between.
pub fn progress(
    desired: i32,
    canary: Option<&CanaryCounts>,
    threshold: Option<&IntOrString>,
) -> BatchProgress {
    let Some(c) = canary else {
        return BatchProgress {
            state: batch_state::UPGRADING,
            updated: 0,
            ready: 0,
        };
    };
    let caught_up = c.observed_generation == Some(c.generation);
    let state = if !caught_up || c.spec_replicas < desired {
        batch_state::UPGRADING
    } else if batch_ready(desired, c.replicas, c.ready, threshold) {
        batch_state::READY
    } else {
        batch_state::VERIFYING
    };
    BatchProgress {
        state,
        updated: c.replicas,
        ready: c.ready,
    }
}

/// `status.canaryStatus.batchState` values.
pub mod batch_state {
    /// The canary is being scaled to the batch.
    pub const UPGRADING: &str = "Upgrading";
    /// Waiting for the batch's groups to be ready.
    pub const VERIFYING: &str = "Verifying";
    /// The batch is ready.
    pub const READY: &str = "Ready";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(spec: i32, stale: bool, replicas: i32, ready: i32) -> CanaryCounts {
        CanaryCounts {
            spec_replicas: spec,
            generation: 2,
            observed_generation: Some(if stale { 1 } else { 2 }),
            replicas,
            ready,
        }
    }

    #[test]
    fn state_follows_the_canary_spec_status_and_readiness() {
        use batch_state::{READY, UPGRADING, VERIFYING};
        // (desired, canary, threshold, state)
        let table = [
            (1, None, None, UPGRADING),
            (2, Some(counts(1, false, 1, 1)), None, UPGRADING),
            (2, Some(counts(2, true, 1, 1)), None, UPGRADING),
            (2, Some(counts(2, false, 2, 1)), None, VERIFYING),
            (2, Some(counts(2, false, 2, 2)), None, READY),
            (
                2,
                Some(counts(2, false, 2, 1)),
                Some(IntOrString::Int(1)),
                READY,
            ),
            // A jump back: the canary keeps more groups than the batch wants.
            (1, Some(counts(3, false, 3, 3)), None, READY),
        ];
        for (desired, canary, threshold, want) in table {
            assert_eq!(
                progress(desired, canary.as_ref(), threshold.as_ref()).state,
                want,
                "desired {desired}, canary {canary:?}, threshold {threshold:?}"
            );
        }
    }
}
