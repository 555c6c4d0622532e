//! Table tests of the LWS plan: an observed world built as plain data, the plan checked as
//! plain data. No cluster, no client.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::{
        apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus},
        core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, Service},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::*;
use crate::{
    k8s::{error::Category, pod::CachedPod},
    lws::{
        deref::{Dereferenced, LiveLeader},
        labels, objects,
        observe::Observed,
        upstream::revision,
    },
};

fn now() -> Time {
    Time(Timestamp::from_second(1_795_327_200).unwrap())
}

fn lws_with(name: &str, replicas: i32, size: i32, image: &str, extra: Value) -> LeaderWorkerSet {
    let mut spec = json!({
        "replicas": replicas,
        "leaderWorkerTemplate": {
            "size": size,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}
        },
        "rolloutStrategy": {"type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
        "startupPolicy": "LeaderCreated",
        "networkConfig": {"subdomainPolicy": "Shared"}
    });
    merge_json(&mut spec, extra);
    serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "ns", "uid": "lws-uid", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

fn key_of(lws: &LeaderWorkerSet) -> String {
    revision::revision_key(&data_of(lws))
}

fn data_of(lws: &LeaderWorkerSet) -> String {
    revision::revision_data(&serde_json::to_value(&lws.spec).unwrap()).unwrap()
}

/// A cluster as our controller would have left it: revision, leader StatefulSet, Service,
/// `groups` whole groups on `lws`'s current template, all ready.
struct World {
    lws: LeaderWorkerSet,
    observed: Observed,
    deref: Dereferenced,
}

impl World {
    fn settled(lws: LeaderWorkerSet) -> Self {
        let key = key_of(&lws);
        Self::settled_under(lws, &key)
    }

    /// [`World::settled`], with the revision recorded under `key` (another controller's).
    fn settled_under(lws: LeaderWorkerSet, key: &str) -> Self {
        let key = key.to_string();
        let mut world = World {
            observed: Observed::default(),
            deref: Dereferenced::default(),
            lws,
        };
        world.add_revision(&key, 1);
        let replicas = objects::replicas(&world.lws);
        let mut sts = objects::leader_statefulset(&world.lws, &key, 0, replicas, 1);
        sts.metadata.uid = Some("leader-sts-uid".into());
        sts.status = Some(StatefulSetStatus {
            replicas,
            ready_replicas: Some(replicas),
            ..Default::default()
        });
        world.observed.leader_sts = Some(Arc::new(sts));
        let svc = objects::shared_headless_service(&world.lws);
        world.observed.services.push(Arc::new(svc));
        for i in 0..replicas {
            world.add_group(i, &key, "a");
        }
        world
    }

    fn add_revision(&mut self, key: &str, number: i64) {
        let mut rev =
            objects::controller_revision(&self.lws, key, number, &data_of(&self.lws)).unwrap();
        rev.metadata.uid = Some(format!("rev-{key}"));
        self.observed.revisions.push(Arc::new(rev));
    }

    /// Group `i` on revision `key`, incarnation `gen` (part of every uid).
    fn add_group(&mut self, i: i32, key: &str, generation: &str) {
        let name = self.lws.name_any();
        let leader = pod(
            &format!("{name}-{i}"),
            &format!("leader-{i}-{generation}"),
            &[
                (labels::NAME, &name),
                (labels::WORKER_INDEX, "0"),
                (labels::GROUP_INDEX, &i.to_string()),
                (labels::REVISION, key),
            ],
            Some(("leader-sts-uid", "StatefulSet")),
        );
        let size = objects::size(&self.lws);
        if size > 1 {
            let rev = self
                .observed
                .revisions
                .iter()
                .find(|r| r.labels().get(labels::REVISION).map(String::as_str) == Some(key))
                .unwrap()
                .clone();
            let template = objects::revision_worker_template(&rev).unwrap();
            let mut sts = objects::worker_statefulset(&self.lws, &leader, i, key, template, None);
            sts.metadata.uid = Some(format!("wsts-{i}-{generation}"));
            sts.status = Some(StatefulSetStatus {
                replicas: size - 1,
                ready_replicas: Some(size - 1),
                available_replicas: Some(size - 1),
                ..Default::default()
            });
            let mut uids = Vec::new();
            for j in 1..size {
                let uid = format!("worker-{i}-{j}-{generation}");
                uids.push(uid.clone());
                self.observed.pods.push(Arc::new(pod(
                    &format!("{name}-{i}-{j}"),
                    &uid,
                    &[
                        (labels::NAME, &name),
                        (labels::WORKER_INDEX, &j.to_string()),
                        (labels::GROUP_INDEX, &i.to_string()),
                        (labels::REVISION, key),
                    ],
                    Some((sts.metadata.uid.as_deref().unwrap(), "StatefulSet")),
                )));
            }
            sts.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(labels::WORKER_ROSTER.into(), uids.join(","));
            self.observed
                .worker_sts
                .insert(sts.name_any(), Arc::new(sts));
        }
        let leader = Arc::new(leader);
        self.observed.pods.push(leader.clone());
        self.observed.leaders.push(leader);
    }

    /// The observation, with its leaders picked from its pods as `observe` picks them.
    fn observed(&self) -> Observed {
        let mut observed = self.observed.clone();
        observed.leaders = observed
            .pods
            .iter()
            .filter(|p| crate::lws::observe::is_leader(p))
            .cloned()
            .collect();
        observed
    }

    fn plan(&self) -> Plan {
        plan(&self.lws, &self.observed(), &self.deref, &now())
    }

    /// [`worker_statefulsets`] on the same inputs as [`World::plan`].
    fn worker_plan(&self) -> Plan {
        worker_statefulsets(&self.lws, &self.observed(), &self.deref)
    }

    fn pod_mut(&mut self, name: &str) -> &mut CachedPod {
        let i = self
            .observed
            .pods
            .iter()
            .position(|p| p.name_any() == name)
            .unwrap();
        Arc::make_mut(&mut self.observed.pods[i])
    }

    fn remove_pod(&mut self, name: &str) {
        self.observed.pods.retain(|p| p.name_any() != name);
        self.observed.leaders.retain(|p| p.name_any() != name);
    }
}

/// A running, ready pod, as the pod cache keeps it.
fn pod(name: &str, uid: &str, labels: &[(&str, &str)], owner: Option<(&str, &str)>) -> CachedPod {
    CachedPod::from(&Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            owner_references: owner.map(|(uid, kind)| {
                vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: kind.into(),
                        name: "owner".into(),
                        uid: uid.into(),
                        controller: Some(true),
                        ..Default::default()
                    },
                ]
            }),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                restart_count: 0,
                ..Default::default()
            }]),
            ..Default::default()
        }),
    })
}

fn names<K: Resource>(writes: &[Write<K>]) -> Vec<String> {
    writes.iter().map(|w| w.object.name_any()).collect()
}

fn restarted(plan: &Plan) -> Vec<&str> {
    plan.restarts.iter().map(|r| r.leader.as_str()).collect()
}

