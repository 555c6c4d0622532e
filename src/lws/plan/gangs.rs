//! Native gang scheduling ([`crate::lws::gang`]): the PodGroups of a gang LWS's groups.
//!
//! A group's PodGroup exists before its pods do: the leader StatefulSet is written after the
//! PodGroups in the same apply, so a new ordinal, a surge group or a group the rolling update
//! is about to move finds its gang already there. The kube-scheduler keeps a pod whose
//! PodGroup is missing out of its queue ("waiting for pod group to appear"), so a PodGroup
//! lost some other way costs a wait, never a half-bound group.
//!
//! Wanted, for each group index: the PodGroup of the revision the group is to run — the update
//! revision from the leader StatefulSet's partition up to its replicas (surge groups included)
//! — and of every revision one of the group's pods runs (a group below the partition keeps its
//! old one, and an old incarnation keeps its own until its pods are gone). Below the partition
//! a group without pods keeps what it has (it is coming back on its old revision). Every other
//! PodGroup of the LWS is deleted: a scaled-away group's, a finished revision's. The API
//! server's PodGroup protection keeps a deleted one until no pod names it any more.
//!
//! PodGroups are immutable: one whose policy is not what its group needs (the
//! exclusive-topology annotation changed, which changes no revision) is deleted, and made
//! again once it is gone. Never two PodGroups for one incarnation: a name is made of the
//! group and the revision, and it is only created once the old one has gone.

use std::collections::BTreeSet;

use k8s_openapi::api::scheduling::v1alpha2::PodGroup;
use kube::ResourceExt;

use super::{Delete, How, OnRefusal, Plan, Write, reasons};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::events::EventSpec,
    lws::{error::Failure, gang, labels, objects, observe::Observed, rolling::Step},
};

/// `ReplicaFailure` reason when gang scheduling is asked for on a cluster without PodGroups.
pub const NOT_SERVED: &str = "GangSchedulingUnavailable";
/// Event reason naming a group the kube-scheduler cannot place whole.
pub const UNSCHEDULABLE: &str = "GangUnschedulable";

/// Why a gang LWS cannot be built on this cluster, if it cannot: nothing of it is built
/// (groups scheduled pod by pod could hold part of their accelerators and wait for ever —
/// exactly what the user asked gang scheduling to prevent).
pub fn blocked(lws: &LeaderWorkerSet, observed: &Observed) -> Option<Failure> {
    (gang::requested(lws) && observed.pod_groups.is_none()).then(|| {
        Failure::blocked(
            NOT_SERVED,
            format!(
                "annotation {}={} asks for gang scheduling, but the API server does not serve \
                 {}/{} PodGroups (Kubernetes 1.36: --runtime-config={0}/{1}=true and the \
                 GenericWorkload and GangScheduling feature gates on the API server, scheduler \
                 and controller-manager); no group is built until it does",
                labels::GANG_SCHEDULING,
                labels::GANG_NATIVE,
                gang::API_GROUP,
                gang::API_VERSION,
            ),
        )
    })
}

/// Plans the PodGroups of `lws` (a no-op unless it asks for gang scheduling): `step` is the
/// leader StatefulSet's planned replicas and partition, `key` the revision from the partition
/// up.
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, step: &Step, key: &str, plan: &mut Plan) {
    let Some(existing) = observed.pod_groups.as_ref() else {
        return;
    };
    if !gang::requested(lws) {
        return;
    }
    let mut wanted: BTreeSet<(i32, String)> = (step.partition.max(0)..step.replicas)
        .map(|i| (i, key.to_string()))
        .collect();
    let mut with_pods = BTreeSet::new();
    for pod in &observed.pods {
        let labels = pod.labels();
        let index = objects::group_index(pod);
        if let (Some(index), Some(revision)) = (index, labels.get(labels::REVISION)) {
            wanted.insert((index, revision.to_string()));
            with_pods.insert(index);
        }
    }
    let mut present = BTreeSet::new();
    for pg in existing {
        let Some((index, revision)) = gang::identity(pg) else {
            continue;
        };
        present.insert((index, revision.to_string()));
        let kept_below_partition =
            index < step.partition.min(step.replicas) && !with_pods.contains(&index);
        let is_wanted = wanted.contains(&(index, revision.to_string()));
        let stale = !gang::same_policy(pg, &gang::pod_group(lws, index, revision));
        if pg.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if (!is_wanted && !kept_below_partition) || stale {
            plan.delete_pod_groups.push(Delete {
                name: pg.name_any(),
                uid: pg.metadata.uid.clone(),
            });
        }
    }
    for (index, revision) in wanted.difference(&present) {
        plan.pod_groups
            .push(write(gang::pod_group(lws, *index, revision)));
    }
    for pg in existing {
        if let (Some(message), Some((index, _))) = (gang::unschedulable(pg), gang::identity(pg)) {
            plan.events.push(EventSpec::warning(
                UNSCHEDULABLE,
                format!(
                    "Group {index} cannot be scheduled whole (PodGroup {}): {message}",
                    pg.name_any()
                ),
            ));
        }
    }
}

