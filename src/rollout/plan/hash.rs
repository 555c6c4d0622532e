//! The strategy hash (`rollouts.kruise.io/hash`): the strategy with every step's `pause` and
//! the `failureThreshold` blanked, so changing those does not count as a changed plan. Like
//! Kruise's, the value is opaque (here sha1 rather than sha256, safe-encoded); a Rollout taken
//! over from Kruise sees one "plan changed" that recomputes the same step.

use sha1::{Digest, Sha1};

use crate::api::rollout::RolloutStrategy;

/// The hash of what makes up the release plan.
pub fn strategy_hash(strategy: &RolloutStrategy) -> String {
    let mut plan = strategy.clone();
    plan.paused = false;
    for s in [
        plan.canary
            .as_mut()
            .map(|c| (&mut c.steps, &mut c.failure_threshold)),
        plan.blue_green
            .as_mut()
            .map(|b| (&mut b.steps, &mut b.failure_threshold)),
    ]
    .into_iter()
    .flatten()
    {
        let (steps, threshold) = s;
        *threshold = None;
        for step in steps.iter_mut() {
            step.pause = None;
        }
    }
    let data = serde_json::to_string(&plan).unwrap_or_default();
    safe_encode(&hex(&Sha1::digest(data.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// apimachinery's `SafeEncodeString`: no vowels, no 0/1/3, so the value never spells a word.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|c| ALPHANUMS[usize::from(c) % ALPHANUMS.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::{CanaryStep, CanaryStrategy, RolloutPause};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn strategy(replicas: i32, pause: Option<i32>, paused: bool) -> RolloutStrategy {
        RolloutStrategy {
            paused,
            canary: Some(CanaryStrategy {
                steps: vec![CanaryStep {
                    replicas: Some(IntOrString::Int(replicas)),
                    pause: Some(RolloutPause { duration: pause }),
                    ..CanaryStep::default()
                }],
                failure_threshold: Some(IntOrString::Int(pause.unwrap_or(0))),
                ..CanaryStrategy::default()
            }),
            blue_green: None,
        }
    }

    #[test]
    fn pauses_threshold_and_paused_do_not_change_the_plan_but_replicas_do() {
        let base = strategy_hash(&strategy(1, None, false));
        assert_eq!(base, strategy_hash(&strategy(1, Some(30), true)));
        assert_ne!(base, strategy_hash(&strategy(2, None, false)));
    }
}
