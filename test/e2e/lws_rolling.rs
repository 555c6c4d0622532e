//! Rolling updates step the leader StatefulSet through exactly upstream LWS v0.9's
//! (replicas, partition) sequences (`../shared/docs/lws-upstream.md` §3.2), and only the
//! changes that make a new revision roll groups.
//!
//! The new template carries a scheduling gate, so its pods stay Pending until the test lets
//! them go; groups are let go one at a time, in the order the update reaches them, and the
//! next only once the controller has reacted to the previous one. That makes the sequence
//! deterministic on a real cluster, however loaded: it is the sequence upstream's algorithm
//! gives when groups become ready one by one. Each script step names the StatefulSet state
//! the update must move to once that group is ready; the whole recorded sequence is then
//! compared, so an extra, missing or different step fails the test.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{TestNs, wait_for, wait_for_all, with_ns},
    lws_support::{
        GROUP_INDEX, NAME, REVISION, Release, StsRecorder, apply, available_with, create_available,
        held_image, image, label, leader_key, lws, lws_revisions, lws_revisions_when, pods_of,
        release, release_in_order, rolling_params, settled_pods, uids, wait_for_names,
    },
};

const SIZE: i32 = 2;

fn with_strategy(mut obj: serde_json::Value, strategy: serde_json::Value) -> serde_json::Value {
    obj["spec"]["rolloutStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdateConfiguration": strategy});
    obj
}

/// The LWS has exactly these condition statuses (for the current generation).
fn conditions_are<const N: usize>(
    want: [(&'static str, &'static str); N],
) -> impl Fn(Option<&LeaderWorkerSet>) -> bool {
    move |l: Option<&LeaderWorkerSet>| {
        let Some(l) = l else { return false };
        let Some(status) = &l.status else {
            return false;
        };
        let have: std::collections::BTreeMap<&str, &str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        status.observed_generation == l.metadata.generation
            && have == want.iter().copied().collect()
    }
}

