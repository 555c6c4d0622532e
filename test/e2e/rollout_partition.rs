//! Partition-style releases (examples/rollout-partition.yaml: Kruise's default canary,
//! `enableExtraWorkloadForCanary: false`) against the real control plane: no second LWS — each step moves the
//! user's own groups to the new template in place, highest ordinals first, the user's spec is
//! never written, and the cluster never holds more groups than the LWS has. Both sides are the
//! one LWS: the stable Service serves the old revision's leaders and the canary Service the
//! new one's, and real requests through the proxy split by the step's weight, none lost. A
//! revert mid-release moves traffic off the moved group, then rolls it back.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use anyhow::{Context, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use lws_rollout::api::LeaderWorkerSet;
use lws_rollout::lws::labels::{HELD_REVISION as HOLD, RELEASE_PARTITION};
use serde_json::Value;

use crate::harness::{TestNs, wait_for, wait_for_all, with_ns};
use crate::lws_support::{available_with, create_available, image, pod_ready};
use crate::rollout_bluegreen::argocd_reads;
use crate::rollout_canary::RATE;
use crate::rollout_support::*;
use crate::traffic_driver::{
    Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip, wait_until_served,
};

/// The HTTPRoute the example names.
const EXAMPLE_ROUTE: &str = "vllm";

/// The Rollout of examples/rollout-partition.yaml, exactly as shipped (it releases
/// [`STABLE`]: 1 group, then 50%, then all, each step paused).
fn example_rollout() -> anyhow::Result<Value> {
    let mut docs = crate::harness::yaml_documents("examples/rollout-partition.yaml")?;
    ensure!(docs.len() == 1 && docs[0]["kind"] == "Rollout", "{docs:?}");
    ensure!(docs[0]["metadata"]["name"] == STABLE);
    Ok(docs.remove(0))
}

/// The image each group's pods run, by group index (every pod of a group must agree, and
/// every pod must be ready).
async fn group_images(ns: &TestNs, groups: usize) -> anyhow::Result<Vec<String>> {
    let pods = wait_for_all(
        &ns.api::<Pod>(),
        &format!("leaderworkerset.sigs.k8s.io/name={STABLE}"),
        WAIT,
        |pods| {
            pods.len() == groups * 2
                && pods
                    .iter()
                    .all(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        },
    )
    .await
    .context("every group whole and ready")?;
    let mut by_group: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &pods {
        let group = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("leaderworkerset.sigs.k8s.io/group-index"))
            .cloned()
            .unwrap_or_default();
        by_group.entry(group).or_default().insert(image(p));
    }
    (0..groups)
        .map(|g| {
            let images = by_group.get(&g.to_string()).cloned().unwrap_or_default();
            ensure!(images.len() == 1, "group {g} runs {images:?}");
            Ok(images.into_iter().next().unwrap_or_default())
        })
        .collect()
}

fn annotation(lws: &LeaderWorkerSet, key: &str) -> Option<String> {
    lws.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}

/// The most leader pods (of any LWS in the namespace) alive at once while the watch ran.
fn watch_peak_leaders(ns: &TestNs) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let peak: Arc<Mutex<usize>> = Arc::default();
    let sink = peak.clone();
    let api = ns.api::<Pod>();
    let task = tokio::spawn(async move {
        let mut alive = BTreeSet::new();
        let mut events = watcher::watcher(
            api,
            watcher::Config::default().labels("leaderworkerset.sigs.k8s.io/worker-index=0"),
        )
        .default_backoff()
        .boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    alive.insert(p.metadata.name.clone().unwrap_or_default());
                }
                watcher::Event::Delete(p) => {
                    alive.remove(&p.metadata.name.clone().unwrap_or_default());
                }
                _ => {}
            }
            let mut peak = sink.lock().unwrap();
            *peak = (*peak).max(alive.len());
        }
    });
    (peak, task)
}

/// (canaryReplicas, canaryReadyReplicas) as the Rollout's status said them, in order.
type CanaryCounts = tokio::sync::watch::Receiver<Vec<(i32, i32)>>;

