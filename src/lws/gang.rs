//! Native gang scheduling of LWS groups (docs/lws.md, "Gang scheduling"): each group
//! incarnation gets a Kubernetes `scheduling.k8s.io/v1alpha2` PodGroup with a gang policy of
//! the group's size, and every pod of the group names it in `spec.schedulingGroup` (set by the
//! pod webhook, [`super::pod_defaults`]). The kube-scheduler then binds all of a group's pods
//! or none of them. Pure helpers shared by the plan and the pod webhook.
//!
//! A PodGroup is named after the group and the revision its pods run:
//! `<lws>-<group index>-<revision key>`. Its fields are immutable, and a group's size and
//! template change only with its revision, so a new revision is a new PodGroup name — a group
//! being rolled never has new pods join the old gang (whose `minCount` may be another size) —
//! while a group rebuilt on the same revision (a restart) joins the same PodGroup again.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::scheduling::v1alpha2::{
        GangSchedulingPolicy, PodGroup, PodGroupSchedulingConstraints, PodGroupSchedulingPolicy,
        PodGroupSpec, TopologyConstraint,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::ResourceExt;

use super::{labels, objects};
use crate::api::leaderworkerset::LeaderWorkerSet;

/// The API group and version of PodGroups, as discovery lists them.
pub const API_GROUP: &str = "scheduling.k8s.io";
/// See [`API_GROUP`].
pub const API_VERSION: &str = "v1alpha2";

/// The PodGroup condition the kube-scheduler writes after each attempt at the whole group.
pub const SCHEDULED_CONDITION: &str = "PodGroupScheduled";

/// Whether `annotations` (an LWS's, or a pod template's copy of them) ask for native gang
/// scheduling.
pub fn requested_by(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(labels::GANG_SCHEDULING).map(String::as_str) == Some(labels::GANG_NATIVE)
}

/// Whether the LWS's groups are gang-scheduled.
pub fn requested(lws: &LeaderWorkerSet) -> bool {
    requested_by(lws.annotations())
}

/// The PodGroup of group `index` running revision `revision` of LWS `lws`.
pub fn pod_group_name(lws: &str, index: i32, revision: &str) -> String {
    format!("{lws}-{index}-{revision}")
}

/// The PodGroup group `index` of `lws` joins while it runs revision `revision`: a gang of the
/// group's size, confined to one domain of the exclusive-topology key when the LWS has one,
/// owned by the LWS (so deleting the LWS takes its PodGroups) and labelled like the group's
/// pods, so the LWS's cache finds it.
pub fn pod_group(lws: &LeaderWorkerSet, index: i32, revision: &str) -> PodGroup {
    let name = lws.name_any();
    let topology = lws
        .annotations()
        .get(labels::EXCLUSIVE_TOPOLOGY)
        .map(|key| PodGroupSchedulingConstraints {
            topology: Some(vec![TopologyConstraint { key: key.clone() }]),
        });
    PodGroup {
        metadata: ObjectMeta {
            name: Some(pod_group_name(&name, index, revision)),
            namespace: lws.namespace(),
            labels: Some(BTreeMap::from([
                (labels::NAME.to_string(), name),
                (labels::GROUP_INDEX.to_string(), index.to_string()),
                (labels::REVISION.to_string(), revision.to_string()),
            ])),
            owner_references: objects::controller_ref(lws).map(|r| vec![r]),
            ..Default::default()
        },
        spec: PodGroupSpec {
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: Some(GangSchedulingPolicy {
                    min_count: objects::size(lws),
                }),
                ..Default::default()
            },
            scheduling_constraints: topology,
            ..Default::default()
        },
        status: None,
    }
}

/// The group index and revision a PodGroup of ours was made for (its labels).
pub fn identity(pg: &PodGroup) -> Option<(i32, &str)> {
    let labels = pg.metadata.labels.as_ref()?;
    let index = labels.get(labels::GROUP_INDEX)?.parse().ok()?;
    Some((index, labels.get(labels::REVISION)?.as_str()))
}

/// Whether two PodGroups ask the scheduler for the same thing (the fields we set; the API
/// server may default others).
pub fn same_policy(a: &PodGroup, b: &PodGroup) -> bool {
    let min = |pg: &PodGroup| pg.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count);
    let keys = |pg: &PodGroup| {
        pg.spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.as_ref())
            .map(|t| t.iter().map(|c| c.key.clone()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    min(a) == min(b) && keys(a) == keys(b)
}

/// The scheduler's last word on a PodGroup it could not place whole: the message of its
/// `PodGroupScheduled=False` condition.
pub fn unschedulable(pg: &PodGroup) -> Option<&str> {
    pg.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == SCHEDULED_CONDITION && c.status == "False")
        .map(|c| c.message.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn lws(spec: serde_json::Value, annotations: &[(&str, &str)]) -> LeaderWorkerSet {
        let mut lws: LeaderWorkerSet = serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "test", "namespace": "ns", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap();
        let annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()));
        lws.metadata.annotations = Some(annotations.collect());
        lws
    }

    #[test]
    fn a_group_gets_a_gang_of_its_size_named_after_group_and_revision() {
        let l = lws(
            json!({"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {}}}),
            &[(labels::GANG_SCHEDULING, "native")],
        );
        assert!(requested(&l));
        let pg = pod_group(&l, 1, "abc");
        assert_eq!(pg.metadata.name.as_deref(), Some("test-1-abc"));
        assert_eq!(
            pg.spec.scheduling_policy.gang.as_ref().unwrap().min_count,
            4
        );
        assert!(pg.spec.scheduling_constraints.is_none());
        assert_eq!(identity(&pg), Some((1, "abc")));
        assert_eq!(
            pg.metadata.owner_references.as_ref().unwrap()[0].kind,
            "LeaderWorkerSet"
        );
    }

    #[test]
    fn exclusive_topology_becomes_the_topology_constraint() {
        let key = "topology.kubernetes.io/zone";
        let l = lws(
            json!({"leaderWorkerTemplate": {"size": 2, "workerTemplate": {}}}),
            &[
                (labels::EXCLUSIVE_TOPOLOGY, key),
                (labels::GANG_SCHEDULING, "yes"),
            ],
        );
        let pg = pod_group(&l, 0, "r");
        let topology = pg.spec.scheduling_constraints.as_ref().unwrap();
        assert_eq!(topology.topology.as_ref().unwrap()[0].key, key);
        let mut other = pg.clone();
        other.spec.scheduling_constraints = None;
        assert!(!same_policy(&pg, &other));
        assert!(same_policy(&pg, &pg.clone()));
        assert!(!requested(&l), "only the value \"native\" opts in");
    }
}
