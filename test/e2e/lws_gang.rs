//! Native gang scheduling (docs/lws.md, "Gang scheduling"): the real kube-scheduler of the
//! local cluster (Kubernetes 1.36, `GenericWorkload` and `GangScheduling` on) places a gang
//! LWS's groups on KWOK nodes whole or not at all.
//!
//! Each test brings KWOK nodes of its own into the suite's cluster — tainted, labelled with a
//! pool of the test's, with `nvidia.com/gpu` capacity the test chooses — and its pods tolerate
//! only that taint and select only that pool, so the capacity is exactly what the test says
//! whatever else the suite runs. The nodes are deleted at the end.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, ensure};
use futures::FutureExt;
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    scheduling::v1alpha2::PodGroup,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use lws_rollout::api::leaderworkerset::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{TestNs, events_when, eventually, wait_for, wait_for_all, with_ns},
    isolated::{IsolatedCluster, ManagerProcess},
    lws_support::{apply, lws},
};

const GANG: &str = "lws-rollout.x-k8s.io/gang-scheduling";
const POOL: &str = "lws-rollout.test/gang-pool";
/// A topology key of the test nodes only: node i of a pool is in rack `i % 2`.
const RACK: &str = "lws-rollout.test/rack";
const GPUS_PER_POD: &str = "8";
const WAIT: Duration = Duration::from_secs(120);

/// KWOK nodes of one test's own: `count` nodes of 8 GPUs each in pool `pool`, tainted so that
/// only the test's pods land there. They are deleted by their pool label ([`with_pool`]).
struct Pool {
    nodes: Api<Node>,
    name: String,
    count: usize,
}

impl Pool {
    async fn new(ns: &TestNs, count: usize) -> anyhow::Result<Self> {
        let mut pool = Self {
            nodes: ns.api_all(),
            name: ns.name.clone(),
            count: 0,
        };
        for _ in 0..count {
            pool.add_node().await?;
        }
        Ok(pool)
    }

    async fn add_node(&mut self) -> anyhow::Result<()> {
        self.add_node_with(GPUS_PER_POD).await
    }

    /// A node of `gpus` GPUs.
    async fn add_node_with(&mut self, gpus: &str) -> anyhow::Result<()> {
        let name = format!("{}-{}", self.name, self.count);
        let capacity = json!({"cpu": "32", "memory": "256Gi", "pods": "110",
            "nvidia.com/gpu": gpus});
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", POOL: self.name,
                    RACK: format!("rack-{}", self.count % 2)}},
            "spec": {"taints": [{"key": POOL, "value": self.name, "effect": "NoSchedule"}]},
            "status": {"allocatable": capacity, "capacity": capacity},
        }))?;
        self.nodes.create(&PostParams::default(), &node).await?;
        self.count += 1;
        wait_for(&self.nodes, &name, WAIT, |n: Option<&Node>| {
            n.and_then(|n| n.status.as_ref()?.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .await
        .with_context(|| format!("node {name} Ready"))?;
        Ok(())
    }

    /// An LWS of `replicas` groups of `size` pods that each need a whole node of this pool (8
    /// GPUs), gang-scheduled when `gang`.
    fn lws(&self, name: &str, replicas: i32, size: i32, gang: bool) -> serde_json::Value {
        let mut obj = lws(name, replicas, size, "vllm/vllm-openai:v0.11.0");
        if gang {
            obj["metadata"]["annotations"] = json!({GANG: "native"});
        }
        let spec = &mut obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"];
        spec["nodeSelector"] = json!({POOL: self.name});
        spec["tolerations"] =
            json!([{"key": POOL, "operator": "Equal", "value": self.name, "effect": "NoSchedule"}]);
        spec["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": GPUS_PER_POD}});
        obj
    }
}

