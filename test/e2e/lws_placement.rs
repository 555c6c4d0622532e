//! Subgroups (`subGroupPolicy`): the pod webhook gives every pod its subgroup index and key the
//! way upstream LWS v0.8 does for both policy types, templates carry the subgroup
//! annotations, and `subgroup-exclusive-topology` keeps each subgroup in a topology domain of
//! its own.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{Node, Pod},
};
use kube::api::ListParams;
use serde_json::json;
use sha1::{Digest, Sha1};

use crate::{
    harness::{TestNs, with_ns},
    lws_support::{create_available, label, lws, pods_of},
};

const SUBGROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/subgroup-index";
const SUBGROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/subgroup-key";
const SUBGROUP_SIZE: &str = "leaderworkerset.sigs.k8s.io/subgroup-size";
const SUBGROUP_TYPE: &str = "leaderworkerset.sigs.k8s.io/subgroup-policy-type";
const SUBGROUP_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology";
const SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
const LEADER_NAME: &str = "leaderworkerset.sigs.k8s.io/leader-name";
const ZONE: &str = "topology.kubernetes.io/zone";

fn with_subgroups(mut obj: serde_json::Value, size: i32, policy: &str) -> serde_json::Value {
    obj["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] =
        json!({"subGroupPolicyType": policy, "subGroupSize": size});
    obj
}

fn sha1_hex(text: &str) -> String {
    Sha1::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn env(pod: &Pod) -> Vec<(String, String)> {
    pod.spec.as_ref().map_or_else(Vec::new, |s| {
        s.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    })
}

/// Pod name → subgroup index label (None when the pod has none), and checks the key of each.
async fn subgroups(ns: &TestNs, name: &str) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    for pod in pods_of(ns, name).await? {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let index = label(&pod, SUBGROUP_INDEX).map(str::to_string);
        let leader = annotation(&pod, LEADER_NAME)
            .unwrap_or(&pod_name)
            .to_string();
        match &index {
            Some(i) => assert_eq!(
                label(&pod, SUBGROUP_KEY),
                Some(sha1_hex(&format!("{leader}/{i}")).as_str()),
                "{pod_name}: subgroup key is sha1(<leader>/<subgroup>)"
            ),
            None => assert_eq!(label(&pod, SUBGROUP_KEY), None, "{pod_name}"),
        }
        out.insert(pod_name, index);
    }
    Ok(out)
}

fn expect(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
    pairs
        .iter()
        .map(|(p, i)| (p.to_string(), i.map(str::to_string)))
        .collect()
}

async fn template_annotations(ns: &TestNs, sts: &str) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(ns
        .api::<StatefulSet>()
        .get(sts)
        .await?
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .unwrap_or_default())
}

