//! Rolling update of an LWS: the leader StatefulSet's `partition` and `replicas` for the next
//! step, from the groups' observed state. Pure; upstream LWS v0.9.0's algorithm (see
//! docs/lws.md, "Rolling update"), so updates proceed in the same sequences. v0.9 changed two
//! things against v0.8: surge groups are reclaimed only while the unready groups fit in
//! `maxUnavailable` (v0.8 kept one fewer surge group than unready groups, which with
//! `maxUnavailable: 0` took a surge group away while a group was still unready), and a leader
//! StatefulSet below `replicas` is first scaled up to `replicas` with no surge.
//!
//! Groups `0..replicas` are the real ones; `replicas..replicas+surge` are surge groups made
//! from the new template while old groups are being replaced. The partition only ever moves
//! down during an update, and never below the user's partition.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// State of one group (leader pod plus worker StatefulSet), by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupState {
    /// The leader and every worker are ready.
    pub ready: bool,
    /// Leader and workers carry the current revision.
    pub updated: bool,
}

/// What the leader StatefulSet looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderSts {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.updateStrategy.rollingUpdate.partition`.
    pub partition: i32,
    /// The LWS replicas recorded on it when it was last written (`leaderworkerset.sigs.k8s.io/replicas`).
    pub recorded_lws_replicas: Option<i32>,
}

/// Inputs of one rolling-update step.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// `spec.replicas` of the LWS.
    pub replicas: i32,
    /// `maxSurge`, unscaled.
    pub max_surge: &'a IntOrString,
    /// `maxUnavailable`, unscaled.
    pub max_unavailable: &'a IntOrString,
    /// `partition` of the LWS (the user's).
    pub user_partition: i32,
    /// The leader StatefulSet, if it exists.
    pub leader_sts: Option<LeaderSts>,
    /// The template changed in this reconcile (a new revision was just created).
    pub template_changed: bool,
    /// State of groups `0..leader_sts.replicas`.
    pub groups: &'a [GroupState],
}

/// The leader StatefulSet's next partition and replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Leader ordinals below this keep the old template.
    pub partition: i32,
    /// Leader StatefulSet replicas (LWS replicas plus surge groups still wanted).
    pub replicas: i32,
}

/// An int-or-percent that is not a valid one (the CRD rejects these; kept for robustness).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid int-or-percent {0:?}")]
pub struct InvalidIntOrPercent(pub String);

/// Scales an int-or-percent against `total` like apimachinery's `GetScaledValueFromIntOrPercent`.
pub fn scaled(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, InvalidIntOrPercent> {
    match value {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct: i64 = s
                .strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| InvalidIntOrPercent(s.clone()))?;
            let product = pct * i64::from(total);
            let scaled = if round_up {
                (product + 99).div_euclid(100)
            } else {
                product.div_euclid(100)
            };
            i32::try_from(scaled).map_err(|_| InvalidIntOrPercent(s.clone()))
        }
    }
}

/// Computes the next step. See the module docs for the shape of the algorithm.
pub fn next_step(input: &Input<'_>) -> Result<Step, InvalidIntOrPercent> {
    let step = compute(input)?;
    Ok(Step {
        partition: step.partition.max(input.user_partition),
        ..step
    })
}

fn compute(input: &Input<'_>) -> Result<Step, InvalidIntOrPercent> {
    let r = input.replicas;
    let Some(sts) = input.leader_sts else {
        return Ok(Step {
            partition: 0,
            replicas: r,
        });
    };
    let surge = scaled(input.max_surge, r, true)?.min(r);
    let max_unavailable = scaled(input.max_unavailable, r, false)?;
    let burst = r + surge;
    let want_replicas = |unready: i32| surge_replicas(r, surge, max_unavailable, unready);

    if input.template_changed {
        let partition = r.min(sts.replicas);
        // Scaling up comes first, without surge groups on top.
        let replicas = if sts.replicas < r {
            r
        } else {
            want_replicas(r)
        };
        return Ok(Step {
            partition,
            replicas,
        });
    }
    if sts.partition == 0 && sts.replicas == r {
        return Ok(Step {
            partition: 0,
            replicas: r,
        });
    }
    if sts.replicas < r {
        return Ok(Step {
            partition: sts.partition,
            replicas: r,
        });
    }

    let unready = (0..r)
        .filter(|&i| {
            input
                .groups
                .get(i as usize)
                .is_none_or(|g| !(g.ready && g.updated))
        })
        .count() as i32;
    if sts.recorded_lws_replicas != Some(r) {
        // Replicas changed mid-update: hold the partition, adjust the surge.
        return Ok(Step {
            partition: sts.partition.min(burst),
            replicas: want_replicas(unready),
        });
    }

    // Surge already reclaimed shrinks the budget, so maxUnavailable is never exceeded.
    let rolling_step = max_unavailable + surge - (burst - sts.replicas);
    Ok(Step {
        partition: rolling_partition(input.groups, sts.replicas, rolling_step, sts.partition),
        replicas: want_replicas(unready),
    })
}

