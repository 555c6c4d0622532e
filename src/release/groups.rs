//! Batch sizes and batch readiness, in groups: an LWS replica *is* a group (a leader and its
//! workers), so every count here is whole groups and a percentage never yields half a group.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// An int, or `"N%"` of `total` rounded up (Kruise scales step replicas and failure
/// thresholds with round-up). `None` for a string that is not a percentage.
pub fn scaled(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(i) => Some(*i),
        IntOrString::String(s) => {
            let pct: i64 = s.trim().strip_suffix('%')?.parse().ok()?;
            let product = pct * i64::from(total.max(0));
            i32::try_from((product + 99).div_euclid(100)).ok()
        }
    }
}

/// Canary groups a batch asks for: its `canaryReplicas` scaled against the stable LWS's
/// replicas, never more than the stable has (a step of `10` on a 4-group LWS means "all") and
/// never negative. An unreadable value counts as 0, so nothing is created from a typo (CEL
/// refuses such values at admission anyway).
pub fn desired_groups(canary_replicas: &IntOrString, stable_replicas: i32) -> i32 {
    scaled(canary_replicas, stable_replicas)
        .unwrap_or(0)
        .clamp(0, stable_replicas.max(0))
}

/// Groups that may be not ready while the batch still counts as ready: `failureThreshold` as a
/// number, or a percentage of the *updated* groups rounded up; absent means 0 (Kruise's code,
/// whatever its doc comment says).
pub fn allowed_unavailable(threshold: Option<&IntOrString>, updated: i32) -> i32 {
    threshold
        .and_then(|t| scaled(t, updated))
        .unwrap_or(0)
        .max(0)
}

/// Kruise's batch-ready predicate, in groups: enough groups exist, enough of them are ready
/// once the threshold is counted, and at least one is ready when any is wanted.
pub fn batch_ready(
    desired: i32,
    updated: i32,
    ready: i32,
    threshold: Option<&IntOrString>,
) -> bool {
    updated >= desired
        && ready + allowed_unavailable(threshold, updated) >= desired
        && (desired == 0 || ready > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn percentages_round_up_to_whole_groups() {
        // (value, stable groups, expected canary groups)
        let table = [
            (s("5%"), 4, 1),
            (s("50%"), 4, 2),
            (s("50%"), 3, 2),
            (s("34%"), 3, 2),
            (s("33%"), 3, 1),
            (s("100%"), 3, 3),
            (s("1%"), 0, 0),
            (IntOrString::Int(1), 4, 1),
            (IntOrString::Int(10), 4, 4),
            (s("ten"), 4, 0),
        ];
        for (value, stable, want) in table {
            assert_eq!(
                desired_groups(&value, stable),
                want,
                "{value:?} of {stable}"
            );
        }
    }

    #[test]
    fn failure_threshold_int_and_percent_of_updated_round_up() {
        let table = [
            (None, 4, 0),
            (Some(IntOrString::Int(1)), 4, 1),
            (Some(s("25%")), 4, 1),
            (Some(s("20%")), 4, 1),
            (Some(s("50%")), 3, 2),
            (Some(s("0%")), 4, 0),
        ];
        for (threshold, updated, want) in table {
            assert_eq!(
                allowed_unavailable(threshold.as_ref(), updated),
                want,
                "{threshold:?} of {updated}"
            );
        }
    }

    #[test]
    fn batch_ready_honours_threshold_and_needs_one_ready_group() {
        // (desired, updated, ready, threshold, ready?)
        let table = [
            (2, 2, 2, None, true),
            (2, 2, 1, None, false),
            (2, 1, 1, None, false),
            (2, 2, 1, Some(IntOrString::Int(1)), true),
            (4, 4, 3, Some(s("25%")), true),
            (4, 4, 2, Some(s("25%")), false),
            (1, 1, 0, Some(IntOrString::Int(1)), false),
            (0, 0, 0, None, true),
            (2, 1, 1, Some(IntOrString::Int(5)), false),
        ];
        for (desired, updated, ready, threshold, want) in table {
            assert_eq!(
                batch_ready(desired, updated, ready, threshold.as_ref()),
                want,
                "desired {desired} updated {updated} ready {ready} threshold {threshold:?}"
            );
        }
    }
}
