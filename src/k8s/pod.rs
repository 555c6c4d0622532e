//! How every controller reads a pod: the pod as the caches keep it ([`CachedPod`]) and one
//! definition of "ready".
//!
//! What kube lacks (kube 4.2.0, https://docs.rs/kube-runtime/4.2.0): a reflector of a projection
//! of an object; delete [`CachedPod`] when its stores can keep a partial type decoded from a watch.

use std::{
    borrow::Cow,
    ops::{Deref, DerefMut},
    sync::Arc,
};

use k8s_openapi::{
    NamespaceResourceScope, api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde::Deserialize;

use super::pairs::Pairs;

/// A pod as the caches keep it: its metadata and the few facts of its spec and status that a
/// controller reads, decoded straight from the watch's JSON. A full `Pod` is ~4 KiB in memory
/// even with its spec emptied (the inline `PodSpec`, container statuses, conditions), and
/// the pod cache was the largest part of the manager's heap; decoding into this skips the rest of each pod without allocating it.
///
/// Its API identity is the Pod's (`kind: Pod`, `v1`, `pods`), so it is watched, listed and
/// read like one; nothing writes it.
///
/// The record is shared: a clone is a reference count. kube-runtime's store copies every object
/// a watch event brings before keeping it, and for pods, the most frequent events, that copy
/// was one allocation per label, annotation and owner, made and freed again per event.
/// Fields read through [`Deref`]; a change
/// through [`DerefMut`] copies the record first if it is shared.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "wire::Pod")]
pub struct CachedPod(Arc<PodRecord>);

/// What [`CachedPod`] holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRecord {
    /// The pod's metadata (owners, deletion, …) but for its labels and annotations, which are
    /// packed apart: `labels` and `annotations` here are always `None` in a [`CachedPod`]
    /// (given here, [`CachedPod::from`] moves them).
    pub metadata: ObjectMeta,
    /// The pod's labels; read them with [`CachedPod::labels`].
    pub labels: Pairs,
    /// The pod's annotations; read them with [`CachedPod::annotations`].
    pub annotations: Pairs,
    /// `spec.nodeName`: exclusive topology places a group's workers next to its leader.
    pub node_name: Option<String>,
    /// A container or init container requests or limits TPUs: a leader's workers then get TPU
    /// variables (`objects::worker_sts`).
    pub requests_tpus: bool,
    /// `status.phase`, as far as a controller tells phases apart.
    pub phase: Phase,
    /// The `Ready` condition is True.
    pub ready_condition: bool,
    /// The highest restart count of any container or init container.
    pub restarts: i32,
}

impl Deref for CachedPod {
    type Target = PodRecord;

    fn deref(&self) -> &PodRecord {
        &self.0
    }
}

impl DerefMut for CachedPod {
    fn deref_mut(&mut self) -> &mut PodRecord {
        Arc::make_mut(&mut self.0)
    }
}

impl From<PodRecord> for CachedPod {
    fn from(mut record: PodRecord) -> Self {
        if let Some(labels) = record.metadata.labels.take() {
            record.labels = Pairs::from(&labels);
        }
        if let Some(annotations) = record.metadata.annotations.take() {
            record.annotations = Pairs::from(&annotations);
        }
        Self(Arc::new(record))
    }
}

impl super::label_index::Labelled for CachedPod {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.labels().get(key)
    }
}

impl CachedPod {
    /// The pod's labels. This, not `ResourceExt::labels` (which reads the metadata, where a
    /// cached pod keeps none), is what `pod.labels()` calls.
    pub fn labels(&self) -> &Pairs {
        &self.0.labels
    }

    /// The pod's annotations (as [`Self::labels`]).
    pub fn annotations(&self) -> &Pairs {
        &self.0.annotations
    }
}

/// The phases a controller tells apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    /// `Pending`: accepted, not all containers started.
    Pending,
    /// `Running`.
    Running,
    /// `Succeeded`, `Failed`, `Unknown`, or no phase yet.
    #[default]
    Other,
}

