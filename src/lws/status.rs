//! LWS status and conditions from the observed groups. Pure; upstream's counters, condition
//! texts and flip semantics (docs/lws.md), with two deliberate
//! differences: a group is ready only when its leader **and every worker** are ready (v0.9's
//! fix), and all conditions of one evaluation are applied in one write (upstream stops after the
//! first changed condition and needs a second reconcile to get to the same state).

use k8s_openapi::{
    api::apps::v1::StatefulSet,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::ResourceExt;

use super::{error::Failure, labels, objects, observe::Observed, plan::leader_sts};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, LeaderWorkerSetStatus},
    k8s::{events::EventSpec, pod},
};

/// What one group looks like (for groups whose leader pod exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedGroup {
    /// Group index.
    pub index: i32,
    /// Leader pod is Running and Ready.
    pub leader_ready: bool,
    /// Revision key on the leader pod.
    pub leader_revision: Option<String>,
    /// The worker StatefulSet, when the group has workers: (all workers ready, its revision key).
    pub workers: Option<(bool, Option<String>)>,
}

/// Inputs besides the groups.
#[derive(Debug, Clone)]
pub struct StatusInput<'a> {
    /// LWS name (for the HPA selector).
    pub name: &'a str,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `size`.
    pub size: i32,
    /// The user's partition.
    pub partition: i32,
    /// Current revision key: the revision the groups should run (the held one while a Rollout
    /// holds the LWS). Conditions judge the groups against it.
    pub revision: &'a str,
    /// Revision key of the template as it is now. `updatedReplicas` / `updatedReadyReplicas`
    /// count the groups on it, as upstream counts them against the update revision: while a
    /// Rollout holds the LWS on the old revision that is 0, and Kruise's own e2e assertions
    /// and tools read it so.
    pub template_revision: &'a str,
    /// Leader StatefulSet `status.replicas`.
    pub sts_replicas: i32,
    /// The status as stored.
    pub current: &'a LeaderWorkerSetStatus,
    /// Clock, for lastTransitionTime.
    pub now: Time,
}

/// The status to write, and what to tell users about it.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusOutcome {
    /// New status.
    pub status: LeaderWorkerSetStatus,
    /// An event (reason, message) when a condition changed.
    pub event: Option<(String, String)>,
    /// Every desired group is updated and ready and the user's partition is 0: old revisions
    /// may go.
    pub update_done: bool,
}

/// Condition type: all groups ready.
pub const AVAILABLE: &str = "Available";
/// Condition type: groups are being created or recovering.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: a rolling update is running.
pub const UPDATE_IN_PROGRESS: &str = "UpdateInProgress";

/// Condition type (ours, not upstream's): the LWS cannot be realised as written — a name too
/// long for its derived objects, an object in the way, or a StatefulSet the API server refuses.
/// Named after the Deployment condition with the same meaning; absent when all is well.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// Sets (`Some((reason, message))`) or removes (`None`) the `ReplicaFailure` condition.
/// Returns whether anything changed.
pub fn set_failure(
    conditions: &mut Vec<Condition>,
    failure: Option<(&str, &str)>,
    generation: Option<i64>,
    now: &Time,
) -> bool {
    let existing = conditions.iter().position(|c| c.type_ == REPLICA_FAILURE);
    match (failure, existing) {
        (None, None) => false,
        (None, Some(i)) => {
            conditions.remove(i);
            true
        }
        (Some((reason, message)), existing) => {
            let new = Condition {
                type_: REPLICA_FAILURE.into(),
                status: "True".into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: now.clone(),
                observed_generation: generation,
            };
            match existing {
                Some(i)
                    if conditions[i].reason == new.reason
                        && conditions[i].message == new.message =>
                {
                    false
                }
                Some(i) => {
                    // Same status: keep when it first became True.
                    let since = conditions[i].last_transition_time.clone();
                    conditions[i] = Condition {
                        last_transition_time: since,
                        ..new
                    };
                    true
                }
                None => {
                    conditions.push(new);
                    true
                }
            }
        }
    }
}

