//! Kueue's "Run LeaderWorkerSet in Multi-Cluster" with our manager on both clusters: two local
//! clusters of the test's own (manager and worker, each its own control plane, Kueue and
//! lws-rollout manager), MultiKueue configured on the manager. An LWS submitted on the manager
//! cluster is dispatched whole to the worker cluster and runs there; its pods on the manager
//! cluster stay gated; our manager there says on the LWS where each group runs; a release of
//! the LWS runs on the worker cluster; deleting the LWS on the manager removes it on the worker.
//! docs/kueue.md ("MultiKueue").

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use lws_rollout::api::{LeaderWorkerSet, kueue::Workload};
use serde_json::{Value, json};

use crate::{
    harness::{TestNs, wait_for, wait_for_all},
    isolated::{IsolatedCluster, ManagerProcess},
    kueue_support::{
        QUEUE, Queues, WAIT, admitted, gated, kueue_or_skip, local_queue, queued_lws, uid_of,
    },
    lws_support::{NAME, available_with},
    rollout_support::{
        STABLE, approve, create_rollout, finished, rollout, wait_paused_at, wait_rollout,
    },
};

/// The name MultiKueue knows the worker cluster by.
const WORKER: &str = "worker1";

fn kueue_api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
            plural,
        ),
    )
}

async fn apply_kueue(
    client: &kube::Client,
    kind: &str,
    plural: &str,
    obj: Value,
) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let o: DynamicObject = serde_json::from_value(obj)?;
    kueue_api(client, kind, plural)
        .patch(&name, &PatchParams::apply("e2e-user"), &Patch::Apply(&o))
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    Ok(())
}

async fn wait_condition(
    client: &kube::Client,
    kind: &str,
    plural: &str,
    name: &str,
    type_: &str,
) -> anyhow::Result<()> {
    wait_for(
        &kueue_api(client, kind, plural),
        name,
        WAIT,
        |o: Option<&DynamicObject>| {
            o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        },
    )
    .await
    .with_context(|| format!("{kind} {name} {type_}"))?;
    Ok(())
}

struct Cluster {
    cluster: IsolatedCluster,
    manager: ManagerProcess,
}

impl Cluster {
    async fn start(name: &str) -> anyhow::Result<Self> {
        let cluster = IsolatedCluster::start(name, &[("LWS_CLUSTER_KUEUE", "1")]).await?;
        let manager = ManagerProcess::start(&cluster, "1", &["--leader-elect=false"])?;
        Ok(Self { cluster, manager })
    }

    async fn namespace(&self, name: &str) -> anyhow::Result<TestNs> {
        self.cluster.namespace(name).await
    }
}

#[test]
fn kueue_multikueue_dispatches_an_lws_whole_to_the_worker_cluster() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(multikueue_body)
}

async fn multikueue_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_multikueue_dispatches_an_lws_whole_to_the_worker_cluster")? {
        return Ok(());
    }
    let (manager, worker) = tokio::join!(Cluster::start("mk-manager"), Cluster::start("mk-worker"));
    let (mut manager, mut worker) = (manager?, worker?);
    let outcome = multikueue_flow(&manager, &worker).await;
    if outcome.is_err() {
        for (what, c) in [("manager", &mut manager), ("worker", &mut worker)] {
            if let Ok(wls) = Api::<Workload>::all(c.cluster.client.clone())
                .list(&ListParams::default())
                .await
            {
                for w in wls {
                    eprintln!(
                        "{what} cluster Workload {}: owners {:?}, cluster {:?}, conditions {:?}",
                        w.metadata.name.unwrap_or_default(),
                        w.metadata
                            .owner_references
                            .unwrap_or_default()
                            .iter()
                            .map(|o| format!("{}/{}", o.kind, o.name))
                            .collect::<Vec<_>>(),
                        w.status.cluster_name,
                        w.status
                            .conditions
                            .iter()
                            .map(|c| format!("{}={}", c.type_, c.status))
                            .collect::<Vec<_>>()
                    );
                }
            }
            c.cluster.keep_logs();
            eprintln!("{what} cluster manager log:\n{}", c.manager.log_tail());
        }
    }
    outcome
}

