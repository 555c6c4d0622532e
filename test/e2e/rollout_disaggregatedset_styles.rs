//! A prefill/decode pair released in partition style and blue-green (the examples
//! rollout-disaggregatedset-partition.yaml and rollout-disaggregatedset-bluegreen.yaml, applied
//! as shipped) against the real control plane, under requests through the proxy when the
//! traffic layer runs, with not one request failing:
//! - partition style, no second copy of the pair: step 1 moves one group of each role from the
//!   stable pair to the new one, so no role ever asks for more groups than its replicas; the
//!   stable pair's remaining groups are never restarted; the new pair gets its share only once
//!   both of its roles are ready; approval finishes with the set's own rolling update.
//!   The last step, which moves the stable pair's last groups, sends the new pair everything
//!   before they go.
//! - blue-green: a whole second pair beside the stable one, idle at step 1; the switch sends
//!   it everything only once every role of it is ready at full size; promotion drains the old
//!   pair together, the stable pair never restarted before.
//! - a template reverted mid-release, in each style: everything back to the stable pair first,
//!   then the new pair's groups go (given back to the stable pair in partition style), both
//!   roles together; the stable pair's groups that served are never restarted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use futures::StreamExt;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::{
    ResourceExt,
    api::{ListParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::{DisaggregatedSet, LeaderWorkerSet};

use crate::harness::{TestNs, wait_for, with_ns};
use crate::rollout_disaggregatedset::{first_weight_seen, pair_traffic};
use crate::rollout_disaggregatedset_faults::wait_revision_gone;
use crate::rollout_support::pair::{
    GROUPS, REVISION_LABEL, ROLE_LABEL, ROLLOUT, ROUTE, SERVICE, SET, SET_LABEL, apply_set,
    canary_weight, canary_weight_now, example_at, pair_lws, wait_canary_weight, wait_one_revision,
    with_image,
};
use crate::rollout_support::{
    WAIT, approve_named, create_rollout, create_route_to, finished, on_big_stack, paused_at,
    wait_rollout_named,
};

pub(crate) const PARTITION_EXAMPLE: &str = "examples/rollout-disaggregatedset-partition.yaml";
const RELEASE_STYLE: &str = "lws-rollout.x-k8s.io/release-style";

/// The most groups any role asked for at once (its LWSs' `spec.replicas` summed over
/// revisions), by role, while the watch ran.
type PeakGroups = Arc<Mutex<BTreeMap<String, i32>>>;

fn watch_peak_groups(ns: &TestNs) -> (PeakGroups, tokio::task::JoinHandle<()>) {
    let peak: PeakGroups = Arc::default();
    let sink = peak.clone();
    let api = ns.api::<LeaderWorkerSet>();
    let task = tokio::spawn(async move {
        let mut asked: BTreeMap<String, (String, i32)> = BTreeMap::new();
        let mut events = watcher::watcher(
            api,
            watcher::Config::default().labels(&format!("{SET_LABEL}={SET}")),
        )
        .default_backoff()
        .boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(l) | watcher::Event::InitApply(l) => {
                    let role = l.labels().get(ROLE_LABEL).cloned().unwrap_or_default();
                    asked.insert(l.name_any(), (role, l.spec.replicas.unwrap_or(1)));
                }
                watcher::Event::Delete(l) => {
                    asked.remove(&l.name_any());
                }
                _ => continue,
            }
            let mut per_role: BTreeMap<String, i32> = BTreeMap::new();
            for (role, replicas) in asked.values() {
                *per_role.entry(role.clone()).or_default() += replicas;
            }
            let mut peak = sink.lock().unwrap();
            for (role, n) in per_role {
                let p = peak.entry(role).or_default();
                *p = (*p).max(n);
            }
        }
    });
    (peak, task)
}