/// Runs `test` in a fresh namespace with a pool of `nodes` nodes, and deletes the nodes after
/// it, whatever its outcome.
async fn with_pool<F, Fut>(prefix: &str, nodes: usize, test: F) -> anyhow::Result<()>
where
    F: FnOnce(TestNs, Pool) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    with_ns(prefix, |ns| async move {
        let pool = Pool::new(&ns, nodes).await?;
        let nodes = Api::<Node>::all(ns.client.clone());
        let selector = format!("{POOL}={}", ns.name);
        let outcome = std::panic::AssertUnwindSafe(test(ns.clone(), pool))
            .catch_unwind()
            .await;
        // The pods first: KWOK finishes a deleted pod only on a node it still manages.
        let _ = ns
            .api::<LeaderWorkerSet>()
            .delete_collection(&DeleteParams::foreground(), &Default::default())
            .await;
        let _ = wait_for_all(&ns.api::<Pod>(), "", WAIT, |pods| pods.is_empty()).await;
        let _ = nodes
            .delete_collection(
                &DeleteParams::default(),
                &kube::api::ListParams::default().labels(&selector),
            )
            .await;
        match outcome {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
    .await
}

/// The LWS's pods by name, each with the node it is bound to (None: not bound).
async fn placement(ns: &TestNs, lws: &str) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    let pods = ns
        .api::<Pod>()
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("leaderworkerset.sigs.k8s.io/name={lws}")),
        )
        .await?;
    Ok(pods
        .items
        .iter()
        .map(|p| {
            (
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
            )
        })
        .collect())
}

fn bound(placement: &BTreeMap<String, Option<String>>) -> usize {
    placement.values().filter(|n| n.is_some()).count()
}

/// Waits until the LWS has `pods` pods of which `bound_count` are bound.
async fn wait_bound(
    ns: &TestNs,
    lws: &str,
    pods: usize,
    bound_count: usize,
) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    eventually(
        WAIT,
        &format!("{lws}: {pods} pods, {bound_count} bound"),
        || async {
            let p = placement(ns, lws).await?;
            Ok((p.len() == pods && bound(&p) == bound_count, p))
        },
    )
    .await
}

/// The condition `PodGroupScheduled` of the LWS's PodGroup for group 0, once it has status
/// `status`.
async fn pod_group_scheduled(ns: &TestNs, lws: &str, status: &str) -> anyhow::Result<PodGroup> {
    let groups = wait_for_all(
        &ns.api::<PodGroup>(),
        &format!("leaderworkerset.sigs.k8s.io/name={lws}"),
        WAIT,
        |pgs| {
            pgs.iter().any(|pg| {
                pg.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "PodGroupScheduled" && c.status == status)
                    })
            })
        },
    )
    .await
    .with_context(|| format!("{lws}: a PodGroup with PodGroupScheduled={status}"))?;
    ensure!(
        groups.len() == 1,
        "{lws}: one PodGroup for its one group: {groups:?}"
    );
    Ok((*groups[0]).clone())
}

/// `obj` (from [`Pool::lws`]) with each pod asking for `gpus` GPUs: a new revision whose pods
/// need nodes of that size.
fn with_gpus(mut obj: serde_json::Value, gpus: &str) -> serde_json::Value {
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": gpus}});
    obj
}

/// The pods of group `index` of `lws` in a placement.
fn group(
    placement: &BTreeMap<String, Option<String>>,
    lws: &str,
    index: i32,
) -> BTreeMap<String, Option<String>> {
    let leader = format!("{lws}-{index}");
    let worker = format!("{leader}-");
    placement
        .iter()
        .filter(|(name, _)| **name == leader || name.starts_with(&worker))
        .map(|(name, node)| (name.clone(), node.clone()))
        .collect()
}

/// Waits until group `index` of `lws` has `pods` pods (none terminating) on the LWS's current
/// revision, of which `bound_count` are bound.
async fn wait_group(
    ns: &TestNs,
    lws: &str,
    index: i32,
    pods: usize,
    bound_count: usize,
) -> anyhow::Result<()> {
    eventually(
        WAIT,
        &format!("{lws} group {index}: {pods} new pods, {bound_count} bound"),
        || async {
            let key = crate::lws_support::leader_key(ns, lws).await?;
            let listed = ns
                .api::<Pod>()
                .list(&kube::api::ListParams::default().labels(&format!(
                    "leaderworkerset.sigs.k8s.io/name={lws},\
                     leaderworkerset.sigs.k8s.io/group-index={index}"
                )))
                .await?;
            let new: Vec<_> = listed
                .items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.labels()
                            .get("leaderworkerset.sigs.k8s.io/template-revision-hash")
                            == Some(&key)
                })
                .collect();
            let bound_now = new
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            let done = listed.items.len() == pods && new.len() == pods && bound_now == bound_count;
            Ok((done, (listed.items.len(), new.len(), bound_now)))
        },
    )
    .await?;
    Ok(())
}

