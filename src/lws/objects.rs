//! The objects an LWS owns, built from its spec: the leader StatefulSet, the shared headless
//! Service, ControllerRevisions, and one worker StatefulSet per group. Pure functions; names,
//! labels, selectors and annotations are upstream LWS v0.10's.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{
            ControllerRevision, RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetOrdinals,
            StatefulSetSpec, StatefulSetUpdateStrategy,
        },
        core::v1::{
            PersistentVolumeClaim, PersistentVolumeClaimSpec, PodTemplateSpec, Service, ServiceSpec,
        },
    },
    apimachinery::pkg::{
        apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference},
        runtime::RawExtension,
        util::intstr::IntOrString,
    },
};
use kube::{Resource, ResourceExt};
use serde::Deserialize;
use sha1::{Digest, Sha1};

use super::labels;
use crate::{
    api::leaderworkerset::{
        LeaderWorkerSet, RollingUpdateConfiguration, SubGroupPolicyType, SubdomainPolicy,
    },
    k8s::pod::CachedPod,
};

fn map<const N: usize>(entries: [(&str, String); N]) -> BTreeMap<String, String> {
    entries
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// Owner reference making `owner` the controller of an object (GC and blockOwnerDeletion).
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    owner.controller_owner_ref(&())
}

/// Group size (`size`, default 1).
pub fn size(lws: &LeaderWorkerSet) -> i32 {
    lws.spec.leader_worker_template.size.unwrap_or(1)
}

/// Desired groups (`replicas`, default 1).
pub fn replicas(lws: &LeaderWorkerSet) -> i32 {
    lws.spec.replicas.unwrap_or(1)
}

/// The rolling update's settings, if the LWS gives any.
pub fn rolling_update(lws: &LeaderWorkerSet) -> Option<&RollingUpdateConfiguration> {
    lws.spec
        .rollout_strategy
        .as_ref()
        .and_then(|s| s.rolling_update_configuration.as_ref())
}

/// The user's rolling-update partition (default 0).
pub fn user_partition(lws: &LeaderWorkerSet) -> i32 {
    rolling_update(lws).and_then(|r| r.partition).unwrap_or(0)
}

/// The subdomain policy (default Shared).
pub fn subdomain_policy(lws: &LeaderWorkerSet) -> SubdomainPolicy {
    lws.spec
        .network_config
        .as_ref()
        .and_then(|n| n.subdomain_policy)
        .unwrap_or_default()
}

