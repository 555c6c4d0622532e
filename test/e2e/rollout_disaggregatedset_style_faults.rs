//! The partition-style and blue-green releases of a prefill/decode pair (the examples
//! rollout-disaggregatedset-partition.yaml and rollout-disaggregatedset-bluegreen.yaml) when
//! things go wrong, against the real control plane, under requests through the proxy when the
//! traffic layer runs, not one of them failing:
//! - one role of the new pair losing every group while it has traffic (partition: at step 1's
//!   50%; blue-green: after the switch to 100%): the route goes back to the stable side at
//!   once (partition: the stable groups the step left; blue-green: the whole stable pair),
//!   the step holds and the release's message names the role; the groups back, the traffic
//!   comes back;
//! - then a third template: the release starts over on it from step 1, the second revision's
//!   roles go together once the route sends them nothing (partition: their groups given back
//!   to the stable pair first; blue-green: the second pair removed), the stable groups that
//!   served never restarted;
//! - the manager SIGKILLed at each phase of both styles (one cluster of its own, the styles one
//!   after the other): it converges, nothing is created twice, no stable group restarted.

use std::collections::BTreeMap;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Service;
use kube::{ResourceExt, api::PostParams};
use lws_rollout::api::DisaggregatedSet;

use crate::{
    crash_support::{CrashCluster, Seen},
    harness::{TestNs, wait_for, wait_for_all, with_ns},
    rollout_disaggregatedset_faults::{
        Watched, canary_message, gated_decode, kill_leaders, none_restarted, track_pods,
        wait_revision_gone,
    },
    rollout_disaggregatedset_styles::{
        BLUE_GREEN_EXAMPLE, PARTITION_EXAMPLE, canary_revision, paused_release, pods_of,
        watch_going, went_together_at,
    },
    rollout_support::{
        WAIT, approve_named, create_rollout, create_route_to, finished, on_big_stack,
        pair::{
            GROUPS, ROLLOUT, ROUTE, SERVICE, SET, apply_set, canary_weight_now, example_at,
            pair_lws, wait_canary_weight, wait_one_revision, with_image,
        },
        paused_at, step, wait_rollout_named,
    },
    rollout_tools::GateKeeper,
};

const HOLD: &str = "rollouts.kruise.io/stable-revision";

/// The pods named in `serving` each had one uid only while `seen` watched: not one of those
/// groups restarted.
fn serving_never_restarted(seen: &Seen, serving: &BTreeMap<String, String>) -> anyhow::Result<()> {
    ensure!(!serving.is_empty(), "the stable side served");
    let seen = seen.lock().unwrap();
    let restarted: Vec<_> = serving
        .keys()
        .filter(|name| seen.get(*name).is_none_or(|uids| uids.len() != 1))
        .collect();
    ensure!(
        restarted.is_empty(),
        "stable pods that served restarted (or were not watched): {restarted:?}"
    );
    Ok(())
}

/// The new pair (`revision`) paused at `index` with `weight`, its decode groups held back by
/// [`crate::lws_support::HOLD_GATE`] from now on: every decode group of it killed takes it out
/// of traffic at once, the step stays paused, and the release's message names the role. Then
/// the groups are let back and the weight comes back.
async fn losing_decode(ns: &TestNs, revision: &str, index: i32, weight: i64) -> anyhow::Result<()> {
    kill_leaders(ns, &format!("{SET}-0-{revision}-decode")).await?;
    wait_canary_weight(ns, 0).await?;
    let r = wait_rollout_named(ns, ROLLOUT, "names the decode role", |r| {
        canary_message(r).contains("role decode has no ready group")
    })
    .await?;
    ensure!(
        paused_at(index)(&r),
        "step {index} holds: {:?} {}",
        step(&r),
        canary_message(&r)
    );
    let gates = GateKeeper::start(ns);
    gates.open();
    wait_canary_weight(ns, weight).await?;
    drop(gates);
    Ok(())
}

/// A third template while paused on the second revision (`second`): the release starts over on
/// it at step 1 (its pause, `weight`), the hold still on `stable`, the second revision's roles
/// gone together while the route sent them nothing. Returns the third revision.
async fn third_template(
    ns: &TestNs,
    v1: &serde_json::Value,
    stable: &str,
    second: &str,
    weight: i64,
) -> anyhow::Result<String> {
    let (going_watch, going) = watch_going(ns, second);
    apply_set(ns, &with_image(v1, "vllm:3")).await?;
    let r = wait_rollout_named(ns, ROLLOUT, "restarted on vllm:3", |r| {
        paused_at(1)(r) && canary_revision(r).is_ok_and(|c| c != stable && c != second)
    })
    .await?;
    let third = canary_revision(&r)?;
    wait_revision_gone(ns, second).await?;
    going_watch.abort();
    went_together_at(&going, second, 0)?;
    wait_canary_weight(ns, weight).await?;
    let set = ns.api::<DisaggregatedSet>().get(SET).await?;
    ensure!(
        set.annotations().get(HOLD).map(String::as_str) == Some(stable),
        "the hold keeps the first stable revision: {:?}",
        set.annotations()
    );
    Ok(third)
}

