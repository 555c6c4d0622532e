//! Helpers of the Kueue e2e tests (docs/kueue.md): whether the cluster runs Kueue, a
//! ClusterQueue with `nvidia.com/gpu` quota and a LocalQueue per test, LWS manifests whose pods
//! ask for GPUs, and read-backs of Kueue's Workloads and gates.
//!
//! Kueue runs out of cluster beside the control plane (`test/kueue/start.sh`, started by
//! `test/cluster/up.sh` with `LWS_CLUSTER_KUEUE=1`). Each test gets a ClusterQueue of its own
//! (cluster-scoped, named after its namespace) on the ResourceFlavor of one node pool, so the
//! quota arithmetic of one test never depends on another's.

use std::{io::Write, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    },
};
use lws_rollout::api::kueue::{ADMISSION_GATE, JOB_UID_LABEL, Workload, condition};
use serde_json::{Value, json};

use crate::harness::{self, TestNs, wait_for_all};

/// The LocalQueue every Kueue test's LWS names.
pub const QUEUE: &str = "gpu-team";
/// The node pool whose ResourceFlavor the tests' ClusterQueues use (`pool-0`: kwok-node-0, -1).
pub const FLAVOR: &str = "pool-0";
/// Bound for anything Kueue and the controllers do together.
pub const WAIT: Duration = Duration::from_secs(90);

/// The state directory of the suite's cluster (the kubeconfig's directory).
pub fn state_dir() -> anyhow::Result<PathBuf> {
    let kubeconfig = harness::kubeconfig_path()?;
    Ok(std::path::Path::new(&kubeconfig)
        .parent()
        .context("the kubeconfig has no directory")?
        .to_path_buf())
}

/// Why the suite's cluster has no Kueue, if it has none (an error when there is no cluster at
/// all: that is a wrongly run suite, not a skip).
pub fn kueue_missing() -> anyhow::Result<Option<String>> {
    let dir = state_dir()?;
    if dir.join("pids/kueue.pid").exists() {
        return Ok(None);
    }
    Ok(Some(
        std::fs::read_to_string(dir.join("kueue/skipped"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| {
                format!(
                    "no Kueue in {} (LWS_CLUSTER_KUEUE=1 starts it)",
                    dir.display()
                )
            }),
    ))
}

/// `true` when Kueue runs; otherwise prints one `SKIPPED` line for `test` past cargo's capture
/// (a skipped Kueue test must never read as a silent pass).
pub fn kueue_or_skip(test: &str) -> anyhow::Result<bool> {
    Ok(match kueue_missing()? {
        None => true,
        Some(reason) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: Kueue off: {reason}");
            false
        }
    })
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

/// A ClusterQueue of the test's own (`e2e-<namespace>`) with `gpus` of `nvidia.com/gpu` quota
/// on [`FLAVOR`], and the LocalQueue [`QUEUE`] in the test's namespace pointing at it; returns
/// once both are Active. [`Queues::delete`] removes the ClusterQueue.
pub struct Queues {
    /// The ClusterQueue's name.
    pub cluster_queue: String,
    /// Its ResourceFlavor.
    pub flavor: String,
    api: Api<DynamicObject>,
}

impl Queues {
    /// Creates both queues on [`FLAVOR`].
    pub async fn create(ns: &TestNs, gpus: i64) -> anyhow::Result<Self> {
        Self::create_on(ns, gpus, FLAVOR).await
    }

    /// Creates both queues on the ResourceFlavor `flavor` (`pool-0` or `pool-1`).
    pub async fn create_on(ns: &TestNs, gpus: i64, flavor: &str) -> anyhow::Result<Self> {
        let cq_res = resource("ClusterQueue", "clusterqueues");
        let lq_res = resource("LocalQueue", "localqueues");
        let api: Api<DynamicObject> = Api::all_with(ns.client.clone(), &cq_res);
        let name = format!("e2e-{}", ns.name);
        let cq: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                     "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": flavor, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
        }))?;
        api.patch(&name, &PatchParams::apply("e2e-user"), &Patch::Apply(&cq))
            .await
            .with_context(|| format!("creating ClusterQueue {name}"))?;
        let queues = Self {
            cluster_queue: name.clone(),
            flavor: flavor.to_string(),
            api,
        };
        let lq = local_queue(QUEUE, &name);
        let lq_api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &lq_res);
        lq_api
            .patch(QUEUE, &PatchParams::apply("e2e-user"), &Patch::Apply(&lq))
            .await
            .context("creating the LocalQueue")?;
        wait_active(&queues.api, &name).await?;
        wait_active(&lq_api, QUEUE).await?;
        Ok(queues)
    }

    /// Sets the ClusterQueue's GPU quota.
    pub async fn set_gpus(&self, gpus: i64) -> anyhow::Result<()> {
        let patch = json!({"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": self.flavor, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}});
        self.api
            .patch(
                &self.cluster_queue,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }

    /// Deletes the ClusterQueue (the namespace, and the LocalQueue with it, goes with the test).
    pub async fn delete(&self) {
        let _ = self
            .api
            .delete(&self.cluster_queue, &DeleteParams::background())
            .await;
    }
}

/// A LocalQueue `name` feeding ClusterQueue `cq`.
pub fn local_queue(name: &str, cq: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": name}, "spec": {"clusterQueue": cq}
    }))
    .expect("a LocalQueue")
}