/// Waits for a PodGroup of group `index` of `lws` whose `PodGroupScheduled` is `status`.
async fn group_pod_group(
    ns: &TestNs,
    lws: &str,
    index: i32,
    status: &str,
) -> anyhow::Result<PodGroup> {
    let groups = wait_for_all(
        &ns.api::<PodGroup>(),
        &format!(
            "leaderworkerset.sigs.k8s.io/name={lws},leaderworkerset.sigs.k8s.io/group-index={index}"
        ),
        WAIT,
        |pgs| pgs.iter().any(|pg| scheduled_status(pg) == status),
    )
    .await
    .with_context(|| format!("{lws} group {index}: a PodGroup with PodGroupScheduled={status}"))?;
    groups
        .iter()
        .find(|pg| scheduled_status(pg) == status)
        .map(|pg| (**pg).clone())
        .context("found")
}

fn scheduled_status(pg: &PodGroup) -> String {
    pg.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodGroupScheduled"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn scheduled_message(pg: &PodGroup) -> String {
    pg.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodGroupScheduled"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_gang_binds_whole_or_not_at_all() -> anyhow::Result<()> {
    with_pool("lws-gang", 3, |ns, mut pool| async move {
        // Four pods of a whole node each, three nodes: the group cannot run whole.
        apply(&ns, &pool.lws("big", 1, 4, true)).await?;
        let pg = pod_group_scheduled(&ns, "big", "False").await?;
        let pg_name = pg.name_any();
        let placed = wait_bound(&ns, "big", 4, 0).await?;
        for pod in placed.keys() {
            let pod = ns.api::<Pod>().get(pod).await?;
            let named = pod.spec.as_ref().and_then(|s| s.scheduling_group.as_ref());
            ensure!(
                named.and_then(|g| g.pod_group_name.as_deref()) == Some(pg_name.as_str()),
                "{} joins PodGroup {pg_name}: {named:?}",
                pod.name_any()
            );
        }
        assert_eq!(
            pg.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count),
            Some(4),
            "a gang of the group's size"
        );
        // The scheduler's reason reaches the LWS's events.
        let message = scheduled_message(&pg);
        events_when(&ns, WAIT, |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("GangUnschedulable")
                    && e.note.as_deref().is_some_and(|n| n.contains("Group 0"))
            })
        })
        .await
        .with_context(|| format!("a GangUnschedulable event (scheduler said: {message})"))?;

        // A group that fits runs meanwhile: the waiting gang holds no GPU.
        apply(&ns, &pool.lws("small", 1, 2, true)).await?;
        wait_bound(&ns, "small", 2, 2).await?;
        ensure!(
            bound(&placement(&ns, "big").await?) == 0,
            "the big gang stays unbound"
        );

        // Room for the whole group: it binds, all four.
        ns.api::<LeaderWorkerSet>()
            .delete("small", &DeleteParams::foreground())
            .await?;
        wait_bound(&ns, "small", 0, 0).await?;
        ensure!(
            bound(&placement(&ns, "big").await?) == 0,
            "three free nodes are not enough for four"
        );
        pool.add_node().await?;
        let placed = wait_bound(&ns, "big", 4, 4).await?;
        let nodes: std::collections::BTreeSet<_> = placed.values().flatten().collect();
        ensure!(nodes.len() == 4, "a node each: {placed:?}");
        pod_group_scheduled(&ns, "big", "True").await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn without_gang_the_same_group_binds_three_of_four() -> anyhow::Result<()> {
    with_pool("lws-nogang", 3, |ns, pool| async move {
        apply(&ns, &pool.lws("big", 1, 4, false)).await?;
        // Three pods hold their nodes' GPUs, the fourth waits for ever: what gang prevents.
        let placed = wait_bound(&ns, "big", 4, 3).await?;
        let waiting: Vec<_> = placed.iter().filter(|(_, n)| n.is_none()).collect();
        let pod = ns.api::<Pod>().get(waiting[0].0).await?;
        ensure!(
            pod.spec
                .as_ref()
                .and_then(|s| s.scheduling_group.as_ref())
                .is_none(),
            "no gang asked for, no PodGroup named"
        );
        wait_for(&ns.api::<Pod>(), waiting[0].0, WAIT, |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref()?.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable")
                    })
                })
        })
        .await?;
        let groups = ns.api::<PodGroup>().list(&Default::default()).await?;
        ensure!(groups.items.is_empty(), "no PodGroups: {:?}", groups.items);
        // Turning gang on for running groups is refused: half a group in a gang never binds.
        let refused = apply(&ns, &pool.lws("big", 1, 4, true))
            .await
            .err()
            .context("adding the annotation to a running LWS is refused")?;
        ensure!(
            format!("{refused:#}").contains("cannot be added, changed or removed"),
            "{refused:#}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn two_gangs_competing_for_one_groups_room_one_runs_whole() -> anyhow::Result<()> {
    with_pool("lws-gang2", 4, |ns, pool| async move {
        apply(&ns, &pool.lws("a", 1, 4, true)).await?;
        apply(&ns, &pool.lws("b", 1, 4, true)).await?;
        // One of them binds whole; the other waits whole, told why.
        let (winner, loser) = eventually(WAIT, "one gang bound whole", || async {
            let (a, b) = (placement(&ns, "a").await?, placement(&ns, "b").await?);
            let state = (a.len(), bound(&a), b.len(), bound(&b));
            let won = match state {
                (4, 4, 4, 0) => Some(("a", "b")),
                (4, 0, 4, 4) => Some(("b", "a")),
                _ => None,
            };
            Ok((won.is_some(), (won, state)))
        })
        .await?
        .0
        .context("a winner")?;
        let pg = pod_group_scheduled(&ns, loser, "False").await?;
        ensure!(
            bound(&placement(&ns, loser).await?) == 0,
            "{loser} waits whole: {}",
            scheduled_message(&pg)
        );
        ensure!(bound(&placement(&ns, winner).await?) == 4);

        // The winner scaled to zero: its PodGroup goes with its group, and the loser binds.
        apply(&ns, &pool.lws(winner, 0, 4, true)).await?;
        wait_bound(&ns, loser, 4, 4).await?;
        wait_for_all(
            &ns.api::<PodGroup>(),
            &format!("leaderworkerset.sigs.k8s.io/name={winner}"),
            WAIT,
            |pgs| pgs.is_empty(),
        )
        .await
        .with_context(|| format!("{winner}'s PodGroup removed on scale-down"))?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn gang_asked_for_on_a_cluster_without_podgroups_says_so() -> anyhow::Result<()> {
    IsolatedCluster::run("gang-unserved", &[("LWS_CLUSTER_GANG", "0")], |cluster| {
        async move {
            let _manager = ManagerProcess::start(cluster, "gang", &[])?;
            let ns = cluster.namespace("gang-unserved").await?;
            let mut obj = lws("big", 1, 4, "vllm/vllm-openai:v0.11.0");
            obj["metadata"]["annotations"] = json!({GANG: "native"});
            apply(&ns, &obj).await?;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                "big",
                WAIT,
                |l: Option<&LeaderWorkerSet>| {
                    l.and_then(|l| l.status.as_ref()?.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "ReplicaFailure"
                                    && c.status == "True"
                                    && c.reason == "GangSchedulingUnavailable"
                                    && c.message.contains("scheduling.k8s.io/v1alpha2")
                            })
                        })
                },
            )
            .await?;
            events_when(&ns, WAIT, |events| {
                events.iter().any(|e| {
                    e.reason.as_deref() == Some("GangSchedulingUnavailable")
                        && e.type_.as_deref() == Some("Warning")
                })
            })
            .await?;
            // Nothing built that could hold part of a group.
            let pods = placement(&ns, "big").await?;
            ensure!(pods.is_empty(), "no pods: {pods:?}");
            Ok(())
        }
        .boxed()
    })
    .await
}

