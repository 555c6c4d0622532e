//! `helm uninstall` in the middle of a release, on a cluster of the test's own: the chart
//! installed with Helm and its manager running as the chart's ServiceAccount with the chart's
//! flags (as test/helm/install.sh runs the suite's), a canary release paused at a step, then
//! `helm uninstall` and the manager stopped as its pod would be. Nothing of ours may block the
//! cluster afterwards: the webhook configurations go with the release (the garbage collector,
//! through their owner), LWS objects and LWS pods are created and deleted without us, the
//! user's LWS keeps its stable groups, and the command docs/install.md gives frees a Rollout
//! deleted with no controller left.

use std::{path::Path, process::Stdio, time::Duration};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::{
    admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
    apps::v1::StatefulSet,
    core::v1::{Pod, Secret},
    rbac::v1::ClusterRole,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use lws_rollout::api::{LeaderWorkerSet, Rollout};
use serde_json::json;

use crate::harness::{eventually, wait_for};
use crate::isolated::{IsolatedCluster, ManagerProcess, repo};
use crate::lws_support::{NAME, create_available, pod_ready, pods_of, uids};
use crate::rollout_support::*;

/// The chart's release and namespace, as test/helm/install.sh installs it.
const RELEASE: &str = "lws-rollout";
const RELEASE_NS: &str = "default";
/// The certificate Secret: the manager's default name, in its namespace (`default` outside a
/// cluster).
const CERT_SECRET: &str = "lws-rollout-webhook-cert";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:default:lws-rollout";

#[test]
fn helm_uninstall_mid_release_leaves_nothing_that_blocks() -> anyhow::Result<()> {
    if std::env::var(crate::helm_chart::HELM_ENV).is_err() {
        bail!(
            "{} is not set: run the e2e tests with test/run-tests.sh",
            crate::helm_chart::HELM_ENV
        );
    }
    on_big_stack(|| IsolatedCluster::run("uninstall", &[], |c| Box::pin(uninstall(c))))
}

/// Helm against the isolated cluster.
async fn helm(cluster: &IsolatedCluster, args: &[&str]) -> anyhow::Result<()> {
    let bin = std::env::var(crate::helm_chart::HELM_ENV)?;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(&bin)
            .args(args)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("helm {args:?} still runs after 120 s"))??;
    ensure!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The cluster's kubeconfig impersonating the chart's ServiceAccount (as test/helm/install.sh
/// writes it for the suite's manager).
fn service_account_kubeconfig(cluster: &IsolatedCluster) -> anyhow::Result<std::path::PathBuf> {
    let admin = std::fs::read_to_string(&cluster.kubeconfig)?;
    let mut out = String::new();
    for line in admin.lines() {
        out.push_str(line);
        out.push('\n');
        if line == "  user:" {
            out.push_str(&format!("    as: {SERVICE_ACCOUNT}\n"));
        }
    }
    ensure!(out.contains("    as: "), "no user entry in {admin}");
    let path = cluster.dir.join("manager-kubeconfig");
    std::fs::write(&path, out)?;
    Ok(path)
}

/// The shell block of docs/install.md that frees Rollouts deleted with no controller left.
fn documented_finalizer_command() -> anyhow::Result<String> {
    let doc = std::fs::read_to_string(repo().join("docs/install.md"))?;
    doc.split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("deletionTimestamp"))
        .map(str::to_string)
        .context("docs/install.md: no sh block removing the finalizer of deleted Rollouts")
}

async fn uninstall(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let chart = repo().join("charts/lws-rollout");
    helm(
        cluster,
        &[
            "install",
            RELEASE,
            &chart.to_string_lossy(),
            "--namespace",
            RELEASE_NS,
            "--skip-crds",
        ],
    )
    .await?;
    // The flags the chart's Deployment passes that matter here (the others are the defaults).
    let kubeconfig = service_account_kubeconfig(cluster)?;
    let mut manager = ManagerProcess::start_with(
        cluster,
        "chart",
        &[
            &format!("--webhook-configuration={RELEASE}"),
            &format!("--webhook-owner={RELEASE}"),
        ],
        &kubeconfig,
    )?;
    let client = cluster.client.clone();
    let role = Api::<ClusterRole>::all(client.clone()).get(RELEASE).await?;
    let owned_by_role = |owners: Option<&Vec<_>>| {
        owners.is_some_and(
            |o: &Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>| {
                o.iter()
                    .any(|o| o.kind == "ClusterRole" && Some(&o.uid) == role.metadata.uid.as_ref())
            },
        )
    };
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    wait_for(
        &mutating,
        RELEASE,
        WAIT,
        |m: Option<&MutatingWebhookConfiguration>| {
            m.is_some_and(|m| owned_by_role(m.metadata.owner_references.as_ref()))
        },
    )
    .await
    .with_context(|| {
        format!(
            "the mutating configuration, owned; manager: {}",
            manager.log_tail()
        )
    })?;
    // Applied right after the mutating one.
    wait_for(
        &validating,
        RELEASE,
        WAIT,
        |v: Option<&ValidatingWebhookConfiguration>| {
            v.is_some_and(|v| owned_by_role(v.metadata.owner_references.as_ref()))
        },
    )
    .await
    .context("the validating configuration, owned")?;
    // The certificate Secret the manager issued at start, owned by the same ClusterRole.
    let secrets = Api::<Secret>::namespaced(client.clone(), RELEASE_NS);
    wait_for(&secrets, CERT_SECRET, WAIT, |s: Option<&Secret>| {
        s.is_some_and(|s| owned_by_role(s.metadata.owner_references.as_ref()))
    })
    .await
    .context("the webhook certificate Secret, owned")?;

    // A canary release paused at its first step: one canary group, the stable LWS held.
    let ns = cluster.namespace("uninstall").await?;
    let v1 = stable_lws(3, "vllm:1");
    create_available(&ns, &v1).await?;
    create_rollout(
        &ns,
        &rollout(
            json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            None,
        ),
    )
    .await?;
    wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_paused_at(&ns, 1).await?;
    let canary = the_canary(&ns).await?;
    let canary_name = canary.metadata.name.clone().context("canary name")?;
    let stable_pods = uids(&ns, STABLE).await?;
    ensure!(
        stable_pods.len() == 6,
        "3 stable groups of 2: {stable_pods:?}"
    );

    // Helm deletes the Deployment (its pods get SIGTERM) and the RBAC.
    helm(cluster, &["uninstall", RELEASE, "--namespace", RELEASE_NS]).await?;
    manager.signal("TERM")?;
    manager.exited(Duration::from_secs(30)).await?;

    // The garbage collector takes the configurations with their owner.
    wait_for(
        &mutating,
        RELEASE,
        WAIT,
        |m: Option<&MutatingWebhookConfiguration>| m.is_none(),
    )
    .await
    .context("the mutating webhook configuration went with the release")?;
    wait_for(
        &validating,
        RELEASE,
        WAIT,
        |v: Option<&ValidatingWebhookConfiguration>| v.is_none(),
    )
    .await
    .context("the validating webhook configuration went with the release")?;
    wait_for(&secrets, CERT_SECRET, WAIT, |s: Option<&Secret>| {
        s.is_none()
    })
    .await
    .context("the webhook certificate Secret went with the release")?;

    // LWS objects and LWS pods are admitted, and deleted, with no one of ours answering.
    let lws_api = ns.api::<LeaderWorkerSet>();
    let after: LeaderWorkerSet = serde_json::from_value(json!({
        "metadata": {"name": "after"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate":
            {"spec": {"containers": [{"name": "m", "image": "vllm:1"}]}}}}
    }))?;
    lws_api.create(&PostParams::default(), &after).await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "after-0", "labels": {NAME: "after"}},
        "spec": {"containers": [{"name": "m", "image": "vllm:1"}]}
    }))?;
    ns.api::<Pod>().create(&PostParams::default(), &pod).await?;
    ns.api::<Pod>()
        .delete("after-0", &DeleteParams::default().grace_period(0))
        .await?;
    gone(&ns.api::<Pod>(), "after-0").await?;
    lws_api.delete("after", &DeleteParams::default()).await?;
    gone(&lws_api, "after").await?;

    // The user's LWS still runs its stable groups, every pod the same and ready.
    let pods = pods_of(&ns, STABLE).await?;
    ensure!(
        uids(&ns, STABLE).await? == stable_pods && pods.iter().all(pod_ready),
        "the stable groups are untouched and ready: {:?}",
        pods.iter()
            .map(|p| (p.metadata.name.clone(), pod_ready(p)))
            .collect::<Vec<_>>()
    );

    // A Rollout deleted with no controller left stays in deletion (its finalizer) until the
    // command docs/install.md gives; then it goes, and so do the LWSs and their StatefulSets.
    let rollouts = ns.api::<Rollout>();
    rollouts.delete(STABLE, &DeleteParams::default()).await?;
    let held = rollouts.get(STABLE).await?;
    ensure!(
        held.metadata.deletion_timestamp.is_some()
            && held
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == "rollouts.kruise.io/rollout"),
        "the deleted Rollout waits on its finalizer: {:?}",
        held.metadata
    );
    run_documented(cluster, &documented_finalizer_command()?).await?;
    gone(&rollouts, STABLE).await?;
    // The canary LWS may already be going: the garbage collector takes what the deleted
    // Rollout's release owned.
    for name in [STABLE, canary_name.as_str()] {
        match lws_api.delete(name, &DeleteParams::foreground()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        gone(&lws_api, name).await?;
    }
    // The garbage collector deletes the StatefulSets once their LWS is gone.
    let statefulsets = ns.api::<StatefulSet>();
    eventually(WAIT, "the LWSs' StatefulSets gone with them", || {
        let statefulsets = statefulsets.clone();
        async move {
            let left: Vec<_> = statefulsets
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect();
            Ok((left.is_empty(), left))
        }
    })
    .await?;
    Ok(())
}

/// Waits until the object is gone.
async fn gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    wait_for(api, name, WAIT, |o: Option<&K>| o.is_none())
        .await
        .with_context(|| format!("{name} deleted"))?;
    Ok(())
}

/// Runs a documented shell block with the cluster's kubectl first on PATH.
async fn run_documented(cluster: &IsolatedCluster, script: &str) -> anyhow::Result<()> {
    let path = format!(
        "{}:{}",
        cluster.bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .env("PATH", path)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .current_dir(Path::new(&cluster.dir))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("the documented command still runs after 60 s")??;
    ensure!(
        out.status.success(),
        "the documented command failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