#[test]
fn rollout_disaggregatedset_partition_losing_a_role_then_a_third_template() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-partition-faults", |ns| async move {
            let what = "pair partition release losing decode, then a third template";
            let gates = GateKeeper::start(&ns);
            gates.open();
            let (v1, stable, second, _, traffic) =
                paused_release(&ns, PARTITION_EXAMPLE, 1, 50, what, |s| {
                    gated_decode(s, "vllm:2")
                })
                .await?;
            drop(gates);
            let (pods, stable_pods) = track_pods(&ns, &stable);
            // The stable groups step 1 left: they carry everything while the new pair is out.
            let serving = pods_of(&ns, &stable).await?;
            losing_decode(&ns, &second, 1, 50).await?;

            let third = third_template(&ns, &v1, &stable, &second, 50).await?;
            let lws = pair_lws(&ns).await?;
            ensure!(
                lws.len() == 4
                    && lws
                        .iter()
                        .all(|l| (l.1 == stable || l.1 == third) && l.2 == 1 && l.3 == 1),
                "one group of each role moved to the third revision, one left on the stable \
                 pair, all ready: {lws:?}"
            );
            pods.abort();
            serving_never_restarted(&stable_pods, &serving)?;
            if let Some(t) = traffic {
                let all = t.stop().await;
                all.assert_no_failures(what)?;
                eprintln!("{what} under load: {}", all.summary());
            }
            Ok(())
        })
    })
}

#[test]
fn rollout_disaggregatedset_blue_green_losing_a_role_after_the_switch_then_a_third_template()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-bluegreen-faults", |ns| async move {
            let what = "pair blue-green release losing decode after the switch, then a third \
                        template";
            let gates = GateKeeper::start(&ns);
            gates.open();
            let (v1, stable, second, _, traffic) =
                paused_release(&ns, BLUE_GREEN_EXAMPLE, 2, 100, what, |s| {
                    gated_decode(s, "vllm:2")
                })
                .await?;
            drop(gates);
            let (pods, stable_pods) = track_pods(&ns, &stable);
            // After the switch: the whole stable pair, never touched, takes everything back.
            losing_decode(&ns, &second, 2, 100).await?;

            // Starts over at step 1: the third pair whole beside the stable one, idle.
            let third = third_template(&ns, &v1, &stable, &second, 0).await?;
            wait_for_all(
                &ns.api::<lws_rollout::api::LeaderWorkerSet>(),
                &format!("{}={SET}", crate::rollout_support::pair::SET_LABEL),
                WAIT,
                |l| {
                    l.len() == 4
                        && l.iter().all(|l| {
                            l.status
                                .as_ref()
                                .is_some_and(|s| s.ready_replicas == Some(GROUPS))
                        })
                },
            )
            .await
            .context("the stable and the third pair whole")?;
            let lws = pair_lws(&ns).await?;
            ensure!(
                lws.iter().filter(|l| l.1 == third).count() == 2
                    && lws.iter().filter(|l| l.1 == stable).count() == 2,
                "the stable pair and the third: {lws:?}"
            );
            pods.abort();
            none_restarted(&stable_pods, "stable")?;
            if let Some(t) = traffic {
                let all = t.stop().await;
                all.assert_no_failures(what)?;
                eprintln!("{what} under load: {}", all.summary());
            }
            Ok(())
        })
    })
}

#[test]
fn rollout_disaggregatedset_partition_and_blue_green_crash_safe_at_every_phase()
-> anyhow::Result<()> {
    on_big_stack(|| async {
        let (mut cc, partition) = CrashCluster::start("pd-style-crash").await?;
        crash_partition(&mut cc, &partition).await?;
        let blue_green = cc.namespace("pd-style-crash-bg").await?;
        crash_blue_green(&mut cc, &blue_green).await?;
        ensure!(cc.manager_running(), "the manager kept running");
        cc.finish();
        Ok(())
    })
}

/// The example at `path` at rest on `vllm:1` in `ns`, its Service, route and Rollout, the
/// watches started; then `vllm:2`, the manager killed as the new pair's first LWS appears.
/// Returns (the stable revision, the watches).
async fn crash_setup(
    cc: &mut CrashCluster,
    ns: &TestNs,
    path: &str,
) -> anyhow::Result<(String, Watched)> {
    let (set, service, rollout) = example_at(path)?;
    apply_set(ns, &with_image(&set, "vllm:1")).await?;
    let stable = wait_one_revision(ns, None).await?;
    let svc: Service = serde_json::from_value(service)?;
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    create_route_to(ns, ROUTE, SERVICE).await?;
    create_rollout(ns, &rollout).await?;
    let watched = Watched::start(ns, &stable);
    apply_set(ns, &with_image(&set, "vllm:2")).await?;
    wait_for_all(
        &ns.api::<lws_rollout::api::LeaderWorkerSet>(),
        &format!("{}={SET}", crate::rollout_support::pair::SET_LABEL),
        WAIT,
        |l| {
            l.iter().any(|l| {
                l.labels().get(crate::rollout_support::pair::REVISION_LABEL) != Some(&stable)
            })
        },
    )
    .await
    .context("an LWS of the new revision")?;
    cc.kill_and_restart(&format!("{path}: as the new pair's first LWS appeared"))
        .await?;
    Ok((stable, watched))
}