/// Leader StatefulSet replicas while `unready` of the `r` real groups are not ready on the new
/// revision: all `surge` groups while more than `surge` are unready; then only as many as the
/// unready groups exceed `max_unavailable`, so surge groups go one by one as groups come up.
pub fn surge_replicas(r: i32, surge: i32, max_unavailable: i32, unready: i32) -> i32 {
    if unready <= surge {
        r + (unready - max_unavailable).max(0)
    } else {
        r + surge
    }
}

/// Where the partition can go given the groups' states and a budget of `rolling_step` groups.
fn rolling_partition(
    groups: &[GroupState],
    sts_replicas: i32,
    rolling_step: i32,
    current: i32,
) -> i32 {
    let state = |i: i32| groups.get(i as usize).copied().unwrap_or_default();
    // Groups at the top that are already done.
    let done_tail = (0..sts_replicas)
        .rev()
        .take_while(|&i| state(i).ready && state(i).updated)
        .count() as i32;
    let base = (sts_replicas - done_tail - rolling_step).max(0);
    // Old groups below the window that are unready already use up budget.
    let unavailable_below = (0..base).filter(|&i| !state(i).ready).count() as i32;
    let mut partition = base + unavailable_below;
    // Groups that are broken anyway (or already updated) can be replaced without losing
    // availability, so the update never gets stuck behind them.
    let mut idx = partition.min(sts_replicas - 1);
    while idx >= base {
        let g = state(idx);
        if !g.ready || g.updated {
            partition = idx;
            idx -= 1;
        } else {
            break;
        }
    }
    partition.min(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i32) -> IntOrString {
        IntOrString::Int(i)
    }

    /// Simulates a rolling update the way the cluster would run it: after each step, the
    /// StatefulSet controller brings groups at or above the partition (and below replicas) to
    /// the new revision, and they become ready one reconcile later. Returns the
    /// (partition, replicas) sequence until it settles.
    fn simulate(
        r: i32,
        surge: IntOrString,
        unavailable: IntOrString,
        user_partition: i32,
    ) -> Vec<(i32, i32)> {
        let mut sts = LeaderSts {
            replicas: r,
            partition: 0,
            recorded_lws_replicas: Some(r),
        };
        let mut groups: Vec<GroupState> = vec![
            GroupState {
                ready: true,
                updated: false
            };
            r as usize
        ];
        let mut seen = Vec::new();
        let mut template_changed = true;
        for _ in 0..50 {
            let step = next_step(&Input {
                replicas: r,
                max_surge: &surge,
                max_unavailable: &unavailable,
                user_partition,
                leader_sts: Some(sts),
                template_changed,
                groups: &groups,
            })
            .unwrap();
            template_changed = false;
            seen.push((step.partition, step.replicas));
            if seen.len() > 2
                && seen[seen.len() - 1] == seen[seen.len() - 2]
                && seen[seen.len() - 2] == seen[seen.len() - 3]
            {
                break;
            }
            // Groups replaced in the previous round have become ready by now; then the
            // StatefulSet controller scales and replaces groups at/above the partition.
            for g in groups.iter_mut().filter(|g| g.updated) {
                g.ready = true;
            }
            groups.resize(
                step.replicas as usize,
                GroupState {
                    ready: false,
                    updated: true,
                },
            );
            for (i, g) in groups.iter_mut().enumerate() {
                if i as i32 >= step.partition && !g.updated {
                    *g = GroupState {
                        ready: false,
                        updated: true,
                    };
                }
            }
            sts = LeaderSts {
                replicas: step.replicas,
                partition: step.partition,
                recorded_lws_replicas: Some(r),
            };
        }
        seen.dedup();
        seen
    }

    #[test]
    fn default_strategy_moves_the_partition_one_group_at_a_time() {
        assert_eq!(
            simulate(4, int(0), int(1), 0),
            vec![(4, 4), (3, 4), (2, 4), (1, 4), (0, 4)]
        );
    }

    #[test]
    fn max_surge_one_adds_a_surge_group_then_releases_it() {
        let seq = simulate(4, int(1), int(1), 0);
        assert_eq!(seq, vec![(4, 5), (3, 5), (2, 5), (1, 5), (0, 5), (0, 4)]);
    }

    #[test]
    fn max_surge_equal_to_replicas_bursts_to_seven_then_back_to_four() {
        let seq = simulate(4, int(4), int(1), 0);
        assert_eq!(
            seq.first(),
            Some(&(4, 7)),
            "upstream's e2e expects 7, not 8: {seq:?}"
        );
        assert_eq!(seq.last(), Some(&(0, 4)), "{seq:?}");
    }

    #[test]
    fn user_partition_stops_the_update_at_that_group() {
        let seq = simulate(6, int(0), int(1), 4);
        assert_eq!(seq, vec![(6, 6), (5, 6), (4, 6)]);
    }

    #[test]
    fn documented_example_r4_unavailable2_surge2() {
        // docs/concepts/rollout-strategy: (P=4,S=6) → (2,6) → … → (0,4). v0.9 reclaims both
        // surge groups at once when the two unready groups fit in maxUnavailable=2 (v0.8 went
        // through (0,5)).
        let seq = simulate(4, int(2), int(2), 0);
        assert_eq!(seq, vec![(4, 6), (2, 6), (0, 6), (0, 4)]);
    }

    #[test]
    fn max_unavailable_zero_keeps_the_surge_group_until_every_group_is_ready() {
        // Upstream v0.9's e2e "rolling update with maxUnavailable zero and maxSurge set": 5,
        // then 4 once the update is done; v0.8 dropped the surge group while one was unready.
        let seq = simulate(4, int(1), int(0), 0);
        assert_eq!(seq, vec![(4, 5), (3, 5), (2, 5), (1, 5), (0, 5), (0, 4)]);
    }

    /// Upstream v0.9's `calculateRollingUpdateReplicas` cases.
    #[test]
    fn surge_replicas_table() {
        // (name, lws replicas, maxSurge, maxUnavailable, unready, want)
        let cases = [
            (
                "surge kept until maxUnavailable covers the unready",
                1,
                1,
                0,
                1,
                2,
            ),
            (
                "surge reclaimed gradually once enough are ready",
                4,
                2,
                1,
                2,
                5,
            ),
            (
                "surge reclaimed before the partition reaches 0",
                2,
                2,
                1,
                2,
                3,
            ),
            ("all ready: the desired replicas", 1, 1, 0, 0, 1),
            ("maxUnavailable permits the unready one", 1, 1, 1, 1, 1),
            ("no surge with maxSurge 0", 3, 0, 0, 1, 3),
            ("more unready than surge: full burst", 4, 1, 1, 3, 5),
        ];
        for (name, r, surge, unavailable, unready, want) in cases {
            assert_eq!(
                surge_replicas(r, surge, unavailable, unready),
                want,
                "{name}"
            );
        }
    }

    fn step(
        r: i32,
        surge: i32,
        unavailable: i32,
        sts: LeaderSts,
        template_changed: bool,
        groups: &[GroupState],
    ) -> Step {
        next_step(&Input {
            replicas: r,
            max_surge: &int(surge),
            max_unavailable: &int(unavailable),
            user_partition: 0,
            leader_sts: Some(sts),
            template_changed,
            groups,
        })
        .unwrap()
    }

    /// Upstream v0.9's `TestRollingUpdateParameters…` cases: scaling up comes before surge.
    #[test]
    fn scaling_up_adds_no_surge_on_top() {
        let sts = LeaderSts {
            replicas: 2,
            partition: 0,
            recorded_lws_replicas: Some(2),
        };
        let old = GroupState {
            ready: true,
            updated: true,
        };
        // Replicas 2 → 3, no template change: 3 replicas, not 4.
        assert_eq!(
            step(3, 1, 0, sts, false, &[old, old]),
            Step {
                partition: 0,
                replicas: 3
            }
        );
        // Replicas 2 → 3 with a template change: partition 2, replicas 3.
        assert_eq!(
            step(3, 1, 0, sts, true, &[old, old]),
            Step {
                partition: 2,
                replicas: 3
            }
        );
        // A template change at the same replicas, maxSurge 2, maxUnavailable 1: 2 + (2 - 1).
        assert_eq!(
            step(2, 2, 1, sts, true, &[old, old]),
            Step {
                partition: 2,
                replicas: 3
            }
        );
        // Mid-update, the StatefulSet still below the new replicas: scale up first.
        let mid = LeaderSts {
            replicas: 2,
            partition: 1,
            recorded_lws_replicas: Some(2),
        };
        assert_eq!(
            step(4, 2, 1, mid, false, &[old, old]),
            Step {
                partition: 1,
                replicas: 4
            }
        );
    }

    #[test]
    fn no_statefulset_yet_means_partition_zero() {
        let step = next_step(&Input {
            replicas: 3,
            max_surge: &int(1),
            max_unavailable: &int(1),
            user_partition: 0,
            leader_sts: None,
            template_changed: false,
            groups: &[],
        })
        .unwrap();
        assert_eq!(
            step,
            Step {
                partition: 0,
                replicas: 3
            }
        );
    }

    #[test]
    fn unready_old_groups_do_not_block_the_update() {
        // All old groups broken: the partition jumps over the broken ones in the window
        // instead of waiting for them to become ready (upstream #567).
        let groups = vec![
            GroupState {
                ready: false,
                updated: false
            };
            4
        ];
        let step = next_step(&Input {
            replicas: 4,
            max_surge: &int(0),
            max_unavailable: &int(1),
            user_partition: 0,
            leader_sts: Some(LeaderSts {
                replicas: 4,
                partition: 4,
                recorded_lws_replicas: Some(4),
            }),
            template_changed: false,
            groups: &groups,
        })
        .unwrap();
        assert_eq!(step.partition, 3);
    }

    #[test]
    fn percentages_scale_like_apimachinery() {
        assert_eq!(scaled(&IntOrString::String("25%".into()), 5, true), Ok(2));
        assert_eq!(scaled(&IntOrString::String("25%".into()), 5, false), Ok(1));
        assert_eq!(scaled(&IntOrString::String("10%".into()), 4, false), Ok(0));
        assert!(scaled(&IntOrString::String("x".into()), 4, false).is_err());
    }
}