/// The set's pods of `revision`, by name, with their uids.
pub(crate) async fn pods_of(
    ns: &TestNs,
    revision: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(ns
        .api::<Pod>()
        .list(
            &ListParams::default()
                .labels(&format!("{SET_LABEL}={SET},{REVISION_LABEL}={revision}")),
        )
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

/// When each role's LWS of a revision was first seen going (scaled to 0, being deleted, or
/// gone), with the route's canary weight read right then.
type Gone = Arc<Mutex<BTreeMap<String, (Instant, i64)>>>;

pub(crate) fn watch_going(ns: &TestNs, revision: &str) -> (tokio::task::JoinHandle<()>, Gone) {
    let seen: Gone = Arc::default();
    let out = seen.clone();
    let ns = ns.clone();
    let going = crate::rollout_support::pair::lws_going(&ns, revision);
    let task = tokio::spawn(async move {
        let mut going = std::pin::pin!(going);
        while let Some(lws) = going.next().await {
            let role = lws.labels().get(ROLE_LABEL).cloned().unwrap_or_default();
            if out.lock().unwrap().contains_key(&role) {
                continue;
            }
            let at = Instant::now();
            let weight = canary_weight_now(&ns).await.unwrap_or(-1);
            out.lock().unwrap().insert(role, (at, weight));
        }
    });
    (task, seen)
}

/// Both roles of `revision` went (within a few seconds of each other: one reconcile, never
/// role by role), each while the route gave the new side `weight`.
pub(crate) fn went_together_at(gone: &Gone, revision: &str, weight: i64) -> anyhow::Result<()> {
    let g = gone.lock().unwrap().clone();
    ensure!(
        g.len() == 2,
        "both roles of {revision} were seen going: {g:?}"
    );
    let times: Vec<Instant> = g.values().map(|v| v.0).collect();
    let gap = times[0].max(times[1]) - times[0].min(times[1]);
    ensure!(
        gap < Duration::from_secs(5),
        "the roles of {revision} went {gap:?} apart: {g:?}"
    );
    for (role, (_, w)) in &g {
        ensure!(
            *w == weight,
            "{role} of {revision} went while the route gave the new pair {w}, not {weight}"
        );
    }
    Ok(())
}

/// The hold, release-groups and release-style gone from the set, the user's selector given
/// back to the Service.
async fn release_lifted(
    ns: &TestNs,
    users_selector: &Option<BTreeMap<String, String>>,
) -> anyhow::Result<()> {
    let set_now = ns.api::<DisaggregatedSet>().get(SET).await?;
    ensure!(
        [
            "rollouts.kruise.io/stable-revision",
            "lws-rollout.x-k8s.io/release-groups",
            RELEASE_STYLE
        ]
        .iter()
        .all(|a| !set_now.annotations().contains_key(*a)),
        "hold, release-groups and release-style lifted: {:?}",
        set_now.annotations()
    );
    let svc_now = ns.api::<Service>().get(SERVICE).await?;
    ensure!(
        svc_now.spec.and_then(|s| s.selector) == *users_selector,
        "the user's selector is given back"
    );
    Ok(())
}

/// After a promotion: every request reaches the new pair's prefill leaders, and none failed over
/// the whole release (`what` names it in the summary line).
async fn all_on_the_new_pair(
    traffic: Option<crate::rollout_disaggregatedset::PairTraffic>,
    new_revision: &str,
    what: &str,
) -> anyhow::Result<()> {
    let Some(t) = traffic else {
        return Ok(());
    };
    let w = t.window(200).await?;
    let new_prefill = format!("{SET}-0-{new_revision}-prefill");
    w.assert_all(
        "after the release every request reaches the new pair",
        |o| o.lws.as_deref() == Some(new_prefill.as_str()),
    )?;
    let all = t.stop().await;
    all.assert_no_failures("the whole release")?;
    eprintln!("{what} under load: {}", all.summary());
    Ok(())
}

/// The revision a Rollout releases.
pub(crate) fn canary_revision(r: &lws_rollout::api::Rollout) -> anyhow::Result<String> {
    let status = r.status.as_ref().context("status")?;
    status
        .canary_status
        .as_ref()
        .map(|c| c.canary_revision.clone())
        .or_else(|| {
            status
                .blue_green_status
                .as_ref()
                .map(|b| b.updated_revision.clone())
        })
        .filter(|r| !r.is_empty())
        .context("the release's new revision")
}

#[test]
fn rollout_disaggregatedset_partition_moves_groups_between_pairs_losing_no_request()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-pd-partition", |ns| async move {
            let (set, service, rollout) = example_at(PARTITION_EXAMPLE)?;
            let set = with_image(&set, "vllm:1");
            apply_set(&ns, &set).await?;
            let stable = wait_one_revision(&ns, None).await?;
            let svc: Service = serde_json::from_value(service)?;
            ns.api::<Service>()
                .create(&PostParams::default(), &svc)
                .await?;
            let users_selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
            create_route_to(&ns, ROUTE, SERVICE).await?;
            create_rollout(&ns, &rollout).await?;
            let traffic = pair_traffic(
                &ns,
                &stable,
                "rollout_disaggregatedset_partition (requests)",
            )
            .await?;
            let stable_pods = pods_of(&ns, &stable).await?;
            let (peak, peak_watch) = watch_peak_groups(&ns);

            // The template change: step 1 moves one group of each role to the new pair.
            let (guard, first_weight) = first_weight_seen(&ns, stable.clone());
            apply_set(&ns, &with_image(&set, "vllm:2")).await?;
            let r = wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
            let lws = pair_lws(&ns).await?;
            let (old, new): (Vec<_>, Vec<_>) = lws.iter().partition(|l| l.1 == stable);
            ensure!(
                old.len() == 2
                    && old.iter().all(|l| l.2 == 1 && l.3 == 1)
                    && new.len() == 2
                    && new.iter().all(|l| l.2 == 1 && l.3 == 1),
                "step 1: one group of each role moved, one left on the stable pair, all ready: \
                 {lws:?}"
            );
            let canary = r
                .status
                .as_ref()
                .and_then(|s| s.canary_status.clone())
                .context("canaryStatus")?;
            ensure!(
                canary.canary_ready_replicas == 1,
                "one complete new pair ready: {canary:?}"
            );
            let set_now = ns.api::<DisaggregatedSet>().get(SET).await?;
            ensure!(
                set_now.annotations().get(RELEASE_STYLE) == Some(&"in-place".to_string())
                    && set_now
                        .annotations()
                        .get("lws-rollout.x-k8s.io/release-groups")
                        == Some(&r#"{"decode":1,"prefill":1}"#.to_string()),
                "one write of both roles' groups, in place: {:?}",
                set_now.annotations()
            );
            // The stable groups left are the ones that ran before: not one restarted.
            let left = pods_of(&ns, &stable).await?;
            ensure!(
                !left.is_empty()
                    && left.len() * 2 == stable_pods.len()
                    && left
                        .iter()
                        .all(|(name, uid)| stable_pods.get(name) == Some(uid)),
                "the stable pair's remaining pods are the same pods: before {stable_pods:?}, \
                 now {left:?}"
            );
            wait_for(
                &ns.api::<HttpRoute>(),
                ROUTE,
                WAIT,
                |r: Option<&HttpRoute>| r.is_some_and(|r| canary_weight(r) == 50),
            )
            .await?;
            guard.await?;
            let at_first_weight = first_weight.lock().unwrap().clone().unwrap_or_default();
            ensure!(
                at_first_weight.len() == 2 && at_first_weight.iter().all(|(_, ready)| *ready >= 1),
                "the route gave the new pair weight before both roles were ready: \
                 {at_first_weight:?}"
            );
            if let Some(t) = &traffic {
                t.assert_step(50, 200).await?;
            }

            // Approve: the rest moves, the hold goes, the set's own rolling update removes
            // the emptied stable pair. The stable pair's last groups go only once the route
            // sends it nothing: the new pair has everything first.
            let (going_watch, going) = watch_going(&ns, &stable);
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            let new_revision = wait_one_revision(&ns, Some(&stable)).await?;
            going_watch.abort();
            went_together_at(&going, &stable, 100)?;
            peak_watch.abort();
            let peak = peak.lock().unwrap().clone();
            ensure!(
                peak.len() == 2 && peak.values().all(|p| *p <= GROUPS),
                "no second copy: no role ever asked for more than its {GROUPS} groups: {peak:?}"
            );
            release_lifted(&ns, &users_selector).await?;
            all_on_the_new_pair(traffic, &new_revision, "pair partition release").await?;
            Ok(())
        })
    })
}

