//! The objects a DisaggregatedSet makes, as upstream v0.9.0 makes them: one LeaderWorkerSet
//! per role and revision, `<set>-<revision>-<role>`, and one headless Service per role of the
//! serving revision, `<set>-<revision>-<role>-prv`. Pure builders.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Service, ServiceSpec},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::ResourceExt;

use crate::api::{
    disaggregatedset::{
        DisaggregatedRoleSpec, DisaggregatedSet, REVISION_LABEL, ROLE_LABEL, SET_NAME_LABEL,
    },
    leaderworkerset::LeaderWorkerSet,
};

/// `<set>-<revision>-<role>`.
pub fn lws_name(set: &str, role: &str, revision: &str) -> String {
    format!("{set}-{revision}-{role}")
}

/// `<set>-<revision>-<role>-prv`.
pub fn service_name(set: &str, role: &str, revision: &str) -> String {
    format!("{set}-{revision}-{role}-prv")
}

/// The labels of a role's LWS and of its pod templates: `app: <set>-<role>` and the set, role
/// and revision.
pub fn labels(set: &str, role: &str, revision: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), format!("{set}-{role}")),
        (ROLE_LABEL.to_string(), role.to_string()),
        (SET_NAME_LABEL.to_string(), set.to_string()),
        (REVISION_LABEL.to_string(), revision.to_string()),
    ])
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

/// The LWS of `role` at `revision` with `replicas` groups: the role's spec, its metadata's
/// labels (ours win) and annotations, our labels on both pod templates too.
pub fn lws(
    set: &DisaggregatedSet,
    role: &DisaggregatedRoleSpec,
    revision: &str,
    replicas: i32,
) -> LeaderWorkerSet {
    let set_name = set.name_any();
    let ours = labels(&set_name, &role.name, revision);
    let mut spec = role.lws_spec();
    spec.replicas = Some(replicas);
    let template = &mut spec.leader_worker_template;
    let worker_meta = template
        .worker_template
        .metadata
        .get_or_insert_with(Default::default);
    worker_meta.labels = Some(merged(worker_meta.labels.as_ref(), &ours));
    if let Some(leader) = template.leader_template.as_mut() {
        let meta = leader.metadata.get_or_insert_with(Default::default);
        meta.labels = Some(merged(meta.labels.as_ref(), &ours));
    }
    let role_meta = role.metadata.clone().unwrap_or_default();
    LeaderWorkerSet {
        metadata: ObjectMeta {
            name: Some(lws_name(&set_name, &role.name, revision)),
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

/// The headless, portless Service of `role` at `revision`, selecting its pods.
pub fn service(set: &DisaggregatedSet, role: &str, revision: &str) -> Service {
    let set_name = set.name_any();
    let selector = BTreeMap::from([
        (SET_NAME_LABEL.to_string(), set_name.clone()),
        (ROLE_LABEL.to_string(), role.to_string()),
        (REVISION_LABEL.to_string(), revision.to_string()),
    ]);
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&set_name, role, revision)),
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
        let lws = lws(&set, &set.spec.roles[0], "abcd1234", 0);
        assert_eq!(lws.name_any(), "pd-abcd1234-prefill");
        assert_eq!(lws.spec.replicas, Some(0));
        let labels = lws.labels();
        assert_eq!(labels["app"], "pd-prefill", "ours win over the role's");
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

        let svc = service(&set, "decode", "abcd1234");
        assert_eq!(svc.name_any(), "pd-abcd1234-decode-prv");
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(spec.ports.is_none());
        assert_eq!(spec.selector.unwrap()[ROLE_LABEL], "decode");
    }
}
