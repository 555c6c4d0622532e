//! Faults around Kueue, each on a cluster of its own (the suite's shared cluster keeps its
//! Kueue and its manager): a queue name that names no LocalQueue, Kueue stopped in the middle
//! of a release and started again, and our manager SIGKILLed while groups wait behind Kueue's
//! gate. docs/kueue.md.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use lws_rollout::api::LeaderWorkerSet;

use crate::{
    crash_support::CrashCluster,
    harness::{TestNs, wait_for, wait_for_all},
    isolated::repo,
    kueue_release::{StableUntouched, on_image, setup, stable},
    kueue_support::{
        QUEUE, Queues, WAIT, admitted, assert_group_gated, kueue_or_skip, local_queue, queued_lws,
        uid_of, wait_workloads,
    },
    lws_support::{NAME, uids},
    rollout_support::{STABLE, approve, condition, step, the_canary, wait_paused_at, wait_rollout},
};

/// An isolated cluster with Kueue (`LWS_CLUSTER_KUEUE=1`) and our manager, which a test may
/// kill and start again.
async fn kueue_cluster(name: &str) -> anyhow::Result<CrashCluster> {
    let mut c = CrashCluster::new(name, &[("LWS_CLUSTER_KUEUE", "1")]).await?;
    c.start_manager()?;
    Ok(c)
}

/// Runs `test/kueue/<script>.sh` (`start`, `stop`) against the cluster.
async fn kueue(c: &CrashCluster, script: &str) -> anyhow::Result<()> {
    c.cluster
        .script(&format!("test/kueue/{script}.sh"), &[], &[])
        .await
}

/// Whether the tests of this file can run: Kueue is built (the suite's cluster runs it).
fn runs(test: &str) -> anyhow::Result<bool> {
    kueue_or_skip(test)
}

/// A queue name that names no LocalQueue: the groups stay gated, the Workloads say why
/// ("LocalQueue … doesn't exist"), nothing crash-loops (the same pods and Workloads for a
/// while); creating the LocalQueue admits them.
#[test]
fn kueue_queue_name_without_a_local_queue_waits_visibly() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_queue_name_without_a_local_queue_body)
}

async fn kueue_queue_name_without_a_local_queue_body() -> anyhow::Result<()> {
    if !runs("kueue_queue_name_without_a_local_queue_waits_visibly")? {
        return Ok(());
    }
    // The shared cluster: a namespace of its own is all this needs.
    crate::harness::with_ns("kueue-noqueue", |ns| {
        Box::pin(async move {
            let name = "vllm";
            let mut lws = queued_lws(name, 2, 2, "vllm:1");
            lws["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "no-such-queue".into();
            crate::lws_support::apply(&ns, &lws).await?;
            let uid = uid_of(&ns, name).await?;
            let w = wait_workloads(&ns, &uid, "both inadmissible, saying why", |w| {
                w.len() == 2
                    && w.iter().all(|w| {
                        w.admission_wait()
                            .is_some_and(|m| m.contains("LocalQueue no-such-queue doesn't exist"))
                    })
            })
            .await?;
            // The LWS says it too (kubectl describe lws): a Warning Event per waiting group.
            crate::harness::events_when(&ns, WAIT, |events| {
                (0..2).all(|g| {
                    events.iter().any(|e| {
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                            && e.reason.as_deref() == Some("WaitingForKueue")
                            && e.note.as_deref()
                                == Some(&format!(
                                    "group {g} waits for Kueue admission in queue no-such-queue: \
                                 LocalQueue no-such-queue doesn't exist"
                                ))
                    })
                })
            })
            .await
            .context("a WaitingForKueue Event on the LWS for each group")?;
            let pods = wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={name}"), WAIT, |p| {
                p.len() == 4
            })
            .await?;
            let pods: Vec<Pod> = pods.iter().map(|p| p.as_ref().clone()).collect();
            assert_group_gated(&pods, name, 0)?;
            assert_group_gated(&pods, name, 1)?;
            // Nothing churns: the same pods and Workloads for a while.
            let before = uids(&ns, name).await?;
            let workloads: std::collections::BTreeSet<_> =
                w.iter().map(|w| w.metadata.uid.clone()).collect();
            let churn = tokio::time::timeout(
                Duration::from_secs(6),
                wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={name}"), WAIT, |p| {
                    p.len() != 4
                        || p.iter().any(|p| {
                            before.get(p.metadata.name.as_deref().unwrap_or_default())
                                != p.metadata.uid.as_ref()
                        })
                }),
            )
            .await;
            if let Ok(Ok(p)) = churn {
                bail!(
                    "pods changed while waiting for a LocalQueue: {} pods",
                    p.len()
                );
            }
            let now: std::collections::BTreeSet<_> = crate::kueue_support::workloads(&ns, &uid)
                .await?
                .iter()
                .map(|w| w.metadata.uid.clone())
                .collect();
            ensure!(now == workloads, "the Workloads were replaced");
            let l = ns.api::<LeaderWorkerSet>().get(name).await?;
            ensure!(
                l.status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0)
                    == 0,
                "no group is ready"
            );
            // The LocalQueue appears (with a ClusterQueue of room): both groups run.
            crate::kueue_support::with_queues(&ns, 4, |q| {
                let ns = ns.clone();
                async move {
                    let lq: Api<kube::api::DynamicObject> = Api::namespaced_with(
                        ns.client.clone(),
                        &ns.name,
                        &kube::api::ApiResource::from_gvk_with_plural(
                            &kube::api::GroupVersionKind::gvk(
                                "kueue.x-k8s.io",
                                "v1beta2",
                                "LocalQueue",
                            ),
                            "localqueues",
                        ),
                    );
                    lq.create(
                        &PostParams::default(),
                        &local_queue("no-such-queue", &q.cluster_queue),
                    )
                    .await?;
                    wait_for(
                        &ns.api(),
                        name,
                        WAIT,
                        crate::lws_support::available_with(2, 2),
                    )
                    .await?;
                    wait_workloads(&ns, &uid, "admitted", |w| admitted(w) == [0, 1]).await?;
                    Ok(())
                }
            })
            .await
        })
    })
    .await
}