#[test]
fn a_settled_lws_writes_nothing() {
    let world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
    let plan = world.plan();
    assert_eq!(plan.blocked, None);
    assert!(
        plan.revisions.is_empty() && plan.leader_sts.is_none(),
        "{plan:#?}"
    );
    assert!(plan.services.is_empty() && plan.worker_sts.is_empty());
    assert!(plan.restarts.is_empty() && plan.rosters.is_empty());
    assert!(plan.events.is_empty());
    let status = plan.status.unwrap();
    assert_eq!(status.status.ready_replicas, Some(2));
    assert!(status.update_done);
}

#[test]
fn a_new_lws_records_its_revision_and_creates_its_leader_statefulset() {
    let lws = lws_with("vllm", 2, 3, "img:1", json!({}));
    let world = World {
        observed: Observed::default(),
        deref: Dereferenced::default(),
        lws,
    };
    let plan = world.plan();
    assert_eq!(
        names(&plan.revisions),
        [format!("vllm-{}-1", key_of(&world.lws))]
    );
    assert_eq!(
        plan.revisions[0].on_success[0].note,
        format!(
            "Creating revision with key {} for a newly created LeaderWorkerSet",
            key_of(&world.lws)
        )
    );
    let sts = plan.leader_sts.as_ref().expect("leader StatefulSet");
    assert_eq!(sts.object.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(sts.on_success[0].note, "Created leader statefulset vllm");
    assert_eq!(names(&plan.services), ["vllm"]);
    // Nothing was read: both names are written so that a taken one is reported (409).
    assert_eq!(sts.how, How::ApplyUnseen);
    assert_eq!(plan.services[0].how, How::CreateUnseen);
}

#[test]
fn names_read_fresh_and_found_free_are_written_as_usual() {
    let world = World {
        observed: Observed::default(),
        deref: Dereferenced {
            verified: true,
            ..Default::default()
        },
        lws: lws_with("vllm", 2, 3, "img:1", json!({})),
    };
    let plan = world.plan();
    assert_eq!(plan.leader_sts.as_ref().map(|w| w.how), Some(How::Apply));
    assert_eq!(plan.services[0].how, How::CreateIfAbsent);
}

#[test]
fn a_foreign_statefulset_with_the_lws_name_blocks_and_is_rechecked() {
    let lws = lws_with("vllm", 2, 3, "img:1", json!({}));
    let mut foreign = objects::leader_statefulset(&lws, "x", 0, 1, 1);
    foreign.metadata.owner_references = None;
    let world = World {
        observed: Observed::default(),
        deref: Dereferenced {
            leader_sts: Some(Box::new(foreign)),
            ..Default::default()
        },
        lws,
    };
    let plan = world.plan();
    let blocked = plan.blocked.as_ref().expect("blocked");
    assert_eq!(blocked.reason, "ObjectConflict");
    assert_eq!(blocked.category, Category::Blocked);
    assert!(plan.leader_sts.is_none() && plan.revisions.is_empty());
    assert_eq!(plan.requeue, Some(RECHECK));
}

#[test]
fn our_statefulset_missing_from_a_lagging_cache_is_not_recreated() {
    let settled = World::settled(lws_with("vllm", 2, 1, "img:1", json!({})));
    let mut world = settled;
    world.deref.leader_sts = world
        .observed
        .leader_sts
        .take()
        .map(|s| Box::new((*s).clone()));
    let plan = world.plan();
    assert_eq!(plan.blocked, None);
    assert!(
        plan.leader_sts.is_none(),
        "nothing to change: {:?}",
        plan.leader_sts
    );
}

#[test]
fn a_name_too_long_blocks_until_the_spec_changes() {
    let world = World {
        observed: Observed::default(),
        deref: Dereferenced::default(),
        lws: lws_with(&"x".repeat(60), 2, 2, "img:1", json!({})),
    };
    let plan = world.plan();
    let blocked = plan.blocked.expect("blocked");
    assert_eq!(
        (blocked.reason, blocked.category),
        ("NameTooLong", Category::Spec)
    );
    assert_eq!(plan.requeue, None, "waits for a change");
}

#[test]
fn a_spec_that_cannot_be_hashed_blocks_with_a_condition_not_a_retry_loop() {
    // Refused by Go's parser, and one Go panics on: neither can be hashed as upstream does.
    for quantity in ["not a quantity", "1e1.5", "1234567890123456789e2147483639"] {
        let lws = lws_with(
            "vllm",
            1,
            1,
            "img:1",
            json!({"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"example.com/x": quantity}}}
            ]}}}}),
        );
        let world = World {
            observed: Observed::default(),
            deref: Dereferenced::default(),
            lws,
        };
        let plan = world.plan();
        let blocked = plan.blocked.expect("blocked");
        assert_eq!(
            (blocked.reason, blocked.category),
            ("InvalidSpec", Category::Spec),
            "{quantity}"
        );
        assert!(
            blocked.message.contains("template revision"),
            "{}",
            blocked.message
        );
        assert_eq!(plan.requeue, None, "waits for a change");
        assert!(plan.revisions.is_empty() && plan.leader_sts.is_none());
    }
}

#[test]
fn quantities_go_writes_differently_are_hashed_as_upstream_hashes_them() {
    // 8Ei, 9Ei and 16Ei are all capped at 2^63-1 by Go: one revision key for the three.
    let key = |q: &str| {
        key_of(&lws_with(
            "vllm",
            1,
            1,
            "img:1",
            json!({"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"memory": q}}}
            ]}}}}),
        ))
    };
    assert_eq!(key("8Ei"), key("9Ei"));
    assert_eq!(key("9Ei"), key("16Ei"));
    assert_ne!(key("01Pi"), key("01"));
    assert_eq!(key("01Pi"), key("+1Pi"), "Go prints both as 1Pi");
}

#[test]
fn a_template_change_records_a_revision_and_starts_the_rolling_update() {
    let mut world = World::settled(lws_with("vllm", 4, 2, "img:1", json!({})));
    let old_key = key_of(&world.lws);
    world.lws = lws_with("vllm", 4, 2, "img:2", json!({}));
    let new_key = key_of(&world.lws);
    let plan = world.plan();
    assert_eq!(names(&plan.revisions), [format!("vllm-{new_key}-2")]);
    let sts = &plan.leader_sts.as_ref().unwrap().object;
    assert_eq!(sts.labels()[labels::REVISION], new_key);
    let rolling = sts
        .spec
        .as_ref()
        .unwrap()
        .update_strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(
        rolling.partition,
        Some(4),
        "the StatefulSet gets the new template before any group is released"
    );
    assert!(plan.truncate_revisions.is_empty(), "{old_key} still runs");
}