pub(crate) const BLUE_GREEN_EXAMPLE: &str = "examples/rollout-disaggregatedset-bluegreen.yaml";

#[test]
fn rollout_disaggregatedset_blue_green_switches_to_a_whole_pair_losing_no_request()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-pd-bluegreen", |ns| async move {
            let (set, service, rollout) = example_at(BLUE_GREEN_EXAMPLE)?;
            let set = with_image(&set, "vllm:1");
            apply_set(&ns, &set).await?;
            let stable = wait_one_revision(&ns, None).await?;
            let svc: Service = serde_json::from_value(service)?;
            ns.api::<Service>()
                .create(&PostParams::default(), &svc)
                .await?;
            let users_selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
            create_route_to(&ns, ROUTE, SERVICE).await?;
            create_rollout(&ns, &rollout).await?;
            let traffic = pair_traffic(
                &ns,
                &stable,
                "rollout_disaggregatedset_blue_green (requests)",
            )
            .await?;
            let stable_pods = pods_of(&ns, &stable).await?;
            let (peak, peak_watch) = watch_peak_groups(&ns);

            // Step 1: the whole second pair beside the stable one, idle.
            let (guard, first_weight) = first_weight_seen(&ns, stable.clone());
            apply_set(&ns, &with_image(&set, "vllm:2")).await?;
            wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
            let lws = pair_lws(&ns).await?;
            ensure!(
                lws.len() == 4 && lws.iter().all(|l| l.2 == GROUPS && l.3 == GROUPS),
                "step 1: both pairs whole, every role at {GROUPS} ready groups: {lws:?}"
            );
            let route = ns.api::<HttpRoute>().get(ROUTE).await?;
            ensure!(canary_weight(&route) == 0, "the idle new pair gets nothing");
            if let Some(t) = &traffic {
                let w = t.window(200).await?;
                let stable_prefill = format!("{SET}-0-{stable}-prefill");
                w.assert_all("at step 1 every request reaches the stable pair", |o| {
                    o.lws.as_deref() == Some(stable_prefill.as_str())
                })?;
            }

            // Step 2: the switch, to the whole new pair.
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "paused at step 2", paused_at(2)).await?;
            wait_for(
                &ns.api::<HttpRoute>(),
                ROUTE,
                WAIT,
                |r: Option<&HttpRoute>| r.is_some_and(|r| canary_weight(r) == 100),
            )
            .await?;
            guard.await?;
            let at_first_weight = first_weight.lock().unwrap().clone().unwrap_or_default();
            ensure!(
                at_first_weight.len() == 2
                    && at_first_weight.iter().all(|(_, ready)| *ready == GROUPS),
                "the route gave the new pair weight before every role was whole: \
                 {at_first_weight:?}"
            );
            let left = pods_of(&ns, &stable).await?;
            ensure!(
                left == stable_pods,
                "the stable pair ran untouched until promotion: before {stable_pods:?}, \
                 now {left:?}"
            );
            if let Some(t) = &traffic {
                t.assert_step(100, 200).await?;
            }

            // Promotion: the set takes the new revision, finds the new pair whole and drains
            // the old pair; traffic comes back to the user's Service.
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            let new_revision = wait_one_revision(&ns, Some(&stable)).await?;
            peak_watch.abort();
            let peak = peak.lock().unwrap().clone();
            ensure!(
                peak.len() == 2 && peak.values().all(|p| *p <= 2 * GROUPS),
                "a second pair, no more: {peak:?}"
            );
            release_lifted(&ns, &users_selector).await?;
            all_on_the_new_pair(traffic, &new_revision, "pair blue-green release").await?;
            Ok(())
        })
    })
}

