//! What the LWS pod webhook does to a pod on CREATE (upstream's `PodWebhook.Default`,
//! docs/lws.md): group and worker index labels, the group key,
//! subgroup labels, the per-replica subdomain, exclusive-placement affinity, and the
//! `LWS_LEADER_ADDRESS` / `LWS_GROUP_SIZE` / `LWS_WORKER_INDEX` variables first in every
//! container. Pure: the webhook (`webhook::pods`) answers with the JSON patch ([`patch`]) of
//! the fields defaulting changes ([`Before`]).
//!
//! Pods requesting `google.com/tpu` also get the TPU variables (`TPU_WORKER_HOSTNAMES`,
//! `TPU_WORKER_ID`, `TPU_NAME`, `TPU_PROCESS_ADDRESSES`, `TPU_PROCESS_PORT`) in every container
//! that requests TPUs (v0.9; with subgroups, in the first one), listing the hosts of its group
//! (or subgroup).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Affinity, Container, EnvVar, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity,
        PodSchedulingGroup,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement},
};
use kube::ResourceExt;
use serde::Serialize;

use super::{error::PodDefaultError, tpu};
use crate::api::volcano::GROUP_NAME_ANNOTATION;
use crate::lws::{
    gang, labels,
    objects::{group_key, parent_and_ordinal, subgroup_key},
    volcano,
};

/// The fields of a pod that [`default_pod`] may change, as they were before it ran: the
/// labels, the subdomain, the affinity, and every container's and init container's variables.
/// The admission patch ([`patch`]) names only these, so the rest of the pod (nearly all of it)
/// is neither copied nor encoded per admission. A field `default_pod` comes to change must be
/// added here; the test `a_patch_of_the_defaultable_fields_gives_the_defaulted_pod` fails until
/// it is.
pub struct Before {
    labels: Option<BTreeMap<String, String>>,
    /// Only the one annotation defaulting may set.
    group_name: Option<String>,
    has_annotations: bool,
    spec: Option<BeforeSpec>,
}

struct BeforeSpec {
    affinity: Option<Affinity>,
    scheduling_group: Option<PodSchedulingGroup>,
    subdomain: Option<String>,
    containers: Vec<Option<Vec<EnvVar>>>,
    init_containers: Vec<Option<Vec<EnvVar>>>,
}

impl Before {
    /// The defaultable fields of `pod`.
    pub fn of(pod: &Pod) -> Self {
        let env = |cs: &[Container]| cs.iter().map(|c| c.env.clone()).collect();
        Self {
            labels: pod.metadata.labels.clone(),
            group_name: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(GROUP_NAME_ANNOTATION).cloned()),
            has_annotations: pod.metadata.annotations.is_some(),
            spec: pod.spec.as_ref().map(|spec| BeforeSpec {
                affinity: spec.affinity.clone(),
                scheduling_group: spec.scheduling_group.clone(),
                subdomain: spec.subdomain.clone(),
                containers: env(&spec.containers),
                init_containers: spec.init_containers.as_deref().map_or(Vec::new(), env),
            }),
        }
    }
}

