//! Migration from the upstream LWS controller (`test/upstream/versions.env`: v0.9.0, or v0.10.0): groups
//! upstream built keep running, pod for pod, when our manager replaces it (the procedure
//! docs/lws.md gives), and from then on our manager rolls them. In a cluster of its own, since
//! upstream and our suite manager must never both own the same objects.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, bail};
use k8s_openapi::api::{
    apps::v1::{ControllerRevision, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{wait_for, wait_for_all},
    isolated::{IsolatedCluster, ManagerProcess},
    lws_support::lws_revisions_in,
    upstream::upstream_script,
};

const NAME: &str = "leaderworkerset.sigs.k8s.io/name";
const REVISION: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";

fn available(ready: i32) -> impl Fn(Option<&LeaderWorkerSet>) -> bool {
    move |l: Option<&LeaderWorkerSet>| {
        l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
            s.ready_replicas == Some(ready)
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Available" && c.status == "True")
        })
    }
}

/// Pod name → (uid, revision label).
async fn pods(api: &Api<Pod>) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    Ok(api
        .list(&ListParams::default().labels(&format!("{NAME}=mig")))
        .await?
        .items
        .into_iter()
        .map(|p| {
            let labels = p.metadata.labels.unwrap_or_default();
            (
                p.metadata.name.unwrap_or_default(),
                (
                    p.metadata.uid.unwrap_or_default(),
                    labels.get(REVISION).cloned().unwrap_or_default(),
                ),
            )
        })
        .collect())
}

/// StatefulSet name → (template as JSON, updateRevision).
async fn statefulsets(
    api: &Api<StatefulSet>,
) -> anyhow::Result<BTreeMap<String, (serde_json::Value, String)>> {
    Ok(api
        .list(&ListParams::default().labels(&format!("{NAME}=mig")))
        .await?
        .items
        .into_iter()
        .map(|s| {
            let template =
                serde_json::to_value(s.spec.as_ref().map(|s| &s.template)).unwrap_or_default();
            let update = s.status.and_then(|s| s.update_revision).unwrap_or_default();
            (s.metadata.name.unwrap_or_default(), (template, update))
        })
        .collect())
}

#[tokio::test]
async fn groups_built_by_upstream_lws_keep_running_when_our_manager_takes_over()
-> anyhow::Result<()> {
    let mut cluster = IsolatedCluster::start("takeover", &[]).await?;
    let result = take_over(&cluster).await;
    if result.is_err() {
        cluster.keep_logs();
        let log =
            std::fs::read_to_string(cluster.dir.join("logs/manager-ours.log")).unwrap_or_default();
        let tail: Vec<_> = log.lines().rev().take(30).collect();
        eprintln!(
            "our manager's log tail:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let _ = upstream_script(&cluster, "stop.sh", &[]).await;
    cluster.stop();
    result
}

async fn take_over(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let client = cluster.client.clone();
    let lws_api: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), "default");
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), "default");

    // 1. Upstream builds 2 groups of 3, with its own webhooks.
    upstream_script(cluster, "start.sh", &[]).await?;
    let lws: LeaderWorkerSet = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "mig", "labels": {"team": "inference"}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": "vllm:1",
                "env": [{"name": "MODEL", "value": "llama"}],
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}}}}
    }))?;
    lws_api.create(&PostParams::default(), &lws).await?;
    wait_for(&lws_api, "mig", Duration::from_secs(120), available(2))
        .await
        .context("upstream makes the LWS Available")?;
    let pods_before = pods(&pod_api).await?;
    assert_eq!(pods_before.len(), 6);
    let sts_before = statefulsets(&sts_api).await?;
    let revisions_before = lws_revisions_in(
        &Api::<ControllerRevision>::namespaced(client.clone(), "default"),
        &ListParams::default().labels(&format!("{NAME}=mig")),
    )
    .await?;
    assert_eq!(revisions_before.len(), 1, "{revisions_before:?}");

    // 2. The migration: stop upstream, remove its webhook configurations (stop.sh), start ours.
    upstream_script(cluster, "stop.sh", &[]).await?;
    // Its PID is recorded with the cluster's, so stopping the cluster stops it.
    let _ours = ManagerProcess::start(cluster, "ours", &[])?;

    // Ours has reconciled once the worker StatefulSets carry its roster (upstream writes no
    // such annotation; since v0.9 it writes observedGeneration too, so that is no sign).
    for group in ["mig-0", "mig-1"] {
        wait_for(
            &sts_api,
            group,
            Duration::from_secs(60),
            |s: Option<&StatefulSet>| {
                s.and_then(|s| s.metadata.annotations.as_ref())
                    .is_some_and(|a| a.contains_key("lws-rollout.x-k8s.io/worker-uids"))
            },
        )
        .await
        .with_context(|| format!("our manager reconciled {group}"))?;
    }
    let lws_now = wait_for(
        &lws_api,
        "mig",
        Duration::from_secs(60),
        |l: Option<&LeaderWorkerSet>| {
            l.is_some_and(|l| {
                l.status.as_ref().and_then(|s| s.observed_generation) == l.metadata.generation
            }) && available(2)(l)
        },
    )
    .await?
    .context("the LWS")?;
    assert_eq!(
        lws_now.status.as_ref().and_then(|s| s.updated_replicas),
        Some(2)
    );

    // 3. Nothing restarted, nothing re-templated, no new revision.
    assert_eq!(
        pods(&pod_api).await?,
        pods_before,
        "every pod kept (same UIDs)"
    );
    let revisions_after = lws_revisions_in(
        &Api::<ControllerRevision>::namespaced(client.clone(), "default"),
        &ListParams::default().labels(&format!("{NAME}=mig")),
    )
    .await?;
    assert_eq!(revisions_after, revisions_before, "no new revision");
    let sts_after = statefulsets(&sts_api).await?;
    assert_eq!(
        sts_after.keys().collect::<Vec<_>>(),
        sts_before.keys().collect::<Vec<_>>()
    );
    for (name, (template, update)) in &sts_before {
        let (template_now, update_now) = &sts_after[name];
        assert_eq!(
            template_now, template,
            "StatefulSet {name}'s pod template unchanged"
        );
        assert_eq!(update_now, update, "StatefulSet {name} rolls nothing");
    }

    // The LWS's labels are on its leader StatefulSet (v0.10's; put there by ours when the
    // upstream was v0.9, with a metadata-only write that rolled nothing, as checked above).
    let leader_sts = sts_api.get("mig").await?;
    assert_eq!(
        leader_sts
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("inference")
    );

    // 4. From now on ours rolls the groups: an image change updates both, group by group.
    lws_api
        .patch(
            "mig",
            &PatchParams::apply("e2e-user").force(),
            &Patch::Apply(json!({
                "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": "mig"},
                "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
                    {"name": "model", "image": "vllm:2"}]}}}}
            })),
        )
        .await?;
    wait_for_all(
        &pod_api,
        &format!("{NAME}=mig"),
        Duration::from_secs(120),
        |pods| {
            pods.len() == 6
                && pods.iter().all(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.spec
                            .as_ref()
                            .is_some_and(|s| s.containers[0].image.as_deref() == Some("vllm:2"))
                })
        },
    )
    .await
    .context("every pod rolled to vllm:2 by our manager")?;
    let after_roll = wait_for(
        &lws_api,
        "mig",
        Duration::from_secs(60),
        |l: Option<&LeaderWorkerSet>| {
            available(2)(l)
                && l.and_then(|l| l.status.as_ref())
                    .is_some_and(|s| s.updated_replicas == Some(2))
        },
    )
    .await?;
    if after_roll.is_none() {
        bail!("the LWS vanished");
    }
    Ok(())
}