/// Upstream's unique keys: hex sha1 of `<scope>/<name>`.
fn unique_key(scope: &str, name: &str) -> String {
    let digest = Sha1::digest(format!("{scope}/{name}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha1(<namespace>/<leader pod name>)` in hex: the group-key label.
pub fn group_key(namespace: &str, leader_pod: &str) -> String {
    unique_key(namespace, leader_pod)
}

/// `sha1(<leader pod name>/<subgroup index>)` in hex: the subgroup-key label.
pub fn subgroup_key(leader_pod: &str, subgroup: &str) -> String {
    unique_key(leader_pod, subgroup)
}

/// A StatefulSet pod name split into its StatefulSet and ordinal (`vllm-0-2` → `vllm-0`, 2).
pub fn parent_and_ordinal(pod_name: &str) -> Option<(&str, i32)> {
    let (parent, n) = pod_name.rsplit_once('-')?;
    if parent.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, n.parse().ok()?))
}

/// Group index of a leader pod: its group-index label, else the StatefulSet's pod-index label,
/// else the ordinal at the end of its name.
pub fn group_index(pod: &CachedPod) -> Option<i32> {
    let labels = pod.labels();
    labels
        .get(labels::GROUP_INDEX)
        .or_else(|| labels.get(labels::POD_INDEX))
        .and_then(|v| v.parse().ok())
        .or_else(|| parent_and_ordinal(&pod.name_any()).map(|(_, i)| i))
}

/// Annotations both pod templates carry.
fn common_template_annotations(lws: &LeaderWorkerSet) -> BTreeMap<String, String> {
    let mut out = map([(labels::SIZE, size(lws).to_string())]);
    if let Some(topology) = lws.annotations().get(labels::EXCLUSIVE_TOPOLOGY) {
        out.insert(labels::EXCLUSIVE_TOPOLOGY.into(), topology.clone());
    }
    if let Some(gang) = lws.annotations().get(labels::GANG_SCHEDULING) {
        out.insert(labels::GANG_SCHEDULING.into(), gang.clone());
    }
    if let Some(policy) = &lws.spec.leader_worker_template.sub_group_policy {
        if let Some(sgs) = policy.sub_group_size {
            out.insert(labels::SUBGROUP_SIZE.into(), sgs.to_string());
        }
        if let Some(topology) = lws.annotations().get(labels::SUBGROUP_EXCLUSIVE_TOPOLOGY) {
            out.insert(labels::SUBGROUP_EXCLUSIVE_TOPOLOGY.into(), topology.clone());
        }
    }
    out
}

fn merge_into(target: &mut Option<BTreeMap<String, String>>, extra: BTreeMap<String, String>) {
    target.get_or_insert_with(BTreeMap::new).extend(extra);
}

/// The LWS's own labels or annotations with ours on top (ours win on a shared key), as v0.10
/// carries them onto the StatefulSets it makes (#896). `None` when both are empty.
fn lws_metadata_and(
    lws_metadata: Option<&BTreeMap<String, String>>,
    ours: BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let mut merged = lws_metadata.cloned().unwrap_or_default();
    merged.extend(ours);
    (!merged.is_empty()).then_some(merged)
}

/// PVC templates as upstream copies them: name, accessModes, storageClassName, volumeMode and
/// resources only.
fn claim_templates(lws: &LeaderWorkerSet, namespace: &str) -> Option<Vec<PersistentVolumeClaim>> {
    let templates = lws
        .spec
        .leader_worker_template
        .volume_claim_templates
        .as_ref()?;
    Some(
        templates
            .iter()
            .map(|t| {
                let spec = t.spec.clone().unwrap_or_default();
                PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: t.metadata.as_ref().and_then(|m| m.name.clone()),
                        namespace: Some(namespace.to_string()),
                        ..Default::default()
                    },
                    spec: Some(PersistentVolumeClaimSpec {
                        access_modes: spec.access_modes,
                        storage_class_name: spec.storage_class_name,
                        volume_mode: spec.volume_mode,
                        resources: spec.resources,
                        ..Default::default()
                    }),
                    status: None,
                }
            })
            .collect(),
    )
}

fn policy_type_name(policy_type: SubGroupPolicyType) -> &'static str {
    match policy_type {
        SubGroupPolicyType::LeaderWorker => "LeaderWorker",
        SubGroupPolicyType::LeaderExcluded => "LeaderExcluded",
    }
}

