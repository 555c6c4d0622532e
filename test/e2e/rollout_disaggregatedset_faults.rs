//! A prefill/decode pair release (examples/rollout-disaggregatedset.yaml) that does not simply
//! succeed, against the real control plane: rolled back by a template revert, a disable or the
//! Rollout's deletion (traffic to the stable pair first, no stable group restarted), a third
//! template (the release starts over, the second revision's roles drained together), one role
//! of the new pair losing its groups (out of traffic at once, the step held, the role named),
//! the manager SIGKILLed at each phase (nothing created twice), and what Argo CD's own health
//! evaluator and `kubectl lws rollout status` say of it; bad input: a Service selecting no role
//! of the set (refused, or reported with nothing written to it), a role scaled externally
//! mid-release (the step held, the role named).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use kube::{
    ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::{BatchRelease, DisaggregatedSet, LeaderWorkerSet, Rollout};
use serde_json::{Value, json};

use crate::{
    crash_support::{CrashCluster, Seen, more_uids_than, track},
    harness::{TestNs, wait_for, wait_for_all, with_ns},
    lws_support::HOLD_GATE,
    rollout_support::{
        WAIT, approve_named, create_rollout, create_route_to, finished, on_big_stack,
        pair::{
            GROUPS, REVISION_LABEL, ROLE_LABEL, ROLLOUT, SERVICE, SET, SET_LABEL, apply_set,
            canary_weight_now, example, pair_lws, wait_canary_weight, wait_one_revision,
            with_image,
        },
        paused_at, phase, step, wait_rollout_named,
    },
    rollout_tools::{GateKeeper, StatusWatch},
};

const HOLD: &str = "rollouts.kruise.io/stable-revision";
const RELEASE_GROUPS: &str = "lws-rollout.x-k8s.io/release-groups";

/// A release of `vllm:2` paused at step 1 with the new pair's 20% in place.
struct Paused {
    /// The set as the user first applied it (`vllm:1`).
    v1: Value,
    /// The example's set, before any image.
    base: Value,
    /// The held revision and the new one.
    stable: String,
    canary: String,
    /// The user's Service selector as created.
    users_selector: Option<BTreeMap<String, String>>,
}

/// `set` on `image` with the decode role's pods held back by [`HOLD_GATE`] until a
/// [`GateKeeper`] lets them start.
pub(crate) fn gated_decode(set: &Value, image: &str) -> Value {
    let mut set = with_image(set, image);
    for role in set["spec"]["roles"].as_array_mut().into_iter().flatten() {
        if role["name"] == "decode" {
            role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulingGates"] =
                json!([{"name": HOLD_GATE}]);
        }
    }
    set
}

/// The example's set at rest on `vllm:1`, its Service, the route and the Rollout; then the
/// template change `v2` (the example's set made into the new template by `v2`), waited to step
/// 1's pause with the new pair's 20%.
async fn paused_pair_release(
    ns: &TestNs,
    v2: impl FnOnce(&Value) -> Value,
) -> anyhow::Result<Paused> {
    let (base, service, rollout) = example()?;
    let v1 = with_image(&base, "vllm:1");
    apply_set(ns, &v1).await?;
    let stable = wait_one_revision(ns, None).await?;
    let svc: Service = serde_json::from_value(service)?;
    let users_selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    create_route_to(ns, crate::rollout_support::pair::ROUTE, SERVICE).await?;
    create_rollout(ns, &rollout).await?;
    apply_set(ns, &v2(&base)).await?;
    let r = wait_rollout_named(ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
    wait_canary_weight(ns, 20).await?;
    let canary = r
        .status
        .and_then(|s| s.canary_status)
        .map(|c| c.canary_revision)
        .context("canaryRevision")?;
    ensure!(
        canary != stable && !canary.is_empty(),
        "{canary} / {stable}"
    );
    Ok(Paused {
        v1,
        base,
        stable,
        canary,
        users_selector,
    })
}

/// Every uid each pod of `revision` of the set ever had: a name with two uids is a group that
/// was restarted.
pub(crate) fn track_pods(ns: &TestNs, revision: &str) -> (tokio::task::JoinHandle<()>, Seen) {
    track(
        ns.api::<Pod>(),
        &format!("{SET_LABEL}={SET},{REVISION_LABEL}={revision}"),
    )
}

/// When each role's LWS of `revision` was first seen going (scaled to 0, being deleted, or
/// gone), with the route's canary weight and the revision the canary Service selected then.
type Drained = Arc<Mutex<BTreeMap<String, (Instant, i64, Option<String>)>>>;

fn watch_drain(ns: &TestNs, revision: &str) -> (tokio::task::JoinHandle<()>, Drained) {
    let seen: Drained = Arc::default();
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
            let selects = ns
                .api::<Service>()
                .get_opt(&format!("{SERVICE}-canary"))
                .await
                .ok()
                .flatten()
                .and_then(|s| s.spec?.selector?.get(REVISION_LABEL).cloned());
            out.lock().unwrap().insert(role, (at, weight, selects));
        }
    });
    (task, seen)
}