fn write(pg: PodGroup) -> Write<PodGroup> {
    let name = pg.name_any();
    Write {
        object: pg,
        how: How::CreateIfAbsent,
        on_success: Vec::new(),
        on_failure: vec![EventSpec::warning(
            reasons::FAILED_CREATE,
            format!("Failed to create PodGroup {name}"),
        )],
        on_refusal: Some(OnRefusal {
            reason: reasons::FAILED_CREATE,
            what: format!("the API server refused PodGroup {name}"),
            blocks: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::{
        api::core::v1::Pod,
        apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time},
    };
    use serde_json::json;

    use super::*;
    use crate::k8s::pod::CachedPod;

    fn lws(replicas: i32, size: i32, annotations: &[(&str, &str)]) -> LeaderWorkerSet {
        let mut lws: LeaderWorkerSet = serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "g", "namespace": "ns", "uid": "lws-uid"},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}},
        }))
        .unwrap();
        let gang = [(labels::GANG_SCHEDULING, labels::GANG_NATIVE)];
        lws.metadata.annotations = Some(
            gang.iter()
                .chain(annotations)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        lws
    }

    /// A pod of group `index` on `revision` (a leader, or worker `worker`).
    fn pod(index: i32, worker: i32, revision: &str) -> Arc<CachedPod> {
        let name = if worker == 0 {
            format!("g-{index}")
        } else {
            format!("g-{index}-{worker}")
        };
        let labels = [
            (labels::NAME, "g".to_string()),
            (labels::WORKER_INDEX, worker.to_string()),
            (labels::GROUP_INDEX, index.to_string()),
            (labels::REVISION, revision.to_string()),
        ];
        Arc::new(CachedPod::from(&Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some("ns".into()),
                labels: Some(labels.map(|(k, v)| (k.to_string(), v)).into()),
                ..Default::default()
            },
            ..Default::default()
        }))
    }

    fn existing(lws: &LeaderWorkerSet, index: i32, revision: &str) -> Arc<PodGroup> {
        let mut pg = gang::pod_group(lws, index, revision);
        pg.metadata.uid = Some(format!("pg-{index}-{revision}"));
        Arc::new(pg)
    }

    struct Case {
        name: &'static str,
        replicas: i32,
        partition: i32,
        pods: Vec<Arc<CachedPod>>,
        present: Vec<(i32, &'static str)>,
        creates: Vec<&'static str>,
        deletes: Vec<&'static str>,
    }

    #[test]
    fn podgroups_follow_the_groups_table() {
        let cases = [
            Case {
                name: "a new LWS: one PodGroup per group before any pod",
                replicas: 2,
                partition: 0,
                pods: vec![],
                present: vec![],
                creates: vec!["g-0-new", "g-1-new"],
                deletes: vec![],
            },
            Case {
                name: "settled: nothing to do",
                replicas: 2,
                partition: 0,
                pods: vec![pod(0, 0, "new"), pod(0, 1, "new"), pod(1, 0, "new")],
                present: vec![(0, "new"), (1, "new")],
                creates: vec![],
                deletes: vec![],
            },
            Case {
                name: "scale-up (or a surge group): the new ordinal's PodGroup first",
                replicas: 3,
                partition: 0,
                pods: vec![pod(0, 0, "new"), pod(1, 0, "new")],
                present: vec![(0, "new"), (1, "new")],
                creates: vec!["g-2-new"],
                deletes: vec![],
            },
            Case {
                name: "scale-down: a group whose pods are gone loses its PodGroup",
                replicas: 1,
                partition: 0,
                pods: vec![pod(0, 0, "new")],
                present: vec![(0, "new"), (1, "new")],
                creates: vec![],
                deletes: vec!["g-1-new"],
            },
            Case {
                name: "scale-down: still terminating pods keep their PodGroup",
                replicas: 1,
                partition: 0,
                pods: vec![pod(0, 0, "new"), pod(1, 1, "new")],
                present: vec![(0, "new"), (1, "new")],
                creates: vec![],
                deletes: vec![],
            },
            Case {
                name: "rolling update at partition 1: group 1 gets the new revision's, group 0 \
                       keeps the old one, the old incarnation of group 1 keeps its own",
                replicas: 2,
                partition: 1,
                pods: vec![pod(0, 0, "old"), pod(0, 1, "old"), pod(1, 1, "old")],
                present: vec![(0, "old"), (1, "old")],
                creates: vec!["g-1-new"],
                deletes: vec![],
            },
            Case {
                name: "rolling update: an old revision no pod runs any more goes",
                replicas: 2,
                partition: 1,
                pods: vec![pod(0, 0, "old"), pod(1, 0, "new")],
                present: vec![(0, "old"), (1, "old"), (1, "new")],
                creates: vec![],
                deletes: vec!["g-1-old"],
            },
            Case {
                name: "below the partition a group being rebuilt keeps its PodGroup",
                replicas: 2,
                partition: 1,
                pods: vec![pod(1, 0, "new")],
                present: vec![(0, "old"), (1, "new")],
                creates: vec![],
                deletes: vec![],
            },
            Case {
                name: "update done: the old revision's PodGroups go",
                replicas: 2,
                partition: 0,
                pods: vec![pod(0, 0, "new"), pod(1, 0, "new")],
                present: vec![(0, "old"), (0, "new"), (1, "new")],
                creates: vec![],
                deletes: vec!["g-0-old"],
            },
        ];
        for case in cases {
            let lws = lws(case.replicas, 2, &[]);
            let observed = Observed {
                pods: case.pods.clone(),
                pod_groups: Some(
                    case.present
                        .iter()
                        .map(|(i, r)| existing(&lws, *i, r))
                        .collect(),
                ),
                ..Default::default()
            };
            let step = Step {
                replicas: case.replicas,
                partition: case.partition,
            };
            let mut out = Plan::default();
            plan(&lws, &observed, &step, "new", &mut out);
            let created: Vec<_> = out.pod_groups.iter().map(|w| w.object.name_any()).collect();
            let deleted: Vec<_> = out
                .delete_pod_groups
                .iter()
                .map(|d| d.name.clone())
                .collect();
            assert_eq!(created, case.creates, "{}: creates", case.name);
            assert_eq!(deleted, case.deletes, "{}: deletes", case.name);
            for w in &out.pod_groups {
                let gang = w.object.spec.scheduling_policy.gang.as_ref().unwrap();
                assert_eq!(
                    gang.min_count, 2,
                    "{}: a gang of the group's size",
                    case.name
                );
                assert_eq!(w.how, How::CreateIfAbsent);
            }
        }
    }

    #[test]
    fn a_podgroup_with_an_outdated_policy_is_replaced_once_gone() {
        let plain = lws(1, 2, &[]);
        let zoned = lws(
            1,
            2,
            &[(labels::EXCLUSIVE_TOPOLOGY, "topology.kubernetes.io/zone")],
        );
        let step = Step {
            replicas: 1,
            partition: 0,
        };
        let mut observed = Observed {
            pods: vec![pod(0, 0, "new")],
            pod_groups: Some(vec![existing(&plain, 0, "new")]),
            ..Default::default()
        };
        let mut out = Plan::default();
        plan(&zoned, &observed, &step, "new", &mut out);
        assert_eq!(
            out.delete_pod_groups.len(),
            1,
            "the outdated one is deleted"
        );
        assert!(out.pod_groups.is_empty(), "never two for one incarnation");

        let mut deleting = (*existing(&plain, 0, "new")).clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        observed.pod_groups = Some(vec![Arc::new(deleting)]);
        let mut out = Plan::default();
        plan(&zoned, &observed, &step, "new", &mut out);
        assert!(
            out.delete_pod_groups.is_empty() && out.pod_groups.is_empty(),
            "waits for it"
        );

        observed.pod_groups = Some(vec![]);
        let mut out = Plan::default();
        plan(&zoned, &observed, &step, "new", &mut out);
        let constraint = out.pod_groups[0]
            .object
            .spec
            .scheduling_constraints
            .as_ref();
        assert_eq!(
            constraint.unwrap().topology.as_ref().unwrap()[0].key,
            "topology.kubernetes.io/zone"
        );
    }

    #[test]
    fn no_api_blocks_a_gang_lws_and_nothing_else() {
        let gang = lws(1, 2, &[]);
        let not_served = Observed::default();
        let failure = blocked(&gang, &not_served).unwrap();
        assert_eq!(failure.reason, NOT_SERVED);
        assert!(
            failure.message.contains("scheduling.k8s.io/v1alpha2"),
            "{}",
            failure.message
        );
        let mut plain = gang.clone();
        plain.metadata.annotations = None;
        assert_eq!(blocked(&plain, &not_served), None);
        let served = Observed {
            pod_groups: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(blocked(&gang, &served), None);
        let mut out = Plan::default();
        plan(
            &plain,
            &served,
            &Step {
                replicas: 1,
                partition: 0,
            },
            "k",
            &mut out,
        );
        assert!(out.pod_groups.is_empty(), "no gang asked for: no PodGroups");
    }

    #[test]
    fn the_schedulers_verdict_becomes_an_event() {
        let l = lws(1, 4, &[]);
        let mut pg = (*existing(&l, 0, "new")).clone();
        pg.status = Some(k8s_openapi::api::scheduling::v1alpha2::PodGroupStatus {
            conditions: Some(vec![Condition {
                type_: gang::SCHEDULED_CONDITION.into(),
                status: "False".into(),
                reason: "Unschedulable".into(),
                message: "0/3 nodes are available".into(),
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }]),
            ..Default::default()
        });
        let observed = Observed {
            pod_groups: Some(vec![Arc::new(pg)]),
            ..Default::default()
        };
        let mut out = Plan::default();
        plan(
            &l,
            &observed,
            &Step {
                replicas: 1,
                partition: 0,
            },
            "new",
            &mut out,
        );
        assert_eq!(out.events.len(), 1);
        assert_eq!(out.events[0].reason, UNSCHEDULABLE);
        assert!(
            out.events[0]
                .note
                .contains("Group 0 cannot be scheduled whole")
        );
        assert!(out.events[0].note.contains("0/3 nodes are available"));
    }
}