/// One RFC 6902 operation of the admission patch, its value borrowed from the defaulted pod
/// and encoded straight from it (no JSON tree of either pod is built: the webhook's largest
/// share of allocations).
#[derive(Debug, Serialize)]
pub struct PatchOp<'a> {
    op: &'static str,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<PatchValue<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PatchValue<'a> {
    Text(&'a str),
    Labels(&'a BTreeMap<String, String>),
    Affinity(&'a Affinity),
    SchedulingGroup(&'a PodSchedulingGroup),
    Env(&'a [EnvVar]),
    Spec(&'a k8s_openapi::api::core::v1::PodSpec),
}

/// A JSON pointer token for `key` (RFC 6901: `~` and `/` escaped).
fn pointer_token(key: &str) -> std::borrow::Cow<'_, str> {
    if key.contains(['~', '/']) {
        key.replace('~', "~0").replace('/', "~1").into()
    } else {
        key.into()
    }
}

/// The operation that takes a field from `was` (present or not) to `now`, if they differ.
fn set<'a, T: PartialEq + ?Sized>(
    ops: &mut Vec<PatchOp<'a>>,
    path: String,
    was: Option<&T>,
    now: Option<&'a T>,
    value: impl FnOnce(&'a T) -> PatchValue<'a>,
) {
    let op = match (was, now) {
        (None, None) => return,
        (Some(was), Some(now)) if was == now => return,
        (None, Some(_)) => "add",
        (Some(_), Some(_)) => "replace",
        (Some(_), None) => "remove",
    };
    ops.push(PatchOp {
        op,
        path,
        value: now.map(value),
    });
}

/// The JSON patch that takes the pod [`Before`] describes to `after`: per label, and per
/// field for the subdomain, the affinity and each container's variables.
pub fn patch<'a>(before: &Before, after: &'a Pod) -> Vec<PatchOp<'a>> {
    let mut ops = Vec::new();
    match (&before.labels, &after.metadata.labels) {
        (Some(was), Some(now)) => {
            for (key, value) in now {
                let path = format!("/metadata/labels/{}", pointer_token(key));
                set(
                    &mut ops,
                    path,
                    was.get(key).map(String::as_str),
                    Some(value.as_str()),
                    PatchValue::Text,
                );
            }
            for key in was.keys().filter(|k| !now.contains_key(*k)) {
                ops.push(PatchOp {
                    op: "remove",
                    path: format!("/metadata/labels/{}", pointer_token(key)),
                    value: None,
                });
            }
        }
        (was, now) => set(
            &mut ops,
            "/metadata/labels".into(),
            was.as_ref(),
            now.as_ref(),
            PatchValue::Labels,
        ),
    }
    let group_name = after
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(GROUP_NAME_ANNOTATION));
    if let Some(name) = group_name.filter(|n| before.group_name.as_ref() != Some(*n)) {
        if before.has_annotations {
            set(
                &mut ops,
                format!(
                    "/metadata/annotations/{}",
                    pointer_token(GROUP_NAME_ANNOTATION)
                ),
                before.group_name.as_deref(),
                Some(name.as_str()),
                PatchValue::Text,
            );
        } else {
            ops.push(PatchOp {
                op: "add",
                path: "/metadata/annotations".into(),
                value: after.metadata.annotations.as_ref().map(PatchValue::Labels),
            });
        }
    }
    let (Some(was), Some(now)) = (&before.spec, &after.spec) else {
        if before.spec.is_none() {
            set(
                &mut ops,
                "/spec".into(),
                None,
                after.spec.as_ref(),
                PatchValue::Spec,
            );
        }
        return ops;
    };
    set(
        &mut ops,
        "/spec/affinity".into(),
        was.affinity.as_ref(),
        now.affinity.as_ref(),
        PatchValue::Affinity,
    );
    set(
        &mut ops,
        "/spec/schedulingGroup".into(),
        was.scheduling_group.as_ref(),
        now.scheduling_group.as_ref(),
        PatchValue::SchedulingGroup,
    );
    set(
        &mut ops,
        "/spec/subdomain".into(),
        was.subdomain.as_deref(),
        now.subdomain.as_deref(),
        PatchValue::Text,
    );
    let lists = [
        ("containers", &was.containers, &now.containers[..]),
        (
            "initContainers",
            &was.init_containers,
            now.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    for (field, was, now) in lists {
        for (i, container) in now.iter().enumerate() {
            let was = was.get(i).and_then(Option::as_deref);
            let path = format!("/spec/{field}/{i}/env");
            set(
                &mut ops,
                path,
                was,
                container.env.as_deref(),
                PatchValue::Env,
            );
        }
    }
    ops
}

/// Whether the webhook applies to this pod at all (it carries the LWS name label).
pub fn is_lws_pod(pod: &Pod) -> bool {
    pod.labels().contains_key(labels::NAME)
}

/// The ordinal at the end of a StatefulSet pod name.
fn ordinal(name: &str) -> Option<i32> {
    parent_and_ordinal(name).map(|(_, i)| i)
}

fn number(pod: &Pod, key: &'static str, value: &str) -> Result<i32, PodDefaultError> {
    value.parse().map_err(|_| PodDefaultError::NotANumber {
        pod: pod.name_any(),
        key,
        value: value.to_string(),
    })
}

/// Applies the LWS defaults to `pod` in place, without a gang-scheduling provider.
pub fn default_pod(pod: &mut Pod) -> Result<(), PodDefaultError> {
    default_pod_with(pod, None)
}

/// Applies the LWS defaults to `pod` in place, for a manager handing groups to
/// `gang_provider`. Pods without the LWS name label are untouched.
pub fn default_pod_with(
    pod: &mut Pod,
    gang_provider: Option<volcano::GangProvider>,
) -> Result<(), PodDefaultError> {
    if !is_lws_pod(pod) {
        return Ok(());
    }
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    let annotations = pod.annotations().clone();
    let size_text = annotations
        .get(labels::SIZE)
        .ok_or_else(|| PodDefaultError::MissingSize(name.clone()))?;
    let size = number(pod, labels::SIZE, size_text)?;
    let subgroup_size = match annotations.get(labels::SUBGROUP_SIZE) {
        Some(v) => Some(number(pod, labels::SUBGROUP_SIZE, v)?),
        None => None,
    };
    let is_leader = pod.labels().get(labels::WORKER_INDEX).map(String::as_str) == Some("0");
    let index = ordinal(&name).ok_or_else(|| PodDefaultError::NoOrdinal(name.clone()))?;

    if is_leader {
        pod.labels_mut()
            .entry(labels::GROUP_INDEX.into())
            .or_insert_with(|| index.to_string());
        if annotations
            .get(labels::SUBDOMAIN_POLICY)
            .map(String::as_str)
            == Some("UniquePerReplica")
        {
            pod.spec.get_or_insert_with(Default::default).subdomain = Some(name.clone());
        }
        let key = pod
            .labels_mut()
            .entry(labels::GROUP_KEY.into())
            .or_insert_with(|| group_key(&namespace, &name))
            .clone();
        if let Some(topology) = annotations.get(labels::EXCLUSIVE_TOPOLOGY) {
            set_exclusive_affinities(pod, &key, topology, labels::GROUP_KEY);
        }
        let leader_excluded = annotations
            .get(labels::SUBGROUP_POLICY_TYPE)
            .map(String::as_str)
            == Some("LeaderExcluded");
        if subgroup_size.is_some() && !has_subgroup_index(pod) && !leader_excluded {
            // The leader always lands in subgroup 0.
            add_subgroup(
                pod,
                &name,
                "0",
                annotations.get(labels::SUBGROUP_EXCLUSIVE_TOPOLOGY),
            );
        }
    } else {
        pod.labels_mut()
            .insert(labels::WORKER_INDEX.into(), index.to_string());
        if let Some(sgs) = subgroup_size.filter(|_| !has_subgroup_index(pod)) {
            let sgs = sgs.max(1);
            let subgroup = worker_subgroup(size, sgs, index);
            let leader = annotations
                .get(labels::LEADER_NAME)
                .cloned()
                .unwrap_or_default();
            add_subgroup(
                pod,
                &leader,
                &subgroup.to_string(),
                annotations.get(labels::SUBGROUP_EXCLUSIVE_TOPOLOGY),
            );
        }
    }

    if gang::requested_by(&annotations) {
        join_gang(pod, is_leader.then_some(index));
    }
    if volcano::applies(gang_provider, &annotations) {
        join_volcano_group(pod);
    }
    tpu::add_tpu_variables(pod, size)?;
    add_lws_variables(pod, size_text);
    Ok(())
}

/// Names the PodGroup of the pod's group incarnation in `spec.schedulingGroup` (native gang
/// scheduling, [`gang`]): the group index (a leader's is its ordinal, a worker's its
/// template's label) and the revision its template carries. A pod that already names a group
/// keeps it; one without the labels is left alone (its group could not be named).
fn join_gang(pod: &mut Pod, leader_index: Option<i32>) {
    let labels = pod.labels();
    let index = leader_index.or_else(|| labels.get(labels::GROUP_INDEX)?.parse().ok());
    let (Some(lws), Some(index), Some(revision)) = (
        labels.get(labels::NAME),
        index,
        labels.get(labels::REVISION),
    ) else {
        return;
    };
    let name = gang::pod_group_name(lws, index, revision);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.scheduling_group.get_or_insert(PodSchedulingGroup {
        pod_group_name: Some(name),
    });
}

/// Names the Volcano PodGroup of the pod's group incarnation in the
/// `scheduling.k8s.io/group-name` annotation (Volcano gang scheduling, [`volcano`]): from the
/// pod's LWS name, group index and revision labels, as upstream writes it (set over any value
/// the pod had).
fn join_volcano_group(pod: &mut Pod) {
    let labels = pod.labels();
    let label = |key: &str| labels.get(key).map(String::as_str).unwrap_or_default();
    let name = volcano::pod_group_name(
        label(labels::NAME),
        label(labels::GROUP_INDEX),
        label(labels::REVISION),
    );
    pod.annotations_mut()
        .insert(GROUP_NAME_ANNOTATION.to_string(), name);
}

/// The subgroup of worker `index`: with `size - 1` divisible by the subgroup size (and `size`
/// not, v0.10's fix #918 for subgroups of 1) the leader is an extra pod of subgroup 0, else it
/// counts as the first member of subgroup 0.
fn worker_subgroup(size: i32, sgs: i32, index: i32) -> i32 {
    if (size - 1) % sgs == 0 && size % sgs != 0 {
        (index - 1) / sgs
    } else {
        index / sgs
    }
}

fn has_subgroup_index(pod: &Pod) -> bool {
    pod.labels()
        .get(labels::SUBGROUP_INDEX)
        .is_some_and(|v| !v.is_empty())
}

fn add_subgroup(pod: &mut Pod, leader: &str, subgroup: &str, topology: Option<&String>) {
    let key = subgroup_key(leader, subgroup);
    pod.labels_mut()
        .insert(labels::SUBGROUP_INDEX.into(), subgroup.to_string());
    pod.labels_mut()
        .insert(labels::SUBGROUP_KEY.into(), key.clone());
    if let Some(topology) = topology {
        set_exclusive_affinities(pod, &key, topology, labels::SUBGROUP_KEY);
    }
}

/// Required affinity to pods with the same key and anti-affinity to pods with another key,
/// both on `topology`: the (sub)group shares one topology domain and owns it. Applied once per
/// topology key.
fn set_exclusive_affinities(pod: &mut Pod, key: &str, topology: &str, label: &str) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let applied = affinity
        .pod_affinity
        .as_ref()
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|t| t.iter().any(|t| t.topology_key == topology))
        && affinity
            .pod_anti_affinity
            .as_ref()
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|t| t.iter().any(|t| t.topology_key == topology));
    if applied {
        return;
    }
    let requirement = |operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: label.into(),
        operator: operator.into(),
        values,
    };
    let term = |expressions| PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_expressions: Some(expressions),
            ..Default::default()
        }),
        topology_key: topology.into(),
        ..Default::default()
    };
    affinity
        .pod_affinity
        .get_or_insert_with(PodAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term(vec![requirement("In", Some(vec![key.into()]))]));
    affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term(vec![
            requirement("Exists", None),
            requirement("NotIn", Some(vec![key.into()])),
        ]));
}