fn make_condition(type_: &str, generation: Option<i64>, now: &Time) -> Condition {
    let (reason, message) = match type_ {
        AVAILABLE => ("AllGroupsReady", "All replicas are ready"),
        UPDATE_IN_PROGRESS => ("GroupsUpdating", "Rolling Upgrade is in progress"),
        _ => ("GroupsProgressing", "Replicas are progressing"),
    };
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        observed_generation: generation,
    }
}

fn exclusive(a: &str, b: &str) -> bool {
    matches!(
        (a, b),
        (AVAILABLE, PROGRESSING)
            | (PROGRESSING, AVAILABLE)
            | (AVAILABLE, UPDATE_IN_PROGRESS)
            | (UPDATE_IN_PROGRESS, AVAILABLE)
    )
}

/// Upstream v0.9's `setCondition`: a True condition replaces one of the same type with another
/// status or another `observedGeneration`, is added when absent, and flips a True exclusive
/// condition to False (keeping its reason and message; its transition time and generation
/// move). Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let mut changed = false;
    let mut found = false;
    for current in conditions.iter_mut() {
        if current.type_ == new.type_ {
            found = true;
            if current.status != new.status
                || current.observed_generation != new.observed_generation
            {
                *current = new.clone();
                changed = true;
            }
        } else if exclusive(&current.type_, &new.type_)
            && new.status == "True"
            && current.status == "True"
        {
            current.status = "False".into();
            current.last_transition_time = new.last_transition_time.clone();
            current.observed_generation = new.observed_generation;
            changed = true;
        }
    }
    if !found && new.status == "True" {
        conditions.push(new);
        changed = true;
    }
    changed
}

/// Computes the status.
pub fn compute(input: &StatusInput<'_>, groups: &[ObservedGroup]) -> StatusOutcome {
    let (mut ready_count, mut updated_count) = (0, 0);
    let (mut current_nonburst, mut updated_nonburst, mut ready_nonburst, mut updated_and_ready) =
        (0, 0, 0, 0);
    for g in groups {
        let on = |key: &str| {
            let workers_on = match &g.workers {
                _ if input.size == 1 => true,
                None => false,
                Some((_, revision)) => revision.as_deref() == Some(key),
            };
            workers_on && g.leader_revision.as_deref() == Some(key)
        };
        let workers_ready = match &g.workers {
            _ if input.size == 1 => true,
            None => continue, // no worker StatefulSet yet: the group is not counted at all
            Some((ready, _)) => *ready,
        };
        let ready = workers_ready && g.leader_ready;
        let updated = on(input.revision);
        let in_window = g.index < input.replicas && g.index >= input.partition;
        ready_count += i32::from(ready);
        updated_count += i32::from(on(input.template_revision));
        current_nonburst += i32::from(in_window);
        updated_nonburst += i32::from(in_window && updated);
        ready_nonburst += i32::from(g.index < input.replicas && ready);
        updated_and_ready += i32::from(in_window && ready && updated);
    }

    let wanted: &[&str] = if updated_nonburst < current_nonburst {
        &[UPDATE_IN_PROGRESS, PROGRESSING]
    } else if ready_nonburst == input.replicas && updated_and_ready == current_nonburst {
        &[AVAILABLE]
    } else {
        &[PROGRESSING]
    };
    let mut conditions = input.current.conditions.clone().unwrap_or_default();
    let mut changed = false;
    for type_ in wanted {
        changed |= set_condition(
            &mut conditions,
            make_condition(type_, input.generation, &input.now),
        );
    }
    // v0.9: every condition states the generation it was computed for.
    for condition in &mut conditions {
        if condition.observed_generation != input.generation {
            condition.observed_generation = input.generation;
            changed = true;
        }
    }
    let event = changed.then(|| {
        let first = make_condition(wanted[0], None, &input.now);
        (
            first.reason,
            format!(
                "{}, with {ready_count} groups ready of total {} groups",
                first.message, input.replicas
            ),
        )
    });

    let status = LeaderWorkerSetStatus {
        conditions: Some(conditions),
        ready_replicas: Some(ready_count),
        updated_replicas: Some(updated_count),
        replicas: Some(input.sts_replicas),
        hpa_pod_selector: input.current.hpa_pod_selector.clone().or_else(|| {
            Some(format!(
                "leaderworkerset.sigs.k8s.io/name={},leaderworkerset.sigs.k8s.io/worker-index=0",
                input.name
            ))
        }),
        observed_generation: input.generation,
    };
    StatusOutcome {
        status,
        event,
        update_done: input.partition == 0 && updated_and_ready == input.replicas,
    }
}

