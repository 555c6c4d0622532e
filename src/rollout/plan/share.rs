//! How many groups a step's `replicas` takes from the stable side, counted the way the
//! Rollout's counts of that side are.
//!
//! A DisaggregatedSet's counts (its replicas, the new pair's ready groups) are complete pairs
//! summed over its slices, but its BatchRelease applies a step's share to each slice on its
//! own (`batchrelease::pair::plan::role_groups`: the share of a role's replicas *per slice*).
//! So the share is scaled against one slice's pairs and the result multiplied by the slices:
//! `replicas: 2` of a set with two slices of two pairs moves all four, not two of four, and a
//! percentage rounds up in each slice, not once over the sum (60% of two slices of two pairs
//! is two per slice, four in all). Scaling per slice and taking the fewest pairs of any role
//! gives the same as the BatchRelease's per-role groups then the fewest of them, since the
//! rounded-up share only grows with the replicas. A plain LWS is one slice.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::rollout::CanaryStep;
use crate::release::groups::desired_groups;
use crate::rollout::observe::{RolloutObserved, StableWorkload};

/// The stable side's size as the Rollout counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StableSize {
    /// Groups (a set's complete pairs, summed over its slices).
    pub replicas: i32,
    /// Slices the groups are spread over, each given the step's share on its own (1 for an
    /// LWS).
    pub slices: i32,
}

impl StableSize {
    /// The size of `workload`.
    pub fn of(workload: &StableWorkload) -> Self {
        Self {
            replicas: workload.replicas,
            slices: workload.slices.max(1),
        }
    }

    /// The size of the workload `obs` read (nothing without one).
    pub fn observed(obs: &RolloutObserved) -> Self {
        obs.workload.as_ref().map(Self::of).unwrap_or_default()
    }

    /// Groups `share` (a step's or a batch's replicas) takes, in all slices together.
    pub fn groups(self, share: &IntOrString) -> i32 {
        let slices = self.slices.max(1);
        desired_groups(share, self.replicas.max(0) / slices) * slices
    }

    /// Groups `step` takes (none without `replicas`).
    pub fn step_groups(self, step: &CanaryStep) -> i32 {
        step.replicas.as_ref().map_or(0, |r| self.groups(r))
    }

    /// Whether `step` takes every group: in partition style the stable side is then left with
    /// none to serve with.
    pub fn emptied_by(self, step: &CanaryStep) -> bool {
        self.replicas > 0 && self.step_groups(step) >= self.replicas
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn a_share_is_taken_in_every_slice() {
        // (share, replicas summed over slices, slices, groups taken in all)
        let table = [
            (IntOrString::Int(1), 2, 1, 1),
            (IntOrString::Int(2), 2, 1, 2),
            (IntOrString::Int(1), 4, 2, 2),
            (IntOrString::Int(2), 4, 2, 4),
            (IntOrString::Int(5), 4, 2, 4),
            (IntOrString::Int(2), 6, 2, 4),
            (pct("50%"), 4, 2, 2),
            (pct("60%"), 4, 2, 4),
            (pct("60%"), 4, 1, 3),
            (pct("100%"), 6, 3, 6),
            (IntOrString::Int(1), 0, 2, 0),
            (IntOrString::Int(1), 4, 0, 1),
        ];
        for (share, replicas, slices, want) in table {
            let size = StableSize { replicas, slices };
            assert_eq!(size.groups(&share), want, "{share:?} of {size:?}");
        }
    }
}
