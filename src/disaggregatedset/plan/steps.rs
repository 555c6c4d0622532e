//! The rolling update of a DisaggregatedSet across its roles: from the replicas each role's old
//! revisions had when the update started, what they have now, what the new revision has and
//! what it should have, the next step — either the new revision's LWSs scale up, or the old
//! ones scale down, never both at once. Pure; upstream v0.9.0's planner
//! (`pkg/controllers/disaggregatedset/planner.go`), so the pair steps through the same
//! sequences (e2e `upstream_reference::disaggregatedset_plans_*` compares whole sequences with
//! upstream's own code).
//!
//! The shape: both sides move along a linear interpolation of `total_steps` steps (the most
//! any role needs at its batch size: `maxSurge`, or `maxUnavailable` when there is no surge);
//! the new side goes up to `ceil(i × target / total)`, the old down to
//! `initial − floor(i × initial / total)`. The step index is recovered from the replicas seen,
//! so the planner keeps no state. Scale-up is allowed while old + new ≤ target + maxSurge for
//! every role; old replicas never drop below target − maxUnavailable − new; and no role of an
//! old revision is drained to 0 while another still has replicas, unless every role can go
//! (no half pair left running).

/// Rolling-update parameters of one role, in groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoleConfig {
    /// Groups the role may run above its target.
    pub max_surge: i32,
    /// Groups the role may run below its target.
    pub max_unavailable: i32,
}

impl RoleConfig {
    /// Upstream's default when a role names no rolling-update configuration.
    pub const DEFAULT: RoleConfig = RoleConfig {
        max_surge: 1,
        max_unavailable: 0,
    };
}

/// Replicas per role, in role order.
pub type Replicas = Vec<i32>;

/// The replicas the old revisions (summed per role) and the new revision should have next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Old revisions, per role.
    pub old: Replicas,
    /// The new revision, per role.
    pub new: Replicas,
}

fn batch_size(c: RoleConfig) -> i32 {
    if c.max_surge > 0 {
        c.max_surge
    } else {
        c.max_unavailable.max(1)
    }
}

/// Steps the slowest role needs at its batch size.
pub fn total_steps(initial_old: &[i32], target: &[i32], config: &[RoleConfig]) -> i32 {
    (0..initial_old.len())
        .map(|i| {
            let most = initial_old[i].max(target[i]).max(0);
            let batch = batch_size(config[i]);
            (most + batch - 1) / batch
        })
        .max()
        .unwrap_or(0)
}

fn next_new(target: &[i32], current: &[i32], total: i32) -> Replicas {
    if total == 0 {
        return target.to_vec();
    }
    let index = |current: i32, target: i32| {
        if target == 0 {
            total
        } else {
            (f64::from(current) * f64::from(total) / f64::from(target)) as i32
        }
    };
    let min_index = (0..target.len())
        .map(|i| index(current[i], target[i]))
        .fold(total, i32::min);
    let next = min_index + 1;
    (0..target.len())
        .map(|i| {
            let progress = f64::from(next) * f64::from(target[i]) / f64::from(total);
            (progress.ceil() as i32).min(target[i]).max(current[i])
        })
        .collect()
}

fn next_old(initial: &[i32], current: &[i32], total: i32) -> Replicas {
    if total == 0 {
        return vec![0; initial.len()];
    }
    let index = |removed: i32, source: i32| {
        if source == 0 {
            0
        } else {
            (f64::from(removed) * f64::from(total) / f64::from(source)) as i32
        }
    };
    let max_index = (0..initial.len())
        .filter(|&i| initial[i] != 0)
        .map(|i| index(initial[i] - current[i], initial[i]))
        .fold(0, i32::max);
    let next = max_index + 1;
    (0..initial.len())
        .map(|i| {
            let progress = f64::from(next) * f64::from(initial[i]) / f64::from(total);
            (initial[i] - progress.floor() as i32)
                .max(0)
                .min(current[i])
        })
        .collect()
}

/// Old replicas above what the update started with (a user scaled an old LWS up) go first.
fn correct_abnormal(initial: &[i32], current_old: &[i32], current_new: &[i32]) -> Option<Step> {
    let expected: Replicas = (0..initial.len())
        .map(|i| initial[i].min(current_old[i]))
        .collect();
    (expected.as_slice() != current_old).then(|| Step {
        old: expected,
        new: current_new.to_vec(),
    })
}

