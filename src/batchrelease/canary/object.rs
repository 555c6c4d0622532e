//! The canary LWS: its name and the whole object the BatchRelease wants.
//!
//! Its name: `crate::release::names::canary_name`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::api::batchrelease::BatchRelease;
use crate::api::kueue::{PRIORITY_CLASS_LABEL, QUEUE_LABEL};
use crate::api::leaderworkerset::LeaderWorkerSet;
use crate::api::rollout::PatchPodTemplateMetadata;
use crate::batchrelease::names::CONTROL_INFO;
use crate::lws::labels::GANG_SCHEDULING;
use crate::release::names::CANARY_LABEL;

/// The BatchRelease as a controller ownerReference.
pub fn owner_ref(br: &BatchRelease) -> OwnerReference {
    OwnerReference {
        api_version: BatchRelease::api_version(&()).into_owned(),
        kind: BatchRelease::kind(&()).into_owned(),
        name: br.name_any(),
        uid: br.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Annotations of the LWS API itself (placement); the canary carries the stable's.
const LWS_ANNOTATION_PREFIX: &str = "leaderworkerset.sigs.k8s.io/";

/// Kueue's labels on the stable LWS that the canary carries too, so its groups wait in the
/// same LocalQueue, at the same priority, and count against the same quota (docs/kueue.md).
/// Without the queue name a canary either escapes the team's quota or — its templates carry
/// the annotation Kueue's webhook put on the stable's — has its pods gated with no Workload
/// to admit them. Kueue's webhook refuses to change the queue name of an LWS later, so a
/// canary is created with it. (Not `kueue.x-k8s.io/multikueue-origin`: a canary is made on the
/// cluster it runs on, not dispatched there.)
const KUEUE_LABELS: [&str; 2] = [QUEUE_LABEL, PRIORITY_CLASS_LABEL];

/// The whole canary LWS: the stable LWS's current spec (the new template), `replicas` groups,
/// no partition, `patch` on the leader template only, Kruise's label and control-info
/// annotation, owned by the BatchRelease.
pub fn desired_canary(
    br: &BatchRelease,
    stable: &LeaderWorkerSet,
    name: &str,
    replicas: i32,
    patch: Option<&PatchPodTemplateMetadata>,
) -> LeaderWorkerSet {
    let owner = owner_ref(br);
    let control_info = serde_json::to_string(&owner).unwrap_or_default();
    let mut spec = stable.spec.clone();
    spec.replicas = Some(replicas);
    // The stable's partition is about the stable's own groups; a canary runs all its groups.
    if let Some(ruc) = spec
        .rollout_strategy
        .as_mut()
        .and_then(|s| s.rolling_update_configuration.as_mut())
    {
        ruc.partition = None;
    }
    if let Some(patch) = patch {
        let lwt = &mut spec.leader_worker_template;
        // No leaderTemplate means the leader runs the worker template: copy it first, so only
        // the leader gets the patched metadata (the canary Service selects leaders).
        let leader = lwt
            .leader_template
            .get_or_insert_with(|| lwt.worker_template.clone());
        let meta = leader.metadata.get_or_insert_with(ObjectMeta::default);
        if let Some(labels) = &patch.labels {
            meta.labels
                .get_or_insert_with(BTreeMap::new)
                .extend(labels.clone());
        }
        if let Some(annotations) = &patch.annotations {
            meta.annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(annotations.clone());
        }
    }
    // Group placement lives in the LWS's own annotations (`exclusive-topology`,
    // `subgroup-exclusive-topology`): without them a canary group of a multi-host server
    // would spread over zones the stable groups never do. Gang scheduling too: a canary group
    // binds whole or not at all, as the stable's do.
    let mut annotations: BTreeMap<String, String> = stable
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(LWS_ANNOTATION_PREFIX) || *k == GANG_SCHEDULING)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(CONTROL_INFO.to_string(), control_info);
    let mut labels: BTreeMap<String, String> = stable
        .labels()
        .iter()
        .filter(|(k, _)| KUEUE_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(CANARY_LABEL.to_string(), stable.name_any());
    LeaderWorkerSet {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: stable.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// Kueue's labels are the ones `existing` (the canary as it is) was created with: Kueue's
/// webhook refuses any change of an LWS's queue name, so a canary made before its stable LWS
/// had one (or by a manager that did not copy it) keeps what it has rather than fail every
/// write for the rest of the release.
pub fn keep_kueue_labels(wanted: &mut LeaderWorkerSet, existing: &LeaderWorkerSet) {
    let labels = wanted.metadata.labels.get_or_insert_with(BTreeMap::new);
    for key in KUEUE_LABELS {
        match existing.labels().get(key) {
            Some(value) => labels.insert(key.to_string(), value.clone()),
            None => labels.remove(key),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canary_keeps_the_stable_placement_annotations_only() {
        let stable: LeaderWorkerSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ns", "annotations": {
                "leaderworkerset.sigs.k8s.io/exclusive-topology": "topology.kubernetes.io/zone",
                "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "kubernetes.io/hostname",
                "rollouts.kruise.io/stable-revision": "abc",
                "lws-rollout.x-k8s.io/gang-scheduling": "native",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}}}}
        }))
        .unwrap();
        let br: BatchRelease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ns", "uid": "u1"},
            "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm"},
                     "releasePlan": {}}
        }))
        .unwrap();
        let canary = desired_canary(&br, &stable, "vllm-canary-x", 1, None);
        let keys: Vec<&String> = canary.annotations().keys().collect();
        assert_eq!(
            keys,
            [
                CONTROL_INFO,
                "leaderworkerset.sigs.k8s.io/exclusive-topology",
                "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology",
                "lws-rollout.x-k8s.io/gang-scheduling"
            ],
            "placement and gang scheduling are copied; the hold and other tools' annotations are not"
        );
    }

    #[test]
    fn the_canary_waits_in_the_stable_kueue_queue_at_its_priority() {
        let stable: LeaderWorkerSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ns", "labels": {
                "kueue.x-k8s.io/queue-name": "gpu-team",
                "kueue.x-k8s.io/priority-class": "serving",
                "kueue.x-k8s.io/multikueue-origin": "manager",
                "app": "vllm"}},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}}}}
        }))
        .unwrap();
        let br: BatchRelease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ns", "uid": "u1"},
            "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm"},
                     "releasePlan": {}}
        }))
        .unwrap();
        let canary = desired_canary(&br, &stable, "vllm-canary-x", 1, None);
        let labels: Vec<(&str, &str)> = canary
            .labels()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("kueue.x-k8s.io/priority-class", "serving"),
                ("kueue.x-k8s.io/queue-name", "gpu-team"),
                (CANARY_LABEL, "vllm"),
            ],
            "Kueue's queue and priority are carried; the user's other labels and MultiKueue's origin are not"
        );
        // A stable LWS without Kueue's labels gives a canary without them.
        let mut plain = stable.clone();
        plain.metadata.labels = None;
        let mut canary = desired_canary(&br, &plain, "vllm-canary-x", 1, None);
        assert_eq!(canary.labels().len(), 1);
        // An existing canary keeps the queue it was created with (Kueue refuses a change).
        let created = desired_canary(&br, &stable, "vllm-canary-x", 1, None);
        keep_kueue_labels(&mut canary, &created);
        assert_eq!(canary.labels(), created.labels());
        let mut wanted = desired_canary(&br, &stable, "vllm-canary-x", 2, None);
        keep_kueue_labels(
            &mut wanted,
            &desired_canary(&br, &plain, "vllm-canary-x", 1, None),
        );
        assert_eq!(
            wanted.labels().len(),
            1,
            "no queue added to a canary made without one"
        );
    }
}