/// Kueue stopped in the middle of a release: its webhooks refuse every LWS write, so the
/// canary cannot grow; the release waits at its step and says why (the Rollout's message and
/// Event carry the API server's answer). Started again, the release goes on by itself.
#[test]
fn kueue_stopped_mid_release_waits_and_goes_on() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_stopped_mid_release_body)
}

async fn kueue_stopped_mid_release_body() -> anyhow::Result<()> {
    if !runs("kueue_stopped_mid_release_waits_and_goes_on")? {
        return Ok(());
    }
    let c = kueue_cluster("kueue-stop").await?;
    let ns = c.namespace("kueue-stop").await?;
    let q = Queues::create(&ns, 8).await?;
    let v1 = stable("vllm:1");
    let stable_uid = setup(&ns, &v1).await?;
    let untouched = StableUntouched::record(&ns, &stable_uid).await?;
    crate::lws_support::apply(&ns, &on_image(&v1, "vllm:2")).await?;
    wait_paused_at(&ns, 1).await?;
    let canary = the_canary(&ns).await?;
    let canary_uid = canary.metadata.uid.clone().context("uid")?;
    wait_workloads(&ns, &canary_uid, "canary group 0 admitted", |w| {
        admitted(w) == [0]
    })
    .await?;

    kueue(&c, "stop").await?;
    approve(&ns).await?;
    let r = wait_rollout(&ns, "a message saying the canary cannot be written", |r| {
        condition(r, "Progressing").is_some_and(|c| {
            c.2.contains("cannot write the canary LeaderWorkerSet") && c.2.contains("kb.io")
        })
    })
    .await?;
    ensure!(step(&r).0 == 2, "{:?}", step(&r));
    let event =
        crate::rollout_support::wait_event(&ns, "CanaryNotReady", "cannot write the canary")
            .await?;
    eprintln!("while Kueue is stopped: {event}");
    untouched.check(&ns, "Kueue stopped").await?;

    kueue(&c, "start").await?;
    wait_paused_at(&ns, 2).await?;
    wait_workloads(&ns, &canary_uid, "canary groups 0, 1 admitted", |w| {
        admitted(w) == [0, 1]
    })
    .await?;
    untouched.check(&ns, "Kueue back").await?;
    let _ = q;
    c.finish();
    Ok(())
}

/// Our manager SIGKILLed while groups wait behind Kueue's gate (a stable group beyond the quota
/// and a canary group of a release): started again it comes back to the same state — the same
/// pods, Workloads, canary, status and message — and goes on once quota frees.
#[test]
fn kueue_manager_killed_while_groups_are_gated_comes_back_to_the_same_state() -> anyhow::Result<()>
{
    crate::rollout_support::on_big_stack(kueue_manager_killed_body)
}