async fn multikueue_flow(manager: &Cluster, worker: &Cluster) -> anyhow::Result<()> {
    let ns_name = "mk";
    // The worker mirrors the manager's namespace and LocalQueue (MultiKueue creates the
    // Workloads and the LWS in the same namespace there); its ClusterQueue has the quota.
    let wns = worker.namespace(ns_name).await?;
    let wq = Queues::create(&wns, 8).await?;
    let mns = manager.namespace(ns_name).await?;
    let mc = &manager.cluster.client;
    // The manager: MultiKueueCluster (the worker's admin kubeconfig, by path: this Kueue runs
    // out of cluster on the same host), MultiKueueConfig, an AdmissionCheck of MultiKueue's,
    // and a ClusterQueue that requires it.
    apply_kueue(
        mc,
        "MultiKueueCluster",
        "multikueueclusters",
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
            "metadata": {"name": WORKER},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Path",
                "location": worker.cluster.kubeconfig.display().to_string()}}}
        }),
    )
    .await?;
    apply_kueue(
        mc,
        "MultiKueueConfig",
        "multikueueconfigs",
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
            "metadata": {"name": "mk"}, "spec": {"clusters": [WORKER]}
        }),
    )
    .await?;
    apply_kueue(mc, "AdmissionCheck", "admissionchecks", json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
        "metadata": {"name": "mk"},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                 "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "mk"}}
    }))
    .await?;
    let cq = format!("e2e-{ns_name}");
    apply_kueue(mc, "ClusterQueue", "clusterqueues", json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": cq},
        "spec": {"namespaceSelector": {},
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "pool-0", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}],
                 "admissionChecksStrategy": {"admissionChecks": [{"name": "mk"}]}}
    }))
    .await?;
    let lq: Api<DynamicObject> = Api::namespaced_with(
        mc.clone(),
        ns_name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "LocalQueue"),
            "localqueues",
        ),
    );
    lq.patch(
        QUEUE,
        &PatchParams::apply("e2e-user"),
        &Patch::Apply(&local_queue(QUEUE, &cq)),
    )
    .await?;
    wait_condition(
        mc,
        "MultiKueueCluster",
        "multikueueclusters",
        WORKER,
        "Active",
    )
    .await?;
    wait_condition(mc, "AdmissionCheck", "admissionchecks", "mk", "Active").await?;
    wait_condition(mc, "ClusterQueue", "clusterqueues", &cq, "Active").await?;

    // Submitted on the manager cluster.
    let v1 = queued_lws(STABLE, 2, 2, "vllm:1");
    crate::lws_support::apply(&mns, &v1).await?;
    let uid = uid_of(&mns, STABLE).await?;
    // Dispatched whole: every group's Workload admitted through the worker, all on it.
    let local = wait_for_all(
        &mns.api::<Workload>(),
        &format!("kueue.x-k8s.io/job-uid={uid}"),
        WAIT,
        |w| {
            w.len() == 2
                && admitted(w) == [0, 1]
                && w.iter()
                    .all(|w| w.status.cluster_name.as_deref() == Some(WORKER))
        },
    )
    .await
    .context("both groups dispatched to the worker and admitted")?;
    ensure!(local.len() == 2);
    // It runs on the worker: the LWS MultiKueue made there, our manager's groups, all ready.
    let remote = wait_for(
        &wns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        available_with(2, 2),
    )
    .await?
    .context("the LWS on the worker")?;
    ensure!(
        remote
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("kueue.x-k8s.io/multikueue-origin"),
        "made by MultiKueue: {:?}",
        remote.metadata.labels
    );
    let remote_pods = wns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{NAME}={STABLE}")))
        .await?;
    ensure!(
        remote_pods.items.len() == 4 && remote_pods.items.iter().all(crate::lws_support::pod_ready)
    );
    // MultiKueue copies the Workloads without owners; our manager on the worker makes its LWS
    // their owner, so replacing a group's pods (the release below) cannot let the garbage
    // collector take a Workload that nobody would make again (docs/kueue.md).
    let remote_uid = remote.metadata.uid.clone().unwrap_or_default();
    // MultiKueue's copies on the worker: Kueue v0.19 leaves the manager's `job-uid` label off
    // them (v0.17 kept it); they carry MultiKueue's origin label.
    let copies = "kueue.x-k8s.io/multikueue-origin";
    wait_for_all(&wns.api::<Workload>(), copies, WAIT, |w| {
        w.len() == 2
            && w.iter().all(|w| {
                w.metadata.owner_references.iter().flatten().any(|o| {
                    o.kind == "LeaderWorkerSet" && o.uid == remote_uid && o.controller.is_none()
                })
            })
    })
    .await
    .context("the worker's group Workloads owned by the worker's LWS")?;
    let uids = |w: &[Workload]| {
        let mut u: Vec<_> = w.iter().filter_map(|w| w.metadata.uid.clone()).collect();
        u.sort();
        u
    };
    let worker_workloads = uids(
        &wns.api::<Workload>()
            .list(&ListParams::default().labels(copies))
            .await?
            .items,
    );
    // On the manager cluster the group's pods exist and stay gated; Kueue never runs them here.
    let local_pods = wait_for_all(&mns.api::<Pod>(), &format!("{NAME}={STABLE}"), WAIT, |p| {
        p.len() == 4
    })
    .await?;
    ensure!(
        local_pods.iter().all(|p| gated(p)),
        "pods on the manager cluster stay gated"
    );
    // Our manager on the manager cluster says where each group runs.
    crate::harness::events_when(&mns, WAIT, |events| {
        (0..2).all(|g| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("DispatchedByMultiKueue")
                    && e.note.as_deref().is_some_and(|n| {
                        n.starts_with(&format!(
                            "group {g} runs on cluster {WORKER} (dispatched by MultiKueue)"
                        ))
                    })
            })
        })
    })
    .await
    .context("a DispatchedByMultiKueue Event on the LWS for each group")?;

    // A release where the LWS runs: on the worker cluster, with a Rollout there. The canary
    // waits in the worker's queue (it is a local LWS of the worker: no MultiKueue origin).
    create_rollout(
        &wns,
        &rollout(
            json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            None,
        ),
    )
    .await?;
    // (kubectl patch --type=json: the worker's LWS was written by MultiKueue, not applied.)
    let images: Vec<Value> = ["leaderTemplate", "workerTemplate"]
        .iter()
        .map(|t| json!({"op": "replace", "path": format!("/spec/leaderWorkerTemplate/{t}/spec/containers/0/image"), "value": "vllm:2"}))
        .collect();
    wns.api::<LeaderWorkerSet>()
        .patch(
            STABLE,
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(Value::Array(images))?),
        )
        .await?;
    wait_paused_at(&wns, 1).await?;
    let canary = crate::rollout_support::the_canary(&wns).await?;
    ensure!(
        !canary
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("kueue.x-k8s.io/multikueue-origin"),
        "the canary is the worker's own"
    );
    approve(&wns).await?;
    wait_rollout(&wns, "finished on the worker", finished("True")).await?;
    wait_for(&wns.api(), STABLE, WAIT, available_with(2, 2)).await?;
    let rolled = wns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{NAME}={STABLE}")))
        .await?;
    ensure!(
        rolled
            .items
            .iter()
            .all(|p| crate::lws_support::image(p) == "vllm:2")
    );
    // Every group was replaced, and its Workload on the worker is the same object throughout.
    let after = wns
        .api::<Workload>()
        .list(&ListParams::default().labels(copies))
        .await?
        .items;
    ensure!(
        uids(&after) == worker_workloads,
        "the worker's group Workloads outlived the release: {worker_workloads:?} → {:?}",
        uids(&after)
    );

    // Deleted on the manager cluster: gone on the worker too, Workloads on both.
    mns.api::<LeaderWorkerSet>()
        .delete(STABLE, &DeleteParams::foreground())
        .await?;
    wait_for(
        &wns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        |l: Option<&LeaderWorkerSet>| l.is_none(),
    )
    .await
    .context("the worker's LWS deleted with the manager's")?;
    wait_for_all(
        &mns.api::<Workload>(),
        &format!("kueue.x-k8s.io/job-uid={uid}"),
        WAIT,
        |w| w.is_empty(),
    )
    .await?;
    let left = wns.api::<Workload>().list(&ListParams::default()).await?;
    if !left
        .items
        .iter()
        .all(|w| w.metadata.deletion_timestamp.is_some())
    {
        wait_for_all(&wns.api::<Workload>(), "", WAIT, |w| w.is_empty())
            .await
            .context("the worker's Workloads deleted")?;
    }
    wq.delete().await;
    let _ = remote;
    Ok(())
}