/// v0.9's event texts for the rolling update: the groups a partition move releases
/// (inclusive), and the surge groups a step deletes.
#[test]
fn rolling_update_events_use_upstream_v09_texts() {
    // (maxUnavailable, maxSurge, StatefulSet replicas and partition before, expected notes)
    let cases: [(i32, i32, i32, i32, &[&str]); 3] = [
        (1, 0, 4, 4, &["Updating replica 3"]),
        (2, 0, 4, 4, &["Updating replicas 2 to 3 (inclusive)"]),
        (
            1,
            2,
            6,
            0,
            &["deleting surge replicas from vllm-4 to vllm-5"],
        ),
    ];
    for (unavailable, surge, sts_replicas, partition, notes) in cases {
        let extra = json!({"rolloutStrategy": {"rollingUpdateConfiguration":
            {"maxUnavailable": unavailable, "maxSurge": surge}}});
        let mut world = World::settled(lws_with("vllm", 4, 2, "img:1", extra.clone()));
        let old_key = key_of(&world.lws);
        world.lws = lws_with("vllm", 4, 2, "img:2", extra);
        let new_key = key_of(&world.lws);
        world.add_revision(&new_key, 2);
        // The update has started: the StatefulSet runs the new template at `partition`.
        let mut sts = objects::leader_statefulset(&world.lws, &new_key, partition, sts_replicas, 1);
        sts.metadata.uid = Some("leader-sts-uid".into());
        world.observed.leader_sts = Some(Arc::new(sts));
        if partition == 0 {
            // Every real group is on the new revision and ready; the surge groups too.
            world.observed.pods.clear();
            world.observed.worker_sts.clear();
            for i in 0..sts_replicas {
                world.add_group(i, &new_key, "b");
            }
        }
        let plan = world.plan();
        let write = plan.leader_sts.expect("the StatefulSet moves");
        let got: Vec<&str> = write.on_success.iter().map(|e| e.note.as_str()).collect();
        assert_eq!(
            got, notes,
            "maxUnavailable {unavailable}, maxSurge {surge} ({old_key})"
        );
    }
}

#[test]
fn a_held_lws_keeps_its_groups_on_the_stable_revision() {
    let mut world = World::settled(lws_with("vllm", 4, 2, "img:1", json!({})));
    let stable = key_of(&world.lws);
    world.lws = lws_with("vllm", 4, 2, "img:2", json!({}));
    world
        .lws
        .annotations_mut()
        .insert(labels::HELD_REVISION.into(), stable.clone());
    let settled_spec = world.observed.leader_sts.as_ref().unwrap().spec.clone();
    let plan = world.plan();
    assert!(
        plan.revisions.is_empty(),
        "no revision for the held-back template"
    );
    // The hold annotation reaches the leader StatefulSet's metadata as every LWS annotation
    // does (v0.10); its spec is as it was: no surge, no partition change.
    let sts = &plan.leader_sts.as_ref().expect("the metadata write").object;
    assert_eq!(sts.annotations()[labels::HELD_REVISION], stable);
    let (spec, settled) = (sts.spec.as_ref().unwrap(), settled_spec.unwrap());
    assert_eq!(spec.replicas, settled.replicas);
    assert_eq!(spec.update_strategy, settled.update_strategy);
    assert_eq!(
        spec.template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap()[labels::REVISION],
        stable
    );
    assert!(plan.restarts.is_empty() && plan.worker_sts.is_empty());
}

/// Partition style: the release partition lets the held LWS roll in place, but only the groups
/// at or above it, and never below the user's own partition; raised to `replicas` (a template
/// change mid-release), no group moves.
#[test]
fn a_release_partition_moves_only_the_groups_at_or_above_it() {
    let partition_of = |plan: &Plan| {
        let sts = plan.leader_sts.as_ref().expect("the StatefulSet moves");
        (
            sts.object.labels().get(labels::REVISION).cloned(),
            sts.object
                .spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.rolling_update.as_ref())
                .and_then(|r| r.partition),
        )
    };
    for (user, release, want) in [(0, "3", 3), (0, "2", 3), (3, "1", 3), (0, "4", 4)] {
        let extra = json!({"rolloutStrategy": {"rollingUpdateConfiguration": {"partition": user}}});
        let mut world = World::settled(lws_with("vllm", 4, 2, "img:1", extra.clone()));
        let stable = key_of(&world.lws);
        world.lws = lws_with("vllm", 4, 2, "img:2", extra);
        let new_key = key_of(&world.lws);
        let annotations = world.lws.annotations_mut();
        annotations.insert(labels::HELD_REVISION.into(), stable.clone());
        annotations.insert(labels::RELEASE_PARTITION.into(), release.into());
        let plan = world.plan();
        assert_eq!(plan.revisions.len(), 1, "the new template is recorded");
        // The first step of the roll: the StatefulSet on the new revision, its partition no
        // lower than the release's (the rolling update then walks it down to there).
        let (key, partition) = partition_of(&plan);
        assert_eq!(
            key.as_deref(),
            Some(new_key.as_str()),
            "user {user}, release {release}"
        );
        assert!(
            partition.unwrap_or(0) >= want.min(4),
            "user {user}, release {release}: partition {partition:?}"
        );
    }

    // Walked down as far as it goes: groups 2 and 3 are updated and ready, the release
    // partition 2 stops it there.
    let mut world = World::settled(lws_with("vllm", 4, 2, "img:1", json!({})));
    let stable = key_of(&world.lws);
    world.lws = lws_with("vllm", 4, 2, "img:2", json!({}));
    let new_key = key_of(&world.lws);
    world.add_revision(&new_key, 2);
    let annotations = world.lws.annotations_mut();
    annotations.insert(labels::HELD_REVISION.into(), stable.clone());
    annotations.insert(labels::RELEASE_PARTITION.into(), "2".into());
    let mut sts = objects::leader_statefulset(&world.lws, &new_key, 2, 4, 1);
    sts.metadata.uid = Some("leader-sts-uid".into());
    world.observed.leader_sts = Some(Arc::new(sts));
    world
        .observed
        .pods
        .retain(|p| !p.name_any().starts_with("vllm-2") && !p.name_any().starts_with("vllm-3"));
    world
        .observed
        .worker_sts
        .retain(|k, _| k != "vllm-2" && k != "vllm-3");
    world.add_group(2, &new_key, "b");
    world.add_group(3, &new_key, "b");
    let plan = world.plan();
    assert!(
        plan.leader_sts.is_none(),
        "partition 2 is where the release wants it: {:?}",
        plan.leader_sts.map(|w| w.object.spec)
    );
    assert_eq!(
        plan.status.as_ref().and_then(|s| s.status.updated_replicas),
        Some(2)
    );
}

#[test]
fn taking_over_upstream_objects_records_the_missing_revision_and_rolls_nothing() {
    let mut world = World::settled(lws_with("vllm", 2, 2, "img:1", json!({})));
    world.observed.revisions.clear(); // upstream's revision is not ours (no LWS controller ref)
    let key = key_of(&world.lws);
    let plan = world.plan();
    assert_eq!(
        plan.revisions[0].on_success[0].note,
        format!("Creating missing revision with key {key} for existing LeaderWorkerSet")
    );
    assert!(
        plan.leader_sts.is_none(),
        "same template, same partition: nothing rolls"
    );
    assert!(plan.restarts.is_empty());
}

