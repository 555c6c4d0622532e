//! Volcano gang scheduling, for parity with upstream LWS's `gangSchedulingManagement`
//! (`schedulerProvider: volcano`; docs/lws.md, "Gang scheduling"): a manager started with
//! `--gang-scheduling-provider=volcano` gives each group a Volcano PodGroup as upstream writes it
//! and annotates every pod of the group with its name.
//!
//! Each test runs its own cluster (the suite's manager runs without the flag) with Volcano's
//! CRDs as `test/volcano/crds.sh` generates them from `volcano.sh/apis`. No Volcano scheduler
//! runs here (its module is not served): a pod with `schedulerName: volcano` stays Pending, and
//! the tests say so; the lifecycle tests leave `schedulerName` unset, so the kube-scheduler
//! binds the pods on KWOK nodes and groups come and go as in any cluster — the PodGroups follow
//! them whatever the scheduler.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, bail, ensure};
use futures::FutureExt;
use k8s_openapi::{
    api::core::v1::Pod,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PropagationPolicy},
};
use lws_rollout::api::{
    leaderworkerset::LeaderWorkerSet,
    volcano::{GROUP_NAME_ANNOTATION, VolcanoPodGroup},
};
use serde_json::json;

use crate::{
    harness::{TestNs, condition, events_when, eventually, wait_for, wait_for_all},
    isolated::{IsolatedCluster, ManagerProcess, repo},
    lws_support::{apply, available_with, lws, pods_of},
};

const FLAG: &str = "--gang-scheduling-provider=volcano";
const NAME: &str = "leaderworkerset.sigs.k8s.io/name";
const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
const REVISION: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";
const WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
const IMAGE: &str = "vllm/vllm-openai:v0.11.0";
const WAIT: Duration = Duration::from_secs(120);

/// The directory of Volcano's generated CRDs (`LWS_E2E_VOLCANO_CRDS`, else the cached output
/// of `test/volcano/crds.sh`, generated on first use).
async fn crds_dir() -> anyhow::Result<String> {
    if let Ok(dir) = std::env::var("LWS_E2E_VOLCANO_CRDS")
        && !dir.is_empty()
    {
        return Ok(dir);
    }
    let out = tokio::process::Command::new("bash")
        .arg(repo().join("test/volcano/crds.sh"))
        .stdin(Stdio::null())
        .output()
        .await
        .context("running test/volcano/crds.sh")?;
    if !out.status.success() {
        bail!(
            "test/volcano/crds.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// Installs Volcano's CRDs and returns once the PodGroup CRD is Established.
async fn install_volcano_crds(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let dir = crds_dir().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    for file in [
        "scheduling.volcano.sh_podgroups.yaml",
        "scheduling.volcano.sh_queues.yaml",
    ] {
        let path = format!("{dir}/{file}");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)?;
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("e2e-volcano").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying {file}"))?;
    }
    wait_for(
        &crds,
        "podgroups.scheduling.volcano.sh",
        WAIT,
        |c: Option<&CustomResourceDefinition>| {
            c.and_then(|c| condition(c, "Established"))
                .is_some_and(|(status, _, _)| status == "True")
        },
    )
    .await?;
    Ok(())
}

/// The Volcano PodGroups of LWS `lws`, by name.
async fn volcano_groups(
    ns: &TestNs,
    lws: &str,
) -> anyhow::Result<BTreeMap<String, VolcanoPodGroup>> {
    Ok(ns
        .api::<VolcanoPodGroup>()
        .list(&ListParams::default().labels(&format!("{NAME}={lws}")))
        .await?
        .items
        .into_iter()
        .map(|pg| (pg.name_any(), pg))
        .collect())
}

/// Waits until the LWS's Volcano PodGroups are exactly `names`.
async fn wait_groups_named(ns: &TestNs, lws: &str, names: &BTreeSet<String>) -> anyhow::Result<()> {
    wait_for_all(
        &ns.api::<VolcanoPodGroup>(),
        &format!("{NAME}={lws}"),
        WAIT,
        |groups| {
            let have: BTreeSet<String> = groups.iter().map(|g| g.name_any()).collect();
            &have == names
        },
    )
    .await
    .with_context(|| format!("{lws}'s Volcano PodGroups to be exactly {names:?}"))?;
    Ok(())
}

fn label<'a>(pod: &'a Pod, key: &str) -> &'a str {
    pod.labels()
        .get(key)
        .map(String::as_str)
        .unwrap_or_default()
}