async fn wait_active(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    harness::wait_for(api, name, WAIT, |o: Option<&DynamicObject>| {
        o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .any(|c| c["type"] == "Active" && c["status"] == "True")
    })
    .await
    .with_context(|| format!("{name} Active"))?;
    Ok(())
}

/// Runs `test` with [`Queues`] of `gpus`, deleting the ClusterQueue afterwards on every path.
pub async fn with_queues<F, Fut>(ns: &TestNs, gpus: i64, test: F) -> anyhow::Result<()>
where
    F: FnOnce(Queues) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let queues = Queues::create(ns, gpus).await?;
    let cleanup = Queues {
        cluster_queue: queues.cluster_queue.clone(),
        flavor: queues.flavor.clone(),
        api: queues.api.clone(),
    };
    let outcome =
        futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(test(queues))).await;
    cleanup.delete().await;
    match outcome {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// An LWS in [`QUEUE`]: `replicas` groups of `size` pods (a leader template when `size > 1`),
/// every pod asking for one GPU, running `image`.
pub fn queued_lws(name: &str, replicas: i32, size: i32, image: &str) -> Value {
    let container = json!({"name": "model", "image": image,
        "resources": {"limits": {"nvidia.com/gpu": "1"}}});
    let mut lwt = json!({"size": size,
        "workerTemplate": {"metadata": {"labels": {"app": name, "role": "worker"}},
                           "spec": {"containers": [container.clone()]}}});
    if size > 1 {
        let mut leader = container;
        leader["ports"] = json!([{"name": "http", "containerPort": 8000}]);
        lwt["leaderTemplate"] = json!({"metadata": {"labels": {"app": name, "role": "leader"}},
                                       "spec": {"containers": [leader]}});
    }
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt}
    })
}

/// The Workloads Kueue made for the LWS with uid `uid`, by group index.
pub async fn workloads(ns: &TestNs, uid: &str) -> anyhow::Result<Vec<Workload>> {
    let mut list = ns
        .api::<Workload>()
        .list(&ListParams::default().labels(&format!("{JOB_UID_LABEL}={uid}")))
        .await?
        .items;
    list.sort_by_key(|w| w.group_index());
    Ok(list)
}

/// Waits until the Workloads of the LWS with uid `uid` satisfy `cond`.
pub async fn wait_workloads(
    ns: &TestNs,
    uid: &str,
    what: &str,
    cond: impl Fn(&[std::sync::Arc<Workload>]) -> bool,
) -> anyhow::Result<Vec<std::sync::Arc<Workload>>> {
    wait_for_all(
        &ns.api::<Workload>(),
        &format!("{JOB_UID_LABEL}={uid}"),
        WAIT,
        cond,
    )
    .await
    .with_context(|| format!("Workloads: {what}"))
}

/// Group indexes of the admitted Workloads among `w`.
pub fn admitted(w: &[std::sync::Arc<Workload>]) -> Vec<i32> {
    let mut v: Vec<i32> = w
        .iter()
        .filter(|w| w.is(condition::ADMITTED))
        .filter_map(|w| w.group_index())
        .collect();
    v.sort_unstable();
    v
}

/// Whether Kueue's admission gate holds `pod`.
pub fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

/// The LWS's uid.
pub async fn uid_of(ns: &TestNs, name: &str) -> anyhow::Result<String> {
    ns.api::<lws_rollout::api::LeaderWorkerSet>()
        .get(name)
        .await?
        .metadata
        .uid
        .context("no uid")
}

/// Fails unless every pod of group `group` of `lws` is Pending behind Kueue's gate.
pub fn assert_group_gated(pods: &[Pod], lws: &str, group: i32) -> anyhow::Result<()> {
    let of_group: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            crate::lws_support::label(p, crate::lws_support::NAME) == Some(lws)
                && crate::lws_support::label(p, crate::lws_support::GROUP_INDEX)
                    == Some(group.to_string().as_str())
        })
        .collect();
    if of_group.is_empty() {
        bail!("group {group} of {lws} has no pods");
    }
    for p in of_group {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if !gated(p)
            || phase != Some("Pending")
            || p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        {
            bail!(
                "pod {} of group {group} is not held by Kueue's gate: phase {phase:?}, gates {:?}",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.scheduling_gates.clone())
            );
        }
    }
    Ok(())
}

/// Labels the namespace so the test cluster's Kueue LWS webhooks skip it
/// (`lws-rollout.test/kueue-webhooks=off`, test/kueue/start.sh): for a test of a spec Kueue's
/// webhook would refuse at admission. No-op effect on a cluster without Kueue.
pub async fn opt_out_of_kueue_webhooks(ns: &TestNs) -> anyhow::Result<()> {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"lws-rollout.test/kueue-webhooks": "off"}}}),
            ),
        )
        .await?;
    // The API server matches webhooks against its cached namespace labels: wait until a
    // dry-run create of what Kueue refuses is no longer sent to Kueue.
    let probe: lws_rollout::api::LeaderWorkerSet = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "kueue-opt-out-probe"},
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"memory": "1e1.5"}}}]}}}}
    }))?;
    let api = ns.api::<lws_rollout::api::LeaderWorkerSet>();
    let dry = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&dry, &probe).await {
            Err(e) if e.to_string().contains("leaderworkerset.kb.io") => {
                if tokio::time::Instant::now() > deadline {
                    bail!(
                        "Kueue's LWS webhooks still see namespace {} after 30s: {e}",
                        ns.name
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => return Ok(()),
        }
    }
}