/// v0.9's revision matching: a ControllerRevision another version or client wrote for the same
/// template, serialised differently, is the running revision — no new revision, no roll; a real
/// template difference still rolls.
#[test]
fn a_revision_written_differently_for_the_same_template_rolls_nothing() {
    let mut world = World::settled(lws_with("vllm", 2, 2, "img:1", json!({})));
    let rev = Arc::make_mut(&mut world.observed.revisions[0]);
    let mut older: Value = serde_json::from_str(&data_of(&world.lws)).unwrap();
    // An older client: `"creationTimestamp": null` in the pod template, no `$patch` markers,
    // an empty `resources` left out.
    older["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] =
        json!({"creationTimestamp": null});
    older["spec"]["leaderWorkerTemplate"]
        .as_object_mut()
        .unwrap()
        .remove("$patch");
    older["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("resources");
    assert_ne!(
        crate::lws::upstream::gojson::marshal(&older),
        data_of(&world.lws)
    );
    rev.data = Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
        older.clone(),
    ));
    let plan = world.plan();
    assert!(plan.revisions.is_empty(), "{:#?}", plan.revisions);
    assert!(plan.leader_sts.is_none(), "nothing rolls");

    // The same stored revision against a new image: a template change.
    world.lws = lws_with("vllm", 2, 2, "img:2", json!({}));
    let plan = world.plan();
    assert_eq!(plan.revisions.len(), 1);
    let sts = plan.leader_sts.expect("the rolling update starts");
    assert_eq!(
        sts.object.labels().get(labels::REVISION),
        Some(&key_of(&world.lws))
    );
}

/// Groups on a revision another controller recorded under its own key for the spec's template
/// are on the template: they count as updated, held by a Rollout or not.
#[test]
fn groups_on_an_adopted_revision_of_the_template_count_as_updated() {
    let mut world = World::settled_under(lws_with("vllm", 2, 2, "img:1", json!({})), "olderkey");
    let updated = |plan: &Plan| plan.status.as_ref().and_then(|s| s.status.updated_replicas);
    let plan = world.plan();
    assert!(plan.revisions.is_empty() && plan.leader_sts.is_none());
    assert_eq!(updated(&plan), Some(2));

    world
        .lws
        .annotations_mut()
        .insert(labels::HELD_REVISION.into(), "olderkey".into());
    assert_eq!(
        updated(&world.plan()),
        Some(2),
        "held on the template itself"
    );

    // The template moves on while held: nothing of it has rolled.
    let held = world.lws.annotations().clone();
    world.lws = lws_with("vllm", 2, 2, "img:2", json!({}));
    *world.lws.annotations_mut() = held;
    assert_eq!(updated(&world.plan()), Some(0));
}

#[test]
fn worker_statefulsets_are_built_only_for_the_live_leader() {
    let mut world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
    world.observed.worker_sts.remove("vllm-1");
    world
        .observed
        .pods
        .retain(|p| !p.name_any().starts_with("vllm-1-"));
    assert_eq!(names(&world.plan().worker_sts), ["vllm-1"]);
    let sts = &world.plan().worker_sts[0];
    assert_eq!(
        sts.on_success[0].note,
        "Created worker statefulset for leader pod vllm-1"
    );

    // The fresh read beside the create decides whether it stays. The live leader: it stays.
    let plan = world.plan();
    let created = BTreeMap::from([("vllm-1".to_string(), "sts-uid".to_string())]);
    let live = |uid: &str, deleting: bool| {
        BTreeMap::from([(
            "vllm-1".to_string(),
            LiveLeader {
                uid: uid.into(),
                deleting,
            },
        )])
    };
    assert!(groups::stale_workers(&plan, &created, &live("leader-1-a", false)).is_empty());
    // The cache still showed the leader that was just replaced (its successor has another
    // uid), or one being deleted, or one already gone: taken back, by the uid it was created
    // with.
    let taken_back = vec![Delete {
        name: "vllm-1".into(),
        uid: Some("sts-uid".into()),
    }];
    for (case, live) in [
        ("replaced", live("leader-1-b", false)),
        ("deleting", live("leader-1-a", true)),
        ("gone", BTreeMap::new()),
    ] {
        assert_eq!(
            groups::stale_workers(&plan, &created, &live),
            taken_back,
            "{case}"
        );
    }
    // A StatefulSet that already existed (the create found it) is never taken back.
    assert!(groups::stale_workers(&plan, &BTreeMap::new(), &BTreeMap::new()).is_empty());
    assert_eq!(groups::leaders_to_verify(&plan), ["vllm-1"]);
}

#[test]
fn a_worker_statefulset_on_its_way_to_the_cache_is_not_created_twice() {
    let mut world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
    world.observed.worker_sts.remove("vllm-1");
    world.observed.pending_workers.insert("vllm-1".into());
    let plan = world.plan();
    assert!(plan.worker_sts.is_empty(), "created a moment ago");
    assert_eq!(
        plan.requeue,
        Some(crate::k8s::expected::PATIENCE),
        "looks again"
    );
    world.observed.pending_workers.clear();
    assert_eq!(names(&world.plan().worker_sts), ["vllm-1"]);
}

#[test]
fn the_leader_lane_takes_only_its_leaders_worker_statefulset() {
    let mut world = World::settled(lws_with("vllm", 3, 3, "img:1", json!({})));
    for group in ["vllm-1", "vllm-2"] {
        world.observed.worker_sts.remove(group);
    }
    // The leader STS wants a change too (one replica more): not the lane's to write.
    world.lws.spec.replicas = Some(4);
    let plan = world.plan();
    assert_eq!(world.worker_plan().worker_sts, plan.worker_sts);
    assert!(plan.leader_sts.is_some() && plan.status.is_some());
    let lane = groups::for_leader(plan.clone(), "vllm-2").expect("its workers");
    assert_eq!(names(&lane.worker_sts), ["vllm-2"]);
    assert_eq!(
        lane,
        Plan {
            worker_sts: lane.worker_sts.clone(),
            ..Default::default()
        },
        "nothing but that one create"
    );
    assert_eq!(
        lane.worker_sts[0], plan.worker_sts[1],
        "as the plan built it"
    );
    // Its workers exist: nothing for the lane.
    assert_eq!(groups::for_leader(plan, "vllm-0"), None);
    // Not cached yet (created a moment ago by the lane or a reconcile): nothing either.
    world.observed.pending_workers.insert("vllm-2".into());
    assert_eq!(groups::for_leader(world.plan(), "vllm-2"), None);
    // A blocked LWS: nothing, whatever the plan held before the block.
    world.observed.pending_workers.clear();
    let mut bad_surge = world.lws.clone();
    bad_surge.spec.rollout_strategy = Some(
        serde_json::from_value(
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": "x%"}}),
        )
        .unwrap(),
    );
    world.lws.metadata.name = Some("x".repeat(64));
    assert_eq!(groups::for_leader(world.plan(), "vllm-2"), None);
    assert_eq!(groups::for_leader(world.worker_plan(), "vllm-2"), None);
    world.lws = bad_surge;
    assert!(world.plan().blocked.is_some() && world.worker_plan().blocked.is_some());
}