/// Checks that every pod names its group's PodGroup, and that each leader's group has one as
/// upstream writes it; returns the PodGroup names (one per leader).
async fn check_groups(
    ns: &TestNs,
    lws_name: &str,
    min_member: i64,
    min_resources: serde_json::Value,
) -> anyhow::Result<BTreeSet<String>> {
    let pods = pods_of(ns, lws_name).await?;
    let mut names = BTreeSet::new();
    for pod in &pods {
        let want = format!(
            "{lws_name}-{}-{}",
            label(pod, GROUP_INDEX),
            label(pod, REVISION)
        );
        let got = pod.annotations().get(GROUP_NAME_ANNOTATION);
        ensure!(
            got == Some(&want),
            "pod {} names {got:?}, not {want}",
            pod.name_any()
        );
        if label(pod, WORKER_INDEX) == "0" {
            names.insert(want);
        }
    }
    wait_groups_named(ns, lws_name, &names).await?;
    let groups = volcano_groups(ns, lws_name).await?;
    for leader in pods.iter().filter(|p| label(p, WORKER_INDEX) == "0") {
        let name = format!(
            "{lws_name}-{}-{}",
            label(leader, GROUP_INDEX),
            label(leader, REVISION)
        );
        let pg = serde_json::to_value(&groups[&name])?;
        let owners = &pg["metadata"]["ownerReferences"];
        ensure!(
            owners
                == &json!([{"apiVersion": "v1", "kind": "Pod", "name": leader.name_any(),
                    "uid": leader.uid().unwrap_or_default(), "controller": true,
                    "blockOwnerDeletion": true}]),
            "{name} is owned by its leader {}: {owners}",
            leader.name_any()
        );
        ensure!(
            pg["metadata"]["labels"]
                == json!({NAME: lws_name, GROUP_INDEX: label(leader, GROUP_INDEX),
                    REVISION: label(leader, REVISION)}),
            "{name}'s labels: {}",
            pg["metadata"]["labels"]
        );
        ensure!(
            pg["spec"]["minMember"] == json!(min_member),
            "{name}'s minMember: {}",
            pg["spec"]["minMember"]
        );
        ensure!(
            pg["spec"]["minResources"] == min_resources,
            "{name}'s minResources: {}",
            pg["spec"]["minResources"]
        );
    }
    Ok(names)
}

/// A group of a leader (100m CPU, 128Mi) and two workers (200m CPU, 256Mi each), with a Volcano
/// queue and one `volcano.sh/` annotation upstream copies onto the PodGroups.
fn web(replicas: i32, image: &str) -> serde_json::Value {
    let mut obj = lws("web", replicas, 3, image);
    obj["metadata"]["annotations"] = json!({
        "scheduling.volcano.sh/queue-name": "research",
        "volcano.sh/preemptable": "false",
        "example.com/not-copied": "x",
    });
    let tmpl = &mut obj["spec"]["leaderWorkerTemplate"];
    tmpl["workerTemplate"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "200m", "memory": "256Mi"}});
    tmpl["leaderTemplate"] = json!({"spec": {"containers": [{"name": "model", "image": image,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}});
    obj
}

#[tokio::test]
async fn volcano_podgroups_follow_each_group_as_upstream_writes_them() -> anyhow::Result<()> {
    IsolatedCluster::run("volcano", &[], |cluster| {
        async move {
            install_volcano_crds(cluster).await?;
            let _manager = ManagerProcess::start(cluster, "volcano", &[FLAG])?;
            let ns = cluster.namespace("volcano").await?;
            let lwss = ns.api::<LeaderWorkerSet>();
            let resources = json!({"cpu": "500m", "memory": "640Mi"});

            // Two groups: a PodGroup each, named after group and revision, owned by the
            // leader; queue and volcano.sh/ annotations from the LWS.
            apply(&ns, &web(2, IMAGE)).await?;
            wait_for(&lwss, "web", WAIT, available_with(2, 2)).await?;
            let first = check_groups(&ns, "web", 3, resources.clone()).await?;
            ensure!(first.len() == 2, "two groups, two PodGroups: {first:?}");
            for pg in volcano_groups(&ns, "web").await?.values() {
                ensure!(
                    pg.spec.queue.as_deref() == Some("research"),
                    "queue: {pg:?}"
                );
                ensure!(
                    pg.annotations()
                        == &BTreeMap::from([("volcano.sh/preemptable".into(), "false".into())]),
                    "annotations: {:?}",
                    pg.annotations()
                );
            }

            // A rolling update: each group's new incarnation gets its new revision's PodGroup,
            // the old ones go with their leaders.
            apply(&ns, &web(2, "vllm/vllm-openai:v0.11.1")).await?;
            wait_for(&lwss, "web", WAIT, available_with(2, 2)).await?;
            let rolled = eventually(WAIT, "every pod on the new revision", || async {
                let pods = pods_of(&ns, "web").await?;
                let revisions: BTreeSet<String> = pods
                    .iter()
                    .map(|p| label(p, REVISION).to_string())
                    .collect();
                Ok((pods.len() == 6 && revisions.len() == 1, revisions))
            })
            .await?;
            let second = check_groups(&ns, "web", 3, resources.clone()).await?;
            ensure!(
                second.is_disjoint(&first) && second.len() == 2,
                "new PodGroups {second:?} (revision {rolled:?}) replace {first:?}"
            );

            // Scale-down: group 1's PodGroup goes with its leader.
            apply(&ns, &web(1, "vllm/vllm-openai:v0.11.1")).await?;
            wait_for(&lwss, "web", WAIT, available_with(1, 1)).await?;
            let after = check_groups(&ns, "web", 3, resources).await?;
            ensure!(
                after.len() == 1 && after.iter().all(|n| n.starts_with("web-0-")),
                "only group 0's PodGroup is left: {after:?}"
            );

            // The LWS deleted (foreground, as upstream's spec): no PodGroup is left.
            lwss.delete(
                "web",
                &DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Foreground),
                    ..Default::default()
                },
            )
            .await?;
            wait_groups_named(&ns, "web", &BTreeSet::new()).await?;

            // startupPolicy LeaderReady: minMember 1 (the leader binds first), minResources
            // still the whole group's.
            let mut ready_first = lws("lr", 1, 2, IMAGE);
            ready_first["spec"]["startupPolicy"] = json!("LeaderReady");
            ready_first["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
                [0]["resources"] = json!({"requests": {"cpu": "1"}});
            apply(&ns, &ready_first).await?;
            wait_for(&lwss, "lr", WAIT, available_with(1, 1)).await?;
            check_groups(&ns, "lr", 1, json!({"cpu": "2"})).await?;

            // Pods for Volcano's scheduler: annotated, with their PodGroup, and Pending — no
            // Volcano scheduler runs here to bind them.
            let mut for_volcano = lws("vc", 1, 2, IMAGE);
            for_volcano["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulerName"] =
                json!("volcano");
            apply(&ns, &for_volcano).await?;
            let pending = eventually(WAIT, "vc's two pods, Pending", || async {
                let pods = pods_of(&ns, "vc").await?;
                let seen: Vec<(String, Option<String>, Option<String>)> = pods
                    .iter()
                    .map(|p| {
                        let spec = p.spec.as_ref();
                        (
                            p.name_any(),
                            spec.and_then(|s| s.scheduler_name.clone()),
                            spec.and_then(|s| s.node_name.clone()),
                        )
                    })
                    .collect();
                let ok = pods.len() == 2
                    && seen
                        .iter()
                        .all(|(_, s, n)| s.as_deref() == Some("volcano") && n.is_none());
                Ok((ok, seen))
            })
            .await?;
            check_groups(&ns, "vc", 2, json!({})).await?;
            eprintln!("volcano: pods left to Volcano's scheduler stay Pending here: {pending:?}");

            // An LWS asking for native gang scheduling gets Kubernetes' PodGroup only.
            let mut native = lws("native", 1, 2, IMAGE);
            native["metadata"]["annotations"] =
                json!({"lws-rollout.x-k8s.io/gang-scheduling": "native"});
            apply(&ns, &native).await?;
            wait_for(&lwss, "native", WAIT, available_with(1, 1)).await?;
            for pod in pods_of(&ns, "native").await? {
                ensure!(
                    !pod.annotations().contains_key(GROUP_NAME_ANNOTATION),
                    "native pod {} names no Volcano PodGroup",
                    pod.name_any()
                );
                let joined = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduling_group.as_ref())
                    .and_then(|g| g.pod_group_name.clone());
                ensure!(
                    joined.is_some(),
                    "native pod {} joins its gang",
                    pod.name_any()
                );
            }
            ensure!(
                volcano_groups(&ns, "native").await?.is_empty(),
                "no Volcano PodGroup for a native gang LWS"
            );
            Ok(())
        }
        .boxed()
    })
    .await
}

