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
use thiserror::Error;

use super::{
    gang, labels,
    objects::{group_key, parent_and_ordinal, subgroup_key},
    volcano,
};
use crate::api::volcano::GROUP_NAME_ANNOTATION;

/// Why a pod cannot be admitted (the webhook fails the CREATE, as upstream does).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PodDefaultError {
    /// The StatefulSet template always sets the size annotation.
    #[error("size annotation is unexpectedly missing for pod {0}")]
    MissingSize(String),
    /// An annotation that must be a number is not.
    #[error("annotation {key} of pod {pod} is not a number: {value:?}")]
    NotANumber {
        /// Pod name.
        pod: String,
        /// Annotation key.
        key: &'static str,
        /// Its value.
        value: String,
    },
    /// LWS pods are StatefulSet pods, named `<parent>-<ordinal>`.
    #[error("parsing pod ordinal for pod {0}")]
    NoOrdinal(String),
}

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
    add_tpu_variables(pod, size)?;
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

const TPU: &str = "google.com/tpu";
const TPU_DEFAULT_PORT: &str = "8476";
const TPU_DEFAULT_PORT_NUMBER: i32 = 8476;

fn requests_tpus(c: &Container) -> bool {
    let nonzero = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        m.as_ref()
            .and_then(|m| m.get(TPU))
            .is_some_and(|q| super::quantity::canonical(&q.0).is_ok_and(|v| v != "0"))
    };
    c.resources
        .as_ref()
        .is_some_and(|r| nonzero(&r.limits) || nonzero(&r.requests))
}