/// The leader lane's plan creates exactly the worker StatefulSets the full plan would, whatever
/// the world: groups missing, a held template, a rolling update, a revision not cached.
#[test]
fn worker_statefulsets_alone_are_the_full_plans() {
    let mut missing = World::settled(lws_with("vllm", 4, 2, "img:1", json!({})));
    missing.observed.worker_sts.clear();
    let mut held = World::settled(lws_with("vllm", 4, 2, "img:1", json!({})));
    let stable = key_of(&held.lws);
    held.lws = lws_with("vllm", 4, 2, "img:2", json!({}));
    held.lws
        .annotations_mut()
        .insert(labels::HELD_REVISION.into(), stable);
    held.observed.worker_sts.clear();
    let mut rolling = World::settled(lws_with("vllm", 4, 2, "img:1", json!({})));
    rolling.lws = lws_with("vllm", 4, 2, "img:2", json!({}));
    rolling.observed.worker_sts.clear();
    let mut uncached = World::settled(lws_with("vllm", 2, 2, "img:1", json!({})));
    uncached.observed.worker_sts.clear();
    uncached.observed.revisions.clear();
    for (case, world) in [
        ("groups missing", missing),
        ("held", held),
        ("rolling", rolling),
        ("revision not cached", uncached),
    ] {
        let (full, alone) = (world.plan(), world.worker_plan());
        assert_eq!(alone.worker_sts, full.worker_sts, "{case}");
        assert_eq!(alone.blocked, full.blocked, "{case}");
    }
}

#[test]
fn a_worker_whose_revision_is_not_cached_yet_is_retried_soon() {
    let mut world = World::settled(lws_with("vllm", 1, 2, "img:1", json!({})));
    world.observed.worker_sts.clear();
    world.observed.revisions.clear();
    world.add_revision("other", 2);
    let plan = world.plan();
    assert!(plan.worker_sts.is_empty());
    assert_eq!(plan.requeue, Some(std::time::Duration::from_secs(1)));
}

#[test]
fn a_missing_topology_label_is_a_visible_failure() {
    let mut world = World::settled(lws_with("vllm", 1, 2, "img:1", json!({})));
    world.lws.annotations_mut().insert(
        labels::EXCLUSIVE_TOPOLOGY.into(),
        "topology.kubernetes.io/zone".into(),
    );
    world.observed.worker_sts.clear();
    world
        .deref
        .node_labels
        .insert("node-a".into(), BTreeMap::new());
    let plan = world.plan();
    assert!(plan.worker_sts.is_empty());
    let failure = plan.failure.expect("failure");
    assert_eq!(failure.reason, "TopologyLabelMissing");
    world.deref.node_labels.insert(
        "node-a".into(),
        [("topology.kubernetes.io/zone".to_string(), "z1".to_string())].into(),
    );
    let plan = world.plan();
    let selector = plan.worker_sts[0]
        .object
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .node_selector
        .clone();
    assert_eq!(selector.unwrap()["topology.kubernetes.io/zone"], "z1");
}

#[test]
fn a_users_service_with_the_lws_name_is_reported_once_and_not_taken_over() {
    let mut world = World::settled(lws_with("vllm", 1, 1, "img:1", json!({})));
    world.observed.services.clear();
    world.deref.shared_service = Some(Box::new(Service {
        metadata: ObjectMeta {
            name: Some("vllm".into()),
            ..Default::default()
        },
        ..Default::default()
    }));
    let plan = world.plan();
    assert!(plan.services.is_empty(), "never taken over");
    let failure = plan.failure.clone().expect("failure");
    assert_eq!(failure.reason, "ObjectConflict");
    assert!(
        plan.events[0]
            .note
            .starts_with("Failed to create headless service")
    );
    // Once the condition says so, the event is not repeated.
    let mut status = world.lws.status.clone().unwrap_or_default();
    status.conditions = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "ReplicaFailure".into(),
            status: "True".into(),
            reason: failure.reason.into(),
            message: failure.message.clone(),
            last_transition_time: now(),
            observed_generation: None,
        },
    ]);
    world.lws.status = Some(status);
    assert!(world.plan().events.is_empty());
}

#[test]
fn group_restarts_table() {
    struct Case {
        name: &'static str,
        change: fn(&mut World),
        restarts: &'static [&'static str],
        note: Option<&'static str>,
    }
    let cases = [
        Case {
            name: "a worker container restarted",
            change: |w| w.pod_mut("vllm-1-2").restarts = 1,
            restarts: &["vllm-1"],
            note: Some("Worker pod vllm-1-2 failed, deleted leader pod vllm-1 to recreate group 1"),
        },
        Case {
            name: "a worker is terminating",
            change: |w| {
                w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now());
            },
            restarts: &["vllm-0"],
            note: None,
        },
        Case {
            name: "a worker vanished before any cache saw it terminating",
            change: |w| w.remove_pod("vllm-1-2"),
            restarts: &["vllm-1"],
            note: Some("Worker pod vllm-1-2 failed, deleted leader pod vllm-1 to recreate group 1"),
        },
        Case {
            name: "a worker was replaced by the StatefulSet controller (new uid)",
            change: |w| {
                w.pod_mut("vllm-0-2").metadata.uid = Some("worker-0-2-replacement".into());
            },
            restarts: &["vllm-0"],
            note: None,
        },
        Case {
            name: "the leader container restarted",
            change: |w| w.pod_mut("vllm-0").restarts = 2,
            restarts: &["vllm-0"],
            note: None,
        },
        Case {
            name: "the leader is already going: nothing to add",
            change: |w| {
                w.pod_mut("vllm-0").metadata.deletion_timestamp = Some(now());
                w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now());
            },
            restarts: &[],
            note: None,
        },
        Case {
            name: "our delete of the leader a moment ago has not reached the cache: once per incident",
            change: |w| {
                w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now());
                w.observed.restarting_leaders.insert("vllm-0".into());
            },
            restarts: &[],
            note: None,
        },
        Case {
            name: "a straggler of the previous incarnation does not count",
            change: |w| {
                let mut straggler = (*w
                    .observed
                    .pods
                    .iter()
                    .find(|p| p.name_any() == "vllm-1-1")
                    .unwrap())
                .as_ref()
                .clone();
                straggler.metadata.name = Some("vllm-1-3".into());
                straggler.metadata.uid = Some("old".into());
                straggler.metadata.deletion_timestamp = Some(now());
                straggler.metadata.owner_references.as_mut().unwrap()[0].uid = "wsts-1-old".into();
                w.observed.pods.push(Arc::new(straggler));
            },
            restarts: &[],
            note: None,
        },
        Case {
            name: "a worker StatefulSet of a replaced leader is not the group's",
            change: |w| {
                w.remove_pod("vllm-1-2");
                w.pod_mut("vllm-1").metadata.uid = Some("leader-1-new".into());
            },
            restarts: &[],
            note: None,
        },
        Case {
            name: "a worker on another revision than its leader is part of an update",
            change: |w| {
                let worker = w.pod_mut("vllm-1-1");
                worker.labels = worker.labels.with(labels::REVISION, "other");
                w.pod_mut("vllm-1-1").metadata.deletion_timestamp = Some(now());
            },
            restarts: &[],
            note: None,
        },
    ];
    for case in cases {
        let mut world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
        (case.change)(&mut world);
        let plan = world.plan();
        assert_eq!(restarted(&plan), case.restarts, "{}", case.name);
        if let Some(note) = case.note {
            assert_eq!(plan.restarts[0].event.note, note, "{}", case.name);
        }
        for r in &plan.restarts {
            assert!(
                r.uid.starts_with(&format!("leader-{}", &r.leader[5..])),
                "uid precondition: {}",
                case.name
            );
        }
    }
}