/// Pod and Workload uids of the stable LWS and `canary` (Workloads of the LWSes `lws_uids`).
async fn snapshot(
    ns: &TestNs,
    canary: &str,
    lws_uids: &[&str],
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut all: BTreeMap<String, String> = uids(ns, STABLE).await?;
    all.extend(uids(ns, canary).await?);
    for uid in lws_uids {
        for w in crate::kueue_support::workloads(ns, uid).await? {
            all.insert(
                format!("workload/{}", w.metadata.name.unwrap_or_default()),
                w.metadata.uid.unwrap_or_default(),
            );
        }
    }
    Ok(all)
}

async fn kueue_manager_killed_body() -> anyhow::Result<()> {
    if !runs("kueue_manager_killed_while_groups_are_gated_comes_back_to_the_same_state")? {
        return Ok(());
    }
    let mut c = kueue_cluster("kueue-kill").await?;
    let ns = c.namespace("kueue-kill").await?;
    // Stable: 2 groups of 2 (4 GPUs) + quota for nothing more: the canary's group waits.
    let q = Queues::create(&ns, 4).await?;
    let v1 = stable("vllm:1");
    let stable_uid = setup(&ns, &v1).await?;
    crate::lws_support::apply(&ns, &on_image(&v1, "vllm:2")).await?;
    let waiting = format!("canary group 0 waits for Kueue admission in queue {QUEUE}");
    let r = wait_rollout(&ns, "the canary waits for Kueue", |r| {
        condition(r, "Progressing").is_some_and(|c| c.2.contains(&waiting))
    })
    .await?;
    let canary = the_canary(&ns).await?;
    let canary_name = canary.metadata.name.clone().unwrap_or_default();
    let canary_uid = canary.metadata.uid.clone().context("uid")?;
    let before = snapshot(&ns, &canary_name, &[&stable_uid, &canary_uid]).await?;
    let pods = crate::lws_support::pods_of(&ns, &canary_name).await?;
    assert_group_gated(&pods, &canary_name, 0)?;
    let message = condition(&r, "Progressing")
        .map(|c| c.2)
        .unwrap_or_default();

    c.kill_and_restart("while groups waited behind Kueue's gate")
        .await?;
    // The new manager has listed everything and decided: the Rollout is reconciled again
    // (its status written by this process) — give it the time a restart takes, watching
    // that nothing changes meanwhile.
    let changed = tokio::time::timeout(
        Duration::from_secs(15),
        wait_for_all(&ns.api::<Pod>(), "", WAIT, |p| {
            p.iter().any(|p| p.metadata.deletion_timestamp.is_some())
        }),
    )
    .await;
    if let Ok(Ok(p)) = changed {
        bail!("a pod was deleted after the restart: {} pods", p.len());
    }
    ensure!(
        snapshot(&ns, &canary_name, &[&stable_uid, &canary_uid]).await? == before,
        "the restarted manager changed pods or Workloads"
    );
    let r = wait_rollout(&ns, "the same message", |r| {
        condition(r, "Progressing").is_some_and(|c| c.2 == message)
    })
    .await?;
    ensure!(the_canary(&ns).await?.metadata.uid.as_deref() == Some(canary_uid.as_str()));
    let pods = crate::lws_support::pods_of(&ns, &canary_name).await?;
    assert_group_gated(&pods, &canary_name, 0)?;
    let _ = r;
    // Quota frees: the release goes on.
    q.set_gpus(6).await?;
    wait_paused_at(&ns, 1).await?;
    wait_workloads(&ns, &canary_uid, "canary admitted", |w| admitted(w) == [0]).await?;
    c.finish();
    Ok(())
}

/// Runs `test/kueue/build.sh` with only `PATH`, a scratch HOME and cache, and `extra`.
fn kueue_build(name: &str, path: &str, extra: &[(&str, String)]) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("lws-e2e-kueue-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(repo().join("test/kueue/build.sh"))
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("LWS_ROLLOUT_CACHE", dir.join("cache"));
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("bash runs");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn kueue_build_without_go_says_what_is_missing_and_takes_a_prebuilt_binary() {
    let out = kueue_build("nogo", "/usr/bin:/bin", &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("lws-rollout kueue:"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line, stderr was:\n{stderr}");
    assert!(lines[0].contains("no Go toolchain"), "{}", lines[0]);
    assert!(lines[0].contains("LWS_KUEUE_BIN"), "{}", lines[0]);
    // A prebuilt binary (any executable stands in) is used as it is, without Go.
    let out = kueue_build(
        "prebuilt",
        "/usr/bin:/bin",
        &[("LWS_KUEUE_BIN", "/bin/true".into())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/bin/true");
    let out = kueue_build(
        "notexec",
        "/usr/bin:/bin",
        &[("LWS_KUEUE_BIN", "/nonexistent/kueue".into())],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an executable"));
}