fn complete(current_old: &[i32], current_new: &[i32], target: &[i32]) -> bool {
    (0..target.len()).all(|i| current_old[i] == 0 && current_new[i] >= target[i])
}

fn new_at_target(current_new: &[i32], target: &[i32]) -> bool {
    (0..target.len()).all(|i| current_new[i] >= target[i])
}

fn can_scale_up(current_old: &[i32], next_new: &[i32], target: &[i32], c: &[RoleConfig]) -> bool {
    (0..target.len())
        .filter(|&i| target[i] != 0)
        .all(|i| current_old[i] + next_new[i] <= target[i] + c[i].max_surge)
}

fn min_old(initial: &[i32], current_new: &[i32], target: &[i32], c: &[RoleConfig]) -> Replicas {
    (0..initial.len())
        .map(|i| {
            if initial[i] >= target[i] {
                (target[i] - c[i].max_unavailable - current_new[i]).max(0)
            } else {
                0
            }
        })
        .collect()
}

fn can_drain_all(new: &[i32], initial: &[i32], target: &[i32], c: &[RoleConfig]) -> bool {
    (0..target.len())
        .filter(|&i| initial[i] >= target[i])
        .all(|i| new[i] >= target[i] - c[i].max_unavailable)
}

/// No half pair: when some (but not all) of an old revision's roles would reach 0, either all
/// go (the new revision can take over every role) or none does (each keeps at least 1).
fn prevent_orphans(
    next_old: &mut [i32],
    new: &[i32],
    initial: &[i32],
    target: &[i32],
    c: &[RoleConfig],
) {
    let roles: Vec<usize> = (0..initial.len()).filter(|&i| initial[i] != 0).collect();
    let any_zero = roles.iter().any(|&i| next_old[i] == 0);
    let all_zero = roles.iter().all(|&i| next_old[i] == 0);
    if !any_zero || all_zero {
        return;
    }
    if can_drain_all(new, initial, target, c) {
        next_old.iter_mut().for_each(|o| *o = 0);
        return;
    }
    for &i in &roles {
        if next_old[i] == 0 {
            next_old[i] = 1;
        }
    }
}

fn try_scale_up(
    current_old: &[i32],
    current_new: &[i32],
    next_new: &[i32],
    target: &[i32],
    c: &[RoleConfig],
) -> Option<Step> {
    let grows = (0..current_new.len()).any(|i| next_new[i] > current_new[i]);
    (grows && can_scale_up(current_old, next_new, target, c)).then(|| Step {
        old: current_old.to_vec(),
        new: next_new.to_vec(),
    })
}

fn try_proportional_drain(state: &State<'_>, minimum: &[i32], total: i32) -> Option<Step> {
    let mut old = next_old(state.initial_old, state.current_old, total);
    for (o, m) in old.iter_mut().zip(minimum) {
        *o = (*o).max(*m);
    }
    prevent_orphans(
        &mut old,
        state.current_new,
        state.initial_old,
        state.target,
        state.config,
    );
    let shrinks = (0..old.len()).any(|i| old[i] < state.current_old[i]);
    shrinks.then(|| Step {
        old,
        new: state.current_new.to_vec(),
    })
}

fn try_force_drain(state: &State<'_>, next_new: &[i32]) -> Option<Step> {
    let c = state.config;
    let mut old: Replicas = (0..state.current_old.len())
        .map(|i| {
            let room = state.target[i] + c[i].max_surge - next_new[i];
            let mut o = state.current_old[i].min(room).max(0);
            if state.initial_old[i] >= state.target[i] {
                o = o.max((state.target[i] - c[i].max_unavailable - next_new[i]).max(0));
            }
            o
        })
        .collect();
    if !(0..old.len()).any(|i| old[i] < state.current_old[i]) {
        return None;
    }
    prevent_orphans(
        &mut old,
        next_new,
        state.initial_old,
        state.target,
        state.config,
    );
    Some(Step {
        old,
        new: next_new.to_vec(),
    })
}

/// Everything the planner looks at, per role.
#[derive(Clone, Copy, Debug)]
pub struct State<'a> {
    /// Old revisions' replicas when the update started (the initial-replicas annotations).
    pub initial_old: &'a [i32],
    /// Old revisions' replicas now.
    pub current_old: &'a [i32],
    /// The new revision's replicas now.
    pub current_new: &'a [i32],
    /// The new revision's target (0 for a role the spec no longer has).
    pub target: &'a [i32],
    /// Each role's surge and unavailability.
    pub config: &'a [RoleConfig],
}