impl Phase {
    fn parse(phase: Option<&str>) -> Self {
        match phase {
            Some("Pending") => Self::Pending,
            Some("Running") => Self::Running,
            _ => Self::Other,
        }
    }
}

/// The resource whose request makes a leader's workers TPU workers.
pub const TPU_RESOURCE: &str = "google.com/tpu";

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The same facts of a full pod (a pod read whole, and the tests' pods).
impl From<&Pod> for CachedPod {
    fn from(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let quantities = |c: &k8s_openapi::api::core::v1::Container| {
            c.resources.as_ref().is_some_and(|r| {
                [&r.limits, &r.requests]
                    .into_iter()
                    .flatten()
                    .any(|m| m.contains_key(TPU_RESOURCE))
            })
        };
        PodRecord {
            // As decoded from a watch: without managedFields (`into` packs the labels and
            // annotations).
            metadata: ObjectMeta {
                managed_fields: None,
                ..pod.metadata.clone()
            },
            labels: Pairs::default(),
            annotations: Pairs::default(),
            node_name: spec.and_then(|s| s.node_name.clone()),
            requests_tpus: spec.is_some_and(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .any(quantities)
            }),
            phase: Phase::parse(status.and_then(|s| s.phase.as_deref())),
            ready_condition: status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            }),
            restarts: status
                .into_iter()
                .flat_map(|s| {
                    s.container_statuses
                        .iter()
                        .flatten()
                        .chain(s.init_container_statuses.iter().flatten())
                })
                .map(|c| c.restart_count)
                .max()
                .unwrap_or(0),
        }
        .into()
    }
}

/// The pod's JSON as far as [`CachedPod`] reads it; serde skips every other field without
/// allocating it.
mod wire {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use serde::{Deserialize, de::IgnoredAny};

    use super::Pairs;

    #[derive(Deserialize)]
    pub struct Pod {
        #[serde(default)]
        metadata: Meta,
        #[serde(default)]
        spec: Spec,
        #[serde(default)]
        status: Status,
    }

    /// `ObjectMeta` without `managedFields`: the API server's record of who set which field,
    /// which no controller reads, is usually the largest part of a pod's metadata, and as
    /// generic JSON it costs an allocation per field path; skipped here, never decoded.
    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        #[serde(default)]
        annotations: Pairs,
        creation_timestamp: Option<Time>,
        deletion_grace_period_seconds: Option<i64>,
        deletion_timestamp: Option<Time>,
        finalizers: Option<Vec<String>>,
        generate_name: Option<String>,
        generation: Option<i64>,
        #[serde(default)]
        labels: Pairs,
        name: Option<String>,
        namespace: Option<String>,
        owner_references: Option<Vec<OwnerReference>>,
        resource_version: Option<String>,
        self_link: Option<String>,
        uid: Option<String>,
    }

    impl Meta {
        /// The metadata as a cached pod keeps it, and its labels and annotations.
        fn split(m: Self) -> (ObjectMeta, Pairs, Pairs) {
            let metadata = ObjectMeta {
                annotations: None,
                creation_timestamp: m.creation_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                deletion_timestamp: m.deletion_timestamp,
                finalizers: m.finalizers,
                generate_name: m.generate_name,
                generation: m.generation,
                labels: None,
                managed_fields: None,
                name: m.name,
                namespace: m.namespace,
                owner_references: m.owner_references,
                resource_version: m.resource_version,
                self_link: m.self_link,
                uid: m.uid,
            };
            (metadata, m.labels, m.annotations)
        }
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        node_name: Option<String>,
        #[serde(default)]
        containers: Vec<Container>,
        #[serde(default)]
        init_containers: Vec<Container>,
    }

    #[derive(Deserialize)]
    struct Container {
        #[serde(default)]
        resources: Resources,
    }

    #[derive(Default, Deserialize)]
    struct Resources {
        #[serde(default)]
        limits: BTreeMap<String, IgnoredAny>,
        #[serde(default)]
        requests: BTreeMap<String, IgnoredAny>,
    }

    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        phase: Option<String>,
        #[serde(default)]
        conditions: Vec<Condition>,
        #[serde(default)]
        container_statuses: Vec<ContainerStatus>,
        #[serde(default)]
        init_container_statuses: Vec<ContainerStatus>,
    }

    #[derive(Deserialize)]
    struct Condition {
        #[serde(rename = "type", default)]
        type_: String,
        #[serde(default)]
        status: String,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ContainerStatus {
        #[serde(default)]
        restart_count: i32,
    }

    impl From<Pod> for super::CachedPod {
        fn from(pod: Pod) -> Self {
            let tpus = |c: &Container| {
                [&c.resources.limits, &c.resources.requests]
                    .into_iter()
                    .any(|m| m.contains_key(super::TPU_RESOURCE))
            };
            let status = pod.status;
            let (metadata, labels, annotations) = Meta::split(pod.metadata);
            super::PodRecord {
                metadata,
                labels,
                annotations,
                node_name: pod.spec.node_name,
                requests_tpus: pod
                    .spec
                    .containers
                    .iter()
                    .chain(&pod.spec.init_containers)
                    .any(tpus),
                phase: super::Phase::parse(status.phase.as_deref()),
                ready_condition: status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True"),
                restarts: status
                    .container_statuses
                    .iter()
                    .chain(&status.init_container_statuses)
                    .map(|c| c.restart_count)
                    .max()
                    .unwrap_or(0),
            }
            .into()
        }
    }
}

