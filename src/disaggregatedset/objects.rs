//! The objects a DisaggregatedSet makes, as upstream v0.10.0 makes them: one LeaderWorkerSet
//! per slice, role and revision, `<set>-<slice>-<revision>-<role>`, and one headless Service per
//! role of a slice's serving revision, `<set>-<slice>-<revision>-<role>-prv`, the placement
//! policy's pod affinities on the LWS's pod templates. A v0.9 child (`<set>-<revision>-<role>`,
//! no slice label) is slice 0's. Pure builders.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec, Service, ServiceSpec,
    },
    apimachinery::pkg::apis::meta::v1::{
        LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
    },
};
use kube::ResourceExt;

use crate::api::{
    disaggregatedset::{
        DisaggregatedRoleSpec, DisaggregatedSet, PlacementType, REVISION_LABEL, ROLE_LABEL,
        SET_NAME_LABEL, SLICE_LABEL,
    },
    leaderworkerset::LeaderWorkerSet,
};

/// `<set>-<slice>-<revision>-<role>`.
pub fn lws_name(set: &str, slice: i32, role: &str, revision: &str) -> String {
    format!("{set}-{slice}-{revision}-{role}")
}

/// `<set>-<revision>-<role>`: a v0.9 child's name (slice 0's).
pub fn legacy_lws_name(set: &str, role: &str, revision: &str) -> String {
    format!("{set}-{revision}-{role}")
}

/// `<set>-<slice>-<revision>-<role>-prv`.
pub fn service_name(set: &str, slice: i32, role: &str, revision: &str) -> String {
    format!("{}-prv", lws_name(set, slice, role, revision))
}

/// The slice of a child: its slice label, 0 without one (a v0.9 child); `None` when the label
/// is not a slice index.
pub fn slice_of(labels: &BTreeMap<String, String>) -> Option<i32> {
    match labels.get(SLICE_LABEL).filter(|v| !v.is_empty()) {
        None => Some(0),
        Some(v) => v.parse().ok().filter(|s| *s >= 0),
    }
}

/// A child made by a v0.9 controller (no slice label).
pub fn is_legacy(labels: &BTreeMap<String, String>) -> bool {
    labels.get(SLICE_LABEL).is_none_or(|v| v.is_empty())
}

/// The labels of a role's LWS and of its pod templates: `app: <set>-<slice>-<role>` and the
/// set, role, slice and revision.
pub fn labels(set: &str, slice: i32, role: &str, revision: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), format!("{set}-{slice}-{role}")),
        (ROLE_LABEL.to_string(), role.to_string()),
        (SLICE_LABEL.to_string(), slice.to_string()),
        (SET_NAME_LABEL.to_string(), set.to_string()),
        (REVISION_LABEL.to_string(), revision.to_string()),
    ])
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn term(requirements: Vec<LabelSelectorRequirement>, topology: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_expressions: Some(requirements),
            match_labels: None,
        }),
        topology_key: topology.into(),
        ..Default::default()
    }
}

/// Adds the placement policy's required pod affinities to `pod` (keeping any it has): a
/// slice's pods share one domain; the set's other slices are kept out of it (a v0.9 pod, which
/// has no slice label, counts as slice 0's); with ExclusiveTopology, every other set's slices
/// too.
pub fn place(pod: &mut PodSpec, set: &str, slice: i32, placement: (PlacementType, &str)) {
    let (kind, topology) = placement;
    if kind == PlacementType::None {
        return;
    }
    let slice = slice.to_string();
    let affinity = pod.affinity.get_or_insert_with(Affinity::default);
    affinity
        .pod_affinity
        .get_or_insert_with(PodAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term(
            vec![
                requirement(SET_NAME_LABEL, "In", &[set]),
                requirement(SLICE_LABEL, "In", &[&slice]),
            ],
            topology,
        ));
    let mut other_slices = vec![requirement(SET_NAME_LABEL, "In", &[set])];
    if slice == "0" {
        // A v0.9 pod of this set is slice 0's own: only labelled pods of other slices repel.
        other_slices.push(requirement(SLICE_LABEL, "Exists", &[]));
    }
    other_slices.push(requirement(SLICE_LABEL, "NotIn", &[&slice]));
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    anti.push(term(other_slices, topology));
    if kind == PlacementType::ExclusiveTopology {
        anti.push(term(
            vec![
                requirement(SET_NAME_LABEL, "Exists", &[]),
                requirement(SET_NAME_LABEL, "NotIn", &[set]),
                requirement(SLICE_LABEL, "Exists", &[]),
            ],
            topology,
        ));
    }
}

