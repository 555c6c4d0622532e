//! The one place a Rollout's release style is picked, and what differs per style: the
//! BatchRelease it asks for, the orders it finishes in, which steps route traffic, whether the
//! last step pauses, and the status field the release is written to. The step machine
//! (`steps`), the phases (`phase`), traffic (`routing`) and finalising (`finalise`) are shared
//! and ask the style through [`Style`]; a new style is a module beside [`super::canary`],
//! [`super::bluegreen`] and [`super::partition`] and an arm here.

use crate::api::batchrelease::{BatchRelease, FinalizingPolicy, RollingStyle};
use crate::api::rollout::{CanaryStep, FinalisingStep, Rollout};

use super::reason::Reason;
use super::{Draft, bluegreen, canary, partition};

/// A release style this controller runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// A canary LWS beside the stable one, grown batch by batch ([`canary`]).
    Canary,
    /// A second LWS grown beside the user's one, traffic switched over, the user's LWS rolled
    /// while the second serves everything ([`bluegreen`]).
    BlueGreen,
    /// The user's groups moved to the new template in place, step by step ([`partition`]).
    Partition,
}

/// The style `rollout` asks for, or why this controller does not run it (the message of the
/// `Accepted=False` condition).
pub fn of(rollout: &Rollout) -> Result<Style, String> {
    match RollingStyle::of(&rollout.spec.strategy) {
        Some(RollingStyle::Canary) => Ok(Style::Canary),
        Some(RollingStyle::BlueGreen) => Ok(Style::BlueGreen),
        Some(RollingStyle::Partition) => Ok(Style::Partition),
        None => Err("strategy has no canary".into()),
    }
}

/// The style of the release `rollout` may have in flight. Admission keeps the style immutable
/// while a release is in flight, so a Rollout refused for its style can only be finishing a
/// release it ran before this version refused that style — a canary, the first style run.
pub fn in_flight(rollout: &Rollout) -> Style {
    of(rollout).unwrap_or(Style::Canary)
}

impl Style {
    /// The BatchRelease this style wants: run up to batch `partition` (0-based; `None` =
    /// finish), finalised by `policy`.
    pub fn batch_release(
        self,
        d: &Draft<'_>,
        partition: Option<i32>,
        policy: Option<FinalizingPolicy>,
    ) -> BatchRelease {
        match self {
            Style::Canary => canary::batch_release(d, partition, policy),
            Style::BlueGreen => bluegreen::batch_release(d, partition, policy),
            Style::Partition => partition::batch_release(d, partition, policy),
        }
    }

    /// The finalising order for `reason`.
    pub fn finalising_order(self, reason: Reason) -> &'static [FinalisingStep] {
        match self {
            Style::Canary => canary::finalising_order(reason),
            Style::BlueGreen => bluegreen::finalising_order(reason),
            Style::Partition => partition::finalising_order(reason),
        }
    }

    /// Whether `step` routes traffic through the split (the stable Service pinned, the canary
    /// Service and route in place). A canary step without `traffic` or `matches` runs on the
    /// user's objects as they are (Kruise); a blue-green step never does: without `traffic`
    /// it sends 0% to the new side, which must get nothing before the switch.
    pub fn routes(self, step: &CanaryStep) -> bool {
        match self {
            Style::Canary | Style::Partition => has_traffic(step),
            Style::BlueGreen => true,
        }
    }

    /// Whether a last step of `replicas: "100%"` skips its pause (Kruise: canary only; a
    /// blue-green release always waits at its last step, the moment before the switch).
    pub fn skips_last_full_pause(self) -> bool {
        self != Style::BlueGreen
    }

    /// Where the release's progress is written: `canaryStatus` or `blueGreenStatus`.
    pub fn status_field(self) -> StatusField {
        match self {
            Style::Canary | Style::Partition => StatusField::Canary,
            Style::BlueGreen => StatusField::BlueGreen,
        }
    }
}

/// Whether a step shifts any traffic (a weight or matches).
pub fn has_traffic(step: &CanaryStep) -> bool {
    step.traffic.is_some() || step.matches.as_ref().is_some_and(|m| !m.is_empty())
}

/// The status field a style writes its progress to (Kruise writes exactly one of them; tools
/// pick the one present: `kubectl-kruise rollout approve` patches whichever it finds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusField {
    /// `status.canaryStatus`.
    Canary,
    /// `status.blueGreenStatus`.
    BlueGreen,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(strategy: serde_json::Value) -> Rollout {
        serde_json::from_value(json!({
            "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet", "name": "m"}, "strategy": strategy}
        }))
        .unwrap()
    }

    #[test]
    fn the_style_is_picked_from_the_strategy_as_kruise_reads_it() {
        let steps = json!([{"replicas": 1}]);
        let cases = [
            (
                json!({"canary": {"enableExtraWorkloadForCanary": true, "steps": steps}}),
                Ok(Style::Canary),
            ),
            (json!({"canary": {"steps": steps}}), Ok(Style::Partition)),
            (json!({"blueGreen": {"steps": steps}}), Ok(Style::BlueGreen)),
            (json!({}), Err("strategy has no canary")),
        ];
        for (strategy, want) in cases {
            let r = rollout(strategy.clone());
            match (of(&r), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{strategy}"),
                (Err(got), Err(want)) => assert!(got.starts_with(want), "{strategy}: {got}"),
                (got, want) => panic!("{strategy}: {got:?}, want {want:?}"),
            }
            assert_eq!(in_flight(&r), of(&r).unwrap_or(Style::Canary), "{strategy}");
        }
    }
}