/// Running, with the `Ready` condition True (what the kubelet — here KWOK — reports once every
/// readiness probe passes).
pub fn ready(pod: &CachedPod) -> bool {
    pod.phase == Phase::Running && pod.ready_condition
}

/// The pod is on its way out (deleted, waiting for its grace period or finalizers).
pub fn terminating(pod: &CachedPod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStatus, PodCondition, PodSpec, PodStatus, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    fn pod(phase: &str, ready: &str) -> CachedPod {
        CachedPod::from(&Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn ready_needs_running_and_the_ready_condition() {
        assert!(ready(&pod("Running", "True")));
        assert!(!ready(&pod("Running", "False")));
        assert!(!ready(&pod("Pending", "True")));
        assert!(!ready(&CachedPod::default()));
    }

    fn container(name: &str, resource: Option<&str>) -> Container {
        Container {
            name: name.into(),
            image: Some("img:1".into()),
            resources: resource.map(|r| ResourceRequirements {
                requests: Some([(r.to_string(), Quantity("1".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A pod with every field a reader looks at, and many it does not.
    fn full_pod(tpu_in: Option<&str>, restarts: [i32; 2]) -> Pod {
        let status = |name: &str, restart_count| ContainerStatus {
            name: name.into(),
            restart_count,
            image: "img:1".into(),
            ..Default::default()
        };
        Pod {
            metadata: serde_json::from_value(json!({
                "name": "vllm-0", "namespace": "ns", "uid": "u1",
                "generateName": "vllm-", "generation": 2, "resourceVersion": "17",
                "selfLink": "/api/v1/namespaces/ns/pods/vllm-0",
                "creationTimestamp": "2026-11-24T10:00:00Z",
                "deletionTimestamp": "2026-11-24T10:05:00Z", "deletionGracePeriodSeconds": 30,
                "finalizers": ["example.com/keep"],
                "labels": {"leaderworkerset.sigs.k8s.io/name": "vllm"},
                "annotations": {"leaderworkerset.sigs.k8s.io/size": "4"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "vllm", "uid": "s1", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}],
            }))
            .unwrap(),
            spec: Some(PodSpec {
                node_name: Some("node-a".into()),
                containers: vec![
                    container("main", (tpu_in == Some("main")).then_some(TPU_RESOURCE)),
                    container("side", Some("cpu")),
                ],
                init_containers: Some(vec![container(
                    "init",
                    (tpu_in == Some("init")).then_some(TPU_RESOURCE),
                )]),
                hostname: Some("vllm-0".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: "True".into(),
                        ..Default::default()
                    },
                    PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..Default::default()
                    },
                ]),
                container_statuses: Some(vec![status("main", restarts[0])]),
                init_container_statuses: Some(vec![status("init", restarts[1])]),
                pod_ip: Some("10.0.0.1".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn decoding_the_json_keeps_what_reading_the_full_pod_finds() {
        let cases = [
            full_pod(None, [0, 0]),
            full_pod(Some("main"), [3, 0]),
            full_pod(Some("init"), [0, 2]),
            Pod::default(),
        ];
        for full in cases {
            let decoded: CachedPod =
                serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
            assert_eq!(decoded, CachedPod::from(&full), "{full:?}");
            // Every field of the metadata but managedFields, which is never kept, and the
            // labels and annotations, which are kept packed.
            let mut metadata = full.metadata.clone();
            metadata.managed_fields = None;
            let labels = metadata.labels.take().unwrap_or_default();
            let annotations = metadata.annotations.take().unwrap_or_default();
            assert_eq!(decoded.metadata, metadata);
            assert_eq!(decoded.labels().to_map(), labels);
            assert_eq!(decoded.annotations().to_map(), annotations);
        }
        assert!(full_pod(None, [0, 0]).metadata.managed_fields.is_some());
        let tpu = CachedPod::from(&full_pod(Some("init"), [0, 2]));
        assert!(tpu.requests_tpus);
        assert_eq!(tpu.restarts, 2);
        assert_eq!(tpu.node_name.as_deref(), Some("node-a"));
        assert!(ready(&tpu));
        assert!(!CachedPod::from(&full_pod(None, [0, 0])).requests_tpus);
    }

    #[test]
    fn a_watch_event_decodes_into_a_cached_pod() {
        let event: kube::api::WatchEvent<CachedPod> = serde_json::from_value(json!({
            "type": "MODIFIED",
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"},
                "spec": {"containers": [{"name": "c", "image": "i",
                    "resources": {"limits": {"google.com/tpu": "4"}}}]},
                "status": {"phase": "Pending"}},
        }))
        .unwrap();
        let kube::api::WatchEvent::Modified(pod) = event else {
            panic!("not a modification")
        };
        assert_eq!(pod.phase, Phase::Pending);
        assert!(pod.requests_tpus);
        assert!(!ready(&pod));
        assert_eq!(
            kube::ResourceExt::resource_version(&pod).as_deref(),
            Some("7")
        );
    }

    #[test]
    fn labels_given_in_the_metadata_are_packed_and_indexed() {
        use crate::k8s::label_index::LabelIndex;
        let pod = CachedPod::from(PodRecord {
            metadata: serde_json::from_value(json!({
                "name": "vllm-0", "namespace": "ns",
                "labels": {"leaderworkerset.sigs.k8s.io/name": "vllm"},
                "annotations": {"leaderworkerset.sigs.k8s.io/size": "4"},
            }))
            .unwrap(),
            ..Default::default()
        });
        assert_eq!(pod.metadata.labels, None, "one place for the labels");
        assert_eq!(pod.metadata.annotations, None);
        assert_eq!(
            pod.labels().get("leaderworkerset.sigs.k8s.io/name"),
            Some("vllm")
        );
        assert_eq!(
            pod.annotations().get("leaderworkerset.sigs.k8s.io/size"),
            Some("4")
        );
        let index = LabelIndex::new("leaderworkerset.sigs.k8s.io/name");
        index.upsert(Arc::new(pod));
        assert_eq!(
            index.get("ns", "vllm").len(),
            1,
            "filed by its packed label"
        );
    }

    #[test]
    fn a_clone_shares_the_record_until_one_side_changes() {
        let pod = CachedPod::from(&full_pod(None, [0, 0]));
        let mut copy = pod.clone();
        assert!(
            Arc::ptr_eq(&pod.0, &copy.0),
            "the store's copy is a reference"
        );
        copy.restarts = 3;
        assert!(!Arc::ptr_eq(&pod.0, &copy.0));
        assert_eq!(
            (pod.restarts, copy.restarts),
            (0, 3),
            "a change leaves the original alone"
        );
    }
}