/// Both roles of the drained revision went together (in the same reconcile: well within the
/// time a group takes to go), each while the new pair had no traffic.
fn drained_together_after_traffic(drained: &Drained, revision: &str) -> anyhow::Result<()> {
    let d = drained.lock().unwrap().clone();
    ensure!(
        d.len() == 2,
        "both roles of {revision} were seen going: {d:?}"
    );
    let times: Vec<Instant> = d.values().map(|v| v.0).collect();
    let gap = times[0].max(times[1]) - times[0].min(times[1]);
    ensure!(
        gap < Duration::from_secs(5),
        "the roles of {revision} went {gap:?} apart: {d:?}"
    );
    for (role, (_, weight, selects)) in &d {
        ensure!(
            *weight == 0 || selects.as_deref() != Some(revision),
            "{role} of {revision} went while the route still sent it {weight}"
        );
    }
    Ok(())
}

/// Waits until no LWS of `revision` is left.
pub(crate) async fn wait_revision_gone(ns: &TestNs, revision: &str) -> anyhow::Result<()> {
    wait_for_all(
        &ns.api::<LeaderWorkerSet>(),
        &format!("{SET_LABEL}={SET},{REVISION_LABEL}={revision}"),
        WAIT,
        |l| l.is_empty(),
    )
    .await
    .with_context(|| format!("every LWS of revision {revision} is gone"))?;
    Ok(())
}

/// After the release: the hold and release-groups gone, the user's selector given back and
/// the canary Service gone.
async fn release_undone(ns: &TestNs, p: &Paused) -> anyhow::Result<()> {
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        SET,
        WAIT,
        |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| {
                !s.annotations().contains_key(HOLD) && !s.annotations().contains_key(RELEASE_GROUPS)
            })
        },
    )
    .await
    .context("the hold and release-groups are lifted")?;
    wait_for(
        &ns.api::<Service>(),
        &format!("{SERVICE}-canary"),
        WAIT,
        |s: Option<&Service>| s.is_none(),
    )
    .await
    .context("the canary Service is gone")?;
    wait_for(
        &ns.api::<Service>(),
        SERVICE,
        WAIT,
        |s: Option<&Service>| {
            s.and_then(|s| s.spec.as_ref()).map(|s| &s.selector) == Some(&p.users_selector)
        },
    )
    .await
    .context("the user's selector is given back")?;
    wait_canary_weight(ns, 0).await
}

/// No pod of `revision` was ever recreated (a group restart recreates its pods by name).
pub(crate) fn none_restarted(seen: &Seen, what: &str) -> anyhow::Result<()> {
    let restarted = more_uids_than(seen, 1);
    ensure!(restarted.is_empty(), "{what} pods restarted: {restarted:?}");
    ensure!(!seen.lock().unwrap().is_empty(), "{what} pods were watched");
    Ok(())
}

#[test]
fn rollout_disaggregatedset_template_revert_drains_the_new_pair_after_traffic() -> anyhow::Result<()>
{
    on_big_stack(|| {
        with_ns("pd-revert", |ns| async move {
            let p = paused_pair_release(&ns, |b| with_image(b, "vllm:2")).await?;
            let (pods, stable_pods) = track_pods(&ns, &p.stable);
            let (drain, drained) = watch_drain(&ns, &p.canary);
            // The template back to the held revision: a rollback.
            apply_set(&ns, &p.v1).await?;
            wait_rollout_named(&ns, ROLLOUT, "rolled back", finished("False")).await?;
            wait_revision_gone(&ns, &p.canary).await?;
            release_undone(&ns, &p).await?;
            drain.abort();
            drained_together_after_traffic(&drained, &p.canary)?;
            ensure!(
                wait_one_revision(&ns, None).await? == p.stable,
                "the stable pair is what runs"
            );
            pods.abort();
            none_restarted(&stable_pods, "stable")?;
            Ok(())
        })
    })
}

