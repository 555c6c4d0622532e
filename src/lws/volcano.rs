//! Upstream LWS's gang scheduling through Volcano (docs/lws.md, "Gang scheduling"), for
//! drop-in parity with `gangSchedulingManagement.schedulerProvider: volcano`: turned on for the
//! whole manager (`--gang-scheduling-provider=volcano`), every group incarnation of every LWS
//! gets a Volcano PodGroup, and every pod of the group names it in the
//! `scheduling.k8s.io/group-name` annotation (set by the pod webhook,
//! [`super::admission::pod_defaults`]). Volcano's scheduler (pods with `schedulerName: volcano`, which the
//! user sets in the templates, as upstream) then binds a group's pods together or not at all.
//!
//! As upstream writes it: named `<lws>-<group index>-<revision key>` (the leader's
//! annotation), owned (controller reference) by the group's leader pod — so it goes when the
//! leader pod goes: a new revision, a recreated group, a scale-down — labelled with the LWS
//! name, group index and revision, annotated with the LWS's `volcano.sh/*` annotations;
//! `minMember` the group size (1 with `startupPolicy: LeaderReady`, whose workers wait for a
//! Ready leader), `minResources` a leader's requests plus `size - 1` workers', `queue` from the
//! LWS's `scheduling.volcano.sh/queue-name` annotation. Made once the leader pod exists, before
//! the group's worker StatefulSet; never updated.
//!
//! An LWS that asks for native gang scheduling ([`super::gang`]) is left out: its groups get
//! Kubernetes PodGroups only (two gang schedulers for one group would each wait for the other's
//! pods).

use std::{collections::BTreeMap, str::FromStr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use super::{gang, labels, objects, pod_requests};
use crate::{
    api::{
        leaderworkerset::{LeaderWorkerSet, StartupPolicy},
        volcano::{
            ANNOTATION_PREFIX, GROUP_NAME_ANNOTATION, QUEUE_NAME_ANNOTATION, VolcanoPodGroup,
            VolcanoPodGroupSpec,
        },
    },
    k8s::pod::CachedPod,
};

/// The gang scheduler a manager hands groups to (upstream's `schedulerProvider`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangProvider {
    /// Volcano (`scheduling.volcano.sh/v1beta1` PodGroups).
    Volcano,
}

impl FromStr for GangProvider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "volcano" => Ok(Self::Volcano),
            other => Err(format!(
                "unsupported gang scheduling provider {other:?}; the supported providers are [volcano]"
            )),
        }
    }
}

/// Whether Volcano PodGroups are made for `lws` under `provider`: every LWS but one that asks
/// for native gang scheduling.
pub fn applies(provider: Option<GangProvider>, annotations: &BTreeMap<String, String>) -> bool {
    provider == Some(GangProvider::Volcano) && !gang::requested_by(annotations)
}

/// The PodGroup name a pod of LWS `lws`, group `index`, revision `revision` names (upstream
/// formats the labels as they are, empty or not).
pub fn pod_group_name(lws: &str, index: &str, revision: &str) -> String {
    format!("{lws}-{index}-{revision}")
}

/// The Volcano PodGroup of the group `leader` leads: `None` when the leader does not name one
/// (admitted before Volcano was turned on) — its pods join no gang, and no PodGroup is made.
pub fn pod_group(lws: &LeaderWorkerSet, leader: &CachedPod) -> Option<VolcanoPodGroup> {
    let name = leader
        .annotations()
        .get(GROUP_NAME_ANNOTATION)
        .filter(|n| !n.is_empty())?;
    let pod_labels = leader.labels();
    let label = |key: &str| pod_labels.get(key).unwrap_or_default().to_string();
    let size = objects::size(lws);
    let min_member = match lws.spec.startup_policy.unwrap_or_default() {
        StartupPolicy::LeaderReady => 1,
        StartupPolicy::LeaderCreated => size,
    };
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: leader.name_any(),
        uid: leader.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let annotations: BTreeMap<String, String> = lws
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(VolcanoPodGroup {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: lws.namespace(),
            labels: Some(BTreeMap::from([
                (labels::NAME.to_string(), lws.name_any()),
                (labels::GROUP_INDEX.to_string(), label(labels::GROUP_INDEX)),
                (labels::REVISION.to_string(), label(labels::REVISION)),
            ])),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: VolcanoPodGroupSpec {
            min_member,
            queue: lws.annotations().get(QUEUE_NAME_ANNOTATION).cloned(),
            min_resources: Some(min_resources(lws)),
            priority_class_name: None,
        },
    })
}