/// Each pod's PodGroup, by pod name.
async fn joined(ns: &TestNs, lws: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let pods = ns
        .api::<Pod>()
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("leaderworkerset.sigs.k8s.io/name={lws}")),
        )
        .await?;
    Ok(pods
        .items
        .iter()
        .map(|p| {
            let group = p.spec.as_ref().and_then(|s| s.scheduling_group.as_ref());
            let name = group.and_then(|g| g.pod_group_name.clone());
            (p.name_any(), name.unwrap_or_default())
        })
        .collect())
}

/// The LWS's PodGroups: name → uid.
async fn pod_groups(ns: &TestNs, lws: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let groups = ns
        .api::<PodGroup>()
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("leaderworkerset.sigs.k8s.io/name={lws}")),
        )
        .await?;
    Ok(groups
        .items
        .iter()
        .map(|pg| (pg.name_any(), pg.uid().unwrap_or_default()))
        .collect())
}

#[tokio::test]
async fn a_gang_lws_restarts_and_rolls_with_one_podgroup_per_group_incarnation()
-> anyhow::Result<()> {
    with_pool("lws-gang-roll", 4, |ns, pool| async move {
        // Exactly the room for both groups: a node per pod.
        apply(&ns, &pool.lws("g", 2, 2, true)).await?;
        wait_bound(&ns, "g", 4, 4).await?;
        let before = pod_groups(&ns, "g").await?;
        ensure!(before.len() == 2, "one PodGroup per group: {before:?}");
        let key = crate::lws_support::leader_key(&ns, "g").await?;
        let joined_before = joined(&ns, "g").await?;
        for (pod, group) in &joined_before {
            let index = if pod.starts_with("g-0") { 0 } else { 1 };
            ensure!(*group == format!("g-{index}-{key}"), "{pod} joins {group}");
        }

        // A restart rebuilds group 0 on the same revision: it joins the same PodGroup again.
        let worker_uid = ns.api::<Pod>().get("g-0-1").await?.uid();
        ns.api::<Pod>().delete("g-0-1", &DeleteParams::default()).await?;
        eventually(WAIT, "group 0 rebuilt and bound", || async {
            let leader = ns.api::<Pod>().get_opt("g-0").await?;
            let worker = ns.api::<Pod>().get_opt("g-0-1").await?;
            let placed = placement(&ns, "g").await?;
            let rebuilt = worker.as_ref().is_some_and(|w| w.uid() != worker_uid)
                && leader.is_some()
                && placed.len() == 4
                && bound(&placed) == 4;
            Ok((rebuilt, placed))
        })
        .await?;
        ensure!(
            pod_groups(&ns, "g").await? == before,
            "the same PodGroups, not new ones"
        );

        // A new template: each group moves to a new PodGroup, and the old ones go.
        let mut updated = pool.lws("g", 2, 2, true);
        updated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["image"] = json!("vllm/vllm-openai:v0.12.0");
        apply(&ns, &updated).await?;
        let new_key = eventually(WAIT, "a new revision on every pod, all bound", || async {
            let key_now = crate::lws_support::leader_key(&ns, "g").await?;
            let pods = ns
                .api::<Pod>()
                .list(&kube::api::ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=g"))
                .await?;
            let all_new = pods.items.len() == 4
                && key_now != key
                && pods.items.iter().all(|p| {
                    p.labels().get("leaderworkerset.sigs.k8s.io/template-revision-hash")
                        == Some(&key_now)
                        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                        && p.metadata.deletion_timestamp.is_none()
                });
            Ok((all_new, key_now))
        })
        .await?;
        let groups = eventually(WAIT, "only the new revision's PodGroups", || async {
            let groups = pod_groups(&ns, "g").await?;
            let names: Vec<_> = groups.keys().cloned().collect();
            Ok((
                names == [format!("g-0-{new_key}"), format!("g-1-{new_key}")],
                names,
            ))
        })
        .await?;
        for (pod, group) in joined(&ns, "g").await? {
            ensure!(groups.contains(&group), "{pod} joins one of {groups:?}: {group}");
        }
        Ok(())
    })
    .await
}

#[test]
fn a_canary_of_a_gang_lws_binds_whole() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(canary_binds_whole)
}

