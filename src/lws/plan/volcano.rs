//! Volcano gang scheduling ([`crate::lws::volcano`]): the Volcano PodGroup of each group whose
//! leader pod exists, as upstream LWS makes it — once the leader exists and is not being
//! deleted, before the group's worker StatefulSet (the apply writes PodGroups first), never
//! updated. Nothing is deleted here: a PodGroup is owned by its leader pod, so the garbage
//! collector removes it with the leader (a new revision, a recreated group, a scale-down, the
//! LWS deleted). A PodGroup of the same name still owned by a previous leader of the group (a
//! restart on the same revision) is left to the garbage collector, and its deletion wakes the
//! reconcile that makes the new leader's.

use kube::ResourceExt;

use super::{How, OnRefusal, Plan, Write, gangs, reasons};
use crate::{
    api::{
        leaderworkerset::LeaderWorkerSet,
        volcano::{GROUP, VERSION, VolcanoPodGroup},
    },
    k8s::events::EventSpec,
    lws::{
        error::Failure,
        observe::{Observed, VolcanoObserved},
        volcano,
    },
};

/// Why the LWS's groups cannot be built, if they cannot: the manager hands groups to Volcano,
/// but the API server does not serve Volcano's PodGroups. Nothing is built — pods that name a
/// PodGroup that can never exist would wait for ever (upstream stalls the same groups with
/// only a log line).
pub fn blocked(lws: &LeaderWorkerSet, observed: &Observed) -> Option<Failure> {
    (matches!(observed.volcano, VolcanoObserved::NotServed)
        && volcano::applies(Some(volcano::GangProvider::Volcano), lws.annotations()))
    .then(|| {
        Failure::blocked(
            gangs::NOT_SERVED,
            format!(
                "the manager runs with --gang-scheduling-provider=volcano, but the API server \
                 does not serve Volcano's {GROUP}/{VERSION} PodGroups (install Volcano, then \
                 restart the manager); no group is built until it does"
            ),
        )
    })
}

/// Plans the Volcano PodGroups of `lws`'s groups (a no-op unless Volcano gang scheduling is on
/// and served, and the LWS does not ask for native gang scheduling).
pub fn plan(lws: &LeaderWorkerSet, observed: &Observed, plan: &mut Plan) {
    let VolcanoObserved::Served(existing) = &observed.volcano else {
        return;
    };
    if !volcano::applies(Some(volcano::GangProvider::Volcano), lws.annotations()) {
        return;
    }
    for leader in &observed.leaders {
        if leader.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(pg) = volcano::pod_group(lws, leader) else {
            continue;
        };
        let name = pg.name_any();
        if existing.iter().any(|e| e.name_any() == name) {
            continue;
        }
        plan.volcano_pod_groups.push(write(pg));
    }
}

fn write(pg: VolcanoPodGroup) -> Write<VolcanoPodGroup> {
    let name = pg.name_any();
    Write {
        object: pg,
        how: How::CreateIfAbsent,
        on_success: Vec::new(),
        on_failure: vec![EventSpec::warning(
            reasons::FAILED_CREATE,
            format!("Failed to create Volcano PodGroup {name}"),
        )],
        on_refusal: Some(OnRefusal {
            reason: reasons::FAILED_CREATE,
            what: format!("the API server refused Volcano PodGroup {name}"),
            blocks: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::{api::volcano::GROUP_NAME_ANNOTATION, k8s::pod::CachedPod, lws::labels};

    fn lws(annotations: serde_json::Value) -> LeaderWorkerSet {
        serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "g", "namespace": "ns", "uid": "lws-uid", "annotations": annotations},
            "spec": {"replicas": 3, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}},
        }))
        .unwrap()
    }

    fn leader(index: i32, revision: &str, deleting: bool) -> Arc<CachedPod> {
        let mut pod: Pod = serde_json::from_value(json!({"metadata": {
            "name": format!("g-{index}"), "namespace": "ns", "uid": format!("uid-{index}"),
            "labels": {labels::NAME: "g", labels::WORKER_INDEX: "0",
                labels::GROUP_INDEX: index.to_string(), labels::REVISION: revision},
            "annotations": {GROUP_NAME_ANNOTATION: format!("g-{index}-{revision}")},
        }}))
        .unwrap();
        if deleting {
            pod.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
            );
        }
        Arc::new(CachedPod::from(&pod))
    }

    fn existing(name: &str) -> Arc<VolcanoPodGroup> {
        Arc::new(VolcanoPodGroup::new(name, Default::default()))
    }

    #[test]
    fn volcano_podgroups_follow_the_leaders_table() {
        struct Case {
            name: &'static str,
            annotations: serde_json::Value,
            volcano: VolcanoObserved,
            leaders: Vec<Arc<CachedPod>>,
            creates: Vec<&'static str>,
            blocked: bool,
        }
        let served =
            |names: &[&str]| VolcanoObserved::Served(names.iter().map(|n| existing(n)).collect());
        let cases = [
            Case {
                name: "each leader's group gets its PodGroup",
                annotations: json!({}),
                volcano: served(&[]),
                leaders: vec![leader(0, "r1", false), leader(1, "r1", false)],
                creates: vec!["g-0-r1", "g-1-r1"],
                blocked: false,
            },
            Case {
                name: "existing ones are left as they are (never updated)",
                annotations: json!({}),
                volcano: served(&["g-0-r1"]),
                leaders: vec![leader(0, "r1", false), leader(1, "r2", false)],
                creates: vec!["g-1-r2"],
                blocked: false,
            },
            Case {
                name: "a leader being deleted gets none",
                annotations: json!({}),
                volcano: served(&[]),
                leaders: vec![leader(0, "r1", true)],
                creates: vec![],
                blocked: false,
            },
            Case {
                name: "Volcano off: nothing",
                annotations: json!({}),
                volcano: VolcanoObserved::Off,
                leaders: vec![leader(0, "r1", false)],
                creates: vec![],
                blocked: false,
            },
            Case {
                name: "a native gang LWS is left to the kube-scheduler",
                annotations: json!({labels::GANG_SCHEDULING: "native"}),
                volcano: served(&[]),
                leaders: vec![leader(0, "r1", false)],
                creates: vec![],
                blocked: false,
            },
            Case {
                name: "configured but not served: blocked, nothing made",
                annotations: json!({}),
                volcano: VolcanoObserved::NotServed,
                leaders: vec![leader(0, "r1", false)],
                creates: vec![],
                blocked: true,
            },
        ];
        for case in cases {
            let lws = lws(case.annotations);
            let observed = Observed {
                leaders: case.leaders,
                volcano: case.volcano,
                ..Default::default()
            };
            assert_eq!(
                blocked(&lws, &observed).is_some(),
                case.blocked,
                "{}",
                case.name
            );
            let mut p = Plan::default();
            plan(&lws, &observed, &mut p);
            let made: Vec<String> = p
                .volcano_pod_groups
                .iter()
                .map(|w| w.object.name_any())
                .collect();
            assert_eq!(made, case.creates, "{}", case.name);
        }
    }
}