/// Every (canaryReplicas, canaryReadyReplicas) the Rollout's status said while the watch ran.
/// A receiver, so the test can wait on what was said rather than read it after the fact.
fn watch_canary_ready(ns: &TestNs) -> (CanaryCounts, tokio::task::JoinHandle<()>) {
    let (sink, seen) = tokio::sync::watch::channel(Vec::new());
    let api = ns.api::<lws_rollout::api::rollout::Rollout>();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(
            api,
            watcher::Config::default().fields(&format!("metadata.name={STABLE}")),
        )
        .applied_objects()
        .default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(r)) = stream.next().await {
            if let Some(c) = r.status.and_then(|s| s.canary_status) {
                sink.send_modify(|seen| seen.push((c.canary_replicas, c.canary_ready_replicas)));
            }
        }
    });
    (seen, task)
}

/// Waits until what the status said, in order, satisfies `cond`; fails after `WAIT` with all
/// of it.
async fn canary_counts_until(
    seen: &mut CanaryCounts,
    what: &str,
    cond: impl Fn(&[(i32, i32)]) -> bool,
) -> anyhow::Result<()> {
    let held = matches!(
        tokio::time::timeout(WAIT, seen.wait_for(|s| cond(s))).await,
        Ok(Ok(_))
    );
    ensure!(held, "{what}: the status said {:?}", *seen.borrow());
    Ok(())
}

/// Ready leader IPs of the user's LWS groups `groups`.
async fn leader_ips_of(ns: &TestNs, groups: &[usize]) -> anyhow::Result<BTreeSet<String>> {
    Ok(ns
        .api::<Pod>()
        .list(&kube::api::ListParams::default().labels(&format!(
            "leaderworkerset.sigs.k8s.io/name={STABLE},leaderworkerset.sigs.k8s.io/worker-index=0"
        )))
        .await?
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("leaderworkerset.sigs.k8s.io/group-index"))
                .and_then(|g| g.parse::<usize>().ok())
                .is_some_and(|g| groups.contains(&g))
        })
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect())
}

/// The template revision the user's groups run now (every leader agrees).
async fn running_revision(ns: &TestNs) -> anyhow::Result<String> {
    let revisions: BTreeSet<String> = ns
        .api::<Pod>()
        .list(&kube::api::ListParams::default().labels(&format!(
            "leaderworkerset.sigs.k8s.io/name={STABLE},leaderworkerset.sigs.k8s.io/worker-index=0"
        )))
        .await?
        .items
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get("leaderworkerset.sigs.k8s.io/template-revision-hash")
                .cloned()
        })
        .collect();
    ensure!(revisions.len() == 1, "leaders on {revisions:?}");
    Ok(revisions.into_iter().next().unwrap_or_default())
}

/// At a paused step: the stable Service serves the leaders of `stable` groups only, the canary
/// Service those of `moved` (the new revision's), and requests split `percent`% to the new.
async fn sides_at(
    ns: &TestNs,
    stable: &[usize],
    moved: &[usize],
    traffic: Option<&Traffic>,
    percent: u32,
) -> anyhow::Result<()> {
    wait_endpoints(ns, SERVICE, &leader_ips_of(ns, stable).await?).await?;
    wait_endpoints(
        ns,
        &format!("{SERVICE}-canary"),
        &leader_ips_of(ns, moved).await?,
    )
    .await?;
    if let Some(t) = traffic {
        t.assert_step(percent, 400).await?;
    }
    Ok(())
}

type Traffic = ReleaseTraffic<Box<dyn Fn(&Outcome) -> bool + Send + Sync>>;

