//! Crash safety of a partition-style release: the manager is SIGKILLed as the
//! first batch's release partition is written, as a later batch moves groups in place, while
//! the LWS rolls the rest at the end, during a rollback, while a batch waits for its deadline
//! and as the automatic rollback on that deadline starts — on a cluster of the test's own.
//! Every restart decides from the cluster and the Rollout's status alone: the same end state as
//! an uninterrupted release, no group replaced twice, no group outside the batch touched, the
//! BatchRelease created once per release.

use anyhow::{Context, ensure};
use lws_rollout::api::LeaderWorkerSet;
use lws_rollout::lws::labels::RELEASE_PARTITION;
use serde_json::json;

use crate::harness::{TestNs, wait_for};
use crate::lws_support::{available_with, image, settled_pods, uids};
use crate::rollout_crash::{CrashCluster, Watched, more_than_once};
use crate::rollout_support::*;

/// Waits until the user's LWS carries the release partition `want` (`None`: none).
async fn wait_partition(ns: &TestNs, want: Option<&str>) -> anyhow::Result<LeaderWorkerSet> {
    wait_for(&ns.api(), STABLE, WAIT, |l: Option<&LeaderWorkerSet>| {
        l.is_some_and(|l| {
            l.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(RELEASE_PARTITION))
                .map(String::as_str)
                == want
        })
    })
    .await?
    .with_context(|| format!("release partition {want:?}"))
}

#[test]
fn rollout_partition_crash_safe_release_and_rollback() -> anyhow::Result<()> {
    on_big_stack(crash_partition)
}