#[test]
fn rollout_disaggregatedset_disabled_mid_release_moves_traffic_first() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-disable", |ns| async move {
            let p = paused_pair_release(&ns, |b| with_image(b, "vllm:2")).await?;
            let (pods, stable_pods) = track_pods(&ns, &p.stable);
            let (lws_task, lws_seen) =
                track(ns.api::<LeaderWorkerSet>(), &format!("{SET_LABEL}={SET}"));
            let (guard, at_lift) = weight_when_hold_lifted(&ns);
            ns.api::<Rollout>()
                .patch(
                    ROLLOUT,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"disabled": true}})),
                )
                .await?;
            wait_rollout_named(&ns, ROLLOUT, "Disabled", |r| phase(r) == "Disabled").await?;
            release_undone(&ns, &p).await?;
            guard.await?;
            let weight = *at_lift.lock().unwrap();
            ensure!(
                weight == Some(0),
                "the hold was lifted while the route sent the new pair {weight:?}"
            );
            // Released: the set's own rolling update takes the pair to the template, from the
            // canary it already runs (its LWSs not recreated), and drains the stable pair.
            ensure!(wait_one_revision(&ns, Some(&p.stable)).await? == p.canary);
            lws_task.abort();
            let twice = more_uids_than(&lws_seen, 1);
            ensure!(twice.is_empty(), "LWSs recreated: {twice:?}");
            pods.abort();
            none_restarted(&stable_pods, "stable")?;
            Ok(())
        })
    })
}

#[test]
fn rollout_disaggregatedset_deleted_mid_release_lifts_the_hold_after_traffic() -> anyhow::Result<()>
{
    on_big_stack(|| {
        with_ns("pd-delete", |ns| async move {
            let p = paused_pair_release(&ns, |b| with_image(b, "vllm:2")).await?;
            let (pods, stable_pods) = track_pods(&ns, &p.stable);
            let (guard, at_lift) = weight_when_hold_lifted(&ns);
            ns.api::<Rollout>()
                .delete(ROLLOUT, &DeleteParams::default())
                .await?;
            wait_for(
                &ns.api::<Rollout>(),
                ROLLOUT,
                WAIT,
                |r: Option<&Rollout>| r.is_none(),
            )
            .await
            .context("the Rollout's finalizer is removed")?;
            release_undone(&ns, &p).await?;
            guard.await?;
            let weight = *at_lift.lock().unwrap();
            ensure!(
                weight == Some(0),
                "the hold was lifted while the route sent the new pair {weight:?}"
            );
            ensure!(wait_one_revision(&ns, Some(&p.stable)).await? == p.canary);
            // No Rollout is left to hold the next template change.
            apply_set(&ns, &with_image(&p.base, "vllm:3")).await?;
            let set = ns.api::<DisaggregatedSet>().get(SET).await?;
            ensure!(
                !set.annotations().contains_key(HOLD),
                "a change without a Rollout is not held: {:?}",
                set.annotations()
            );
            pods.abort();
            none_restarted(&stable_pods, "stable")?;
            Ok(())
        })
    })
}

/// The route's canary weight the first time the set is seen without the hold.
fn weight_when_hold_lifted(ns: &TestNs) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Option<i64>>>) {
    let seen = Arc::new(Mutex::new(None));
    let out = seen.clone();
    let ns = ns.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(
            ns.api::<DisaggregatedSet>(),
            watcher::Config::default().fields(&format!("metadata.name={SET}")),
        )
        .applied_objects()
        .default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(set)) = stream.next().await {
            if set.annotations().contains_key(HOLD) {
                continue;
            }
            *out.lock().unwrap() = Some(canary_weight_now(&ns).await.unwrap_or(-1));
            return;
        }
    });
    (task, seen)
}