/// The set at rest on `vllm:1` from the example at `path`, its Service, the route and the
/// Rollout, requests flowing; then the template `v2` makes of it (`vllm:2`), waited to step
/// `step`'s pause with the new pair given `weight`. Returns (the set on `vllm:1`, the stable revision, the new one, the user's
/// selector, the requests).
pub(crate) async fn paused_release(
    ns: &TestNs,
    path: &str,
    step: i32,
    weight: i64,
    what: &str,
    v2: impl FnOnce(&serde_json::Value) -> serde_json::Value,
) -> anyhow::Result<(
    serde_json::Value,
    String,
    String,
    Option<BTreeMap<String, String>>,
    Option<crate::rollout_disaggregatedset::PairTraffic>,
)> {
    let (set, service, rollout) = example_at(path)?;
    let v1 = with_image(&set, "vllm:1");
    apply_set(ns, &v1).await?;
    let stable = wait_one_revision(ns, None).await?;
    let svc: Service = serde_json::from_value(service)?;
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    let users_selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
    create_route_to(ns, ROUTE, SERVICE).await?;
    create_rollout(ns, &rollout).await?;
    let traffic = pair_traffic(ns, &stable, what).await?;
    apply_set(ns, &v2(&v1)).await?;
    for at in 1..=step {
        let r =
            wait_rollout_named(ns, ROLLOUT, &format!("paused at step {at}"), paused_at(at)).await?;
        if at < step {
            ensure!(canary_revision(&r)? != stable, "a new revision is released");
            approve_named(ns, ROLLOUT).await?;
        }
    }
    wait_canary_weight(ns, weight).await?;
    let r = wait_rollout_named(ns, ROLLOUT, "still paused", paused_at(step)).await?;
    let canary = canary_revision(&r)?;
    ensure!(canary != stable, "{canary} / {stable}");
    Ok((v1, stable, canary, users_selector, traffic))
}