/// RecreateGroupAfterStart (v0.9) and v0.8's annotation: a group is rebuilt only once it has
/// started (all `size` pods exist, none Pending); a roster — recorded only once the group has
/// started — still rebuilds a started group that lost a worker to a Pending replacement.
#[test]
fn recreate_group_after_start_table() {
    use crate::k8s::pod::Phase;
    const AFTER_START: &str = "RecreateGroupAfterStart";
    const ON_RESTART: &str = "RecreateGroupOnPodRestart";
    struct Case {
        name: &'static str,
        policy: &'static str,
        annotation: bool,
        change: fn(&mut World),
        restarts: &'static [&'static str],
    }
    fn pending(w: &mut World, pod: &str) {
        w.pod_mut(pod).phase = Phase::Pending;
    }
    let cases = [
        Case {
            name: "started group, a worker container restarted",
            policy: AFTER_START,
            annotation: false,
            change: |w| w.pod_mut("vllm-1-2").restarts = 1,
            restarts: &["vllm-1"],
        },
        Case {
            name: "started group, a worker is terminating",
            policy: AFTER_START,
            annotation: false,
            change: |w| w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now()),
            restarts: &["vllm-0"],
        },
        Case {
            name: "a Pending worker: a terminating sibling does not rebuild the group",
            policy: AFTER_START,
            annotation: false,
            change: |w| {
                pending(w, "vllm-0-2");
                w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now());
            },
            restarts: &[],
        },
        Case {
            name: "a Pending worker: a restarted leader does not rebuild the group",
            policy: AFTER_START,
            annotation: false,
            change: |w| {
                pending(w, "vllm-1-1");
                w.pod_mut("vllm-1").restarts = 3;
            },
            restarts: &[],
        },
        Case {
            name: "a Pending leader: a restarted worker does not rebuild the group",
            policy: AFTER_START,
            annotation: false,
            change: |w| {
                pending(w, "vllm-1");
                w.pod_mut("vllm-1-2").restarts = 1;
            },
            restarts: &[],
        },
        Case {
            name: "a worker not created yet (no roster): a restart waits",
            policy: AFTER_START,
            annotation: false,
            change: |w| {
                let sts = Arc::make_mut(w.observed.worker_sts.get_mut("vllm-0").unwrap());
                sts.metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .remove(labels::WORKER_ROSTER);
                w.remove_pod("vllm-0-2");
                w.pod_mut("vllm-0-1").restarts = 1;
            },
            restarts: &[],
        },
        Case {
            name: "a started group lost a worker to a Pending replacement (roster)",
            policy: AFTER_START,
            annotation: false,
            change: |w| {
                w.pod_mut("vllm-0-2").metadata.uid = Some("worker-0-2-replacement".into());
                pending(w, "vllm-0-2");
            },
            restarts: &["vllm-0"],
        },
        Case {
            name: "the leader's other groups are unaffected by one Pending group",
            policy: AFTER_START,
            annotation: false,
            change: |w| {
                pending(w, "vllm-0-2");
                w.pod_mut("vllm-1-1").restarts = 1;
            },
            restarts: &["vllm-1"],
        },
        Case {
            name: "v0.8 annotation on RecreateGroupOnPodRestart: same as RecreateGroupAfterStart",
            policy: ON_RESTART,
            annotation: true,
            change: |w| {
                pending(w, "vllm-0-2");
                w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now());
            },
            restarts: &[],
        },
        Case {
            name: "RecreateGroupOnPodRestart alone rebuilds a group with a Pending pod",
            policy: ON_RESTART,
            annotation: false,
            change: |w| {
                pending(w, "vllm-0-2");
                w.pod_mut("vllm-0-1").metadata.deletion_timestamp = Some(now());
            },
            restarts: &["vllm-0"],
        },
    ];
    for case in cases {
        let mut lws = lws_with(
            "vllm",
            2,
            3,
            "img:1",
            json!({"leaderWorkerTemplate": {"restartPolicy": case.policy}}),
        );
        if case.annotation {
            lws.annotations_mut()
                .insert(labels::RECREATE_GROUP_AFTER_START.into(), "true".into());
        }
        let mut world = World::settled(lws);
        (case.change)(&mut world);
        assert_eq!(restarted(&world.plan()), case.restarts, "{}", case.name);
    }
}

#[test]
fn after_start_records_a_roster_only_once_the_group_started() {
    for (policy, pending_roster) in [
        ("RecreateGroupAfterStart", false),
        ("RecreateGroupOnPodRestart", true),
    ] {
        let mut world = World::settled(lws_with(
            "vllm",
            1,
            3,
            "img:1",
            json!({"leaderWorkerTemplate": {"restartPolicy": policy}}),
        ));
        let sts = Arc::make_mut(world.observed.worker_sts.get_mut("vllm-0").unwrap());
        sts.metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(labels::WORKER_ROSTER);
        world.pod_mut("vllm-0-1").phase = crate::k8s::pod::Phase::Pending;
        assert_eq!(!world.plan().rosters.is_empty(), pending_roster, "{policy}");
        world.pod_mut("vllm-0-1").phase = crate::k8s::pod::Phase::Running;
        assert_eq!(world.plan().rosters.len(), 1, "{policy}: started");
    }
}