#[test]
fn rollout_disaggregatedset_third_template_starts_over_draining_the_second() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-third", |ns| async move {
            let p = paused_pair_release(&ns, |b| with_image(b, "vllm:2")).await?;
            let (pods, stable_pods) = track_pods(&ns, &p.stable);
            let (drain, drained) = watch_drain(&ns, &p.canary);
            apply_set(&ns, &with_image(&p.base, "vllm:3")).await?;
            // A new release on the third template, from step 1, the held revision unchanged.
            let r = wait_rollout_named(&ns, ROLLOUT, "restarted on vllm:3", |r| {
                step(r) == (1, "StepPaused".into())
                    && r.status
                        .as_ref()
                        .and_then(|s| s.canary_status.as_ref())
                        .is_some_and(|c| {
                            !c.canary_revision.is_empty() && c.canary_revision != p.canary
                        })
            })
            .await?;
            let third = r
                .status
                .and_then(|s| s.canary_status)
                .map(|c| c.canary_revision)
                .unwrap_or_default();
            wait_revision_gone(&ns, &p.canary).await?;
            drain.abort();
            drained_together_after_traffic(&drained, &p.canary)?;
            wait_canary_weight(&ns, 20).await?;
            let lws = pair_lws(&ns).await?;
            ensure!(
                lws.iter()
                    .filter(|l| l.1 == p.stable)
                    .all(|l| l.2 == GROUPS && l.3 == GROUPS)
                    && lws.iter().filter(|l| l.1 == third).count() == 2
                    && lws.iter().filter(|l| l.1 == third).all(|l| l.2 == 1),
                "the stable pair whole, one group of each role of the third revision: {lws:?}"
            );
            let set = ns.api::<DisaggregatedSet>().get(SET).await?;
            ensure!(
                set.annotations().get(HOLD) == Some(&p.stable),
                "the hold keeps the first stable revision: {:?}",
                set.annotations()
            );
            // And it finishes on the third template.
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            ensure!(wait_one_revision(&ns, Some(&p.stable)).await? == third);
            pods.abort();
            none_restarted(&stable_pods, "stable")?;
            Ok(())
        })
    })
}

/// The release's message (`canaryStatus.message`, or `blueGreenStatus.message`).
pub(crate) fn canary_message(r: &Rollout) -> String {
    crate::rollout_support::common(r)
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

/// Deletes the leader pod of every group of the LWS `lws`: each group restarts (and, with new
/// pods held by [`HOLD_GATE`], stays unready).
pub(crate) async fn kill_leaders(ns: &TestNs, lws: &str) -> anyhow::Result<()> {
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "leaderworkerset.sigs.k8s.io/name={lws},leaderworkerset.sigs.k8s.io/worker-index=0"
        )))
        .await?;
    ensure!(!pods.items.is_empty(), "{lws} has leaders");
    for pod in &pods.items {
        ns.api::<Pod>()
            .delete(&pod.name_any(), &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// One `kubectl lws rollout status` line of the pair (no watch).
async fn status_line(ns: &TestNs) -> anyhow::Result<String> {
    let out = crate::rollout_tools::run(
        crate::rollout_tools::kubectl_lws(),
        &ns.name,
        &["rollout", "status", ROLLOUT, "--watch=false"],
    )
    .await?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn rollout_disaggregatedset_losing_a_role_takes_the_pair_out_of_traffic() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-fault", |ns| async move {
            let gates = GateKeeper::start(&ns);
            gates.open();
            let p = paused_pair_release(&ns, |b| gated_decode(b, "vllm:2")).await?;
            let watch = StatusWatch::start(&ns.name, ROLLOUT, "240s")?;
            // Both roles' sides, from the plugin.
            let line = status_line(&ns).await?;
            ensure!(
                line.contains("canary 1/1 pairs ready")
                    && line.contains("prefill stable 2/2 canary 1/1")
                    && line.contains("decode stable 2/2 canary 1/1"),
                "kubectl lws rollout status at step 1: {line}"
            );
            // From now on new pods stay Pending: kill the new pair's decode groups.
            drop(gates);
            kill_leaders(&ns, &format!("{SET}-0-{}-decode", p.canary)).await?;
            // Out of traffic at once, and the Rollout says which role.
            wait_canary_weight(&ns, 0).await?;
            wait_rollout_named(&ns, ROLLOUT, "names the decode role", |r| {
                canary_message(r).contains("role decode has no ready group")
            })
            .await?;
            wait_for_all(&ns.api::<Event>(), "", WAIT, |events| {
                events.iter().any(|e| {
                    e.reason.as_deref() == Some("PairIncomplete")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("role decode"))
                })
            })
            .await
            .context("a PairIncomplete Event naming the role")?;
            let line = status_line(&ns).await?;
            ensure!(
                line.contains("decode stable 2/2 canary 0/1")
                    && line.contains("traffic 0% (20% once the new pair is complete)"),
                "kubectl lws rollout status with the decode gone: {line}"
            );
            // Approved meanwhile: step 2 does not complete without decode, and sends nothing.
            approve_named(&ns, ROLLOUT).await?;
            let r = wait_rollout_named(&ns, ROLLOUT, "held at step 2", |r| {
                step(r).0 == 2 && canary_message(r).contains("role decode")
            })
            .await?;
            ensure!(
                step(&r).1 != "Completed" && canary_weight_now(&ns).await? == 0,
                "step 2 holds with the pair out of traffic: {:?}",
                step(&r)
            );
            // The decode groups come back: the release goes on and finishes.
            let gates = GateKeeper::start(&ns);
            gates.open();
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            ensure!(wait_one_revision(&ns, Some(&p.stable)).await? == p.canary);
            let (code, lines) = watch.finish(Duration::from_secs(60)).await?;
            ensure!(
                code == 0
                    && lines
                        .iter()
                        .any(|l| l.contains("decode stable 2/2 canary 0/1"))
                    && lines
                        .last()
                        .is_some_and(|l| l.contains("successfully rolled out")),
                "kubectl lws rollout status followed the pair to the end ({code}): {lines:#?}"
            );
            drop(gates);
            Ok(())
        })
    })
}