#[tokio::test]
async fn subgroups_label_pods_for_leader_worker_and_leader_excluded() -> anyhow::Result<()> {
    with_ns("lws-subgroups", |ns| async move {
        // LeaderExcluded, size 5, subgroups of 2: the leader belongs to none; workers 1,2 | 3,4.
        let excluded = with_subgroups(lws("ex", 2, 5, "vllm:1"), 2, "LeaderExcluded");
        // LeaderWorker, size 4, subgroups of 2: size-1 is odd, so the leader counts as a
        // member: leader,1 | 2,3.
        let counted = with_subgroups(lws("lw", 1, 4, "vllm:1"), 2, "LeaderWorker");
        create_available(&ns, &excluded).await?;
        create_available(&ns, &counted).await?;

        let mut want = Vec::new();
        for g in ["ex-0", "ex-1"] {
            want.push((g.to_string(), None));
            for (w, s) in [(1, "0"), (2, "0"), (3, "1"), (4, "1")] {
                want.push((format!("{g}-{w}"), Some(s.to_string())));
            }
        }
        assert_eq!(
            subgroups(&ns, "ex").await?,
            want.into_iter().collect::<BTreeMap<_, _>>()
        );
        assert_eq!(
            subgroups(&ns, "lw").await?,
            expect(&[
                ("lw-0", Some("0")),
                ("lw-0-1", Some("0")),
                ("lw-0-2", Some("1")),
                ("lw-0-3", Some("1")),
            ])
        );

        // Annotations: size, subgroup size and (since v0.10, #945) the policy type on both
        // templates.
        let leader = template_annotations(&ns, "ex").await?;
        assert_eq!(leader.get(SIZE).map(String::as_str), Some("5"));
        assert_eq!(leader.get(SUBGROUP_SIZE).map(String::as_str), Some("2"));
        assert_eq!(
            leader.get(SUBGROUP_TYPE).map(String::as_str),
            Some("LeaderExcluded")
        );
        let worker = template_annotations(&ns, "ex-1").await?;
        assert_eq!(worker.get(SUBGROUP_SIZE).map(String::as_str), Some("2"));
        assert_eq!(worker.get(LEADER_NAME).map(String::as_str), Some("ex-1"));
        assert_eq!(
            worker.get(SUBGROUP_TYPE).map(String::as_str),
            Some("LeaderExcluded")
        );
        assert_eq!(
            template_annotations(&ns, "lw")
                .await?
                .get(SUBGROUP_TYPE)
                .map(String::as_str),
            Some("LeaderWorker")
        );

        // The LWS variables are unchanged by subgroups.
        let ns_name = ns.name.clone();
        for pod in pods_of(&ns, "ex").await? {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let group = &pod_name[..4];
            let worker = pod_name.get(5..).unwrap_or("0");
            assert_eq!(
                env(&pod),
                [
                    (
                        "LWS_LEADER_ADDRESS".to_string(),
                        format!("{group}.ex.{ns_name}")
                    ),
                    ("LWS_GROUP_SIZE".into(), "5".into()),
                    ("LWS_WORKER_INDEX".into(), worker.to_string()),
                ],
                "{pod_name}"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn subgroup_exclusive_topology_gives_each_subgroup_its_own_zone() -> anyhow::Result<()> {
    with_ns("lws-subgroup-excl", |ns| async move {
        // Size 5, subgroups of 2, LeaderWorker: size-1 is even, so the leader is an extra
        // member of subgroup 0: leader,1,2 | 3,4. Two subgroups, two zones.
        let mut obj = with_subgroups(lws("sx", 1, 5, "vllm:1"), 2, "LeaderWorker");
        obj["metadata"]["annotations"] = json!({SUBGROUP_TOPOLOGY: ZONE});
        create_available(&ns, &obj).await?;
        assert_eq!(
            subgroups(&ns, "sx").await?,
            expect(&[
                ("sx-0", Some("0")),
                ("sx-0-1", Some("0")),
                ("sx-0-2", Some("0")),
                ("sx-0-3", Some("1")),
                ("sx-0-4", Some("1")),
            ])
        );

        let nodes = ns.api_all::<Node>().list(&ListParams::default()).await?;
        let zone_of = |node: &str| {
            nodes
                .items
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(node))
                .and_then(|n| n.metadata.labels.as_ref()?.get(ZONE).cloned())
        };
        let mut zones: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
        for pod in pods_of(&ns, "sx").await? {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let key = label(&pod, SUBGROUP_KEY).unwrap_or_default().to_string();
            assert_eq!(
                annotation(&pod, SUBGROUP_TOPOLOGY),
                Some(ZONE),
                "{pod_name}"
            );
            // One affinity/anti-affinity pair on the subgroup key, per upstream's validator.
            let affinity = pod
                .spec
                .as_ref()
                .and_then(|s| s.affinity.clone())
                .unwrap_or_default();
            let terms = affinity
                .pod_affinity
                .and_then(|a| a.required_during_scheduling_ignored_during_execution)
                .unwrap_or_default();
            let anti = affinity
                .pod_anti_affinity
                .and_then(|a| a.required_during_scheduling_ignored_during_execution)
                .unwrap_or_default();
            assert_eq!((terms.len(), anti.len()), (1, 1), "{pod_name}");
            assert_eq!(terms[0].topology_key, ZONE);
            assert_eq!(anti[0].topology_key, ZONE);
            let expressions = |t: &k8s_openapi::api::core::v1::PodAffinityTerm| {
                t.label_selector
                    .clone()
                    .and_then(|s| s.match_expressions)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|e| (e.key, e.operator, e.values.unwrap_or_default()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                expressions(&terms[0]),
                [(
                    SUBGROUP_KEY.to_string(),
                    "In".to_string(),
                    vec![key.clone()]
                )],
                "{pod_name}"
            );
            assert_eq!(
                expressions(&anti[0]),
                [
                    (SUBGROUP_KEY.to_string(), "Exists".to_string(), vec![]),
                    (
                        SUBGROUP_KEY.to_string(),
                        "NotIn".to_string(),
                        vec![key.clone()]
                    )
                ],
                "{pod_name}"
            );
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            zones.entry(key).or_default().insert(zone_of(&node));
        }
        assert_eq!(zones.len(), 2, "two subgroups: {zones:?}");
        let placed: Vec<_> = zones.values().collect();
        for z in &placed {
            assert_eq!(z.len(), 1, "a subgroup stays in one zone: {zones:?}");
        }
        assert_ne!(placed[0], placed[1], "subgroups own their zones: {zones:?}");
        Ok(())
    })
    .await
}