/// Kills the manager as the set's hold is lifted, then waits for the release to finish on
/// the new revision with the canary Service gone, nothing created twice, no stable group
/// restarted.
async fn crash_finalising(
    cc: &mut CrashCluster,
    ns: &TestNs,
    stable: &str,
    watched: Watched,
    what: &str,
) -> anyhow::Result<()> {
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        SET,
        WAIT,
        |s: Option<&DisaggregatedSet>| s.is_some_and(|s| !s.annotations().contains_key(HOLD)),
    )
    .await
    .context("the hold lifted")?;
    cc.kill_and_restart(&format!("{what}: as the hold was lifted"))
        .await?;
    wait_rollout_named(ns, ROLLOUT, "finished", finished("True")).await?;
    wait_one_revision(ns, Some(stable)).await?;
    wait_for(
        &ns.api::<Service>(),
        &format!("{SERVICE}-canary"),
        WAIT,
        |s: Option<&Service>| s.is_none(),
    )
    .await
    .context("the canary Service is gone")?;
    watched.nothing_twice()?;
    none_restarted(&watched.stable_pods, &format!("{what}: stable"))?;
    Ok(())
}

/// Partition style: killed as the new pair's first LWS appears, at step 1's pause, as step 2
/// sends the new pair everything before moving the stable pair's last groups, and as the
/// hold is lifted. The stable pair's groups are only ever moved (deleted), never restarted.
async fn crash_partition(cc: &mut CrashCluster, ns: &TestNs) -> anyhow::Result<()> {
    let what = "partition";
    let (stable, watched) = crash_setup(cc, ns, PARTITION_EXAMPLE).await?;
    wait_rollout_named(ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
    wait_canary_weight(ns, 50).await?;
    cc.kill_and_restart("partition: at step 1's pause").await?;
    let r = wait_rollout_named(ns, ROLLOUT, "still paused at step 1", paused_at(1)).await?;
    let canary = canary_revision(&r)?;
    wait_canary_weight(ns, 50).await?;
    let lws = pair_lws(ns).await?;
    ensure!(
        lws.len() == 4 && lws.iter().all(|l| l.2 == 1),
        "step 1's groups after the restart, one of each role on each side: {lws:?}"
    );
    approve_named(ns, ROLLOUT).await?;
    wait_canary_weight(ns, 100).await?;
    cc.kill_and_restart("partition: as step 2 sent the new pair everything")
        .await?;
    crash_finalising(cc, ns, &stable, watched, what).await?;
    ensure!(wait_one_revision(ns, Some(&stable)).await? == canary);
    Ok(())
}

/// Blue-green: killed as the new pair's first LWS appears, at step 1's pause (the new pair
/// whole and idle), once the switch sent it everything, and as promotion lifts the hold.
async fn crash_blue_green(cc: &mut CrashCluster, ns: &TestNs) -> anyhow::Result<()> {
    let what = "blue-green";
    let (stable, watched) = crash_setup(cc, ns, BLUE_GREEN_EXAMPLE).await?;
    wait_rollout_named(ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
    cc.kill_and_restart("blue-green: at step 1's pause").await?;
    let r = wait_rollout_named(ns, ROLLOUT, "still paused at step 1", paused_at(1)).await?;
    let canary = canary_revision(&r)?;
    let lws = pair_lws(ns).await?;
    ensure!(
        lws.len() == 4 && lws.iter().all(|l| l.2 == GROUPS && l.3 == GROUPS),
        "step 1 after the restart: both pairs whole: {lws:?}"
    );
    ensure!(
        canary_weight_now(ns).await? == 0,
        "the idle pair gets nothing"
    );
    approve_named(ns, ROLLOUT).await?;
    wait_canary_weight(ns, 100).await?;
    cc.kill_and_restart("blue-green: after the switch").await?;
    wait_rollout_named(ns, ROLLOUT, "paused at step 2", paused_at(2)).await?;
    wait_canary_weight(ns, 100).await?;
    approve_named(ns, ROLLOUT).await?;
    crash_finalising(cc, ns, &stable, watched, what).await?;
    ensure!(wait_one_revision(ns, Some(&stable)).await? == canary);
    Ok(())
}