async fn crash_partition() -> anyhow::Result<()> {
    let (mut cc, ns) = CrashCluster::start("rollout-part-crash").await?;
    let v1 = stable_lws(4, "vllm:1");
    let steps = json!([
        {"replicas": 1, "traffic": "25%", "pause": {}},
        {"replicas": "50%", "traffic": "50%", "pause": {}},
        {"replicas": "100%"}
    ]);
    let mut r = rollout(steps, Some(gateway_routing()));
    let canary = r["spec"]["strategy"]["canary"].as_object_mut().unwrap();
    canary.remove("enableExtraWorkloadForCanary");
    canary.remove("patchPodTemplateMetadata");
    release_setup(&ns, &v1, &r).await?;
    let baseline = uids(&ns, STABLE).await?;
    let watched = Watched::start(&ns);
    let (user_pods, brs) = (&watched.stable_pods, &watched.brs);

    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_partition(&ns, Some("3")).await?;
    cc.kill_and_restart("as the first batch's partition was written")
        .await?;
    wait_paused_at(&ns, 1).await?;
    wait_route(&ns, split_route(25)).await?;
    let group = |g: usize| {
        let mut names = vec![format!("{STABLE}-{g}"), format!("{STABLE}-{g}-1")];
        names.sort();
        names
    };
    let untouched = |now: &std::collections::BTreeMap<String, String>, groups: &[usize]| {
        groups
            .iter()
            .flat_map(|g| group(*g))
            .all(|name| now.get(&name) == baseline.get(&name))
    };
    ensure!(
        untouched(&uids(&ns, STABLE).await?, &[0, 1, 2]),
        "a group outside batch 1 restarted"
    );

    approve(&ns).await?;
    wait_partition(&ns, Some("2")).await?;
    cc.kill_and_restart("as batch 2 moved groups in place")
        .await?;
    wait_paused_at(&ns, 2).await?;
    wait_route(&ns, split_route(50)).await?;
    ensure!(
        untouched(&uids(&ns, STABLE).await?, &[0, 1]),
        "a group outside batches 1 and 2 restarted"
    );

    approve(&ns).await?;
    wait_rollout(&ns, "the LWS rolls the rest", |r| {
        finalising(r) == "ResumeWorkload"
    })
    .await?;
    cc.kill_and_restart("while the LWS rolled the rest").await?;
    wait_rollout(&ns, "release finished", finished("True")).await?;
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        available_with(4, 4),
    )
    .await?;
    ensure!(
        settled_pods(&ns, STABLE, 8)
            .await?
            .iter()
            .all(|p| image(p) == "vllm:2")
    );
    nothing_left(&ns).await?;
    let replaced_twice: Vec<String> = user_pods
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, u)| u.len() > 2)
        .map(|(n, _)| n.clone())
        .collect();
    ensure!(
        replaced_twice.is_empty(),
        "pods replaced more than once: {replaced_twice:?}"
    );
    let twice = more_than_once(&brs.lock().unwrap());
    ensure!(twice.is_empty(), "BatchRelease created twice: {twice:?}");

    // Release 2, reverted at step 1: kill as the rollback starts. Only the moved group goes
    // back; the others never restart.
    let before = uids(&ns, STABLE).await?;
    apply_lws(&ns, &with_image(&v1, "vllm:3")).await?;
    wait_partition(&ns, Some("3")).await?;
    wait_paused_at(&ns, 1).await?;
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_rollout(&ns, "rollback finalising", |r| !finalising(r).is_empty()).await?;
    cc.kill_and_restart("during the rollback").await?;
    wait_rollout(&ns, "rolled back", finished("False")).await?;
    wait_partition(&ns, None).await?;
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        available_with(4, 4),
    )
    .await?;
    nothing_left(&ns).await?;
    let after = uids(&ns, STABLE).await?;
    ensure!(
        [0, 1, 2]
            .iter()
            .flat_map(|g| group(*g))
            .all(|name| after.get(&name) == before.get(&name)),
        "the rollback touched a group it had not moved"
    );
    ensure!(
        settled_pods(&ns, STABLE, 8)
            .await?
            .iter()
            .all(|p| image(p) == "vllm:2")
    );

    // Release 3, with a deadline and automatic rollback: the moved group can never be
    // scheduled. Killed while its batch waits (the restarted manager must still see the
    // deadline from the stored status), and again as the automatic rollback starts.
    let rollouts = ns.api::<lws_rollout::api::rollout::Rollout>();
    rollouts
        .patch(
            STABLE,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "lws-rollout.x-k8s.io/progress-deadline-seconds": "6",
                "lws-rollout.x-k8s.io/rollback-on-deadline": "true"
            }}})),
        )
        .await?;
    let before = uids(&ns, STABLE).await?;
    let mut broken = with_image(&v1, "vllm:4");
    for t in ["leaderTemplate", "workerTemplate"] {
        broken["spec"]["leaderWorkerTemplate"][t]["spec"]["nodeSelector"] =
            json!({"lws-rollout.test/no-such-node": "true"});
    }
    apply_lws(&ns, &broken).await?;
    wait_partition(&ns, Some("3")).await?;
    cc.kill_and_restart("while the batch waited for its deadline")
        .await?;
    wait_rollout(&ns, "the automatic rollback started", |r| {
        condition(r, "Progressing").is_some_and(|c| c.1 == "RolledBackOnDeadline")
    })
    .await?;
    cc.kill_and_restart("as the automatic rollback started")
        .await?;
    let late = wait_rollout(&ns, "rolled back on the deadline", |r| {
        finalising(r) == "END"
            && condition(r, "Progressing")
                .is_some_and(|c| c.0 == "False" && c.1 == "RolledBackOnDeadline")
    })
    .await?;
    let msg = condition(&late, "Progressing").context("condition")?.2;
    ensure!(
        msg.contains("not ready within 6s") && msg.contains("group 3"),
        "the message names the late group: {msg}"
    );
    // The moved group is back on the held revision, the release partition gone, the hold
    // kept until the template changes; no other group restarted.
    let lws = wait_partition(&ns, None).await?;
    ensure!(
        lws.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("rollouts.kruise.io/stable-revision")),
        "the workload stays held until its template changes"
    );
    ensure!(
        settled_pods(&ns, STABLE, 8)
            .await?
            .iter()
            .all(|p| image(p) == "vllm:2"),
        "the moved group went back to the held revision"
    );
    let after = uids(&ns, STABLE).await?;
    ensure!(
        [0, 1, 2]
            .iter()
            .flat_map(|g| group(*g))
            .all(|name| after.get(&name) == before.get(&name)),
        "the deadline's rollback touched a group it had not moved"
    );
    ensure!(batch_release(&ns).await?.is_none(), "the BatchRelease went");
    // Back to the held template: a cancel that moves no group; nothing of the release left.
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_rollout(&ns, "cancelled", finished("False")).await?;
    nothing_left(&ns).await?;
    ensure!(
        uids(&ns, STABLE).await? == after,
        "ending the release restarted a group"
    );
    cc.passed = true;
    Ok(())
}