/// Upstream v0.9's `AddTPUVariables`: no-op unless a container requests TPUs and the first
/// such container has neither `TPU_WORKER_HOSTNAMES` nor `TPU_WORKER_ID` yet. With subgroups,
/// the first TPU container gets its subgroup's hosts (as in v0.8); otherwise every TPU
/// container does (v0.9, #754): each pod is listed once per TPU container, container `i` on port
/// `8476 + i` unless it names its own `TPU_PROCESS_PORT`, and the worker id counts containers
/// (`pod index × containers + i`).
fn add_tpu_variables(pod: &mut Pod, size: i32) -> Result<(), PodDefaultError> {
    let name = pod.name_any();
    let labels_ = pod.labels().clone();
    let annotations = pod.annotations().clone();
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(());
    };
    let subdomain = spec.subdomain.clone().unwrap_or_default();
    let mut containers: Vec<&mut Container> = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
        .filter(|c| requests_tpus(c))
        .collect();
    let Some(first) = containers.first() else {
        return Ok(());
    };
    if first
        .env
        .iter()
        .flatten()
        .any(|e| e.name == "TPU_WORKER_HOSTNAMES" || e.name == "TPU_WORKER_ID")
    {
        return Ok(());
    }
    let user_port = |c: &Container| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == "TPU_PROCESS_PORT")
            .map(|e| e.value.clone().unwrap_or_default())
    };
    let is_leader = labels_.get(labels::WORKER_INDEX).map(String::as_str) == Some("0");
    let leader_has_tpus = annotations
        .get(labels::LEADER_REQUESTS_TPUS)
        .map(String::as_str)
        == Some("true");
    let parent = |n: &str| {
        parent_and_ordinal(n)
            .map(|(p, _)| p.to_string())
            .ok_or_else(|| PodDefaultError::NoOrdinal(n.to_string()))
    };
    let var = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        value_from: None,
    };

    if let Some(sgs) = annotations.get(labels::SUBGROUP_SIZE) {
        let num = |key: &'static str, v: Option<&String>| -> Result<i32, PodDefaultError> {
            let v = v.cloned().unwrap_or_default();
            v.parse().map_err(|_| PodDefaultError::NotANumber {
                pod: name.clone(),
                key,
                value: v,
            })
        };
        let sgs = num(labels::SUBGROUP_SIZE, Some(sgs))?.max(1);
        let mut subgroup = num(labels::SUBGROUP_INDEX, labels_.get(labels::SUBGROUP_INDEX))?;
        let worker = num(labels::WORKER_INDEX, labels_.get(labels::WORKER_INDEX))?;
        // Without TPUs on the leader the TPU hosts are the workers alone, numbered from worker
        // 1 (v0.10, #918: the leader keeps id 0 and its own subgroup; v0.9 gave it id -1).
        let worker_id = if worker != 0 && !leader_has_tpus {
            subgroup = (worker - 1) / sgs;
            (worker - 1) % sgs
        } else {
            worker % sgs
        };
        let mut hosts: Vec<String> = Vec::new();
        let leader;
        let (mut start, mut end) = (sgs * subgroup + 1, sgs * (subgroup + 1));
        if is_leader {
            leader = name.clone();
            hosts.push(leader.clone());
            end -= 1;
        } else {
            leader = parent(&name)?;
            if leader_has_tpus && subgroup == 0 {
                end -= 1;
                hosts.push(leader.clone());
            } else if leader_has_tpus {
                start -= 1;
                end -= 1;
            }
        }
        hosts.extend((start..=end).map(|i| format!("{leader}-{i}")));
        let container = &mut containers[0];
        let own_port = user_port(container);
        let port = own_port
            .clone()
            .unwrap_or_else(|| TPU_DEFAULT_PORT.to_string());
        let env = container.env.get_or_insert_with(Vec::new);
        env.push(var(
            "TPU_WORKER_HOSTNAMES",
            hosts
                .iter()
                .map(|h| format!("{h}.{subdomain}"))
                .collect::<Vec<_>>()
                .join(","),
        ));
        env.push(var("TPU_WORKER_ID", worker_id.to_string()));
        env.push(var("TPU_NAME", leader));
        env.push(var(
            "TPU_PROCESS_ADDRESSES",
            hosts
                .iter()
                .map(|h| format!("{h}.{subdomain}:{port}"))
                .collect::<Vec<_>>()
                .join(","),
        ));
        if own_port.is_none() {
            env.push(var("TPU_PROCESS_PORT", port));
        }
        return Ok(());
    }

    let (leader, pod_index) = if is_leader {
        (name.clone(), 0)
    } else {
        let ordinal = ordinal(&name).ok_or_else(|| PodDefaultError::NoOrdinal(name.clone()))?;
        (
            parent(&name)?,
            if leader_has_tpus {
                ordinal
            } else {
                ordinal - 1
            },
        )
    };
    let count = i32::try_from(containers.len()).unwrap_or(i32::MAX);
    let own_ports: Vec<Option<String>> = containers.iter().map(|c| user_port(c)).collect();
    let ports: Vec<String> = own_ports
        .iter()
        .zip(0..)
        .map(|(own, i)| {
            own.clone()
                .unwrap_or_else(|| (TPU_DEFAULT_PORT_NUMBER + i).to_string())
        })
        .collect();
    let mut pods: Vec<String> = Vec::new();
    if leader_has_tpus || is_leader {
        pods.push(leader.clone());
    }
    pods.extend((1..size).map(|i| format!("{leader}-{i}")));
    let subdomain = subdomain.as_str();
    let hostnames = pods
        .iter()
        .flat_map(|p| ports.iter().map(move |_| format!("{p}.{subdomain}")))
        .collect::<Vec<_>>()
        .join(",");
    let addresses = pods
        .iter()
        .flat_map(|p| {
            ports
                .iter()
                .map(move |port| format!("{p}.{subdomain}:{port}"))
        })
        .collect::<Vec<_>>()
        .join(",");
    for ((container, i), (own, port)) in containers
        .iter_mut()
        .zip(0..)
        .zip(own_ports.iter().zip(&ports))
    {
        let env = container.env.get_or_insert_with(Vec::new);
        env.push(var("TPU_WORKER_HOSTNAMES", hostnames.clone()));
        env.push(var("TPU_WORKER_ID", (pod_index * count + i).to_string()));
        env.push(var("TPU_NAME", leader.clone()));
        env.push(var("TPU_PROCESS_ADDRESSES", addresses.clone()));
        if own.is_none() {
            env.push(var("TPU_PROCESS_PORT", port.clone()));
        }
    }
    Ok(())
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
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
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

    fn env(p: &Pod, container: usize) -> Vec<(String, String)> {
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

    fn tpu_pod(
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

    fn var(p: &Pod, name: &str) -> Option<String> {
        env(p, 0)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    #[test]
    fn tpu_variables_match_upstream_e2e_expectations() {
        // Upstream's e2e: size 2, leader and worker request TPUs (Shared and UniquePerReplica).
        let mut leader = tpu_pod(
            "test-sample-0",
            json!({labels::NAME: "test-sample", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
            "test-sample",
        );
        default_pod(&mut leader).unwrap();
        assert_eq!(
            var(&leader, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("test-sample-0.test-sample,test-sample-0-1.test-sample")
        );
        assert_eq!(var(&leader, "TPU_WORKER_ID").as_deref(), Some("0"));
        assert_eq!(var(&leader, "TPU_NAME").as_deref(), Some("test-sample-0"));
        assert_eq!(var(&leader, "TPU_PROCESS_PORT").as_deref(), Some("8476"));
        assert_eq!(
            var(&leader, "TPU_PROCESS_ADDRESSES").as_deref(),
            Some("test-sample-0.test-sample:8476,test-sample-0-1.test-sample:8476")
        );
        assert_eq!(
            env(&leader, 0)[0].0,
            "LWS_LEADER_ADDRESS",
            "LWS variables still come first"
        );

        let mut worker = tpu_pod(
            "test-sample-0-1",
            json!({labels::NAME: "test-sample", labels::GROUP_INDEX: "0"}),
            json!({labels::SIZE: "2", labels::LEADER_REQUESTS_TPUS: "true", labels::LEADER_NAME: "test-sample-0"}),
            "test-sample-0",
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(
            var(&worker, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("test-sample-0.test-sample-0,test-sample-0-1.test-sample-0")
        );
        assert_eq!(var(&worker, "TPU_WORKER_ID").as_deref(), Some("1"));
    }

    /// v0.9 (#754): every TPU container gets the variables; each pod is listed once per TPU
    /// container, container `i` on port 8476 + i (or its own), ids counting containers.
    /// Upstream's unit and e2e cases (replicas 2, size 2, two TPU containers).
    #[test]
    fn every_tpu_container_gets_the_variables() {
        let two = |name: &str, labels: serde_json::Value, annotations: serde_json::Value| {
            let mut p = pod(name, labels, annotations, "default");
            let tpu = json!({"limits": {TPU: "4"}});
            let spec = p.spec.as_mut().unwrap();
            spec.containers[0].resources = Some(serde_json::from_value(tpu.clone()).unwrap());
            spec.containers
                .push(serde_json::from_value(json!({"name": "c2", "resources": tpu})).unwrap());
            p
        };
        let value = |p: &Pod, container: usize, name: &str| {
            env(p, container)
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
        };
        let hosts = "test-sample-0.default,test-sample-0.default,test-sample-0-1.default,test-sample-0-1.default";
        let mut leader = two(
            "test-sample-0",
            json!({labels::NAME: "test-sample", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
        );
        default_pod(&mut leader).unwrap();
        for (c, id, port) in [(0, "0", "8476"), (1, "1", "8477")] {
            assert_eq!(
                value(&leader, c, "TPU_WORKER_HOSTNAMES").as_deref(),
                Some(hosts)
            );
            assert_eq!(value(&leader, c, "TPU_WORKER_ID").as_deref(), Some(id));
            assert_eq!(
                value(&leader, c, "TPU_NAME").as_deref(),
                Some("test-sample-0")
            );
            assert_eq!(value(&leader, c, "TPU_PROCESS_PORT").as_deref(), Some(port));
            assert_eq!(
                value(&leader, c, "TPU_PROCESS_ADDRESSES").as_deref(),
                Some(
                    "test-sample-0.default:8476,test-sample-0.default:8477,test-sample-0-1.default:8476,test-sample-0-1.default:8477"
                )
            );
        }
        let mut worker = two(
            "test-sample-0-1",
            json!({labels::NAME: "test-sample", labels::GROUP_INDEX: "0"}),
            json!({labels::SIZE: "2", labels::LEADER_REQUESTS_TPUS: "true", labels::LEADER_NAME: "test-sample-0"}),
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(value(&worker, 0, "TPU_WORKER_ID").as_deref(), Some("2"));
        assert_eq!(value(&worker, 1, "TPU_WORKER_ID").as_deref(), Some("3"));
        assert_eq!(
            value(&worker, 1, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some(hosts)
        );

        // Custom ports per container are used in the addresses and not repeated.
        let mut custom = two(
            "test-sample-0",
            json!({labels::NAME: "test-sample", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
        );
        for (c, port) in custom
            .spec
            .as_mut()
            .unwrap()
            .containers
            .iter_mut()
            .zip(["8478", "8479"])
        {
            c.env = Some(vec![EnvVar {
                name: "TPU_PROCESS_PORT".into(),
                value: Some(port.into()),
                value_from: None,
            }]);
        }
        default_pod(&mut custom).unwrap();
        assert_eq!(
            value(&custom, 0, "TPU_PROCESS_ADDRESSES").as_deref(),
            Some(
                "test-sample-0.default:8478,test-sample-0.default:8479,test-sample-0-1.default:8478,test-sample-0-1.default:8479"
            )
        );
        assert_eq!(
            env(&custom, 1)
                .iter()
                .filter(|(n, _)| n == "TPU_PROCESS_PORT")
                .count(),
            1
        );
    }

    #[test]
    fn tpu_ids_shift_when_the_leader_has_no_tpus_and_subgroups_list_their_own_hosts() {
        let mut worker = tpu_pod(
            "g-0-2",
            json!({labels::NAME: "g"}),
            json!({labels::SIZE: "3", labels::LEADER_NAME: "g-0"}),
            "g",
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(
            var(&worker, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("g-0-1.g,g-0-2.g")
        );
        assert_eq!(var(&worker, "TPU_WORKER_ID").as_deref(), Some("1"));

        // size 5, subgroups of 2, leader without TPUs: worker 3 is in subgroup 1 with worker 4.
        let mut sub = tpu_pod(
            "g-0-3",
            json!({labels::NAME: "g"}),
            json!({labels::SIZE: "5", labels::SUBGROUP_SIZE: "2", labels::LEADER_NAME: "g-0"}),
            "g",
        );
        default_pod(&mut sub).unwrap();
        assert_eq!(
            var(&sub, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("g-0-3.g,g-0-4.g")
        );
        assert_eq!(var(&sub, "TPU_WORKER_ID").as_deref(), Some("0"));
        assert_eq!(var(&sub, "TPU_NAME").as_deref(), Some("g-0"));
    }

    /// Upstream v0.10's `TestAddTPUVariablesSubGroup` cases for subgroups of 1 and the leader
    /// (#918): (pod, worker index label, subgroup label, leader requests TPUs, subgroup size,
    /// TPU_WORKER_ID, TPU_WORKER_HOSTNAMES).
    #[test]
    fn tpu_variables_with_subgroups_table() {
        for (name, worker, subgroup, leader_tpus, sgs, id, hosts) in [
            (
                "test-sample-0",
                "0",
                "0",
                false,
                "1",
                "0",
                "test-sample-0.default",
            ),
            (
                "test-sample-0",
                "0",
                "0",
                false,
                "2",
                "0",
                "test-sample-0.default,test-sample-0-1.default",
            ),
            (
                "prefill-0-1",
                "1",
                "1",
                true,
                "1",
                "0",
                "prefill-0-1.default",
            ),
            (
                "prefill-0-2",
                "2",
                "2",
                true,
                "1",
                "0",
                "prefill-0-2.default",
            ),
            (
                "prefill-0-1",
                "1",
                "1",
                false,
                "1",
                "0",
                "prefill-0-1.default",
            ),
            (
                "prefill-0-2",
                "2",
                "2",
                false,
                "1",
                "0",
                "prefill-0-2.default",
            ),
        ] {
            let mut annotations = json!({labels::SIZE: "3", labels::SUBGROUP_SIZE: sgs});
            if leader_tpus {
                annotations[labels::LEADER_REQUESTS_TPUS] = json!("true");
            }
            let mut p = tpu_pod(
                name,
                json!({labels::NAME: "x", labels::WORKER_INDEX: worker, labels::SUBGROUP_INDEX: subgroup}),
                annotations,
                "default",
            );
            default_pod(&mut p).unwrap();
            let case = format!("{name} leader TPUs {leader_tpus} subgroups of {sgs}");
            assert_eq!(var(&p, "TPU_WORKER_ID").as_deref(), Some(id), "{case}");
            assert_eq!(
                var(&p, "TPU_WORKER_HOSTNAMES").as_deref(),
                Some(hosts),
                "{case}"
            );
            let leader = name.rsplit_once('-').map_or(name, |(l, _)| l);
            let tpu_name = if worker == "0" { name } else { leader };
            assert_eq!(var(&p, "TPU_NAME").as_deref(), Some(tpu_name), "{case}");
        }
        // A whole group of 3 with subgroups of 1, leader without TPUs, through the webhook's
        // own subgroup labels: workers 1 and 2 each list only themselves, as id 0.
        for n in [1, 2] {
            let mut w = tpu_pod(
                &format!("g-0-{n}"),
                json!({labels::NAME: "g"}),
                json!({labels::SIZE: "3", labels::SUBGROUP_SIZE: "1", labels::LEADER_NAME: "g-0"}),
                "g",
            );
            default_pod(&mut w).unwrap();
            assert_eq!(w.labels()[labels::SUBGROUP_INDEX], n.to_string());
            assert_eq!(var(&w, "TPU_WORKER_ID").as_deref(), Some("0"));
            assert_eq!(var(&w, "TPU_WORKER_HOSTNAMES"), Some(format!("g-0-{n}.g")));
        }
    }

    #[test]
    fn a_user_tpu_port_is_kept_and_existing_tpu_variables_win() {
        let mut p = tpu_pod(
            "t-0",
            json!({labels::NAME: "t", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "1"}),
            "t",
        );
        p.spec.as_mut().unwrap().containers[0].env = Some(vec![EnvVar {
            name: "TPU_PROCESS_PORT".into(),
            value: Some("9000".into()),
            value_from: None,
        }]);
        default_pod(&mut p).unwrap();
        assert_eq!(
            var(&p, "TPU_PROCESS_ADDRESSES").as_deref(),
            Some("t-0.t:9000")
        );
        assert_eq!(
            env(&p, 0)
                .iter()
                .filter(|(n, _)| n == "TPU_PROCESS_PORT")
                .count(),
            1
        );

        let mut preset = tpu_pod(
            "t-0",
            json!({labels::NAME: "t", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
            "t",
        );
        preset.spec.as_mut().unwrap().containers[0].env = Some(vec![EnvVar {
            name: "TPU_WORKER_ID".into(),
            value: Some("7".into()),
            value_from: None,
        }]);
        default_pod(&mut preset).unwrap();
        assert_eq!(var(&preset, "TPU_WORKER_ID").as_deref(), Some("7"));
        assert_eq!(var(&preset, "TPU_WORKER_HOSTNAMES"), None);
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