async fn canary_binds_whole() -> anyhow::Result<()> {
    use crate::rollout_support::{
        STABLE, create_rollout, phase, rollout, the_canary, wait_paused_at, wait_rollout,
    };
    // The stable's two groups fill four nodes; one node is spare: half a canary group.
    with_pool("lws-gang-canary", 5, |ns, mut pool| async move {
        crate::lws_support::create_available(&ns, &pool.lws(STABLE, 2, 2, true)).await?;
        create_rollout(&ns, &rollout(json!([{"replicas": 1, "pause": {}}]), None)).await?;
        wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;

        let mut updated = pool.lws(STABLE, 2, 2, true);
        updated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["image"] = json!("vllm/vllm-openai:v0.12.0");
        apply(&ns, &updated).await?;
        let canary = eventually(WAIT, "the canary LWS", || async {
            let canary = the_canary(&ns).await.ok();
            Ok((canary.is_some(), canary))
        })
        .await?
        .context("a canary")?;
        let canary = canary.name_any();
        ensure!(
            ns.api::<LeaderWorkerSet>().get(&canary).await?.annotations().get(GANG)
                == Some(&"native".to_string()),
            "the canary keeps gang scheduling"
        );
        // Room for one of its two pods: none binds, and the release says which group waits
        // for the scheduler, at its step.
        let pg = pod_group_scheduled(&ns, &canary, "False").await?;
        wait_bound(&ns, &canary, 2, 0).await?;
        let said = format!("group 0 cannot be scheduled whole (PodGroup {}): ", pg.name_any());
        let waiting = wait_rollout(&ns, "the release says why it waits", |r| {
            message(r).contains(&said)
        })
        .await?;
        ensure!(
            crate::rollout_support::step(&waiting).0 == 1,
            "{:?}",
            waiting.status
        );
        crate::rollout_support::wait_event(&ns, "CanaryNotReady", &said).await?;
        ensure!(bound(&placement(&ns, STABLE).await?) == 4, "the stable groups run on");

        // Room for the whole group: it binds whole and the release reaches its pause.
        pool.add_node().await?;
        wait_bound(&ns, &canary, 2, 2).await?;
        wait_paused_at(&ns, 1).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn exclusive_topology_keeps_a_gang_in_one_domain_and_a_gang_no_domain_holds_waits()
-> anyhow::Result<()> {
    // Two racks of two 8-GPU nodes each.
    with_pool("lws-gang-rack", 4, |ns, pool| async move {
        let in_racks = |name: &str, size: i32| {
            let mut obj = pool.lws(name, 1, size, true);
            obj["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] =
                json!(RACK);
            obj
        };
        // A group of four fits in no rack: it waits whole, the scheduler saying why, and is
        // not rebuilt over and over.
        apply(&ns, &in_racks("wide", 4)).await?;
        let pg = pod_group_scheduled(&ns, "wide", "False").await?;
        let topology = pg
            .spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.as_ref());
        ensure!(
            topology.is_some_and(|t| t[0].key == RACK),
            "the exclusive-topology key is the PodGroup's constraint: {topology:?}"
        );
        let waiting = wait_bound(&ns, "wide", 4, 0).await?;
        let leader_uid = ns.api::<Pod>().get("wide-0").await?.uid();
        // A group of two fits in one rack and runs there.
        apply(&ns, &in_racks("narrow", 2)).await?;
        let placed = wait_bound(&ns, "narrow", 2, 2).await?;
        let nodes = ns.api_all::<Node>();
        let mut racks = std::collections::BTreeSet::new();
        for node in placed.values().flatten() {
            racks.insert(nodes.get(node).await?.labels().get(RACK).cloned());
        }
        ensure!(racks.len() == 1, "one rack for the whole group: {racks:?}");
        let message = scheduled_message(&pg);
        events_when(&ns, WAIT, |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("GangUnschedulable")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains(&pg.name_any()))
            })
        })
        .await
        .with_context(|| format!("the scheduler's reason on the LWS: {message}"))?;
        // Still the same four pods, none bound: waiting, not recreated.
        let still = placement(&ns, "wide").await?;
        ensure!(
            still.keys().eq(waiting.keys()) && bound(&still) == 0,
            "{still:?} vs {waiting:?}"
        );
        ensure!(
            ns.api::<Pod>().get("wide-0").await?.uid() == leader_uid,
            "the waiting group's leader is the one it started with"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn under_kueue_an_admitted_gang_group_binds_whole_and_the_next_waits_for_quota()
-> anyhow::Result<()> {
    // Kueue gates each group's pods until it admits the group; the gang then binds it whole.
    use crate::kueue_support::{kueue_or_skip, queued_lws, with_queues};
    if !kueue_or_skip("lws_gang::under_kueue")? {
        return Ok(());
    }
    with_ns("lws-gang-kueue", |ns| async move {
        // Quota for one group of two one-GPU pods.
        with_queues(&ns, 2, |_queues| async {
            let mut obj = queued_lws("q", 2, 2, "vllm/vllm-openai:v0.11.0");
            obj["metadata"]["annotations"] = json!({GANG: "native"});
            apply(&ns, &obj).await?;
            // Kueue admits one group; the scheduler binds that one whole.
            let placed = eventually(WAIT, "one group bound whole", || async {
                let p = placement(&ns, "q").await?;
                let bound_groups: Vec<_> = ["q-0", "q-1"]
                    .iter()
                    .filter(|g| p.get(**g).is_some_and(Option::is_some))
                    .collect();
                Ok((p.len() == 4 && bound(&p) == 2 && bound_groups.len() == 1, p))
            })
            .await?;
            let running = if placed["q-0"].is_some() {
                "q-0"
            } else {
                "q-1"
            };
            ensure!(
                placed[&format!("{running}-1")].is_some(),
                "the admitted group's worker binds with its leader: {placed:?}"
            );
            let waiting = if running == "q-0" { "q-1" } else { "q-0" };
            for pod in [waiting.to_string(), format!("{waiting}-1")] {
                let pod = ns.api::<Pod>().get(&pod).await?;
                ensure!(
                    crate::kueue_support::gated(&pod),
                    "{} waits for Kueue's admission",
                    pod.name_any()
                );
            }
            let groups = pod_groups(&ns, "q").await?;
            ensure!(groups.len() == 2, "each group has its PodGroup: {groups:?}");
            Ok(())
        })
        .await
    })
    .await
}

#[tokio::test]
async fn a_rolling_update_of_a_gang_lws_moves_each_group_whole() -> anyhow::Result<()> {
    with_pool("lws-gang-update", 4, |ns, mut pool| async move {
        apply(&ns, &pool.lws("g", 2, 2, true)).await?;
        wait_bound(&ns, "g", 4, 4).await?;
        let old = pod_groups(&ns, "g").await?;
        // The new revision's pods need 16 GPUs, more than any node of the pool has.
        apply(&ns, &with_gpus(pool.lws("g", 2, 2, true), "16")).await?;
        // Group 1 goes first: its new pods wait whole, told why; group 0 runs on.
        let pg = group_pod_group(&ns, "g", 1, "False").await?;
        ensure!(
            !old.contains_key(&pg.name_any()),
            "a new PodGroup for the new revision"
        );
        wait_group(&ns, "g", 1, 2, 0).await?;
        events_when(&ns, WAIT, |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("GangUnschedulable")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("Group 1") && n.contains(&pg.name_any()))
            })
        })
        .await
        .with_context(|| {
            format!(
                "the scheduler's reason on the LWS: {}",
                scheduled_message(&pg)
            )
        })?;
        ensure!(
            bound(&group(&placement(&ns, "g").await?, "g", 0)) == 2,
            "group 0 keeps running while group 1 waits"
        );
        // Room for group 1: it binds whole; then group 0 rolls and waits whole in turn.
        pool.add_node_with("16").await?;
        pool.add_node_with("16").await?;
        wait_group(&ns, "g", 1, 2, 2).await?;
        group_pod_group(&ns, "g", 0, "False").await?;
        wait_group(&ns, "g", 0, 2, 0).await?;
        pool.add_node_with("16").await?;
        pool.add_node_with("16").await?;
        wait_group(&ns, "g", 0, 2, 2).await?;
        Ok(())
    })
    .await
}

