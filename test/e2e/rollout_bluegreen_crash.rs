//! Crash safety of a blue-green release: the manager is SIGKILLed as the
//! second LWS appears, mid-growth, at the switch, during promotion and during a rollback, on a
//! cluster of the test's own. Every restart decides from the cluster and the Rollout's status
//! alone: the same end state as an uninterrupted release, nothing created twice, no user group
//! restarted before promotion. Kills happen as soon as a watch sees the moment they aim at.

use anyhow::ensure;
use lws_rollout::api::LeaderWorkerSet;

use crate::harness::wait_for;
use crate::lws_support::{available_with, image, settled_pods, uids};
use crate::rollout_crash::{CrashCluster, Watched, more_than_once, wait_for_all_canary};
use crate::rollout_support::*;

#[test]
fn rollout_bluegreen_crash_safe_release_and_rollback() -> anyhow::Result<()> {
    on_big_stack(crash_blue_green)
}

async fn crash_blue_green() -> anyhow::Result<()> {
    let (mut cc, ns) = CrashCluster::start("rollout-bg-crash").await?;
    let v1 = stable_lws(2, "vllm:1");
    release_setup(
        &ns,
        &v1,
        &blue_green_rollout(blue_green_two_steps(), Some(gateway_routing())),
    )
    .await?;
    let baseline = uids(&ns, STABLE).await?;
    let watched = Watched::start(&ns);
    let (user_pods, second_lws, brs, services) = (
        &watched.stable_pods,
        &watched.canary_lws,
        &watched.brs,
        &watched.services,
    );

    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_for_all_canary(&ns, |c| !c.is_empty()).await?;
    cc.kill_and_restart("as the second LWS appeared").await?;
    wait_paused_at(&ns, 1).await?;
    approve(&ns).await?;
    wait_for_all_canary(&ns, |c| c.iter().any(|l| l.spec.replicas == Some(2))).await?;
    cc.kill_and_restart("as the second LWS grew").await?;
    wait_paused_at(&ns, 2).await?;
    wait_route(&ns, split_route(100)).await?;
    ensure!(uids(&ns, STABLE).await? == baseline, "a user pod restarted");

    approve(&ns).await?;
    wait_rollout(&ns, "switching", |r| {
        finalising(r) == "FinalisingStepRouteTrafficToNew"
    })
    .await?;
    cc.kill_and_restart("at the switch").await?;
    wait_rollout(&ns, "promoting", |r| finalising(r) == "ResumeWorkload").await?;
    ensure!(
        uids(&ns, STABLE).await? == baseline,
        "a user pod restarted before the switch was done"
    );
    cc.kill_and_restart("during promotion").await?;
    wait_rollout(&ns, "release finished", finished("True")).await?;
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        available_with(2, 2),
    )
    .await?;
    ensure!(
        settled_pods(&ns, STABLE, 4)
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
        "user pods replaced more than once: {replaced_twice:?}"
    );
    for (what, seen) in [
        ("second LWS", second_lws),
        ("BatchRelease", brs),
        ("Service", services),
    ] {
        let twice = more_than_once(&seen.lock().unwrap());
        ensure!(twice.is_empty(), "{what} created twice: {twice:?}");
    }

    // Release 2, rolled back after the switch: kill as the rollback starts.
    let before = uids(&ns, STABLE).await?;
    let old = ns.api::<lws_rollout::api::Rollout>().get(STABLE).await?;
    let old_revision = old
        .status
        .and_then(|s| s.blue_green_status)
        .map(|b| b.updated_revision)
        .unwrap_or_default();
    apply_lws(&ns, &with_image(&v1, "vllm:3")).await?;
    wait_rollout(&ns, "release 2 at step 1", |r| {
        step(r) == (1, "StepPaused".to_string())
            && r.status
                .as_ref()
                .and_then(|s| s.blue_green_status.as_ref())
                .is_some_and(|b| b.updated_revision != old_revision)
    })
    .await?;
    approve(&ns).await?;
    wait_paused_at(&ns, 2).await?;
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_rollout(&ns, "rollback finalising", |r| !finalising(r).is_empty()).await?;
    cc.kill_and_restart("during the rollback").await?;
    wait_rollout(&ns, "rolled back", finished("False")).await?;
    nothing_left(&ns).await?;
    ensure!(
        uids(&ns, STABLE).await? == before,
        "the rollback touched a user group"
    );
    ensure!(
        second_lws.lock().unwrap().len() == 2,
        "one second LWS per release: {:?}",
        second_lws.lock().unwrap()
    );
    cc.passed = true;
    Ok(())
}