/// The next step, or `None` when the update is done (or cannot move).
pub fn next_step(state: &State<'_>) -> Option<Step> {
    let (initial, old, new, target, c) = (
        state.initial_old,
        state.current_old,
        state.current_new,
        state.target,
        state.config,
    );
    if complete(old, new, target) {
        return None;
    }
    let total = total_steps(initial, target, c);
    if total == 0 {
        return None;
    }
    if let Some(step) = correct_abnormal(initial, old, new) {
        return Some(step);
    }
    if new_at_target(new, target) {
        return Some(Step {
            old: vec![0; initial.len()],
            new: new.to_vec(),
        });
    }
    let grown = next_new(target, new, total);
    let minimum = min_old(initial, new, target, c);
    try_scale_up(old, new, &grown, target, c)
        .or_else(|| try_proportional_drain(state, &minimum, total))
        .or_else(|| try_force_drain(state, &grown))
}

/// Every step of a whole update from `initial_old` to `target`, starting state included (each
/// step taken as soon as the previous one is done): for tests and the reference comparison.
pub fn all_steps(initial_old: &[i32], target: &[i32], config: &[RoleConfig]) -> Vec<Step> {
    let mut steps = vec![Step {
        old: initial_old.to_vec(),
        new: vec![0; initial_old.len()],
    }];
    let most = initial_old.iter().chain(target).copied().max().unwrap_or(0);
    for _ in 0..(most * 2 + 10) {
        let last = steps.last().expect("at least the start").clone();
        let Some(step) = next_step(&State {
            initial_old,
            current_old: &last.old,
            current_new: &last.new,
            target,
            config,
        }) else {
            break;
        };
        steps.push(step);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn surge(n: i32) -> RoleConfig {
        RoleConfig {
            max_surge: n,
            max_unavailable: 0,
        }
    }

    fn unavailable(n: i32) -> RoleConfig {
        RoleConfig {
            max_surge: 0,
            max_unavailable: n,
        }
    }

    fn pairs(steps: &[Step]) -> Vec<([i32; 2], [i32; 2])> {
        steps
            .iter()
            .map(|s| ([s.old[0], s.old[1]], [s.new[0], s.new[1]]))
            .collect()
    }

    /// Upstream v0.9.0's exact sequences (its `TestComputeAllSteps_ExactSequence` situations):
    /// (name, initial, target, config, (old, new) per step).
    #[test]
    fn exact_sequences() {
        type Case = (
            &'static str,
            [i32; 2],
            [i32; 2],
            [RoleConfig; 2],
            &'static [([i32; 2], [i32; 2])],
        );
        let d = RoleConfig::DEFAULT;
        let cases: &[Case] = &[
            (
                "1/1, surge 1",
                [1, 1],
                [1, 1],
                [d, d],
                &[([1, 1], [0, 0]), ([1, 1], [1, 1]), ([0, 0], [1, 1])],
            ),
            (
                "2/2, surge 1: up and down in turns",
                [2, 2],
                [2, 2],
                [d, d],
                &[
                    ([2, 2], [0, 0]),
                    ([2, 2], [1, 1]),
                    ([1, 1], [1, 1]),
                    ([1, 1], [2, 2]),
                    ([0, 0], [2, 2]),
                ],
            ),
            (
                "6/2, surge 1: the smaller role keeps pace, its last old group goes with the other's",
                [6, 2],
                [6, 2],
                [d, d],
                &[
                    ([6, 2], [0, 0]),
                    ([6, 2], [1, 1]),
                    ([5, 2], [1, 1]),
                    ([5, 2], [2, 1]),
                    ([4, 2], [2, 1]),
                    ([4, 2], [3, 1]),
                    ([3, 1], [3, 1]),
                    ([3, 1], [4, 2]),
                    ([2, 1], [4, 2]),
                    ([2, 1], [5, 2]),
                    ([1, 1], [5, 2]),
                    ([1, 1], [6, 2]),
                    ([0, 0], [6, 2]),
                ],
            ),
            (
                "6/2, surge 2",
                [6, 2],
                [6, 2],
                [surge(2), surge(2)],
                &[
                    ([6, 2], [0, 0]),
                    ([6, 2], [2, 1]),
                    ([4, 2], [2, 1]),
                    ([4, 2], [4, 2]),
                    ([2, 1], [4, 2]),
                    ([2, 1], [6, 2]),
                    ([0, 0], [6, 2]),
                ],
            ),
            (
                "6/4, surge 2",
                [6, 4],
                [6, 4],
                [surge(2), surge(2)],
                &[
                    ([6, 4], [0, 0]),
                    ([6, 4], [2, 2]),
                    ([4, 3], [2, 2]),
                    ([4, 3], [4, 3]),
                    ([2, 2], [4, 3]),
                    ([2, 2], [6, 4]),
                    ([0, 0], [6, 4]),
                ],
            ),
        ];
        for (name, initial, target, config, want) in cases {
            assert_eq!(pairs(&all_steps(initial, target, config)), *want, "{name}");
        }
    }

    #[test]
    fn every_update_completes_within_its_bounds() {
        // Over a grid of sizes and configs: it ends at (0, target); with surge, never below the
        // targets' sum; no role ever above target + surge; no half pair of an old revision.
        for a in 0..6 {
            for b in 0..6 {
                for (ta, tb) in [(a, b), (a + 1, b), (b, a), (3, 3), (0, 0)] {
                    for config in [
                        [RoleConfig::DEFAULT; 2],
                        [surge(2), surge(1)],
                        [unavailable(1), unavailable(2)],
                        [RoleConfig {
                            max_surge: 1,
                            max_unavailable: 1,
                        }; 2],
                    ] {
                        let steps = all_steps(&[a, b], &[ta, tb], &config);
                        let last = steps.last().unwrap();
                        let name = format!("{a}/{b} → {ta}/{tb} with {config:?}: {steps:?}");
                        if ta + tb > 0 || a + b > 0 {
                            assert_eq!(last.old, vec![0, 0], "{name}");
                            assert!(last.new[0] >= ta && last.new[1] >= tb, "{name}");
                        }
                        for s in &steps[1..] {
                            if a > 0 && b > 0 {
                                assert!(
                                    (s.old[0] == 0) == (s.old[1] == 0),
                                    "half an old pair left: {name}"
                                );
                            }
                            for i in 0..2 {
                                let t = [ta, tb][i];
                                if t > 0 && config[i].max_surge > 0 {
                                    assert!(
                                        s.old[i] + s.new[i]
                                            <= t.max([a, b][i]) + config[i].max_surge,
                                        "{name}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_done_update_has_no_next_step_and_a_fresh_one_starts_by_scaling_up() {
        let config = [RoleConfig::DEFAULT; 2];
        let done = State {
            initial_old: &[2, 2],
            current_old: &[0, 0],
            current_new: &[2, 2],
            target: &[2, 2],
            config: &config,
        };
        assert_eq!(next_step(&done), None);
        let fresh = State {
            current_old: &[2, 2],
            current_new: &[0, 0],
            ..done
        };
        assert_eq!(
            next_step(&fresh),
            Some(Step {
                old: vec![2, 2],
                new: vec![1, 1]
            })
        );
        // An old LWS scaled up by hand mid-update is brought back first.
        let abnormal = State {
            current_old: &[3, 2],
            current_new: &[1, 1],
            ..done
        };
        assert_eq!(
            next_step(&abnormal),
            Some(Step {
                old: vec![2, 2],
                new: vec![1, 1]
            })
        );
        // A role removed from the spec (target 0) drains with the others.
        let removed = [RoleConfig::DEFAULT; 3];
        let steps = all_steps(&[2, 2, 1], &[2, 2, 0], &removed);
        assert_eq!(steps.last().unwrap().old, vec![0, 0, 0]);
        assert_eq!(steps.last().unwrap().new, vec![2, 2, 0]);
    }

    #[test]
    fn total_steps_follow_the_slowest_role() {
        assert_eq!(total_steps(&[6, 2], &[6, 2], &[RoleConfig::DEFAULT; 2]), 6);
        assert_eq!(total_steps(&[6, 2], &[6, 2], &[surge(2), surge(2)]), 3);
        assert_eq!(
            total_steps(&[4, 4], &[4, 4], &[unavailable(3), unavailable(3)]),
            2
        );
        assert_eq!(total_steps(&[0, 0], &[0, 0], &[RoleConfig::DEFAULT; 2]), 0);
    }
}