/// Ours: a group still not ready a deadline after its newest pod was created is reported
/// (`ReplicaFailure` / `ProgressDeadlineExceeded`), and the plan looks again when the next
/// unready group reaches its deadline.
#[test]
fn a_group_that_cannot_come_up_is_reported_after_its_deadline() {
    let at = |secs_ago: i64| Time(Timestamp::from_second(now().0.as_second() - secs_ago).unwrap());
    // (name, annotation, ages of group 0's and group 1's pods, unready pods, failure, requeue ≤)
    type Case = (
        &'static str,
        Option<&'static str>,
        i64,
        i64,
        &'static [&'static str],
        Option<&'static str>,
        Option<u64>,
    );
    let cases: [Case; 6] = [
        (
            "all ready, old pods: nothing",
            None,
            5000,
            5000,
            &[],
            None,
            None,
        ),
        (
            "a worker not ready 1801 s after the group's newest pod",
            None,
            9000,
            1801,
            &["vllm-1-2"],
            Some("group 1 (leader vllm-1) is not ready 1800s after its newest pod was created"),
            None,
        ),
        (
            "not ready for 100 s: look again at the deadline",
            None,
            9000,
            100,
            &["vllm-1-2"],
            None,
            Some(1701),
        ),
        (
            "the annotation shortens the deadline",
            Some("30"),
            9000,
            31,
            &["vllm-1"],
            Some("group 1 (leader vllm-1) is not ready 30s after its newest pod was created"),
            None,
        ),
        (
            "two late groups: the first is named",
            Some("30"),
            40,
            31,
            &["vllm-0-1", "vllm-1"],
            Some(
                "group 0 (leader vllm-0) is not ready 30s after its newest pod was created, and 1 more group(s)",
            ),
            None,
        ),
        (
            "an unparsable annotation keeps the default",
            Some("soon"),
            9000,
            100,
            &["vllm-1"],
            None,
            Some(1701),
        ),
    ];
    for (name, annotation, age0, age1, unready, failure, requeue) in cases {
        let mut lws = lws_with("vllm", 2, 3, "img:1", json!({}));
        if let Some(a) = annotation {
            lws.annotations_mut()
                .insert(labels::PROGRESS_DEADLINE.into(), a.into());
        }
        let mut world = World::settled(lws);
        for pod in [
            "vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2",
        ] {
            let age = if pod.starts_with("vllm-0") {
                age0
            } else {
                age1
            };
            world.pod_mut(pod).metadata.creation_timestamp = Some(at(age));
        }
        for pod in unready {
            world.pod_mut(pod).ready_condition = false;
            if let Some(sts) = world.observed.worker_sts.get_mut(&pod[..6]) {
                let sts = Arc::make_mut(sts);
                sts.status.as_mut().unwrap().ready_replicas = Some(1);
            }
        }
        let plan = world.plan();
        assert_eq!(
            plan.failure
                .as_ref()
                .map(|f| (f.reason, f.message.as_str())),
            failure.map(|m| (progress::REASON, m)),
            "{name}"
        );
        if let Some(max) = requeue {
            let wait = plan.requeue.expect(name);
            assert!(
                wait.as_secs() <= max && wait.as_secs() + 5 >= max,
                "{name}: {wait:?}"
            );
        }
    }
}

#[test]
fn restart_policy_none_restarts_no_group() {
    let mut world = World::settled(lws_with(
        "vllm",
        2,
        3,
        "img:1",
        json!({"leaderWorkerTemplate": {"restartPolicy": "None"}}),
    ));
    world.remove_pod("vllm-1-2");
    assert!(world.plan().restarts.is_empty());
}

#[test]
fn a_roster_is_recorded_once_every_worker_exists() {
    let mut world = World::settled(lws_with("vllm", 1, 3, "img:1", json!({})));
    let sts = Arc::make_mut(world.observed.worker_sts.get_mut("vllm-0").unwrap());
    sts.metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(labels::WORKER_ROSTER);
    let plan = world.plan();
    assert_eq!(
        plan.rosters,
        [Roster {
            worker_sts: "vllm-0".into(),
            uid: "wsts-0-a".into(),
            value: "worker-0-1-a,worker-0-2-a".into(),
        }]
    );
    // Not before every worker exists.
    world.remove_pod("vllm-0-2");
    let plan = world.plan();
    assert!(plan.rosters.is_empty() && plan.restarts.is_empty());
}

#[test]
fn surge_groups_keep_their_services_while_they_exist() {
    let extra = json!({"networkConfig": {"subdomainPolicy": "UniquePerReplica"},
        "rolloutStrategy": {"rollingUpdateConfiguration": {"maxSurge": 4}}});
    let mut world = World::settled(lws_with("vllm", 4, 2, "img:1", extra.clone()));
    world.observed.services.clear();
    let key = key_of(&world.lws);
    let mut names_now: Vec<String> = world
        .plan()
        .services
        .iter()
        .map(|w| w.object.name_any())
        .collect();
    names_now.sort();
    assert_eq!(names_now, ["vllm-0", "vllm-1", "vllm-2", "vllm-3"]);
    for i in 0..4 {
        world
            .observed
            .services
            .push(Arc::new(objects::group_headless_service(&world.lws, i)));
    }
    // The template changes: the leader StatefulSet goes to 7 replicas; surge groups 4..6
    // get their Services before their pods exist.
    world.lws = lws_with("vllm", 4, 2, "img:2", extra.clone());
    let plan = world.plan();
    assert_eq!(
        plan.leader_sts
            .as_ref()
            .unwrap()
            .object
            .spec
            .as_ref()
            .unwrap()
            .replicas,
        Some(7)
    );
    assert_eq!(names(&plan.services), ["vllm-4", "vllm-5", "vllm-6"]);
    assert!(plan.delete_services.is_empty());
    for i in 4..7 {
        world
            .observed
            .services
            .push(Arc::new(objects::group_headless_service(&world.lws, i)));
        world.add_group(i, &key, "s");
    }
    // The update ends: the StatefulSet goes back to 4, but groups 4..6 still have pods.
    let sts = Arc::make_mut(world.observed.leader_sts.as_mut().unwrap());
    sts.spec.as_mut().unwrap().replicas = Some(4);
    world.lws = lws_with("vllm", 4, 2, "img:1", extra);
    let plan = world.plan();
    assert!(
        plan.delete_services.is_empty(),
        "pods of groups 4..6 still run"
    );
    // Once their pods are gone, so are their Services — and only theirs.
    for i in 4..7 {
        world.remove_pod(&format!("vllm-{i}"));
        world.remove_pod(&format!("vllm-{i}-1"));
    }
    let deleted: Vec<_> = world
        .plan()
        .delete_services
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(deleted, ["vllm-4", "vllm-5", "vllm-6"]);
}

#[test]
fn group_services_are_owned_by_the_lws_not_the_leader() {
    let lws = lws_with("vllm", 1, 1, "img:1", json!({}));
    let svc = objects::group_headless_service(&lws, 3);
    let owner = &svc.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("LeaderWorkerSet", "lws-uid")
    );
    assert_eq!(svc.metadata.name.as_deref(), Some("vllm-3"));
}

#[test]
fn an_update_that_is_done_truncates_old_revisions() {
    let mut world = World::settled(lws_with("vllm", 2, 1, "img:1", json!({})));
    world.add_revision("old-key", 0);
    let plan = world.plan();
    assert_eq!(
        plan.truncate_revisions
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["vllm-old-key-0"]
    );
}

#[test]
fn the_plan_is_a_function_of_its_inputs() {
    let world = World::settled(lws_with("vllm", 3, 2, "img:2", json!({})));
    assert_eq!(world.plan(), world.plan());
}

#[allow(dead_code)]
fn unused(_: ControllerRevision, _: StatefulSet) {}