#[test]
fn rollout_disaggregatedset_argocd_health_follows_the_pair_release() -> anyhow::Result<()> {
    let Some(bin) = crate::lws_argocd::argocd_tool() else {
        return Ok(());
    };
    on_big_stack(move || {
        with_ns("pd-argocd", |ns| async move {
            use crate::lws_argocd::{Recorder, argocd_cm_from_docs, health, health_with};
            let cm = argocd_cm_from_docs()?;
            let rollouts = Recorder::start(ns.api::<Rollout>());
            let sets = Recorder::start(ns.api::<DisaggregatedSet>());
            let p = paused_pair_release(&ns, |b| with_image(b, "vllm:2")).await?;
            let paused = ns.api::<Rollout>().get(ROLLOUT).await?;
            for (what, cm) in [("built-in", None), ("customization", Some(&cm))] {
                let (status, message) = health_with(&bin, cm, &paused).await?;
                ensure!(
                    status == "Suspended",
                    "{what} at step 1: {status} {message}"
                );
            }
            let held = ns.api::<DisaggregatedSet>().get(SET).await?;
            let (status, message) = health(&bin, &cm, &held).await?;
            ensure!(
                status == "Healthy",
                "the held set while its pair is released: {status} {message}"
            );
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            wait_one_revision(&ns, Some(&p.stable)).await?;
            let done = ns.api::<Rollout>().get(ROLLOUT).await?;
            for (what, cm) in [("built-in", None), ("customization", Some(&cm))] {
                let (status, message) = health_with(&bin, cm, &done).await?;
                ensure!(status == "Healthy", "{what} when done: {status} {message}");
            }
            let set = wait_for(
                &ns.api::<DisaggregatedSet>(),
                SET,
                WAIT,
                |s: Option<&DisaggregatedSet>| {
                    s.is_some_and(|s| {
                        crate::harness::condition(s, "Progressing")
                            .is_some_and(|c| c.0 == "False" && c.1 == "Complete")
                    })
                },
            )
            .await?
            .context("the set")?;
            let (status, message) = health(&bin, &cm, &set).await?;
            ensure!(status == "Healthy", "the released set: {status} {message}");
            // Every version the API server showed: never a script error; the release seen
            // Progressing and Suspended; the set never Degraded.
            let mut statuses = std::collections::BTreeSet::new();
            // A Rollout created a moment ago has no status: Argo CD's built-in script cannot
            // read it (docs/argocd.md: Unknown for an instant, as with Kruise).
            for r in rollouts
                .seen()
                .iter()
                .filter(|r| r.name_any() == ROLLOUT && r.status.is_some())
            {
                let (status, message) = health_with(&bin, None, r).await?;
                ensure!(
                    status != "Unknown" && !status.is_empty(),
                    "Argo CD cannot assess the Rollout: {message}"
                );
                statuses.insert(status);
            }
            ensure!(
                ["Progressing", "Suspended", "Healthy"]
                    .iter()
                    .all(|s| statuses.contains(*s)),
                "the Rollout's health went through the release: {statuses:?}"
            );
            for s in sets.seen().iter().filter(|s| s.name_any() == SET) {
                let (status, message) = health(&bin, &cm, s).await?;
                ensure!(
                    !matches!(status.as_str(), "Unknown" | "Degraded" | ""),
                    "the set during the release: {status} {message}"
                );
            }
            Ok(())
        })
    })
}