/// The three LWS variables, first and in this order in every container and init container;
/// user variables of the same names are dropped (upstream PR #152).
fn add_lws_variables(pod: &mut Pod, size: &str) {
    let lws = pod.labels().get(labels::NAME).cloned().unwrap_or_default();
    let group = pod
        .labels()
        .get(labels::GROUP_INDEX)
        .cloned()
        .unwrap_or_default();
    let worker = pod
        .labels()
        .get(labels::WORKER_INDEX)
        .cloned()
        .unwrap_or_default();
    let namespace = pod.namespace().unwrap_or_default();
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let subdomain = spec.subdomain.clone().unwrap_or_default();
    let vars = [
        (
            "LWS_LEADER_ADDRESS",
            format!("{lws}-{group}.{subdomain}.{namespace}"),
        ),
        ("LWS_GROUP_SIZE", size.to_string()),
        ("LWS_WORKER_INDEX", worker),
    ];
    let inject = |c: &mut Container| {
        let mut env: Vec<EnvVar> = vars
            .iter()
            .map(|(n, v)| EnvVar {
                name: (*n).into(),
                value: Some(v.clone()),
                value_from: None,
            })
            .collect();
        env.extend(
            c.env
                .take()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| !vars.iter().any(|(n, _)| *n == e.name)),
        );
        c.env = Some(env);
    };
    spec.containers.iter_mut().for_each(inject);
    spec.init_containers.iter_mut().flatten().for_each(inject);
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tpu::TPU;
    use super::*;
    use serde_json::json;

    pub(in crate::lws::admission) fn pod(
        name: &str,
        labels: serde_json::Value,
        annotations: serde_json::Value,
        subdomain: &str,
    ) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": labels, "annotations": annotations},
            "spec": {"subdomain": subdomain, "containers": [{"name": "c", "env": [{"name": "USER", "value": "1"}, {"name": "LWS_GROUP_SIZE", "value": "bogus"}]}],
                     "initContainers": [{"name": "init"}]}
        }))
        .unwrap()
    }

    pub(in crate::lws::admission) fn env(p: &Pod, container: usize) -> Vec<(String, String)> {
        p.spec.as_ref().unwrap().containers[container]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn leader_gets_group_labels_and_variables_first() {
        let mut p = pod(
            "vllm-1",
            json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "4"}),
            "vllm",
        );
        default_pod(&mut p).unwrap();
        assert_eq!(p.labels()[labels::GROUP_INDEX], "1");
        assert_eq!(
            p.labels()[labels::GROUP_KEY],
            group_key("default", "vllm-1")
        );
        assert_eq!(
            env(&p, 0),
            [
                (
                    "LWS_LEADER_ADDRESS".to_string(),
                    "vllm-1.vllm.default".to_string()
                ),
                ("LWS_GROUP_SIZE".into(), "4".into()),
                ("LWS_WORKER_INDEX".into(), "0".into()),
                ("USER".into(), "1".into()),
            ]
        );
        let init = &p.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0];
        assert_eq!(init.env.as_ref().unwrap()[0].name, "LWS_LEADER_ADDRESS");
    }

    #[test]
    fn worker_gets_its_index_from_the_name() {
        let mut p = pod(
            "vllm-1-3",
            json!({labels::NAME: "vllm", labels::GROUP_INDEX: "1", labels::GROUP_KEY: "k"}),
            json!({labels::SIZE: "4", labels::LEADER_NAME: "vllm-1"}),
            "vllm",
        );
        default_pod(&mut p).unwrap();
        assert_eq!(p.labels()[labels::WORKER_INDEX], "3");
        assert_eq!(env(&p, 0)[0].1, "vllm-1.vllm.default");
        assert_eq!(
            env(&p, 0)[2],
            ("LWS_WORKER_INDEX".to_string(), "3".to_string())
        );
    }

    #[test]
    fn unique_per_replica_leader_gets_its_own_subdomain() {
        let mut p = pod(
            "vllm-0",
            json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2", labels::SUBDOMAIN_POLICY: "UniquePerReplica"}),
            "vllm",
        );
        default_pod(&mut p).unwrap();
        assert_eq!(
            p.spec.as_ref().unwrap().subdomain.as_deref(),
            Some("vllm-0")
        );
        assert_eq!(env(&p, 0)[0].1, "vllm-0.vllm-0.default");
    }

    #[test]
    fn exclusive_topology_adds_one_affinity_pair_once() {
        let mut p = pod(
            "vllm-0",
            json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2", labels::EXCLUSIVE_TOPOLOGY: "topology.kubernetes.io/zone"}),
            "vllm",
        );
        default_pod(&mut p).unwrap();
        default_pod(&mut p).unwrap();
        let affinity =
            serde_json::to_value(p.spec.as_ref().unwrap().affinity.as_ref().unwrap()).unwrap();
        let key = group_key("default", "vllm-0");
        assert_eq!(
            affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!([{"labelSelector": {"matchExpressions": [{"key": labels::GROUP_KEY, "operator": "In", "values": [key]}]}, "topologyKey": "topology.kubernetes.io/zone"}])
        );
        assert_eq!(
            affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
            json!([{"labelSelector": {"matchExpressions": [
                {"key": labels::GROUP_KEY, "operator": "Exists"},
                {"key": labels::GROUP_KEY, "operator": "NotIn", "values": [key]}
            ]}, "topologyKey": "topology.kubernetes.io/zone"}])
        );
    }

    #[test]
    fn subgroup_indexes_follow_upstream() {
        // size 5, subgroups of 2: (5-1) % 2 == 0, so the leader is extra in subgroup 0 and
        // workers 1,2 → 0, workers 3,4 → 1.
        let worker = |n: i32, size: &str| {
            let mut p = pod(
                &format!("g-0-{n}"),
                json!({labels::NAME: "g"}),
                json!({labels::SIZE: size, labels::SUBGROUP_SIZE: "2", labels::LEADER_NAME: "g-0"}),
                "g",
            );
            default_pod(&mut p).unwrap();
            p.labels()[labels::SUBGROUP_INDEX].clone()
        };
        assert_eq!([1, 2, 3, 4].map(|n| worker(n, "5")), ["0", "0", "1", "1"]);
        // size 4, subgroups of 2: 3 % 2 != 0, so the leader counts: workers 1 → 0, 2,3 → 1.
        assert_eq!([1, 2, 3].map(|n| worker(n, "4")), ["0", "1", "1"]);

        let mut excluded = pod(
            "g-0",
            json!({labels::NAME: "g", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "5", labels::SUBGROUP_SIZE: "2", labels::SUBGROUP_POLICY_TYPE: "LeaderExcluded"}),
            "g",
        );
        default_pod(&mut excluded).unwrap();
        assert!(
            !excluded.labels().contains_key(labels::SUBGROUP_INDEX),
            "LeaderExcluded leaders are in no subgroup"
        );
    }

    /// Upstream's `TestGetSubGroupIndex` cases (v0.10) and the subgroups of 1 it fixed (#918):
    /// (size, subgroup size, worker index, subgroup).
    #[test]
    fn worker_subgroup_table() {
        for (size, sgs, worker, want) in [
            (4, 2, 2, 1),
            (5, 2, 2, 0),
            (5, 2, 1, 0),
            (5, 2, 3, 1),
            (4, 2, 1, 0),
            (4, 2, 3, 1),
            // Subgroups of 1: every pod is a subgroup of its own (v0.9 put worker 1 with the
            // leader in subgroup 0 and every later worker one subgroup too low).
            (3, 1, 1, 1),
            (3, 1, 2, 2),
            (2, 1, 1, 1),
            // LeaderExcluded shapes (size - 1 divisible) are unchanged.
            (4, 3, 1, 0),
            (4, 3, 3, 0),
            (7, 3, 4, 1),
        ] {
            assert_eq!(
                worker_subgroup(size, sgs, worker),
                want,
                "size {size}, subgroups of {sgs}, worker {worker}"
            );
        }
    }

    pub(in crate::lws::admission) fn tpu_pod(
        name: &str,
        labels: serde_json::Value,
        annotations: serde_json::Value,
        subdomain: &str,
    ) -> Pod {
        let mut p = pod(name, labels, annotations, subdomain);
        p.spec.as_mut().unwrap().containers[0].resources =
            Some(serde_json::from_value(json!({"limits": {TPU: "4"}})).unwrap());
        p
    }

    pub(in crate::lws::admission) fn var(p: &Pod, name: &str) -> Option<String> {
        env(p, 0)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    #[test]
    fn missing_size_is_refused_and_other_pods_are_untouched() {
        let mut p = pod(
            "vllm-0",
            json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0"}),
            json!({}),
            "vllm",
        );
        assert_eq!(
            default_pod(&mut p),
            Err(PodDefaultError::MissingSize("vllm-0".into()))
        );
        let mut other = pod("web-0", json!({"app": "web"}), json!({}), "web");
        let before = other.clone();
        default_pod(&mut other).unwrap();
        assert_eq!(other, before);
    }

    #[test]
    fn gang_pods_name_the_podgroup_of_their_group_and_revision() {
        let gang = json!({labels::SIZE: "3", labels::GANG_SCHEDULING: "native"});
        let group_of = |p: &Pod| {
            p.spec
                .as_ref()?
                .scheduling_group
                .as_ref()?
                .pod_group_name
                .clone()
        };
        let mut leader = pod(
            "vllm-2",
            json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"}),
            gang.clone(),
            "vllm",
        );
        default_pod(&mut leader).unwrap();
        assert_eq!(group_of(&leader).as_deref(), Some("vllm-2-abc"));
        let mut worker = pod(
            "vllm-2-1",
            json!({labels::NAME: "vllm", labels::GROUP_INDEX: "2", labels::REVISION: "abc"}),
            json!({labels::SIZE: "3", labels::GANG_SCHEDULING: "native", labels::LEADER_NAME: "vllm-2"}),
            "vllm",
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(group_of(&worker).as_deref(), Some("vllm-2-abc"));
        // Without the annotation (or with another value) no pod joins a gang.
        for annotations in [
            json!({labels::SIZE: "3"}),
            json!({labels::SIZE: "3", labels::GANG_SCHEDULING: "volcano"}),
        ] {
            let mut plain = pod(
                "vllm-0",
                json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"}),
                annotations,
                "vllm",
            );
            default_pod(&mut plain).unwrap();
            assert_eq!(group_of(&plain), None);
        }
    }

    #[test]
    fn with_volcano_every_lws_pod_names_its_groups_volcano_podgroup() {
        let volcano = Some(volcano::GangProvider::Volcano);
        let group_name = |p: &Pod| p.annotations().get(GROUP_NAME_ANNOTATION).cloned();
        let cases = [
            (
                "a leader: its ordinal is the group index",
                pod(
                    "vllm-2",
                    json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"}),
                    json!({labels::SIZE: "3"}),
                    "vllm",
                ),
                volcano,
                Some("vllm-2-abc"),
            ),
            (
                "a worker: its template's group index label",
                pod(
                    "vllm-2-1",
                    json!({labels::NAME: "vllm", labels::GROUP_INDEX: "2", labels::REVISION: "abc"}),
                    json!({labels::SIZE: "3", labels::LEADER_NAME: "vllm-2",
                        GROUP_NAME_ANNOTATION: "stale"}),
                    "vllm",
                ),
                volcano,
                Some("vllm-2-abc"),
            ),
            (
                "no provider: no annotation",
                pod(
                    "vllm-0",
                    json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"}),
                    json!({labels::SIZE: "3"}),
                    "vllm",
                ),
                None,
                None,
            ),
            (
                "a native gang LWS's pod joins its Kubernetes PodGroup only",
                pod(
                    "vllm-0",
                    json!({labels::NAME: "vllm", labels::WORKER_INDEX: "0", labels::REVISION: "abc"}),
                    json!({labels::SIZE: "3", labels::GANG_SCHEDULING: "native"}),
                    "vllm",
                ),
                volcano,
                None,
            ),
            (
                "not an LWS pod",
                pod("web-0", json!({"app": "web"}), json!({}), "web"),
                volcano,
                None,
            ),
        ];
        for (name, before, provider, want) in cases {
            let mut after = before.clone();
            default_pod_with(&mut after, provider).unwrap();
            assert_eq!(group_name(&after).as_deref(), want, "{name}");
            // The webhook's patch carries the annotation.
            let patch: json_patch::Patch = serde_json::from_slice(
                &serde_json::to_vec(&patch(&Before::of(&before), &after)).unwrap(),
            )
            .unwrap();
            let mut patched = serde_json::to_value(&before).unwrap();
            json_patch::patch(&mut patched, &patch).unwrap();
            assert_eq!(
                patched,
                serde_json::to_value(&after).unwrap(),
                "{name}: patch"
            );
        }
        let mut no_annotations = pod(
            "b-0",
            json!({labels::NAME: "b", labels::WORKER_INDEX: "0", labels::REVISION: "r"}),
            json!({}),
            "b",
        );
        no_annotations.metadata.annotations = None;
        assert!(
            default_pod_with(&mut no_annotations, volcano).is_err(),
            "size is required"
        );
    }

    #[test]
    fn a_patch_of_the_defaultable_fields_gives_the_defaulted_pod() {
        let lws = |name: &str| json!({labels::NAME: name});
        let leader = |name: &str| json!({labels::NAME: name, labels::WORKER_INDEX: "0"});
        let bare = |mut p: Pod| -> Pod {
            // Containers without variables, no init containers, no subdomain.
            let spec = p.spec.as_mut().unwrap();
            spec.containers[0].env = None;
            spec.init_containers = None;
            spec.subdomain = None;
            p
        };
        let mut cases = vec![
            pod("vllm-1", leader("vllm"), json!({labels::SIZE: "4"}), "vllm"),
            pod(
                "vllm-1-2",
                lws("vllm"),
                json!({labels::SIZE: "4", labels::LEADER_NAME: "vllm-1"}),
                "vllm",
            ),
            pod(
                "vllm-0",
                leader("vllm"),
                json!({labels::SIZE: "2", labels::SUBDOMAIN_POLICY: "UniquePerReplica"}),
                "vllm",
            ),
            pod(
                "x-0",
                leader("x"),
                json!({labels::SIZE: "3", labels::EXCLUSIVE_TOPOLOGY: "rack"}),
                "x",
            ),
            pod(
                "g-0",
                leader("g"),
                json!({labels::SIZE: "5", labels::SUBGROUP_SIZE: "2",
                    labels::SUBGROUP_EXCLUSIVE_TOPOLOGY: "host"}),
                "g",
            ),
            pod(
                "g-0-3",
                lws("g"),
                json!({labels::SIZE: "5", labels::SUBGROUP_SIZE: "2", labels::LEADER_NAME: "g-0",
                    labels::SUBGROUP_EXCLUSIVE_TOPOLOGY: "host"}),
                "g",
            ),
            tpu_pod("t-0", leader("t"), json!({labels::SIZE: "2"}), "t"),
            tpu_pod(
                "t-0-1",
                lws("t"),
                json!({labels::SIZE: "2", labels::LEADER_NAME: "t-0"}),
                "t",
            ),
            pod(
                "gang-1",
                json!({labels::NAME: "gang", labels::WORKER_INDEX: "0", labels::REVISION: "r1"}),
                json!({labels::SIZE: "2", labels::GANG_SCHEDULING: "native"}),
                "gang",
            ),
            bare(pod("b-0", leader("b"), json!({labels::SIZE: "2"}), "b")),
            bare(pod("b-0-1", lws("b"), json!({labels::SIZE: "2"}), "b")),
            pod("web-0", json!({"app": "web"}), json!({}), "web"),
        ];
        let mut no_labels = pod("n-0", json!({}), json!({}), "n");
        no_labels.metadata.labels = None;
        cases.push(no_labels);
        let mut tpu_init = tpu_pod("ti-0", leader("ti"), json!({labels::SIZE: "2"}), "ti");
        tpu_init
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0]
            .resources = Some(serde_json::from_value(json!({"requests": {TPU: "1"}})).unwrap());
        cases.push(tpu_init);

        for before in cases {
            let name = before.name_any();
            let mut after = before.clone();
            default_pod(&mut after).unwrap();
            let patch: json_patch::Patch = serde_json::from_slice(
                &serde_json::to_vec(&patch(&Before::of(&before), &after)).unwrap(),
            )
            .unwrap();
            let mut patched = serde_json::to_value(&before).unwrap();
            json_patch::patch(&mut patched, &patch).unwrap();
            assert_eq!(
                patched,
                serde_json::to_value(&after).unwrap(),
                "{name}: the patch of the defaultable fields ({patch:?}) makes the defaulted pod"
            );
        }
    }
}