/// Waits until the recorder has seen the leader StatefulSet's current state, then returns the
/// whole sequence.
async fn settled_sequence(
    ns: &TestNs,
    name: &str,
    recorder: &StsRecorder,
) -> anyhow::Result<Vec<(i32, i32)>> {
    let now = rolling_params(&ns.api::<StatefulSet>().get(name).await?);
    let start = std::time::Instant::now();
    while recorder.sequence().last() != Some(&now) {
        if start.elapsed() > Duration::from_secs(10) {
            anyhow::bail!(
                "the watch never delivered {now:?}; seen {:?}",
                recorder.sequence()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(recorder.sequence())
}

/// Every pod runs `image` and the revision `key`, and the only LWS revision left is `key`'s.
async fn all_groups_run(
    ns: &TestNs,
    name: &str,
    replicas: i32,
    want_image: &str,
) -> anyhow::Result<()> {
    let key = leader_key(ns, name).await?;
    // {replicas} groups of {SIZE}, surge groups and replaced pods gone.
    let pods = settled_pods(ns, name, (replicas * SIZE) as usize).await?;
    for pod in &pods {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        assert_eq!(image(pod), want_image, "{pod_name} runs the new image");
        assert_eq!(
            label(pod, REVISION),
            Some(key.as_str()),
            "{pod_name} runs the new revision"
        );
    }
    // Old revisions truncated.
    let revisions = lws_revisions_when(ns, name, |r| r.len() == 1).await?;
    assert!(revisions[0].starts_with(&format!("{name}-{key}-")));
    Ok(())
}

/// Runs `script`, then waits until the LWS is Available with (ready, updated) groups.
async fn release_until(
    ns: &TestNs,
    name: &str,
    recorder: &StsRecorder,
    script: &[Release],
    (ready, updated): (i32, i32),
) -> anyhow::Result<()> {
    release_in_order(ns, name, SIZE, recorder, script).await?;
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        name,
        Duration::from_secs(60),
        available_with(ready, updated),
    )
    .await?;
    Ok(())
}

/// Rolls `obj` (already Available, `replicas` groups) to a held `vllm:2` template, releasing
/// groups as `script` says, and returns the recorded (replicas, partition) sequence.
async fn roll_scripted(
    ns: &TestNs,
    obj: &serde_json::Value,
    replicas: i32,
    script: &[Release],
) -> anyhow::Result<Vec<(i32, i32)>> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let recorder = StsRecorder::start(ns, name).await?;
    apply(ns, &held_image(obj, "vllm:2")).await?;
    release_until(ns, name, &recorder, script, (replicas, replicas)).await?;
    settled_sequence(ns, name, &recorder).await
}

#[tokio::test]
async fn max_surge_one_rolls_through_five_replicas_then_back_to_four() -> anyhow::Result<()> {
    with_ns("roll-surge1", |ns| async move {
        let obj = with_strategy(
            lws("s1", 4, SIZE, "vllm:1"),
            json!({"maxSurge": 1, "maxUnavailable": 1}),
        );
        create_available(&ns, &obj).await?;
        let script = [
            // The surge group comes up held, so group 3 is the one unready group allowed.
            release(4, Some((5, 2))).held_until((5, 3)),
            release(3, Some((5, 1))),
            release(2, Some((5, 0))),
            release(1, Some((4, 0))),
            release(0, None),
        ];
        let seq = roll_scripted(&ns, &obj, 4, &script).await?;
        // (replicas, partition): one surge group from the start, the partition steps down one
        // group per ready group, and the surge group goes once at most one group is unready.
        assert_eq!(
            seq,
            [(4, 0), (5, 4), (5, 3), (5, 2), (5, 1), (5, 0), (4, 0)]
        );
        all_groups_run(&ns, "s1", 4, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn max_unavailable_zero_keeps_the_surge_group_until_the_last_group_is_ready()
-> anyhow::Result<()> {
    with_ns("roll-surge1-mu0", |ns| async move {
        // Upstream v0.9's e2e "rolling update with maxUnavailable zero and maxSurge set": 5
        // replicas during the update, 4 once it is done. v0.8 released the surge group as soon
        // as group 0 was replaced, with group 0 not ready yet (one group short).
        let obj = with_strategy(
            lws("s1z", 4, SIZE, "vllm:1"),
            json!({"maxSurge": 1, "maxUnavailable": 0}),
        );
        create_available(&ns, &obj).await?;
        let script = [
            release(4, Some((5, 3))),
            release(3, Some((5, 2))),
            release(2, Some((5, 1))),
            release(1, Some((5, 0))),
            release(0, Some((4, 0))),
        ];
        let seq = roll_scripted(&ns, &obj, 4, &script).await?;
        assert_eq!(
            seq,
            [(4, 0), (5, 4), (5, 3), (5, 2), (5, 1), (5, 0), (4, 0)]
        );
        all_groups_run(&ns, "s1z", 4, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn max_surge_equal_to_replicas_bursts_to_seven_then_back_to_four() -> anyhow::Result<()> {
    with_ns("roll-surge4", |ns| async move {
        let mut obj = with_strategy(
            lws("s4", 4, SIZE, "vllm:1"),
            json!({"maxSurge": 4, "maxUnavailable": 1}),
        );
        // Surge groups get a Service each, like any group, and lose it when released.
        obj["spec"]["networkConfig"] = json!({"subdomainPolicy": "UniquePerReplica"});
        create_available(&ns, &obj).await?;
        let script = [
            // Surge groups 4-6 come up held, so group 3 goes too: four groups unready.
            release(6, Some((7, 2))).held_until((7, 3)),
            release(5, Some((7, 1))),
            release(4, Some((7, 0))),
            release(3, Some((6, 0))),
            release(2, Some((5, 0))),
            release(1, Some((4, 0))),
            release(0, None),
        ];
        let seq = roll_scripted(&ns, &obj, 4, &script).await?;
        // Upstream bursts to R + (unready - 1) = 7 rather than 8, then releases one surge
        // group per group that becomes ready once the partition is at 0.
        assert_eq!(
            seq,
            [
                (4, 0),
                (7, 4),
                (7, 3),
                (7, 2),
                (7, 1),
                (7, 0),
                (6, 0),
                (5, 0),
                (4, 0)
            ]
        );
        all_groups_run(&ns, "s4", 4, "vllm:2").await?;
        // The surge groups' Services go with their leaders, through the garbage collector.
        wait_for_names(
            &ns.api::<k8s_openapi::api::core::v1::Service>(),
            Duration::from_secs(30),
            &["s4-0", "s4-1", "s4-2", "s4-3"],
        )
        .await
    })
    .await
}

#[tokio::test]
async fn max_unavailable_two_replaces_two_groups_at_a_time_without_surge() -> anyhow::Result<()> {
    with_ns("roll-unavail2", |ns| async move {
        let obj = with_strategy(
            lws("u2", 4, SIZE, "vllm:1"),
            json!({"maxSurge": 0, "maxUnavailable": 2}),
        );
        create_available(&ns, &obj).await?;
        let script = [
            release(3, Some((4, 1))),
            release(2, Some((4, 0))),
            release(1, None),
            release(0, None),
        ];
        let seq = roll_scripted(&ns, &obj, 4, &script).await?;
        // Two groups go at once (4 → 2); each ready group frees one slot of the budget.
        assert_eq!(seq, [(4, 0), (4, 4), (4, 2), (4, 1), (4, 0)]);
        all_groups_run(&ns, "u2", 4, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn user_partition_updates_only_groups_at_or_above_it_until_lowered() -> anyhow::Result<()> {
    with_ns("roll-partition", |ns| async move {
        let name = "up";
        let base = lws(name, 6, SIZE, "vllm:1");
        create_available(&ns, &base).await?;
        let old_key = leader_key(&ns, name).await?;
        let before = uids(&ns, name).await?;
        let recorder = StsRecorder::start(&ns, name).await?;
        let lws_api = ns.api::<LeaderWorkerSet>();

        // Setting the partition alone rolls nothing: it only moves the StatefulSet partition.
        let partitioned = with_strategy(base.clone(), json!({"partition": 4}));
        apply(&ns, &partitioned).await?;
        wait_for(
            &ns.api::<StatefulSet>(),
            name,
            Duration::from_secs(30),
            |s: Option<&StatefulSet>| s.is_some_and(|s| rolling_params(s) == (6, 4)),
        )
        .await?;
        assert_eq!(leader_key(&ns, name).await?, old_key, "no new revision");

        // The template change updates groups 5 and 4 only.
        let updated = held_image(&partitioned, "vllm:2");
        apply(&ns, &updated).await?;
        wait_for(
            &lws_api,
            name,
            Duration::from_secs(30),
            conditions_are([
                ("Available", "False"),
                ("Progressing", "True"),
                ("UpdateInProgress", "True"),
            ]),
        )
        .await?;
        let script = [release(5, Some((6, 4))), release(4, None)];
        release_until(&ns, name, &recorder, &script, (6, 2)).await?;
        let new_key = leader_key(&ns, name).await?;
        assert_ne!(new_key, old_key);
        let lws_now = lws_api.get(name).await?;
        let status = lws_now.status.clone().unwrap_or_default();
        assert_eq!(
            (
                status.replicas,
                status.updated_replicas,
                status.ready_replicas
            ),
            (Some(6), Some(2), Some(6)),
            "partitioned groups updated, the rest still counted ready"
        );
        // Held at the partition is a finished state: Available, nothing in progress.
        assert!(
            conditions_are([
                ("Available", "True"),
                ("Progressing", "False"),
                ("UpdateInProgress", "False"),
            ])(Some(&lws_now)),
            "{:?}",
            status.conditions
        );
        let after = uids(&ns, name).await?;
        for pod in pods_of(&ns, name).await? {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let group: i32 = label(&pod, GROUP_INDEX).unwrap_or("-1").parse()?;
            if group >= 4 {
                assert_eq!(
                    image(&pod),
                    "vllm:2",
                    "{pod_name} is at or above the partition"
                );
                assert_eq!(label(&pod, REVISION), Some(new_key.as_str()));
            } else {
                assert_eq!(image(&pod), "vllm:1", "{pod_name} is below the partition");
                assert_eq!(label(&pod, REVISION), Some(old_key.as_str()));
                assert_eq!(
                    before[&pod_name], after[&pod_name],
                    "{pod_name} kept running"
                );
            }
        }
        assert_eq!(
            lws_revisions(&ns).await?.len(),
            2,
            "both revisions kept while the update is partitioned"
        );
        assert_eq!(
            settled_sequence(&ns, name, &recorder).await?,
            [(6, 0), (6, 4), (6, 6), (6, 5), (6, 4)]
        );

        // Lowering the partition to 2 continues with groups 3 and 2, then 0 finishes it.
        apply(
            &ns,
            &with_strategy(updated.clone(), json!({"partition": 2})),
        )
        .await?;
        let script = [release(3, Some((6, 2))), release(2, None)];
        release_until(&ns, name, &recorder, &script, (6, 4)).await?;
        apply(
            &ns,
            &with_strategy(updated.clone(), json!({"partition": 0})),
        )
        .await?;
        let script = [release(1, Some((6, 0))), release(0, None)];
        release_until(&ns, name, &recorder, &script, (6, 6)).await?;
        assert_eq!(
            settled_sequence(&ns, name, &recorder).await?,
            [
                (6, 0),
                (6, 4),
                (6, 6),
                (6, 5),
                (6, 4),
                (6, 3),
                (6, 2),
                (6, 1),
                (6, 0)
            ]
        );
        all_groups_run(&ns, name, 6, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn surge_groups_stay_while_a_user_partition_holds_the_update() -> anyhow::Result<()> {
    with_ns("roll-partition-surge", |ns| async move {
        let name = "ps";
        let obj = with_strategy(
            lws(name, 3, SIZE, "vllm:1"),
            json!({"maxSurge": 1, "maxUnavailable": 1, "partition": 2}),
        );
        create_available(&ns, &obj).await?;
        let recorder = StsRecorder::start(&ns, name).await?;
        let updated = held_image(&obj, "vllm:2");
        apply(&ns, &updated).await?;
        // Group 2 and the surge group 3 are updated; the burst stays while partitioned.
        let script = [release(3, None), release(2, None)];
        release_until(&ns, name, &recorder, &script, (4, 2)).await?;
        assert_eq!(
            settled_sequence(&ns, name, &recorder).await?,
            [(3, 2), (4, 3), (4, 2)]
        );
        for pod in pods_of(&ns, name).await? {
            let group: i32 = label(&pod, GROUP_INDEX).unwrap_or("-1").parse()?;
            let want = if group >= 2 { "vllm:2" } else { "vllm:1" };
            assert_eq!(image(&pod), want, "{:?}", pod.metadata.name);
        }

        // Resetting the partition finishes the update and only then lets the surge group go.
        apply(
            &ns,
            &with_strategy(
                updated.clone(),
                json!({"maxSurge": 1, "maxUnavailable": 1, "partition": 0}),
            ),
        )
        .await?;
        let script = [release(1, Some((3, 0))), release(0, None)];
        release_until(&ns, name, &recorder, &script, (3, 3)).await?;
        assert_eq!(
            settled_sequence(&ns, name, &recorder).await?,
            [(3, 2), (4, 3), (4, 2), (4, 0), (3, 0)]
        );
        all_groups_run(&ns, name, 3, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn a_template_change_during_an_update_rolls_every_group_to_the_latest() -> anyhow::Result<()>
{
    with_ns("roll-twice", |ns| async move {
        let name = "tw";
        let obj = lws(name, 3, SIZE, "vllm:1");
        create_available(&ns, &obj).await?;
        // vllm:2 starts on the top group and is held there, unready…
        apply(&ns, &held_image(&obj, "vllm:2")).await?;
        wait_for_all(
            &ns.api::<Pod>(),
            &format!("{NAME}={name}"),
            Duration::from_secs(30),
            |pods| pods.iter().any(|p| image(p) == "vllm:2"),
        )
        .await
        .context("a vllm:2 pod")?;
        // …when vllm:3 replaces it: every group, the held one included, ends on vllm:3.
        apply(&ns, &lws(name, 3, SIZE, "vllm:3")).await?;
        wait_for(
            &ns.api::<LeaderWorkerSet>(),
            name,
            Duration::from_secs(120),
            available_with(3, 3),
        )
        .await?;
        all_groups_run(&ns, name, 3, "vllm:3").await?;
        let revisions = lws_revisions(&ns).await?;
        assert!(
            revisions[0].ends_with("-3"),
            "the third revision of the LWS: {revisions:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn replicas_raised_with_the_template_surge_above_the_new_count() -> anyhow::Result<()> {
    with_ns("roll-scale-up", |ns| async move {
        // Upstream's "rolling update with replicas scaled up and maxSurge set": 2 → 4 groups
        // together with a new template, maxSurge 2.
        let name = "ru";
        let obj = with_strategy(
            lws(name, 2, SIZE, "vllm:1"),
            json!({"maxSurge": 2, "maxUnavailable": 1}),
        );
        create_available(&ns, &obj).await?;
        let recorder = StsRecorder::start(&ns, name).await?;
        let mut updated = held_image(&obj, "vllm:2");
        updated["spec"]["replicas"] = json!(4);
        apply(&ns, &updated).await?;
        let script = [
            release(5, None),
            release(4, Some((6, 1))),
            release(3, Some((6, 0))),
            release(2, Some((5, 0))),
            release(1, Some((4, 0))),
            release(0, None),
        ];
        release_until(&ns, name, &recorder, &script, (4, 4)).await?;
        // v0.9 scales up to the 4 groups first (no surge on top), then adds the 2 surge groups
        // with the partition at the old count; then down as groups get ready (v0.8 went to 6 at
        // once).
        assert_eq!(
            settled_sequence(&ns, name, &recorder).await?,
            [(2, 0), (4, 2), (6, 2), (6, 1), (6, 0), (5, 0), (4, 0)]
        );
        all_groups_run(&ns, name, 4, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn replicas_lowered_during_an_update_hold_the_partition_then_continue() -> anyhow::Result<()>
{
    with_ns("roll-scale-down", |ns| async move {
        // Upstream's "replicas decreases during rolling update": 6 groups, the update starts,
        // then the LWS is scaled to 3.
        let name = "rd";
        let obj = lws(name, 6, SIZE, "vllm:1");
        create_available(&ns, &obj).await?;
        let recorder = StsRecorder::start(&ns, name).await?;
        let mut updated = held_image(&obj, "vllm:2");
        apply(&ns, &updated).await?;
        let start = std::time::Instant::now();
        while recorder.sequence().last() != Some(&(6, 5)) {
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(30),
                "the update never reached partition 5: {:?}",
                recorder.sequence()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        updated["spec"]["replicas"] = json!(3);
        apply(&ns, &updated).await?;
        // Group 5, held, goes with the scale-down; the update goes on from group 2.
        let script = [
            release(2, Some((3, 1))),
            release(1, Some((3, 0))),
            release(0, None),
        ];
        release_until(&ns, name, &recorder, &script, (3, 3)).await?;
        assert_eq!(
            settled_sequence(&ns, name, &recorder).await?,
            [(6, 0), (6, 6), (6, 5), (3, 3), (3, 2), (3, 1), (3, 0)]
        );
        all_groups_run(&ns, name, 3, "vllm:2").await
    })
    .await
}

#[tokio::test]
async fn replicas_strategy_and_startup_changes_do_not_roll_but_a_size_change_does()
-> anyhow::Result<()> {
    with_ns("roll-triggers", |ns| async move {
        let name = "tr";
        let mut obj = lws(name, 2, SIZE, "vllm:1");
        create_available(&ns, &obj).await?;
        let key = leader_key(&ns, name).await?;
        let revisions = lws_revisions(&ns).await?;
        let before = uids(&ns, name).await?;
        let lws_api = ns.api::<LeaderWorkerSet>();
        let sts_api = ns.api::<StatefulSet>();
        let unchanged = |what: &'static str| {
            let ns = ns.clone();
            let key = key.clone();
            let revisions = revisions.clone();
            let before = before.clone();
            async move {
                assert_eq!(leader_key(&ns, name).await?, key, "{what}: same revision");
                assert_eq!(
                    lws_revisions(&ns).await?,
                    revisions,
                    "{what}: no new revision"
                );
                let now = uids(&ns, name).await?;
                for (pod, uid) in &before {
                    assert_eq!(now.get(pod), Some(uid), "{what}: {pod} kept running");
                }
                anyhow::Ok(())
            }
        };

        // More replicas: one more group, the two existing ones untouched.
        obj["spec"]["replicas"] = json!(3);
        apply(&ns, &obj).await?;
        wait_for(
            &lws_api,
            name,
            Duration::from_secs(90),
            available_with(3, 3),
        )
        .await?;
        unchanged("replicas 2 → 3").await?;

        // Rollout strategy, startup policy and LWS labels are not part of the revision.
        obj["spec"]["rolloutStrategy"] = json!({"type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 2}});
        obj["spec"]["startupPolicy"] = json!("LeaderReady");
        obj["metadata"]["labels"] = json!({"team": "inference"});
        apply(&ns, &obj).await?;
        let generation = lws_api.get(name).await?.metadata.generation;
        wait_for(
            &lws_api,
            name,
            Duration::from_secs(30),
            move |l: Option<&LeaderWorkerSet>| {
                l.and_then(|l| l.status.as_ref())
                    .is_some_and(|s| s.observed_generation == generation)
            },
        )
        .await?;
        // The controller has acted on this generation and replaced nothing.
        wait_for(
            &lws_api,
            name,
            Duration::from_secs(30),
            available_with(3, 3),
        )
        .await?;
        unchanged("strategy, startupPolicy, labels").await?;

        // Size is part of the template: every group is replaced, now with three pods.
        obj["spec"]["leaderWorkerTemplate"]["size"] = json!(3);
        apply(&ns, &obj).await?;
        wait_for(&sts_api, name, Duration::from_secs(30), {
            let key = key.clone();
            move |s: Option<&StatefulSet>| {
                s.and_then(|s| s.metadata.labels.as_ref())
                    .and_then(|l| l.get(REVISION))
                    .is_some_and(|k| *k != key)
            }
        })
        .await?;
        wait_for(
            &lws_api,
            name,
            Duration::from_secs(120),
            available_with(3, 3),
        )
        .await?;
        let new_key = leader_key(&ns, name).await?;
        // Three groups of three, the replaced pods gone.
        let pods = settled_pods(&ns, name, 9).await?;
        let now = uids(&ns, name).await?;
        for pod in &pods {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            assert_eq!(label(pod, REVISION), Some(new_key.as_str()), "{pod_name}");
            if let Some(old) = before.get(&pod_name) {
                assert_ne!(&now[&pod_name], old, "{pod_name} was replaced");
            }
        }
        Ok(())
    })
    .await
}