#[tokio::test]
async fn volcano_configured_without_its_crds_says_so_then_builds_once_installed()
-> anyhow::Result<()> {
    IsolatedCluster::run("volcano-unserved", &[], |cluster| {
        async move {
            let mut manager = ManagerProcess::start(cluster, "volcano-unserved", &[FLAG])?;
            let ns = cluster.namespace("volcano-unserved").await?;
            let lwss = ns.api::<LeaderWorkerSet>();
            apply(&ns, &lws("early", 1, 2, IMAGE)).await?;
            wait_for(&lwss, "early", WAIT, |l: Option<&LeaderWorkerSet>| {
                l.and_then(|l| condition(l, "ReplicaFailure")).is_some_and(
                    |(status, reason, message)| {
                        status == "True"
                            && reason == "GangSchedulingUnavailable"
                            && message.contains("scheduling.volcano.sh/v1beta1")
                    },
                )
            })
            .await?;
            events_when(&ns, WAIT, |events| {
                events.iter().any(|e| {
                    e.reason.as_deref() == Some("GangSchedulingUnavailable")
                        && e.type_.as_deref() == Some("Warning")
                })
            })
            .await?;
            let pods = pods_of(&ns, "early").await?;
            ensure!(
                pods.is_empty(),
                "nothing built: {:?}",
                pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
            );
            ensure!(manager.running(), "the manager keeps running");

            // Volcano installed and the manager restarted (as the condition says): the LWS is
            // built, its group with its PodGroup.
            install_volcano_crds(cluster).await?;
            manager.signal("TERM")?;
            manager.exited(Duration::from_secs(30)).await?;
            let _manager = ManagerProcess::start(cluster, "volcano", &[FLAG])?;
            wait_for(&lwss, "early", WAIT, available_with(1, 1)).await?;
            let names = check_groups(&ns, "early", 2, json!({})).await?;
            ensure!(names.len() == 1, "one group, one PodGroup: {names:?}");
            Ok(())
        }
        .boxed()
    })
    .await
}