/// What a crash test watches: every uid of the set's LWSs and of its pods of the stable
/// revision, the BatchReleases and the Services. Dropping it stops the watches.
pub(crate) struct Watched {
    lws: Seen,
    pub(crate) stable_pods: Seen,
    brs: Seen,
    services: Seen,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watched {
    /// Starts watching the set's objects in `ns`, `stable` its stable revision.
    pub(crate) fn start(ns: &TestNs, stable: &str) -> Self {
        let (t1, lws) = track(ns.api::<LeaderWorkerSet>(), &format!("{SET_LABEL}={SET}"));
        let (t2, stable_pods) = track_pods(ns, stable);
        let (t3, brs) = track(ns.api::<BatchRelease>(), "");
        let (t4, services) = track(ns.api::<Service>(), "");
        Watched {
            lws,
            stable_pods,
            brs,
            services,
            tasks: vec![t1, t2, t3, t4],
        }
    }

    /// No LWS, BatchRelease or Service was created twice under one name.
    pub(crate) fn nothing_twice(&self) -> anyhow::Result<()> {
        for (kind, seen) in [
            ("LWS", &self.lws),
            ("BatchRelease", &self.brs),
            ("Service", &self.services),
        ] {
            let twice = more_uids_than(seen, 1);
            ensure!(twice.is_empty(), "{kind} created twice: {twice:?}");
        }
        Ok(())
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

#[test]
fn rollout_disaggregatedset_crash_safe_at_every_phase() -> anyhow::Result<()> {
    on_big_stack(crash_at_every_phase)
}

async fn crash_at_every_phase() -> anyhow::Result<()> {
    let (mut cc, ns) = CrashCluster::start("pd-crash").await?;
    let (base, service, rollout) = example()?;
    let v1 = with_image(&base, "vllm:1");
    apply_set(&ns, &v1).await?;
    let stable = wait_one_revision(&ns, None).await?;
    let svc: Service = serde_json::from_value(service)?;
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    create_route_to(&ns, crate::rollout_support::pair::ROUTE, SERVICE).await?;
    create_rollout(&ns, &rollout).await?;
    let watched = Watched::start(&ns, &stable);

    // While the canary roles are being created: killed as the first LWS of the new revision
    // appears.
    apply_set(&ns, &with_image(&base, "vllm:2")).await?;
    wait_for_all(
        &ns.api::<LeaderWorkerSet>(),
        &format!("{SET_LABEL}={SET}"),
        WAIT,
        |l| {
            l.iter()
                .any(|l| l.labels().get(REVISION_LABEL) != Some(&stable))
        },
    )
    .await
    .context("an LWS of the new revision")?;
    cc.kill_and_restart("as the new pair's first LWS appeared")
        .await?;
    let r = wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
    wait_canary_weight(&ns, 20).await?;
    let canary = r
        .status
        .and_then(|s| s.canary_status)
        .map(|c| c.canary_revision)
        .unwrap_or_default();

    // At the paused step: the restart keeps the step, its groups and its traffic.
    cc.kill_and_restart("at step 1's pause").await?;
    let r = wait_rollout_named(&ns, ROLLOUT, "still paused at step 1", paused_at(1)).await?;
    ensure!(
        canary_message(&r).contains("batch 1"),
        "{}",
        canary_message(&r)
    );
    wait_canary_weight(&ns, 20).await?;
    let lws = pair_lws(&ns).await?;
    ensure!(
        lws.iter().filter(|l| l.1 == canary).all(|l| l.2 == 1)
            && lws.iter().filter(|l| l.1 == stable).all(|l| l.2 == GROUPS),
        "step 1's groups after the restart: {lws:?}"
    );

    // While finalising: killed as the hold is lifted (the Rollout's finalising write).
    approve_named(&ns, ROLLOUT).await?;
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        SET,
        WAIT,
        |s: Option<&DisaggregatedSet>| s.is_some_and(|s| !s.annotations().contains_key(HOLD)),
    )
    .await
    .context("the hold lifted")?;
    cc.kill_and_restart("as the hold was lifted").await?;
    wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
    ensure!(wait_one_revision(&ns, Some(&stable)).await? == canary);
    wait_for(
        &ns.api::<Service>(),
        &format!("{SERVICE}-canary"),
        WAIT,
        |s: Option<&Service>| s.is_none(),
    )
    .await
    .context("the canary Service is gone")?;
    ensure!(cc.manager_running(), "the manager kept running");

    watched.nothing_twice()?;
    none_restarted(&watched.stable_pods, "stable")?;
    drop(watched);
    cc.finish();
    Ok(())
}

/// The message a refused write came back with.
fn refusal(result: anyhow::Result<String>) -> anyhow::Result<String> {
    match result {
        Ok(name) => anyhow::bail!("Rollout {name} was admitted"),
        Err(err) => Ok(format!("{err:?}")),
    }
}

#[test]
fn rollout_disaggregatedset_a_service_of_no_role_of_the_set_is_refused_or_reported()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-svc-role", |ns| async move {
            let (base, service, rollout) = example()?;
            apply_set(&ns, &with_image(&base, "vllm:1")).await?;
            let stable = wait_one_revision(&ns, None).await?;
            let role_service = |name: &str, role: &str| -> anyhow::Result<Service> {
                let mut svc = service.clone();
                svc["metadata"]["name"] = json!(name);
                svc["spec"]["selector"][ROLE_LABEL] = json!(role);
                Ok(serde_json::from_value(svc)?)
            };
            let naming = |svc: &str| {
                let mut r = rollout.clone();
                r["spec"]["strategy"]["canary"]["trafficRoutings"][0]["service"] = json!(svc);
                r
            };

            // The set and the Service exist: refused at admission, naming both and the roles.
            ns.api::<Service>()
                .create(&PostParams::default(), &role_service("pd-embed", "embed")?)
                .await?;
            let why =
                refusal(crate::rollout_support::submit_rollout(&ns, &naming("pd-embed")).await)?;
            for part in [
                "trafficRoutings[0].service",
                "Service pd-embed",
                "role embed",
                "prefill, decode",
            ] {
                ensure!(why.contains(part), "the refusal says {part}: {why}");
            }
            // Blue-green routes through its own strategy's trafficRoutings: checked the same.
            let mut blue_green = naming("pd-embed");
            let routings = blue_green["spec"]["strategy"]["canary"]["trafficRoutings"].clone();
            blue_green["spec"]["strategy"] = json!({"blueGreen": {
                "steps": [{"replicas": "100%", "traffic": "0%", "pause": {}},
                    {"replicas": "100%", "traffic": "100%", "pause": {}}],
                "trafficRoutings": routings}});
            let why = refusal(crate::rollout_support::submit_rollout(&ns, &blue_green).await)?;
            for part in [
                "spec.strategy.blueGreen.trafficRoutings[0].service",
                "Service pd-embed",
                "role embed",
            ] {
                ensure!(
                    why.contains(part),
                    "the blue-green refusal says {part}: {why}"
                );
            }

            // The Service made after the Rollout: a Warning and the Rollout's message, the
            // release held before anything is made, and nothing written to the Service.
            create_rollout(&ns, &naming("pd-late")).await?;
            ns.api::<Service>()
                .create(&PostParams::default(), &role_service("pd-late", "embed")?)
                .await?;
            create_route_to(&ns, crate::rollout_support::pair::ROUTE, "pd-late").await?;
            apply_set(&ns, &with_image(&base, "vllm:2")).await?;
            wait_rollout_named(
                &ns,
                ROLLOUT,
                "says the Service has no role",
                |r: &Rollout| {
                    r.status
                        .as_ref()
                        .and_then(|s| s.message.as_deref())
                        .is_some_and(|m| m.contains("pd-late") && m.contains("role embed"))
                },
            )
            .await?;
            wait_for_all(&ns.api::<Event>(), "", WAIT, |events| {
                events.iter().any(|e| {
                    e.involved_object.name.as_deref() == Some(ROLLOUT)
                        && e.reason.as_deref() == Some("TrafficRoutingInvalid")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("pd-late") && m.contains("prefill, decode"))
                })
            })
            .await
            .context("a TrafficRoutingInvalid Event naming the Service and the roles")?;
            let late = ns.api::<Service>().get("pd-late").await?;
            ensure!(
                late.spec.as_ref().and_then(|s| s.selector.clone())
                    == role_service("pd-late", "embed")?
                        .spec
                        .and_then(|s| s.selector),
                "the Service is not pinned: {:?}",
                late.spec
            );
            ensure!(
                ns.api::<Service>()
                    .get_opt("pd-late-canary")
                    .await?
                    .is_none(),
                "no canary Service is made from it"
            );
            ensure!(
                pair_lws(&ns)
                    .await?
                    .iter()
                    .all(|(_, revision, _, _)| *revision == stable),
                "nothing of the new revision: {:?}",
                pair_lws(&ns).await?
            );

