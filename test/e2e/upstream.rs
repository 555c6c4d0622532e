//! The upstream LWS v0.8.0 controller runs out of cluster (`test/upstream/start.sh`): in a
//! cluster of its own (our global manager watches the suite's cluster, and two controllers must
//! not fight over the same objects), it turns a small LWS into Available groups through its own
//! webhooks, and `test/upstream/stop.sh` stops it and removes its webhook configurations.

use std::{path::Path, time::Duration};

use anyhow::Context;
use k8s_openapi::api::{
    admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
    apps::v1::StatefulSet,
    core::v1::Pod,
};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::wait_for,
    isolated::{IsolatedCluster, log_tail},
};

/// Environment variable naming the upstream manager binary (`test/upstream/build.sh`).
pub const UPSTREAM_BIN_ENV: &str = "LWS_E2E_UPSTREAM_BIN";

/// Runs `test/upstream/<script>` against `cluster` with the suite's prebuilt binaries.
pub async fn upstream_script(
    cluster: &IsolatedCluster,
    script: &str,
    args: &[&str],
) -> anyhow::Result<()> {
    let upstream = std::env::var(UPSTREAM_BIN_ENV).with_context(|| {
        format!("{UPSTREAM_BIN_ENV} is not set: run the e2e tests with test/run-tests.sh, which builds upstream LWS")
    })?;
    cluster
        .script(
            &format!("test/upstream/{script}"),
            args,
            &[("LWS_UPSTREAM_BIN", &upstream)],
        )
        .await
}

#[tokio::test]
async fn upstream_lws_runs_out_of_cluster_and_makes_an_lws_available() -> anyhow::Result<()> {
    let mut cluster = IsolatedCluster::start("upstream", &[]).await?;
    let result = upstream_makes_lws_available(&cluster).await;
    if result.is_err() {
        cluster.keep_logs();
        eprintln!(
            "upstream LWS log tail:\n{}",
            log_tail(&cluster.dir.join("logs/lws-upstream.log"))
        );
    }
    // Stop upstream (and delete its webhook configurations) on every path, then the cluster.
    let stopped = upstream_script(&cluster, "stop.sh", &[]).await;
    let configs_gone = if stopped.is_ok() && result.is_ok() {
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(cluster.client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(cluster.client.clone());
        mutating
            .get_opt("lws-mutating-webhook-configuration")
            .await?
            .is_none()
            && validating
                .get_opt("lws-validating-webhook-configuration")
                .await?
                .is_none()
    } else {
        true
    };
    cluster.stop();
    result?;
    stopped?;
    assert!(
        configs_gone,
        "stop.sh deletes the webhook configurations start.sh created"
    );
    assert!(
        !cluster.dir.join("pids").exists(),
        "every recorded process stopped"
    );
    Ok(())
}

async fn upstream_makes_lws_available(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    upstream_script(cluster, "start.sh", &[]).await?;
    let pid: i32 = std::fs::read_to_string(cluster.dir.join("pids/lws-upstream.pid"))?
        .trim()
        .parse()?;
    assert!(Path::new(&format!("/proc/{pid}")).exists(), "upstream runs");

    let ns = "default";
    let lws_api: Api<LeaderWorkerSet> = Api::namespaced(cluster.client.clone(), ns);
    let lws: LeaderWorkerSet = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "up"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": "registry.k8s.io/pause:3.10"}]}}}}
    }))?;
    lws_api.create(&PostParams::default(), &lws).await?;
    wait_for(
        &lws_api,
        "up",
        Duration::from_secs(120),
        |l: Option<&LeaderWorkerSet>| {
            l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
                s.ready_replicas == Some(2)
                    && s.conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Available" && c.status == "True")
            })
        },
    )
    .await
    .context("upstream LWS makes 2 groups of 2 Available")?;

    // Upstream's objects: leader StatefulSet, one worker StatefulSet per group, pods labelled by
    // its pod webhook.
    let sts: Api<StatefulSet> = Api::namespaced(cluster.client.clone(), ns);
    let mut names: Vec<_> = sts
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    names.sort();
    assert_eq!(names, ["up", "up-0", "up-1"]);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let pods = pods
        .list(&ListParams::default().labels("leaderworkerset.sigs.k8s.io/name=up"))
        .await?
        .items;
    assert_eq!(pods.len(), 4, "2 groups × size 2");
    for pod in &pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for key in [
            "leaderworkerset.sigs.k8s.io/group-index",
            "leaderworkerset.sigs.k8s.io/worker-index",
            "leaderworkerset.sigs.k8s.io/group-key",
        ] {
            assert!(
                labels.contains_key(key),
                "upstream's pod webhook sets {key} on {:?}",
                pod.metadata.name
            );
        }
    }
    Ok(())
}