/// The set as the controller of what it makes.
pub fn owner(set: &DisaggregatedSet) -> OwnerReference {
    OwnerReference {
        api_version: "disaggregatedset.x-k8s.io/v1".into(),
        kind: "DisaggregatedSet".into(),
        name: set.name_any(),
        uid: set.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn merged(
    user: Option<&BTreeMap<String, String>>,
    ours: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = user.cloned().unwrap_or_default();
    out.extend(ours.clone());
    out
}

/// The LWS of `role` at `revision` in `slice` with `replicas` groups: the role's spec, its
/// metadata's labels (ours win) and annotations, our labels and the placement's affinities on
/// both pod templates too.
pub fn lws(
    set: &DisaggregatedSet,
    slice: i32,
    role: &DisaggregatedRoleSpec,
    revision: &str,
    replicas: i32,
) -> LeaderWorkerSet {
    let set_name = set.name_any();
    let ours = labels(&set_name, slice, &role.name, revision);
    let placement = set
        .spec
        .placement_policy
        .as_ref()
        .and_then(|p| p.effective());
    let mut spec = role.lws_spec();
    spec.replicas = Some(replicas);
    let template = &mut spec.leader_worker_template;
    let worker_meta = template
        .worker_template
        .metadata
        .get_or_insert_with(Default::default);
    worker_meta.labels = Some(merged(worker_meta.labels.as_ref(), &ours));
    if let Some(placement) = placement {
        let pod = template
            .worker_template
            .spec
            .get_or_insert_with(Default::default);
        place(pod, &set_name, slice, placement);
    }
    if let Some(leader) = template.leader_template.as_mut() {
        let meta = leader.metadata.get_or_insert_with(Default::default);
        meta.labels = Some(merged(meta.labels.as_ref(), &ours));
        if let Some(placement) = placement {
            place(
                leader.spec.get_or_insert_with(Default::default),
                &set_name,
                slice,
                placement,
            );
        }
    }
    let role_meta = role.metadata.clone().unwrap_or_default();
    LeaderWorkerSet {
        metadata: ObjectMeta {
            name: Some(lws_name(&set_name, slice, &role.name, revision)),
            namespace: set.namespace(),
            labels: Some(merged(role_meta.labels.as_ref(), &ours)),
            annotations: role_meta.annotations.filter(|a| !a.is_empty()),
            owner_references: Some(vec![owner(set)]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// The headless, portless Service of `role` at `revision` in `slice`, selecting its pods.
pub fn service(set: &DisaggregatedSet, slice: i32, role: &str, revision: &str) -> Service {
    let set_name = set.name_any();
    let selector = BTreeMap::from([
        (SET_NAME_LABEL.to_string(), set_name.clone()),
        (ROLE_LABEL.to_string(), role.to_string()),
        (SLICE_LABEL.to_string(), slice.to_string()),
        (REVISION_LABEL.to_string(), revision.to_string()),
    ]);
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&set_name, slice, role, revision)),
            namespace: set.namespace(),
            labels: Some(selector.clone()),
            owner_references: Some(vec![owner(set)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector),
            ..Default::default()
        }),
        status: None,
    }
}

/// The Service of a v0.9 child adopted in place: `<set>-<revision>-<role>-prv`, selecting its
/// pods, which carry no slice label.
pub fn legacy_service(set: &DisaggregatedSet, role: &str, revision: &str) -> Service {
    let mut svc = service(set, 0, role, revision);
    svc.metadata.name = Some(format!(
        "{}-prv",
        legacy_lws_name(&set.name_any(), role, revision)
    ));
    if let Some(labels) = svc.metadata.labels.as_mut() {
        labels.remove(SLICE_LABEL);
    }
    if let Some(selector) = svc.spec.as_mut().and_then(|s| s.selector.as_mut()) {
        selector.remove(SLICE_LABEL);
    }
    svc
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lws_and_service_look_like_upstreams() {
        let set: DisaggregatedSet = serde_json::from_value(json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "ns", "uid": "set-uid"},
            "spec": {"roles": [
                {"name": "prefill", "metadata": {"labels": {"team": "a", "app": "mine"}, "annotations": {"x": "y"}},
                 "spec": {"replicas": 3, "leaderWorkerTemplate": {"size": 2,
                    "leaderTemplate": {"metadata": {"labels": {"l": "1"}}, "spec": {"containers": [{"name": "c"}]}},
                    "workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}}},
                {"name": "decode", "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}}}
            ]}
        }))
        .unwrap();
        let lws = lws(&set, 0, &set.spec.roles[0], "abcd1234", 0);
        assert_eq!(lws.name_any(), "pd-0-abcd1234-prefill");
        assert_eq!(lws.spec.replicas, Some(0));
        let labels = lws.labels();
        assert_eq!(labels["app"], "pd-0-prefill", "ours win over the role's");
        assert_eq!(labels[SLICE_LABEL], "0");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[REVISION_LABEL], "abcd1234");
        assert_eq!(lws.annotations()["x"], "y");
        let owner = &lws.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("DisaggregatedSet", "set-uid", Some(true))
        );
        let t = &lws.spec.leader_worker_template;
        let worker = t
            .worker_template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(worker[ROLE_LABEL], "prefill");
        let leader = t
            .leader_template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(
            (leader["l"].as_str(), leader[SET_NAME_LABEL].as_str()),
            ("1", "pd")
        );

        let svc = service(&set, 2, "decode", "abcd1234");
        assert_eq!(svc.name_any(), "pd-2-abcd1234-decode-prv");
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(spec.ports.is_none());
        let selector = spec.selector.unwrap();
        assert_eq!(
            (
                selector[ROLE_LABEL].as_str(),
                selector[SLICE_LABEL].as_str()
            ),
            ("decode", "2")
        );
    }

    fn terms(pod: &PodSpec) -> (Vec<String>, Vec<String>) {
        let show = |t: &PodAffinityTerm| {
            let exprs = t
                .label_selector
                .as_ref()
                .unwrap()
                .match_expressions
                .as_ref()
                .unwrap();
            let parts: Vec<String> = exprs
                .iter()
                .map(|e| {
                    format!(
                        "{} {} {:?}",
                        e.key,
                        e.operator,
                        e.values.clone().unwrap_or_default()
                    )
                })
                .collect();
            format!("{}@{}", parts.join(","), t.topology_key)
        };
        let a = pod.affinity.as_ref().unwrap();
        let affinity = a.pod_affinity.as_ref().map_or(vec![], |p| {
            p.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(show)
                .collect()
        });
        let anti = a.pod_anti_affinity.as_ref().map_or(vec![], |p| {
            p.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(show)
                .collect()
        });
        (affinity, anti)
    }

    /// Upstream's placement terms, table by table: None adds nothing; ExclusiveSlice keeps a
    /// slice together and the set's other slices out (slice 0 tolerating its v0.9 pods);
    /// ExclusiveTopology also keeps every other set's slices out.
    #[test]
    fn placement_adds_upstreams_affinity_terms() {
        let z = "topology.kubernetes.io/zone";
        let mut pod = PodSpec::default();
        place(&mut pod, "pd", 0, (PlacementType::None, z));
        assert!(pod.affinity.is_none());
        for (kind, slice, want_affinity, want_anti) in [
            (
                PlacementType::ExclusiveSlice,
                0,
                vec![format!(
                    "{SET_NAME_LABEL} In [\"pd\"],{SLICE_LABEL} In [\"0\"]@{z}"
                )],
                vec![format!(
                    "{SET_NAME_LABEL} In [\"pd\"],{SLICE_LABEL} Exists [],{SLICE_LABEL} NotIn [\"0\"]@{z}"
                )],
            ),
            (
                PlacementType::ExclusiveSlice,
                3,
                vec![format!(
                    "{SET_NAME_LABEL} In [\"pd\"],{SLICE_LABEL} In [\"3\"]@{z}"
                )],
                vec![format!(
                    "{SET_NAME_LABEL} In [\"pd\"],{SLICE_LABEL} NotIn [\"3\"]@{z}"
                )],
            ),
            (
                PlacementType::ExclusiveTopology,
                1,
                vec![format!(
                    "{SET_NAME_LABEL} In [\"pd\"],{SLICE_LABEL} In [\"1\"]@{z}"
                )],
                vec![
                    format!("{SET_NAME_LABEL} In [\"pd\"],{SLICE_LABEL} NotIn [\"1\"]@{z}"),
                    format!(
                        "{SET_NAME_LABEL} Exists [],{SET_NAME_LABEL} NotIn [\"pd\"],{SLICE_LABEL} Exists []@{z}"
                    ),
                ],
            ),
        ] {
            let mut pod = PodSpec::default();
            place(&mut pod, "pd", slice, (kind, z));
            assert_eq!(
                terms(&pod),
                (want_affinity, want_anti),
                "{kind:?} slice {slice}"
            );
        }
    }

    #[test]
    fn a_v09_child_is_slice_zeros() {
        let l = |v: Option<&str>| {
            v.map(|v| BTreeMap::from([(SLICE_LABEL.to_string(), v.to_string())]))
                .unwrap_or_default()
        };
        assert_eq!((slice_of(&l(None)), is_legacy(&l(None))), (Some(0), true));
        assert_eq!(
            (slice_of(&l(Some("4"))), is_legacy(&l(Some("4")))),
            (Some(4), false)
        );
        assert_eq!(slice_of(&l(Some("x"))), None);
        assert_eq!(
            legacy_lws_name("pd", "decode", "abcd1234"),
            "pd-abcd1234-decode"
        );
    }
}
