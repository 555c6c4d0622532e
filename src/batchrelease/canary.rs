//! The canary LWS: its name and the whole object the BatchRelease wants.
//!
//! Its name: `crate::release::names::canary_name`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::names::CONTROL_INFO;
use crate::api::batchrelease::BatchRelease;
use crate::api::leaderworkerset::LeaderWorkerSet;
use crate::api::rollout::PatchPodTemplateMetadata;
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
    // would spread over zones the stable groups never do.
    let mut annotations: BTreeMap<String, String> = stable
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(LWS_ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(CONTROL_INFO.to_string(), control_info);
    LeaderWorkerSet {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: stable.namespace(),
            labels: Some(BTreeMap::from([(
                CANARY_LABEL.to_string(),
                stable.name_any(),
            )])),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
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
                "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
            ],
            "placement is copied; the hold and other tools' annotations are not"
        );
    }
}