            // The Service fixed to select the prefill role: the release goes on.
            ns.api::<Service>()
                .patch(
                    "pd-late",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"selector": {ROLE_LABEL: "prefill"}}})),
                )
                .await?;
            wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
            Ok(())
        })
    })
}

/// The set's release-groups annotation.
async fn release_groups(ns: &TestNs) -> anyhow::Result<Option<Value>> {
    let set = ns.api::<DisaggregatedSet>().get(SET).await?;
    Ok(set
        .annotations()
        .get(RELEASE_GROUPS)
        .map(|v| serde_json::from_str(v))
        .transpose()?)
}

/// `set` with the decode role's `scaling.mode` (`None`: the field removed, Static).
fn decode_scaling(set: &Value, mode: Option<&str>) -> Value {
    let mut set = set.clone();
    for role in set["spec"]["roles"].as_array_mut().into_iter().flatten() {
        if role["name"] == "decode" {
            match mode {
                Some(mode) => role["scaling"] = json!({"mode": mode}),
                None => {
                    if let Some(r) = role.as_object_mut() {
                        r.remove("scaling");
                    }
                }
            }
        }
    }
    set
}

#[test]
fn rollout_disaggregatedset_a_role_scaled_externally_mid_release_holds_the_step()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("pd-external", |ns| async move {
            let p = paused_pair_release(&ns, |b| with_image(b, "vllm:2")).await?;
            let v2 = with_image(&p.base, "vllm:2");
            ensure!(
                release_groups(&ns).await? == Some(json!({"decode": 1, "prefill": 1})),
                "step 1's batch"
            );
            // Decode handed to an HPA mid-release: the step's share of it no longer means
            // anything, so the release holds and says so.
            apply_set(&ns, &decode_scaling(&v2, Some("External"))).await?;
            // Both the release's message and the one `kubectl get rollout` shows.
            wait_rollout_named(&ns, ROLLOUT, "names the External role", |r| {
                canary_message(r).contains("role decode is scaled externally")
                    && r.status
                        .as_ref()
                        .and_then(|s| s.message.as_deref())
                        .is_some_and(|m| {
                            m.contains("manually confirm")
                                && m.contains("role decode is scaled externally")
                        })
            })
            .await?;
            wait_for_all(&ns.api::<Event>(), "", WAIT, |events| {
                events.iter().any(|e| {
                    e.involved_object.kind.as_deref() == Some("BatchRelease")
                        && e.reason.as_deref() == Some("RoleScaledExternally")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("role decode"))
                })
            })
            .await
            .context("a RoleScaledExternally Warning naming the role")?;
            // Approved: step 2's batch is not written while decode is External.
            approve_named(&ns, ROLLOUT).await?;
            wait_for(
                &ns.api::<BatchRelease>(),
                ROLLOUT,
                WAIT,
                |br: Option<&BatchRelease>| {
                    br.is_some_and(|br| {
                        br.spec.release_plan.batch_partition == Some(1)
                            && br.status.as_ref().is_some_and(|s| {
                                s.observed_generation == br.metadata.generation
                                    && s.message
                                        .as_deref()
                                        .is_some_and(|m| m.contains("scaled externally"))
                            })
                    })
                },
            )
            .await
            .context("the BatchRelease holds step 2's batch")?;
            ensure!(
                release_groups(&ns).await? == Some(json!({"decode": 1, "prefill": 1})),
                "no batch is written while held: {:?}",
                release_groups(&ns).await?
            );
            let r = ns.api::<Rollout>().get(ROLLOUT).await?;
            ensure!(
                step(&r).0 == 2 && step(&r).1 != "Completed",
                "step 2 holds: {:?}",
                step(&r)
            );
            // Static again: the release goes on and finishes.
            apply_set(&ns, &decode_scaling(&v2, None)).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            ensure!(wait_one_revision(&ns, Some(&p.stable)).await? == p.canary);
            Ok(())
        })
    })
}