/// The leader StatefulSet `<lws>` for revision `key` at the given partition and replicas.
///
/// `maxUnavailable` is `max(1, maxUnavailable + maxSurge)` scaled against replicas (upstream's
/// post-0.8 fix #781): v0.8 passed `maxUnavailable` through, which an API server with the
/// MaxUnavailableStatefulSet gate on rejects when it is 0. (The gate is beta but off by default
/// in 1.35 and 1.36, where the API server drops the field.)
pub fn leader_statefulset(
    lws: &LeaderWorkerSet,
    key: &str,
    partition: i32,
    sts_replicas: i32,
    max_unavailable: i32,
) -> StatefulSet {
    let name = lws.name_any();
    let namespace = lws.namespace().unwrap_or_default();
    let ltpl = &lws.spec.leader_worker_template;
    let mut template: PodTemplateSpec = ltpl
        .leader_template
        .clone()
        .unwrap_or_else(|| ltpl.worker_template.clone());
    let meta = template.metadata.get_or_insert_with(Default::default);
    merge_into(
        &mut meta.labels,
        map([
            (labels::WORKER_INDEX, "0".into()),
            (labels::NAME, name.clone()),
            (labels::REVISION, key.into()),
        ]),
    );
    let mut annotations = common_template_annotations(lws);
    if let Some(policy) = &ltpl.sub_group_policy {
        annotations.insert(
            labels::SUBGROUP_POLICY_TYPE.into(),
            policy_type_name(policy.type_.unwrap_or_default()).into(),
        );
    }
    if subdomain_policy(lws) == SubdomainPolicy::UniquePerReplica {
        annotations.insert(labels::SUBDOMAIN_POLICY.into(), "UniquePerReplica".into());
    }
    merge_into(&mut meta.annotations, annotations);

    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: lws_metadata_and(
                lws.metadata.labels.as_ref(),
                map([(labels::NAME, name.clone()), (labels::REVISION, key.into())]),
            ),
            annotations: lws_metadata_and(
                lws.metadata.annotations.as_ref(),
                map([(labels::REPLICAS, replicas(lws).to_string())]),
            ),
            owner_references: controller_ref(lws).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(sts_replicas),
            service_name: Some(name.clone()),
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector {
                match_labels: Some(map([
                    (labels::NAME, name.clone()),
                    (labels::WORKER_INDEX, "0".into()),
                ])),
                ..Default::default()
            },
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(partition),
                    max_unavailable: Some(IntOrString::Int(max_unavailable.max(1))),
                }),
            }),
            template,
            volume_claim_templates: claim_templates(lws, &namespace),
            persistent_volume_claim_retention_policy: ltpl
                .persistent_volume_claim_retention_policy
                .clone(),
            ..Default::default()
        }),
        status: None,
    }
}

/// The shared headless Service `<lws>` (Shared subdomain policy): selects every pod of the
/// LWS, publishes not-ready addresses so groups can find each other while starting.
pub fn shared_headless_service(lws: &LeaderWorkerSet) -> Service {
    let name = lws.name_any();
    headless_service(
        &name,
        lws.namespace(),
        map([(labels::NAME, name.clone())]),
        controller_ref(lws),
    )
}

/// The per-group headless Service `<lws>-<i>` (UniquePerReplica). Owned by the LWS, so it
/// outlives a replacement of its leader (see `plan::services` for why not by the leader pod).
pub fn group_headless_service(lws: &LeaderWorkerSet, index: i32) -> Service {
    headless_service(
        &format!("{}-{index}", lws.name_any()),
        lws.namespace(),
        map([
            (labels::NAME, lws.name_any()),
            (labels::GROUP_INDEX, index.to_string()),
        ]),
        controller_ref(lws),
    )
}

fn headless_service(
    name: &str,
    namespace: Option<String>,
    selector: BTreeMap<String, String>,
    owner: Option<OwnerReference>,
) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace,
            labels: Some(map([(labels::NAME, selector[labels::NAME].clone())])),
            owner_references: owner.map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    }
}

/// ControllerRevision `<lws>-<key>-<number>` holding `data` (see [`super::revision`]).
pub fn controller_revision(
    lws: &LeaderWorkerSet,
    key: &str,
    number: i64,
    data: &str,
) -> Result<ControllerRevision, serde_json::Error> {
    Ok(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(super::upstream::revision::revision_name(
                &lws.name_any(),
                key,
                number,
            )),
            namespace: lws.namespace(),
            labels: Some(map([
                (labels::NAME, lws.name_any()),
                (labels::REVISION, key.into()),
            ])),
            owner_references: controller_ref(lws).map(|r| vec![r]),
            ..Default::default()
        },
        data: Some(RawExtension(serde_json::from_str(data)?)),
        revision: number,
    })
}

/// The worker template stored in a revision's data.
pub fn revision_worker_template(
    revision: &ControllerRevision,
) -> Result<PodTemplateSpec, serde_json::Error> {
    // Decoded from the stored tree in place: the revision holds the whole spec, of which only
    // the worker template is wanted (no copy of either).
    let template = revision
        .data
        .as_ref()
        .map_or(&serde_json::Value::Null, |d| {
            &d.0["spec"]["leaderWorkerTemplate"]["workerTemplate"]
        });
    PodTemplateSpec::deserialize(template)
}