/// The template reverted to `v1` mid-release: rolled back, the new pair's roles gone together
/// once the route gave them nothing, the set back on the stable pair at full size, the release
/// lifted, every request served and after the revert every one by the stable pair.
async fn reverted(
    ns: &TestNs,
    v1: &serde_json::Value,
    stable: &str,
    canary: &str,
    users_selector: &Option<BTreeMap<String, String>>,
    traffic: Option<crate::rollout_disaggregatedset::PairTraffic>,
    what: &str,
) -> anyhow::Result<()> {
    let (going_watch, going) = watch_going(ns, canary);
    apply_set(ns, v1).await?;
    wait_rollout_named(ns, ROLLOUT, "rolled back", finished("False")).await?;
    wait_revision_gone(ns, canary).await?;
    going_watch.abort();
    went_together_at(&going, canary, 0)?;
    ensure!(
        wait_one_revision(ns, None).await? == stable,
        "the stable pair is what runs, every role at {GROUPS} ready groups"
    );
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        SET,
        WAIT,
        |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| {
                !s.annotations()
                    .contains_key("rollouts.kruise.io/stable-revision")
            })
        },
    )
    .await
    .context("the hold is lifted")?;
    release_lifted(ns, users_selector).await?;
    if let Some(t) = traffic {
        let w = t.window(200).await?;
        let stable_prefill = format!("{SET}-0-{stable}-prefill");
        w.assert_all(
            "after the revert every request reaches the stable pair",
            |o| o.lws.as_deref() == Some(stable_prefill.as_str()),
        )?;
        let all = t.stop().await;
        all.assert_no_failures(what)?;
        eprintln!("{what} under load: {}", all.summary());
    }
    Ok(())
}

#[test]
fn rollout_disaggregatedset_partition_revert_gives_the_groups_back_after_traffic()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-partition-revert", |ns| async move {
            let what = "pair partition release reverted";
            let (v1, stable, canary, users_selector, traffic) =
                paused_release(&ns, PARTITION_EXAMPLE, 1, 50, what, |s| {
                    with_image(s, "vllm:2")
                })
                .await?;
            // The stable pair's groups still serving at step 1: never restarted.
            let serving = pods_of(&ns, &stable).await?;
            ensure!(!serving.is_empty(), "the stable pair still serves");
            reverted(&ns, &v1, &stable, &canary, &users_selector, traffic, what).await?;
            let after = pods_of(&ns, &stable).await?;
            ensure!(
                serving
                    .iter()
                    .all(|(name, uid)| after.get(name) == Some(uid)),
                "the stable pair's serving groups were never restarted: before {serving:?}, \
                 after {after:?}"
            );
            Ok(())
        })
    })
}

#[test]
fn rollout_disaggregatedset_blue_green_revert_after_the_switch_goes_back_to_the_stable_pair()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-bluegreen-revert", |ns| async move {
            let what = "pair blue-green release reverted after the switch";
            // Step 2: the switch done, the new pair serving everything.
            let (v1, stable, canary, users_selector, traffic) =
                paused_release(&ns, BLUE_GREEN_EXAMPLE, 2, 100, what, |s| {
                    with_image(s, "vllm:2")
                })
                .await?;
            let stable_pods = pods_of(&ns, &stable).await?;
            reverted(&ns, &v1, &stable, &canary, &users_selector, traffic, what).await?;
            let after = pods_of(&ns, &stable).await?;
            ensure!(
                after == stable_pods,
                "the stable pair ran untouched: before {stable_pods:?}, after {after:?}"
            );
            Ok(())
        })
    })
}