/// What a whole group requests: a leader (the worker template when there is no leader
/// template) plus `size - 1` workers.
pub fn min_resources(
    lws: &LeaderWorkerSet,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    let template = &lws.spec.leader_worker_template;
    let spec_of =
        |t: &k8s_openapi::api::core::v1::PodTemplateSpec| t.spec.clone().unwrap_or_default();
    let leader = template
        .leader_template
        .as_ref()
        .unwrap_or(&template.worker_template);
    let mut total = pod_requests::pod_requests(&spec_of(leader));
    let workers = i128::from(objects::size(lws).max(1) - 1);
    if workers > 0 {
        let worker = pod_requests::pod_requests(&spec_of(&template.worker_template));
        pod_requests::add_into(&mut total, &pod_requests::times(&worker, workers));
    }
    pod_requests::quantities(&total)
}

/// The uid of the pod that controls `pg`, if any.
pub fn controller_uid(pg: &VolcanoPodGroup) -> Option<&str> {
    pg.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn lws(extra: serde_json::Value, annotations: serde_json::Value) -> LeaderWorkerSet {
        let mut v = json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u", "annotations": annotations},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4,
                "workerTemplate": {"spec": {"containers": [{"name": "w",
                    "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "8"}}}]}}}},
        });
        crate::lws::plan::merge_json(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn leader(annotation: Option<&str>) -> CachedPod {
        let mut annotations = serde_json::Map::new();
        if let Some(a) = annotation {
            annotations.insert(GROUP_NAME_ANNOTATION.into(), a.into());
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "leader-uid",
                "labels": {labels::NAME: "web", labels::GROUP_INDEX: "1",
                           labels::WORKER_INDEX: "0", labels::REVISION: "abc"},
                "annotations": annotations},
        }))
        .unwrap();
        CachedPod::from(&pod)
    }

    #[test]
    fn a_group_gets_the_podgroup_upstream_writes() {
        let l = lws(
            json!({"spec": {"leaderWorkerTemplate": {"leaderTemplate": {"spec": {"containers": [
                {"name": "l", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}}),
            json!({QUEUE_NAME_ANNOTATION: "q1", "volcano.sh/preemptable": "false",
                   "other.io/x": "y"}),
        );
        let pg = pod_group(&l, &leader(Some("web-1-abc"))).unwrap();
        let v = serde_json::to_value(&pg).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "web-1-abc", "namespace": "ns",
                    "labels": {labels::NAME: "web", labels::GROUP_INDEX: "1", labels::REVISION: "abc"},
                    "annotations": {"volcano.sh/preemptable": "false"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web-1",
                        "uid": "leader-uid", "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"minMember": 4, "queue": "q1",
                    "minResources": {"cpu": "7", "memory": "1Gi", "nvidia.com/gpu": "24"}},
            })
        );
    }

    #[test]
    fn startup_policy_queue_and_leaderless_templates() {
        let cases = [
            ("LeaderCreated, no leader template", json!({}), 4, "8", None),
            (
                "LeaderReady: the leader alone may bind first",
                json!({"spec": {"startupPolicy": "LeaderReady"}}),
                1,
                "8",
                None,
            ),
            (
                "size 1",
                json!({"spec": {"leaderWorkerTemplate": {"size": 1}}}),
                1,
                "2",
                None,
            ),
        ];
        for (name, extra, min_member, cpu, queue) in cases {
            let pg = pod_group(&lws(extra, json!({})), &leader(Some("web-1-abc"))).unwrap();
            assert_eq!(pg.spec.min_member, min_member, "{name}");
            assert_eq!(
                pg.spec.min_resources.as_ref().unwrap()["cpu"].0,
                cpu,
                "{name}"
            );
            assert_eq!(pg.spec.queue.as_deref(), queue, "{name}");
            assert_eq!(controller_uid(&pg), Some("leader-uid"), "{name}");
        }
        assert!(pod_group(&lws(json!({}), json!({})), &leader(None)).is_none());
    }

    #[test]
    fn native_gang_lws_are_left_to_the_kube_scheduler() {
        let native = BTreeMap::from([(labels::GANG_SCHEDULING.to_string(), "native".to_string())]);
        assert!(!applies(Some(GangProvider::Volcano), &native));
        assert!(applies(Some(GangProvider::Volcano), &BTreeMap::new()));
        assert!(!applies(None, &BTreeMap::new()));
        assert_eq!("volcano".parse(), Ok(GangProvider::Volcano));
        assert!("yunikorn".parse::<GangProvider>().is_err());
    }
}