/// The status the observed groups call for (conditions without `ReplicaFailure`, which
/// [`with_failure`] adds once the apply's outcome is known). `key` is the revision the groups
/// should run, `template_key` the revision of the template as it is now.
pub fn observed_status(
    lws: &LeaderWorkerSet,
    observed: &Observed,
    key: &str,
    template_key: &str,
    leader_sts: Option<&StatefulSet>,
    now: &Time,
) -> StatusOutcome {
    let size = objects::size(lws);
    let ready_workers = leader_sts::ready_workers(observed);
    let groups: Vec<ObservedGroup> = observed
        .leaders
        .iter()
        .filter_map(|leader| {
            let index = objects::group_index(leader)?;
            let workers = observed.worker_sts.get(&leader.name_any()).map(|ws| {
                (
                    leader_sts::workers_ready(ws, &ready_workers, size),
                    ws.labels().get(labels::REVISION).cloned(),
                )
            });
            Some(ObservedGroup {
                index,
                leader_ready: pod::ready(leader),
                leader_revision: leader.labels().get(labels::REVISION).map(str::to_string),
                workers,
            })
        })
        .collect();
    let current = lws.status.clone().unwrap_or_default();
    let partition = objects::user_partition(lws);
    compute(
        &StatusInput {
            name: &lws.name_any(),
            generation: lws.metadata.generation,
            replicas: objects::replicas(lws),
            size,
            partition,
            revision: key,
            template_revision: template_key,
            sts_replicas: leader_sts
                .and_then(|s| s.status.as_ref())
                .map_or(0, |s| s.replicas),
            current: &current,
            now: now.clone(),
        },
        &groups,
    )
}