#[test]
fn rollout_partition_moves_the_users_groups_in_place_and_rolls_a_revert_back() -> anyhow::Result<()>
{
    on_big_stack(|| {
        with_ns("rollout-partition", |ns| async move {
            let v1 = stable_lws(4, "vllm:1");
            create_available(&ns, &v1).await?;
            create_service(&ns).await?;
            create_route_named(&ns, EXAMPLE_ROUTE).await?;
            create_rollout(&ns, &example_rollout()?).await?;
            wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;
            // An answer is "new" when it comes from a revision other than the stable one.
            let stable_revision = Arc::new(Mutex::new(running_revision(&ns).await?));
            let traffic: Option<Traffic> = match traffic_or_skip("rollout_partition (requests)") {
                Some(t) => {
                    let plain = RequestSpec::new(&host(&ns));
                    wait_until_served(&t, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
                    let stable = stable_revision.clone();
                    let is_new: Box<dyn Fn(&Outcome) -> bool + Send + Sync> =
                        Box::new(move |o: &Outcome| {
                            o.revision.as_deref() != Some(stable.lock().unwrap().as_str())
                        });
                    Some(ReleaseTraffic::start(&t, plain, None, RATE, is_new))
                }
                None => None,
            };
            let (peak, watch) = watch_peak_leaders(&ns);
            let spec_before = ns.api::<LeaderWorkerSet>().get(STABLE).await?.spec;

            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            // Step 1: only the highest group moved, in the user's LWS; no second LWS; a
            // quarter of the requests reach it through the canary Service. Argo CD (its own
            // evaluator, docs/argocd.md's customization) reads the pause as Suspended.
            let paused = wait_paused_at(&ns, 1).await?;
            argocd_reads(&paused, "Suspended").await?;
            ensure!(
                group_images(&ns, 4).await? == ["vllm:1", "vllm:1", "vllm:1", "vllm:2"],
                "step 1"
            );
            ensure!(canaries(&ns).await?.is_empty(), "no canary LWS");
            sides_at(&ns, &[0, 1, 2], &[3], traffic.as_ref(), 25).await?;
            let lws = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
            ensure!(annotation(&lws, RELEASE_PARTITION).as_deref() == Some("3"));
            let mut spec_now = lws.spec.clone();
            spec_now.leader_worker_template = spec_before.leader_worker_template.clone();
            ensure!(
                spec_now == spec_before,
                "nothing but the template the user applied changed in the spec: {:?}",
                lws.spec.rollout_strategy
            );
            let r = ns
                .api::<lws_rollout::api::rollout::Rollout>()
                .get(STABLE)
                .await?;
            let c = r
                .status
                .and_then(|s| s.canary_status)
                .context("canaryStatus")?;
            ensure!(
                (c.canary_replicas, c.canary_ready_replicas) == (1, 1),
                "{c:?}"
            );

            // Step 2 (50%): groups 2 and 3, half of the requests.
            approve(&ns).await?;
            wait_paused_at(&ns, 2).await?;
            ensure!(
                group_images(&ns, 4).await? == ["vllm:1", "vllm:1", "vllm:2", "vllm:2"],
                "step 2"
            );
            sides_at(&ns, &[0, 1], &[2, 3], traffic.as_ref(), 50).await?;
            // A moved group fails: a worker of group 3 is deleted and the LWS
            // recreates the whole group. It counts as not ready until it is whole again — the
            // Rollout's canaryReadyReplicas says 1 of 2 meanwhile — and comes back on the new
            // template; no other group restarts.
            let others = crate::lws_support::uids(&ns, STABLE).await?;
            let (mut ready_seen, ready_watch) = watch_canary_ready(&ns);
            // The watch is running before the pod goes, so no status it says is missed.
            canary_counts_until(&mut ready_seen, "the watch started", |s| !s.is_empty()).await?;
            ns.api::<Pod>()
                .delete(
                    &format!("{STABLE}-3-1"),
                    &kube::api::DeleteParams::default(),
                )
                .await?;
            // Not ready while the group is recreated, then 2 of 2 again: in that order (the
            // status read before the deletion already said 2 of 2).
            canary_counts_until(
                &mut ready_seen,
                "the status said the failed group was not ready, then ready again",
                |s| {
                    s.iter()
                        .position(|(_, ready)| *ready < 2)
                        .is_some_and(|dip| s[dip..].contains(&(2, 2)))
                },
            )
            .await?;
            ensure!(
                group_images(&ns, 4).await? == ["vllm:1", "vllm:1", "vllm:2", "vllm:2"],
                "the failed group came back on the new template"
            );
            let now = crate::lws_support::uids(&ns, STABLE).await?;
            ensure!(
                others
                    .iter()
                    .filter(|(name, _)| !name.starts_with(&format!("{STABLE}-3")))
                    .all(|(name, uid)| now.get(name) == Some(uid)),
                "a group other than the failed one restarted"
            );
            ready_watch.abort();
            sides_at(&ns, &[0, 1], &[2, 3], traffic.as_ref(), 50).await?;
            // Done: the LWS rolls the rest by its own strategy; nothing of the release is left.
            approve(&ns).await?;
            let done = wait_rollout(&ns, "finished", finished("True")).await?;
            argocd_reads(&done, "Healthy").await?;
            let lws = wait_for(&ns.api(), STABLE, WAIT, available_with(4, 4))
                .await?
                .context("the LWS")?;
            ensure!(group_images(&ns, 4).await? == ["vllm:2"; 4]);
            ensure!(
                annotation(&lws, RELEASE_PARTITION).is_none() && annotation(&lws, HOLD).is_none(),
                "{:?}",
                lws.metadata.annotations
            );
            nothing_left(&ns).await?;
            let peak_leaders = *peak.lock().unwrap();
            ensure!(
                peak_leaders <= 4,
                "never more groups than the LWS has (maxSurge 0): peak {peak_leaders}"
            );
            watch.abort();

            // A revert mid-release: traffic leaves the moved group first, then it goes back
            // to the running template; nothing of the release is left.
            *stable_revision.lock().unwrap() = running_revision(&ns).await?;
            let v2 = with_image(&v1, "vllm:2");
            apply_lws(&ns, &with_image(&v1, "vllm:3")).await?;
            wait_paused_at(&ns, 1).await?;
            ensure!(
                group_images(&ns, 4).await? == ["vllm:2", "vllm:2", "vllm:2", "vllm:3"],
                "step 1 of the second release"
            );
            sides_at(&ns, &[0, 1, 2], &[3], traffic.as_ref(), 25).await?;
            apply_lws(&ns, &v2).await?;
            let lws = wait_for(&ns.api(), STABLE, WAIT, |l: Option<&LeaderWorkerSet>| {
                l.is_some_and(|l| {
                    annotation(l, RELEASE_PARTITION).is_none() && annotation(l, HOLD).is_none()
                }) && available_with(4, 4)(l)
            })
            .await?
            .context("the LWS")?;
            ensure!(
                group_images(&ns, 4).await? == ["vllm:2"; 4],
                "the moved group rolled back: {:?}",
                lws.metadata.annotations
            );
            wait_rollout(&ns, "Healthy after the rollback", |r| phase(r) == "Healthy").await?;
            nothing_left(&ns).await?;
            if let Some(t) = traffic {
                t.assert_rolled_back(200).await?;
                t.finish().await?;
            }
            Ok(())
        })
    })
}

/// Kruise's `rollouts.kruise.io/rollback-in-batch: "true"` on a partition-style Rollout without
/// traffic routing: a revert does not send every moved group back at once; the release starts
/// again at step 1 for the old template, each step moving its share of the moved groups back
/// (the groups already on it need no update), paused for approval as the steps say, and ends
/// as a completed release. No group that never moved restarts.
#[test]
fn rollout_partition_rolls_a_revert_back_in_batches_with_kruises_annotation() -> anyhow::Result<()>
{
    on_big_stack(|| {
        with_ns("rollout-partition-rib", |ns| async move {
            let v1 = stable_lws(4, "vllm:1");
            create_available(&ns, &v1).await?;
            // The user's Service, which a release without traffic routing leaves alone.
            create_service(&ns).await?;
            let mut rollout = rollout(
                serde_json::json!([
                    {"replicas": "50%", "pause": {}},
                    {"replicas": "100%"}
                ]),
                None,
            );
            // Kruise's default style, with the pod template patch the helper's Rollout
            // carries: it goes on the moved groups' leaders.
            let canary = &mut rollout["spec"]["strategy"]["canary"];
            let canary = canary.as_object_mut().context("canary")?;
            canary.remove("enableExtraWorkloadForCanary");
            rollout["metadata"]["annotations"] =
                serde_json::json!({"rollouts.kruise.io/rollback-in-batch": "true"});
            create_rollout(&ns, &rollout).await?;
            wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;

            // Step 1 (50%): groups 2 and 3 move to vllm:2.
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_paused_at(&ns, 1).await?;
            ensure!(
                group_images(&ns, 4).await? == ["vllm:1", "vllm:1", "vllm:2", "vllm:2"],
                "step 1"
            );
            let unmoved = uids_of_groups(&ns, &[0, 1]).await?;
            wait_patched_leaders(&ns, &[2, 3]).await?;

            // The revert: the release starts again for vllm:1; its step 1 (50% of the two
            // groups that moved) sends only group 3 back, and waits for approval.
            apply_lws(&ns, &v1).await?;
            wait_event(&ns, "Progressing", "rolled back in batches").await?;
            let paused = wait_for(
                &ns.api::<lws_rollout::api::rollout::Rollout>(),
                STABLE,
                WAIT,
                |r: Option<&lws_rollout::api::rollout::Rollout>| {
                    r.is_some_and(|r| {
                        step(r) == (1, "StepPaused".into())
                            && common(r).is_some_and(|c| {
                                c.stable_revision.is_some()
                                    && r.status
                                        .as_ref()
                                        .and_then(|s| s.canary_status.as_ref())
                                        .is_some_and(|cs| {
                                            Some(&cs.canary_revision) == c.stable_revision.as_ref()
                                        })
                            })
                    })
                },
            )
            .await?
            .context("the Rollout")?;
            ensure!(
                condition(&paused, "Progressing").map(|c| c.1) == Some("InRolling".into()),
                "a rollback in batches is a release, not a cancel: {:?}",
                paused.status
            );
            ensure!(
                group_images(&ns, 4).await? == ["vllm:1", "vllm:1", "vllm:2", "vllm:1"],
                "step 1 of the rollback: group 3 back, group 2 still on the new template"
            );
            let br = batch_release(&ns).await?.context("the BatchRelease")?;
            ensure!(
                br.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("rollouts.kruise.io/rollback-in-batch"))
                    .map(String::as_str)
                    == Some("true"),
                "Kruise's mark on the BatchRelease: {:?}",
                br.metadata.annotations
            );
            ensure!(
                br.status
                    .as_ref()
                    .and_then(|s| s.canary_status.as_ref())
                    .and_then(|c| c.no_need_update_replicas)
                    == Some(2),
                "groups 0 and 1 needed no update: {:?}",
                br.status
            );

            // Step 2 (100%): group 2 goes back too; the release completes.
            approve(&ns).await?;
            wait_rollout(&ns, "the rollback finished", finished("True")).await?;
            let lws = wait_for(&ns.api(), STABLE, WAIT, available_with(4, 4))
                .await?
                .context("the LWS")?;
            ensure!(group_images(&ns, 4).await? == ["vllm:1"; 4]);
            ensure!(
                annotation(&lws, RELEASE_PARTITION).is_none() && annotation(&lws, HOLD).is_none(),
                "{:?}",
                lws.metadata.annotations
            );
            ensure!(
                uids_of_groups(&ns, &[0, 1]).await? == unmoved,
                "a group that never moved was restarted"
            );
            wait_patched_leaders(&ns, &[]).await?;
            nothing_left(&ns).await?;
            Ok(())
        })
    })
}