/// v0.9's revision matching across serialisation changes, on a cluster: an LWS whose leader
/// StatefulSet runs a revision another version or client recorded — under another key, its
/// bytes as an encoder before Kubernetes 1.34 wrote them (`"creationTimestamp": null`) — is
/// adopted as it is: no new revision, the StatefulSet keeps that key, the groups come up on
/// it. (Without the matching, the spec hashes to another key and the groups would roll.)
#[tokio::test]
async fn a_revision_recorded_in_another_serialisation_under_another_key_is_adopted()
-> anyhow::Result<()> {
    IsolatedCluster::run("older-revision", &[], |c| Box::pin(adopt_older_revision(c))).await
}

async fn adopt_older_revision(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    use lws_rollout::lws::{objects, upstream::revision};
    const OLDER_KEY: &str = "olderkey1";
    let client = cluster.client.clone();
    let lws_api: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), "default");
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let revisions_api: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    // What another controller left, before ours runs: the LWS, its revision and its leader
    // StatefulSet (scaled to 0, so no pod is made without our pod webhook).
    let lws: LeaderWorkerSet = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "old"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": "vllm:1"}]}}}}
    }))?;
    let lws = lws_api.create(&PostParams::default(), &lws).await?;
    let spec = serde_json::to_value(&lws.spec)?;
    let data = revision::revision_data(&spec)?;
    assert_ne!(revision::revision_key(&data), OLDER_KEY);
    let mut older: serde_json::Value = serde_json::from_str(&data)?;
    older["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["creationTimestamp"] =
        serde_json::Value::Null;
    let recorded = objects::controller_revision(&lws, OLDER_KEY, 1, &older.to_string())?;
    revisions_api
        .create(&PostParams::default(), &recorded)
        .await?;
    let sts = objects::leader_statefulset(&lws, OLDER_KEY, 0, 0, 1);
    sts_api.create(&PostParams::default(), &sts).await?;

    let ours = ManagerProcess::start(cluster, "ours", &[])?;
    wait_for(
        &lws_api,
        "old",
        Duration::from_secs(120),
        |l: Option<&LeaderWorkerSet>| {
            l.and_then(|l| l.status.as_ref())
                .is_some_and(|s| s.ready_replicas == Some(2) && s.updated_replicas == Some(2))
                && available(2)(l)
        },
    )
    .await
    .context("the groups come up on the recorded revision")?;
    // This cluster has no Kueue: one line says so, no watch of its Workloads fails over and
    // over (kube logs each 404 as a warning).
    anyhow::ensure!(
        ours.logged("Kueue is not installed") && !ours.logged("404 page not found"),
        "without Kueue the log says so once and shows no failing Workload watch:\n{}",
        ours.log_tail()
    );
    let revisions = lws_revisions_in(
        &revisions_api,
        &ListParams::default().labels(&format!("{NAME}=old")),
    )
    .await?;
    assert_eq!(
        revisions,
        [recorded.metadata.name.clone().unwrap_or_default()],
        "no new revision: the recorded one is the spec's template"
    );
    let leader = sts_api.get("old").await?;
    assert_eq!(
        leader
            .metadata
            .labels
            .unwrap_or_default()
            .get(REVISION)
            .map(String::as_str),
        Some(OLDER_KEY)
    );
    for pod in Api::<Pod>::namespaced(client, "default")
        .list(&ListParams::default().labels(&format!("{NAME}=old")))
        .await?
    {
        assert_eq!(
            pod.metadata
                .labels
                .unwrap_or_default()
                .get(REVISION)
                .map(String::as_str),
            Some(OLDER_KEY),
            "{:?} runs the recorded revision",
            pod.metadata.name
        );
    }
    Ok(())
}