#[test]
fn a_partition_release_of_a_gang_lws_moves_a_group_whole_and_says_why_it_waits()
-> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(partition_release_binds_whole)
}

async fn partition_release_binds_whole() -> anyhow::Result<()> {
    use crate::rollout_support::{
        STABLE, create_rollout, phase, rollout, wait_event, wait_paused_at, wait_rollout,
    };
    with_pool("lws-gang-partition", 4, |ns, mut pool| async move {
        crate::lws_support::create_available(&ns, &pool.lws(STABLE, 2, 2, true)).await?;
        let mut r = rollout(
            json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            None,
        );
        let canary = &mut r["spec"]["strategy"]["canary"];
        canary["enableExtraWorkloadForCanary"] = json!(false);
        canary
            .as_object_mut()
            .context("canary")?
            .remove("patchPodTemplateMetadata");
        create_rollout(&ns, &r).await?;
        wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;

        // The new template's pods need 16 GPUs: the user's group 1 moves in place and waits
        // whole, and the release says which group and the scheduler's reason.
        apply(&ns, &with_gpus(pool.lws(STABLE, 2, 2, true), "16")).await?;
        let pg = group_pod_group(&ns, STABLE, 1, "False").await?;
        wait_group(&ns, STABLE, 1, 2, 0).await?;
        let said = format!(
            "group 1 cannot be scheduled whole (PodGroup {}): ",
            pg.name_any()
        );
        let waiting = wait_rollout(&ns, "the release says why it waits", |r| {
            message(r).contains(&said)
        })
        .await?;
        ensure!(
            crate::rollout_support::step(&waiting).0 == 1,
            "waits at step 1: {:?}",
            crate::rollout_support::step(&waiting)
        );
        wait_event(&ns, "CanaryNotReady", &said).await?;
        ensure!(
            bound(&group(&placement(&ns, STABLE).await?, STABLE, 0)) == 2,
            "group 0 is not part of the batch and runs on"
        );
        // Room for the group: it binds whole and the release reaches its pause.
        pool.add_node_with("16").await?;
        pool.add_node_with("16").await?;
        wait_group(&ns, STABLE, 1, 2, 2).await?;
        wait_paused_at(&ns, 1).await?;
        Ok(())
    })
    .await
}