/// Pod uids of the user's groups `groups`.
async fn uids_of_groups(ns: &TestNs, groups: &[usize]) -> anyhow::Result<BTreeSet<String>> {
    Ok(ns
        .api::<Pod>()
        .list(
            &kube::api::ListParams::default()
                .labels(&format!("leaderworkerset.sigs.k8s.io/name={STABLE}")),
        )
        .await?
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("leaderworkerset.sigs.k8s.io/group-index"))
                .and_then(|g| g.parse::<usize>().ok())
                .is_some_and(|g| groups.contains(&g))
        })
        .filter_map(|p| p.metadata.uid.clone())
        .collect())
}

/// Waits until exactly the leaders of `groups` carry the Rollout's `patchPodTemplateMetadata`
/// (label `release: canary`, annotation `rollouts.kruise.io/origin: canary`), workers never.
async fn wait_patched_leaders(ns: &TestNs, groups: &[usize]) -> anyhow::Result<()> {
    let want: BTreeSet<String> = groups.iter().map(|g| format!("{STABLE}-{g}")).collect();
    wait_for_all(
        &ns.api::<Pod>(),
        &format!("leaderworkerset.sigs.k8s.io/name={STABLE}"),
        WAIT,
        |pods| {
            let patched: BTreeSet<String> = pods
                .iter()
                .filter(|p| {
                    let meta = &p.metadata;
                    meta.labels
                        .as_ref()
                        .and_then(|l| l.get("release"))
                        .map(String::as_str)
                        == Some("canary")
                        && meta
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get("rollouts.kruise.io/origin"))
                            .map(String::as_str)
                            == Some("canary")
                })
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            patched == want
        },
    )
    .await
    .with_context(|| format!("the leaders of groups {groups:?} (only) carry the patch"))?;
    Ok(())
}