/// Adds (or clears) the `ReplicaFailure` condition; a newly set failure gets a Warning event.
pub fn with_failure(
    status: &mut LeaderWorkerSetStatus,
    failure: Option<&Failure>,
    generation: Option<i64>,
    now: &Time,
) -> Option<EventSpec> {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let changed = set_failure(
        conditions,
        failure.map(|f| (f.reason, f.message.as_str())),
        generation,
        now,
    );
    match failure {
        Some(f) if changed => Some(EventSpec::warning(f.reason, f.message.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_795_327_200).unwrap())
    }

    fn group(index: i32, ready: bool, revision: &str) -> ObservedGroup {
        ObservedGroup {
            index,
            leader_ready: ready,
            leader_revision: Some(revision.into()),
            workers: Some((ready, Some(revision.into()))),
        }
    }

    fn input<'a>(
        current: &'a LeaderWorkerSetStatus,
        replicas: i32,
        partition: i32,
    ) -> StatusInput<'a> {
        StatusInput {
            name: "vllm",
            generation: Some(2),
            replicas,
            size: 2,
            partition,
            revision: "new",
            template_revision: "new",
            sts_replicas: replicas,
            current,
            now: now(),
        }
    }

    #[test]
    fn all_groups_ready_is_available_with_upstream_texts() {
        let current = LeaderWorkerSetStatus::default();
        let out = compute(
            &input(&current, 2, 0),
            &[group(0, true, "new"), group(1, true, "new")],
        );
        let conditions = out.status.conditions.clone().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].reason.as_str()),
            (AVAILABLE, "AllGroupsReady")
        );
        assert_eq!(
            out.event,
            Some((
                "AllGroupsReady".into(),
                "All replicas are ready, with 2 groups ready of total 2 groups".into()
            ))
        );
        assert_eq!(out.status.ready_replicas, Some(2));
        assert_eq!(
            out.status.hpa_pod_selector.as_deref(),
            Some(
                "leaderworkerset.sigs.k8s.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0"
            )
        );
        assert!(out.update_done);
    }

    #[test]
    fn a_group_with_an_unready_worker_is_not_ready() {
        let current = LeaderWorkerSetStatus::default();
        let mut g = group(1, true, "new");
        g.workers = Some((false, Some("new".into())));
        let out = compute(&input(&current, 2, 0), &[group(0, true, "new"), g]);
        assert_eq!(out.status.ready_replicas, Some(1));
        assert_eq!(out.status.conditions.unwrap()[0].type_, PROGRESSING);
    }

    #[test]
    fn update_flips_available_status_only_and_keeps_its_message() {
        let empty = LeaderWorkerSetStatus::default();
        let before = StatusInput {
            revision: "old",
            template_revision: "old",
            ..input(&empty, 2, 0)
        };
        let current = compute(&before, &[group(0, true, "old"), group(1, true, "old")]);
        // The template changed: both groups on "old" while the revision is "new".
        let out = compute(
            &input(&current.status, 2, 0),
            &[group(0, true, "old"), group(1, true, "old")],
        );
        let conditions = out.status.conditions.unwrap();
        let available = conditions.iter().find(|c| c.type_ == AVAILABLE).unwrap();
        assert_eq!(
            (available.status.as_str(), available.message.as_str()),
            ("False", "All replicas are ready")
        );
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == UPDATE_IN_PROGRESS && c.status == "True")
        );
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == PROGRESSING && c.status == "True")
        );
        assert_eq!(out.event.unwrap().0, "GroupsUpdating");
    }

    /// v0.9: every condition carries the generation it was computed for; a new generation
    /// rewrites the conditions (and says so once, like any condition change), the exclusive
    /// flip moves its transition time.
    #[test]
    fn conditions_carry_the_observed_generation() {
        let first = compute(
            &input(&LeaderWorkerSetStatus::default(), 1, 0),
            &[group(0, true, "new")],
        );
        let gen2 = first.status.conditions.clone().unwrap();
        assert!(gen2.iter().all(|c| c.observed_generation == Some(2)));
        assert_eq!(first.status.observed_generation, Some(2));
        // A scale or any other spec change: generation 3, same groups.
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_795_328_000).unwrap());
        let third = compute(
            &StatusInput {
                generation: Some(3),
                now: later.clone(),
                ..input(&first.status, 1, 0)
            },
            &[group(0, true, "new")],
        );
        let gen3 = third.status.conditions.clone().unwrap();
        assert_eq!(gen3.len(), 1);
        assert_eq!(gen3[0].observed_generation, Some(3));
        assert_eq!(gen3[0].status, "True");
        assert_eq!(
            gen3[0].last_transition_time, later,
            "v0.9 replaces the condition"
        );
        assert!(third.event.is_some());
        // A stale foreign condition (ours: ReplicaFailure) gets the generation too.
        let mut with_failure = third.status.clone();
        with_failure.conditions.as_mut().unwrap().push(Condition {
            observed_generation: Some(1),
            ..make_condition(REPLICA_FAILURE, Some(1), &now())
        });
        let again = compute(
            &StatusInput {
                generation: Some(3),
                ..input(&with_failure, 1, 0)
            },
            &[group(0, true, "new")],
        );
        assert!(
            again
                .status
                .conditions
                .unwrap()
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
        // The exclusive flip: Available goes False at the update's time and generation.
        let update = compute(
            &StatusInput {
                generation: Some(4),
                revision: "newer",
                now: later.clone(),
                ..input(&first.status, 1, 0)
            },
            &[group(0, true, "new")],
        );
        let conditions = update.status.conditions.unwrap();
        let available = conditions.iter().find(|c| c.type_ == AVAILABLE).unwrap();
        assert_eq!(available.status, "False");
        assert_eq!(available.observed_generation, Some(4));
        assert_eq!(available.last_transition_time, later);
    }

    #[test]
    fn unchanged_conditions_emit_no_event() {
        let first = compute(
            &input(&LeaderWorkerSetStatus::default(), 1, 0),
            &[group(0, true, "new")],
        );
        let second = compute(&input(&first.status, 1, 0), &[group(0, true, "new")]);
        assert_eq!(second.event, None);
        assert_eq!(second.status, first.status);
    }

    #[test]
    fn a_failure_condition_is_set_updated_and_removed() {
        let mut conditions = vec![make_condition(AVAILABLE, Some(1), &now())];
        assert!(set_failure(
            &mut conditions,
            Some(("NameTooLong", "m1")),
            Some(1),
            &now()
        ));
        assert!(!set_failure(
            &mut conditions,
            Some(("NameTooLong", "m1")),
            Some(1),
            &now()
        ));
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_795_327_999).unwrap());
        assert!(set_failure(
            &mut conditions,
            Some(("FailedCreate", "m2")),
            Some(2),
            &later
        ));
        let failure = conditions
            .iter()
            .find(|c| c.type_ == REPLICA_FAILURE)
            .unwrap();
        assert_eq!(
            (failure.reason.as_str(), failure.message.as_str()),
            ("FailedCreate", "m2")
        );
        assert_eq!(
            failure.last_transition_time,
            now(),
            "still failing since the first time"
        );
        assert!(set_failure(&mut conditions, None, Some(2), &later));
        assert_eq!(conditions.len(), 1, "only Available is left");
        assert!(!set_failure(&mut conditions, None, Some(2), &later));
    }

    #[test]
    fn partitioned_groups_do_not_block_availability() {
        // Partition 1: group 0 stays old, group 1 updated → Available, updatedReplicas 1.
        let current = LeaderWorkerSetStatus::default();
        let out = compute(
            &input(&current, 2, 1),
            &[group(0, true, "old"), group(1, true, "new")],
        );
        assert_eq!(out.status.conditions.unwrap()[0].type_, AVAILABLE);
        assert_eq!(out.status.updated_replicas, Some(1));
        assert!(
            !out.update_done,
            "old revision still in use below the partition"
        );
    }

    /// While a Rollout holds the LWS on the old revision, its groups are not "updated": the
    /// counters count groups on the template as it is now, as upstream LWS (and Kruise's own
    /// e2e, which asserts UpdatedReplicas stays 0 at every step) count them. The conditions
    /// judge the groups against the held revision they are meant to run, so a held LWS whose
    /// groups are all ready stays Available.
    #[test]
    fn held_groups_count_as_updated_only_on_the_current_template() {
        let current = LeaderWorkerSetStatus::default();
        // (groups' revisions, held revision, template revision) → (updated, Available)
        let cases: [(&[&str], &str, &str, i32, bool); 4] = [
            (&["old", "old"], "old", "new", 0, true),
            (&["old", "old"], "old", "old", 2, true),
            (&["new", "new"], "new", "new", 2, true),
            (&["old", "new"], "new", "new", 1, false),
        ];
        for (groups, held, template, updated, available) in cases {
            let observed: Vec<ObservedGroup> = groups
                .iter()
                .enumerate()
                .map(|(i, r)| group(i32::try_from(i).unwrap(), true, r))
                .collect();
            let out = compute(
                &StatusInput {
                    revision: held,
                    template_revision: template,
                    ..input(&current, 2, 0)
                },
                &observed,
            );
            let what = format!("{groups:?} held {held} template {template}");
            assert_eq!(out.status.updated_replicas, Some(updated), "{what}");
            assert_eq!(
                out.status.conditions.unwrap()[0].type_ == AVAILABLE,
                available,
                "{what}"
            );
        }
    }
}