/// The Rollout's `status.message`.
fn message(r: &lws_rollout::api::rollout::Rollout) -> String {
    r.status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

#[test]
fn a_blue_green_release_of_a_gang_lws_binds_the_new_side_whole() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(blue_green_binds_whole)
}

async fn blue_green_binds_whole() -> anyhow::Result<()> {
    use crate::rollout_support::{
        STABLE, blue_green_rollout, create_rollout, phase, the_canary, wait_paused_at, wait_rollout,
    };
    // The stable group fills two nodes; one is spare: half a group of the new side.
    with_pool("lws-gang-bluegreen", 3, |ns, mut pool| async move {
        crate::lws_support::create_available(&ns, &pool.lws(STABLE, 1, 2, true)).await?;
        create_rollout(
            &ns,
            &blue_green_rollout(json!([{"replicas": "100%", "pause": {}}]), None),
        )
        .await?;
        wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;
        let mut updated = pool.lws(STABLE, 1, 2, true);
        updated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["image"] = json!("vllm/vllm-openai:v0.12.0");
        apply(&ns, &updated).await?;
        let green = eventually(WAIT, "the new side's LWS", || async {
            let green = the_canary(&ns).await.ok();
            Ok((green.is_some(), green))
        })
        .await?
        .context("a new side")?
        .name_any();
        ensure!(
            ns.api::<LeaderWorkerSet>().get(&green).await?.annotations().get(GANG)
                == Some(&"native".to_string()),
            "the new side keeps gang scheduling"
        );
        let pg = pod_group_scheduled(&ns, &green, "False").await?;
        wait_bound(&ns, &green, 2, 0).await?;
        let said = format!("group 0 cannot be scheduled whole (PodGroup {}): ", pg.name_any());
        wait_rollout(&ns, "the release says why it waits", |r| message(r).contains(&said)).await?;
        ensure!(bound(&placement(&ns, STABLE).await?) == 2, "the stable group runs on");
        pool.add_node().await?;
        wait_bound(&ns, &green, 2, 2).await?;
        wait_paused_at(&ns, 1).await?;
        Ok(())
    })
    .await
}