/// The worker StatefulSet of one group: named like its leader pod, owned by it, ordinals
/// `1..size`, template from the revision the leader runs (so an old group keeps old workers).
pub fn worker_statefulset(
    lws: &LeaderWorkerSet,
    leader: &CachedPod,
    index: i32,
    key: &str,
    mut template: PodTemplateSpec,
    node_selector: Option<(String, String)>,
) -> StatefulSet {
    let leader_name = leader.name_any();
    let namespace = leader.namespace().unwrap_or_default();
    let group_key = leader
        .labels()
        .get(labels::GROUP_KEY)
        .map(str::to_string)
        .unwrap_or_else(|| group_key(&namespace, &leader_name));
    let selector = map([
        (labels::GROUP_INDEX, index.to_string()),
        (labels::NAME, lws.name_any()),
        (labels::GROUP_KEY, group_key),
    ]);
    let mut pod_labels = selector.clone();
    pod_labels.insert(labels::REVISION.into(), key.into());

    let meta = template.metadata.get_or_insert_with(Default::default);
    merge_into(&mut meta.labels, pod_labels.clone());
    let mut annotations = common_template_annotations(lws);
    // v0.10 (#945): workers learn their subgroup policy as the leader does.
    if let Some(policy_type) = lws
        .spec
        .leader_worker_template
        .sub_group_policy
        .as_ref()
        .and_then(|p| p.type_)
    {
        annotations.insert(
            labels::SUBGROUP_POLICY_TYPE.into(),
            policy_type_name(policy_type).into(),
        );
    }
    annotations.insert(labels::LEADER_NAME.into(), leader_name.clone());
    if leader.requests_tpus {
        annotations.insert(labels::LEADER_REQUESTS_TPUS.into(), "true".into());
    }
    merge_into(&mut meta.annotations, annotations);
    if let Some((key, value)) = node_selector {
        let spec = template.spec.get_or_insert_with(Default::default);
        spec.node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key, value);
    }
    let service_name = match subdomain_policy(lws) {
        SubdomainPolicy::Shared => lws.name_any(),
        SubdomainPolicy::UniquePerReplica => leader_name.clone(),
    };
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(leader_name),
            namespace: Some(namespace.clone()),
            labels: lws_metadata_and(lws.metadata.labels.as_ref(), pod_labels),
            annotations: lws.metadata.annotations.clone().filter(|a| !a.is_empty()),
            owner_references: controller_ref(leader).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(size(lws) - 1),
            service_name: Some(service_name),
            pod_management_policy: Some("Parallel".into()),
            ordinals: Some(StatefulSetOrdinals { start: Some(1) }),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template,
            volume_claim_templates: claim_templates(lws, &namespace),
            persistent_volume_claim_retention_policy: lws
                .spec
                .leader_worker_template
                .persistent_volume_claim_retention_policy
                .clone(),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    pub(crate) fn lws(spec: serde_json::Value) -> LeaderWorkerSet {
        let mut lws: LeaderWorkerSet = serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": "ns", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap();
        lws.metadata.annotations = Some(map([(
            labels::EXCLUSIVE_TOPOLOGY,
            "topology.kubernetes.io/zone".into(),
        )]));
        lws
    }

    #[test]
    fn leader_statefulset_matches_upstream_shape() {
        let lws = lws(json!({"replicas": 3, "leaderWorkerTemplate": {"size": 4,
            "workerTemplate": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}}}));
        let sts = leader_statefulset(&lws, "abc", 2, 4, 0);
        let v = serde_json::to_value(&sts).unwrap();
        assert_eq!(
            v["metadata"]["labels"],
            json!({labels::NAME: "vllm", labels::REVISION: "abc"})
        );
        // The LWS's own annotation is carried over (v0.10, #896).
        assert_eq!(
            v["metadata"]["annotations"],
            json!({labels::REPLICAS: "3", labels::EXCLUSIVE_TOPOLOGY: "topology.kubernetes.io/zone"})
        );
        assert_eq!(
            v["metadata"]["ownerReferences"][0]["kind"],
            "LeaderWorkerSet"
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            v["spec"]["selector"]["matchLabels"],
            json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0"})
        );
        assert_eq!(v["spec"]["podManagementPolicy"], "Parallel");
        assert_eq!(v["spec"]["serviceName"], "vllm");
        assert_eq!(v["spec"]["replicas"], 4);
        assert_eq!(
            v["spec"]["updateStrategy"]["rollingUpdate"],
            json!({"partition": 2, "maxUnavailable": 1})
        );
        let tpl = &v["spec"]["template"]["metadata"];
        assert_eq!(
            tpl["labels"],
            json!({"app": "x", labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"})
        );
        assert_eq!(tpl["annotations"][labels::SIZE], "4");
        assert_eq!(
            tpl["annotations"][labels::EXCLUSIVE_TOPOLOGY],
            "topology.kubernetes.io/zone"
        );
    }

    /// v0.10 (#896): the LWS's labels and annotations reach both StatefulSets, ours winning on
    /// a shared key; the pod templates (and so the revision) are untouched by them.
    #[test]
    fn the_lws_metadata_is_carried_onto_both_statefulsets_table() {
        let leader: CachedPod = serde_json::from_value(
            json!({"metadata": {"name": "vllm-0", "namespace": "ns", "uid": "p-0"}}),
        )
        .unwrap();
        let cases = [
            // (LWS labels, LWS annotations, leader StS labels, leader StS annotations,
            //  worker StS labels (beyond the group's own), worker StS annotations)
            (
                json!(null),
                json!(null),
                json!({labels::NAME: "vllm", labels::REVISION: "abc"}),
                json!({labels::REPLICAS: "2"}),
                json!({}),
                Value::Null,
            ),
            (
                json!({"team": "a"}),
                json!({"note": "x"}),
                json!({"team": "a", labels::NAME: "vllm", labels::REVISION: "abc"}),
                json!({"note": "x", labels::REPLICAS: "2"}),
                json!({"team": "a"}),
                json!({"note": "x"}),
            ),
            // Ours win: a user's label or annotation with one of our keys is overwritten.
            (
                json!({labels::NAME: "other", labels::REVISION: "mine"}),
                json!({labels::REPLICAS: "99"}),
                json!({labels::NAME: "vllm", labels::REVISION: "abc"}),
                json!({labels::REPLICAS: "2"}),
                json!({}),
                json!({labels::REPLICAS: "99"}),
            ),
        ];
        for (
            lws_labels,
            lws_annotations,
            sts_labels,
            sts_annotations,
            worker_extra,
            worker_annotations,
        ) in cases
        {
            let mut lws = lws(json!({"replicas": 2, "leaderWorkerTemplate": {"size": 3,
                "workerTemplate": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}}}));
            lws.metadata.labels = serde_json::from_value(lws_labels.clone()).unwrap();
            lws.metadata.annotations = serde_json::from_value(lws_annotations.clone()).unwrap();
            let sts = serde_json::to_value(leader_statefulset(&lws, "abc", 0, 2, 1)).unwrap();
            assert_eq!(
                sts["metadata"]["labels"], sts_labels,
                "{lws_labels} {lws_annotations}"
            );
            assert_eq!(
                sts["metadata"]["annotations"], sts_annotations,
                "{lws_labels} {lws_annotations}"
            );
            assert_eq!(
                sts["spec"]["template"]["metadata"]["labels"],
                json!({"app": "x", labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"}),
                "the LWS's labels stay off the pods"
            );
            let worker = serde_json::to_value(worker_statefulset(
                &lws,
                &leader,
                0,
                "abc",
                PodTemplateSpec::default(),
                None,
            ))
            .unwrap();
            let mut want = json!({labels::NAME: "vllm", labels::GROUP_INDEX: "0",
                labels::GROUP_KEY: group_key("ns", "vllm-0"), labels::REVISION: "abc"});
            for (k, v) in worker_extra.as_object().unwrap() {
                want[k] = v.clone();
            }
            assert_eq!(worker["metadata"]["labels"], want, "{lws_labels}");
            assert_eq!(
                worker["metadata"]["annotations"], worker_annotations,
                "{lws_annotations}"
            );
        }
    }

    /// v0.10 (#945): the worker template names the subgroup policy, as the leader's does.
    #[test]
    fn workers_carry_the_subgroup_policy_type() {
        let leader: CachedPod = serde_json::from_value(
            json!({"metadata": {"name": "vllm-0", "namespace": "ns", "uid": "p-0"}}),
        )
        .unwrap();
        for (policy, want) in [
            (
                json!({"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"}),
                json!("LeaderExcluded"),
            ),
            (
                json!({"subGroupSize": 2, "subGroupPolicyType": "LeaderWorker"}),
                json!("LeaderWorker"),
            ),
            (json!({"subGroupSize": 2}), Value::Null),
            (json!(null), Value::Null),
        ] {
            let lws = lws(
                json!({"leaderWorkerTemplate": {"size": 5, "subGroupPolicy": policy,
                "workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}}),
            );
            let worker = serde_json::to_value(worker_statefulset(
                &lws,
                &leader,
                0,
                "abc",
                PodTemplateSpec::default(),
                None,
            ))
            .unwrap();
            assert_eq!(
                worker["spec"]["template"]["metadata"]["annotations"][labels::SUBGROUP_POLICY_TYPE],
                want,
                "{policy}"
            );
        }
    }

    #[test]
    fn group_key_is_sha1_of_namespace_and_leader() {
        // sha1("default/vllm-0")
        assert_eq!(group_key("default", "vllm-0").len(), 40);
        assert_ne!(
            group_key("default", "vllm-0"),
            group_key("default", "vllm-1")
        );
    }

    #[test]
    fn worker_statefulset_starts_at_ordinal_one_and_is_owned_by_the_leader() {
        let lws = lws(
            json!({"leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": {"containers": [{"name": "c"}]}}},
                              "networkConfig": {"subdomainPolicy": "UniquePerReplica"}}),
        );
        let leader: CachedPod = serde_json::from_value(
            json!({"metadata": {"name": "vllm-1", "namespace": "ns", "uid": "p-1"}}),
        )
        .unwrap();
        let tpl = PodTemplateSpec::default();
        let sts = worker_statefulset(
            &lws,
            &leader,
            1,
            "abc",
            tpl,
            Some(("zone".into(), "a".into())),
        );
        let v = serde_json::to_value(&sts).unwrap();
        assert_eq!(v["metadata"]["name"], "vllm-1");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Pod");
        assert_eq!(v["spec"]["replicas"], 2);
        assert_eq!(v["spec"]["ordinals"]["start"], 1);
        assert_eq!(
            v["spec"]["serviceName"], "vllm-1",
            "UniquePerReplica uses the leader's own Service"
        );
        assert_eq!(
            v["spec"]["selector"]["matchLabels"][labels::GROUP_KEY],
            group_key("ns", "vllm-1")
        );
        assert_eq!(
            v["spec"]["template"]["metadata"]["annotations"][labels::LEADER_NAME],
            "vllm-1"
        );
        assert_eq!(
            v["spec"]["template"]["spec"]["nodeSelector"],
            json!({"zone": "a"})
        );
        assert_eq!(
            v["spec"]["template"]["metadata"]["labels"][labels::REVISION],
            "abc"
        );
    }
}
#[cfg(test)]
mod revision_tests {
    use super::*;
    #[test]
    fn revision_serializes_its_data() {
        let lws = super::tests::lws(
            serde_json::json!({"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}}),
        );
        let rev = controller_revision(
            &lws,
            "k",
            1,
            r#"{"spec":{"leaderWorkerTemplate":{"workerTemplate":{"spec":{}}}}}"#,
        )
        .unwrap();
        let v = serde_json::to_value(&rev).unwrap();
        assert_eq!(
            v["data"]["spec"]["leaderWorkerTemplate"]["workerTemplate"],
            serde_json::json!({"spec": {}})
        );
        let back: ControllerRevision = serde_json::from_value(v).unwrap();
        assert!(revision_worker_template(&back).is_ok());
    }
}