#[test]
fn a_group_is_ready_when_its_pods_are_whatever_its_statefulset_status_says_yet() {
    // The StatefulSet controller writes a worker StatefulSet's readyReplicas seconds after
    // the pods under load: the pods decide.
    let mut world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
    for sts in world.observed.worker_sts.values_mut() {
        Arc::make_mut(sts).status = Some(StatefulSetStatus::default());
    }
    let status = world.plan().status.unwrap().status;
    assert_eq!(status.ready_replicas, Some(2));

    // A worker not ready (or on its way out) makes its group not ready, even while the
    // StatefulSet's status still counts it.
    let mut world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
    let i = world
        .observed
        .pods
        .iter()
        .position(|p| p.name_any() == "vllm-1-2")
        .unwrap();
    Arc::make_mut(&mut world.observed.pods[i]).ready_condition = false;
    let status = world.plan().status.unwrap().status;
    assert_eq!(status.ready_replicas, Some(1));
}

#[test]
fn a_shared_service_created_a_moment_ago_is_not_created_again() {
    let mut world = World::settled(lws_with("vllm", 2, 3, "img:1", json!({})));
    world.observed.services.clear();
    world.deref.verified = true;
    assert_eq!(names(&world.plan().services), ["vllm"]);
    world.observed.shared_service_pending = true;
    let plan = world.plan();
    assert!(plan.services.is_empty(), "{:?}", names(&plan.services));
    assert_eq!(plan.requeue, Some(crate::k8s::expected::PATIENCE));
}

/// Sets `resourceVersion` on the LWS, its leader StatefulSet and its revisions, as the API
/// server would (the remembered comparisons need them).
fn versioned(mut world: World) -> World {
    world.lws.metadata.resource_version = Some("10".into());
    let sts = world.observed.leader_sts.as_mut().unwrap();
    Arc::make_mut(sts).metadata.resource_version = Some("20".into());
    for rev in &mut world.observed.revisions {
        Arc::make_mut(rev).metadata.resource_version = Some("30".into());
    }
    world
}

#[test]
fn a_remembered_comparison_is_reused_only_while_every_version_it_was_made_of_holds() {
    let mut world = versioned(World::settled(lws_with("vllm", 2, 3, "img:1", json!({}))));
    let first = world.plan();
    assert!(first.leader_sts.is_none() && first.revisions.is_empty());
    let remembered = first.remember.clone();
    let in_sync = remembered.leader_in_sync.clone().expect("leader compared");
    assert_eq!(in_sync.sts, ("leader-sts-uid".into(), "20".into()));
    assert_eq!(in_sync.lws, ("lws-uid".into(), "10".into()));
    assert!(
        remembered
            .revision_match
            .as_ref()
            .expect("revision compared")
            .matches
    );

    // Handed back, the same answers come out.
    world.observed.remembered = remembered.clone();
    assert_eq!(world.plan().remember, remembered);

    // The answers are trusted for the versions they name: a StatefulSet changed under the
    // same resourceVersion (which the API server never does) is not compared again …
    let sts = world.observed.leader_sts.as_mut().unwrap();
    Arc::make_mut(sts).spec.as_mut().unwrap().service_name = Some("other".into());
    assert!(world.plan().leader_sts.is_none());
    // … and a new resourceVersion is: the StatefulSet is applied back.
    let sts = world.observed.leader_sts.as_mut().unwrap();
    Arc::make_mut(sts).metadata.resource_version = Some("21".into());
    let plan = world.plan();
    let write = plan
        .leader_sts
        .expect("the changed StatefulSet is applied back");
    assert_eq!(
        write.object.spec.unwrap().service_name.as_deref(),
        Some("vllm")
    );
    assert_eq!(plan.remember.leader_in_sync, None);

    // A new LWS version (here: another resourceVersion only) is compared again too.
    let mut world = versioned(World::settled(lws_with("vllm", 2, 3, "img:1", json!({}))));
    world.observed.remembered = remembered.clone();
    world.lws.metadata.resource_version = Some("11".into());
    let plan = world.plan();
    assert!(plan.leader_sts.is_none());
    assert_eq!(
        plan.remember.leader_in_sync.unwrap().lws,
        ("lws-uid".into(), "11".into())
    );
}

#[test]
fn a_remembered_revision_match_is_dropped_with_a_new_generation_or_revision_version() {
    let mut world = versioned(World::settled(lws_with("vllm", 2, 3, "img:1", json!({}))));
    let remembered = world.plan().remember;
    // The remembered "matches" is reused for the same revision version …
    let mut wrong = remembered.clone();
    wrong.revision_match.as_mut().unwrap().matches = false;
    world.observed.remembered = wrong.clone();
    let matched = |plan: Plan| plan.remember.revision_match.unwrap().matches;
    assert!(!matched(world.plan()), "the remembered answer is reused");
    // … and not once the revision has another resourceVersion, or the LWS a new generation.
    let rev = &mut world.observed.revisions[0];
    Arc::make_mut(rev).metadata.resource_version = Some("31".into());
    assert!(matched(world.plan()), "compared again");
    let mut world = versioned(World::settled(lws_with("vllm", 2, 3, "img:1", json!({}))));
    world.observed.remembered = wrong;
    world.lws.metadata.generation = Some(2);
    assert!(matched(world.plan()), "compared again");
}

/// v0.10 (#896): the LWS's labels and annotations go onto its leader StatefulSet. A cluster
/// built before (by v0.9 or an earlier lws-rollout) gets them by one metadata write of the
/// leader StatefulSet: same revision, partition and replicas, no group replaced, the worker
/// StatefulSets (created once) left alone.
#[test]
fn the_lws_metadata_reaches_a_running_leader_statefulset_without_a_roll() {
    let plain = lws_with("vllm", 2, 3, "img:1", json!({}));
    let mut labelled = plain.clone();
    labelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    labelled.metadata.annotations = Some([("note".to_string(), "x".to_string())].into());
    assert_eq!(
        key_of(&labelled),
        key_of(&plain),
        "metadata is not part of the revision"
    );

    let mut world = World::settled(plain);
    world.lws = labelled.clone();
    let plan = world.plan();
    assert_eq!(plan.blocked, None);
    assert!(plan.revisions.is_empty(), "no new revision: {plan:#?}");
    assert!(plan.restarts.is_empty() && plan.worker_sts.is_empty());
    let sts = &plan.leader_sts.as_ref().expect("a metadata write").object;
    assert_eq!(sts.labels()["team"], "a");
    assert_eq!(sts.labels()[labels::REVISION], key_of(&labelled));
    assert_eq!(sts.annotations()["note"], "x");
    assert_eq!(sts.annotations()[labels::REPLICAS], "2");
    let spec = sts.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition),
        Some(0)
    );
    assert!(
        plan.events.is_empty() && plan.leader_sts.as_ref().unwrap().on_success.is_empty(),
        "a metadata write is no rolling-update step"
    );

    // Once written, nothing more to do.
    let plan = World::settled(labelled).plan();
    assert!(plan.leader_sts.is_none() && plan.revisions.is_empty());
}