#[test]
fn a_release_whose_gang_group_cannot_bind_rolls_back_at_its_deadline() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(gang_release_misses_its_deadline)
}

async fn gang_release_misses_its_deadline() -> anyhow::Result<()> {
    use crate::rollout_support::{
        STABLE, condition, create_rollout, finalising, phase, rollout, wait_event, wait_rollout,
    };
    // Room for the stable group only: the canary group can never bind.
    with_pool("lws-gang-deadline", 2, |ns, pool| async move {
        crate::lws_support::create_available(&ns, &pool.lws(STABLE, 1, 2, true)).await?;
        let mut r = rollout(json!([{"replicas": 1, "pause": {}}]), None);
        r["metadata"]["annotations"] = json!({
            "lws-rollout.x-k8s.io/progress-deadline-seconds": "20",
            "lws-rollout.x-k8s.io/rollback-on-deadline": "true"
        });
        create_rollout(&ns, &r).await?;
        wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;
        let user_pods = crate::lws_support::uids(&ns, STABLE).await?;
        let mut updated = pool.lws(STABLE, 1, 2, true);
        updated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["image"] = json!("vllm/vllm-openai:v0.12.0");
        apply(&ns, &updated).await?;
        let late = wait_rollout(&ns, "deadline missed", |r| {
            condition(r, "Progressing")
                .is_some_and(|c| c.0 == "False" && c.1 == "RolledBackOnDeadline")
        })
        .await?;
        let msg = condition(&late, "Progressing").context("condition")?.2;
        ensure!(
            msg.contains("not ready within 20s")
                && msg.contains("group 0 cannot be scheduled whole (PodGroup "),
            "the message names the gang-blocked group: {msg}"
        );
        wait_event(&ns, "ProgressDeadlineExceeded", "cannot be scheduled whole").await?;
        // Rolled back: the canary and its PodGroups gone, the user's group untouched.
        wait_rollout(&ns, "canary removed", |r| {
            finalising(r) == "END" && phase(r) == "Progressing"
        })
        .await?;
        crate::rollout_crash::wait_for_all_canary(&ns, |c| c.is_empty()).await?;
        wait_for_all(&ns.api::<PodGroup>(), "", WAIT, |pgs| {
            pgs.iter().all(|pg| {
                pg.labels().get("leaderworkerset.sigs.k8s.io/name").map(String::as_str)
                    == Some(STABLE)
            })
        })
        .await
        .context("only the user's LWS has PodGroups")?;
        ensure!(
            crate::lws_support::uids(&ns, STABLE).await? == user_pods,
            "a user pod restarted"
        );
        ensure!(bound(&placement(&ns, STABLE).await?) == 2);
        Ok(())
    })
    .await
}
