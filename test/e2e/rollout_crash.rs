//! Crash safety of a release: the manager is SIGKILLed mid-scale, mid-traffic change, during
//! finalisation (as the canary gives its groups back), during a rollback, while the Rollout is
//! being disabled and while it is being deleted, on a cluster of the test's own (the suite's
//! manager must not take over meanwhile). Every restart decides from the cluster and the Rollout's status
//! alone, so the release must end exactly as an uninterrupted one: no stable pod replaced
//! before finalisation, no canary LWS, BatchRelease or canary Service created twice, nothing
//! left behind.
//!
//! Kills happen as soon as a watch sees the moment they aim at, never after fixed sleeps.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::DeleteParams;
use lws_rollout::api::{BatchRelease, LeaderWorkerSet, Rollout};

use crate::{
    crash_support::{CrashCluster, Seen, more_uids_than, track},
    harness::{TestNs, wait_for},
    lws_support::{NAME, uids},
    rollout_canary::three_steps,
    rollout_support::*,
};

/// Moved to the Rollout tests' shared module; named here too for the tests that use it so.
pub use crate::rollout_support::wait_for_all_canary;

/// What a crash test watches through its releases: every uid the stable pods, the canary
/// LWSs, the BatchReleases and the Services of the namespace ever had. Dropping it stops the
/// watches.
pub struct Watched {
    pub stable_pods: Seen,
    pub canary_lws: Seen,
    pub brs: Seen,
    pub services: Seen,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Watched {
    pub fn start(ns: &TestNs) -> Self {
        let (t1, stable_pods) = track(ns.api::<Pod>(), &format!("{NAME}={STABLE}"));
        let (t2, canary_lws) = track(
            ns.api::<LeaderWorkerSet>(),
            &format!("{CANARY_LABEL}={STABLE}"),
        );
        let (t3, brs) = track(ns.api::<BatchRelease>(), "");
        let (t4, services) = track(ns.api::<Service>(), "");
        Self {
            stable_pods,
            canary_lws,
            brs,
            services,
            tasks: vec![t1, t2, t3, t4],
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The end of a release to `image` that must look like an uninterrupted one, whatever failed
/// in between: finished successfully, the stable LWS released with every group on `image`,
/// nothing of the release left, no stable pod replaced more than once (by the stable LWS's own
/// roll), no canary LWS, BatchRelease or Service created twice.
pub async fn ended_uninterrupted(
    ns: &TestNs,
    what: &str,
    image: &str,
    watched: &Watched,
) -> anyhow::Result<()> {
    wait_rollout(ns, what, finished("True")).await?;
    released_to(ns, 4, image).await?;
    nothing_left(ns).await?;
    let replaced_twice = more_uids_than(&watched.stable_pods, 2);
    ensure!(
        replaced_twice.is_empty(),
        "stable pods replaced more than once: {replaced_twice:?}"
    );
    for (kind, seen) in [
        ("canary LWS", &watched.canary_lws),
        ("BatchRelease", &watched.brs),
        ("Service", &watched.services),
    ] {
        let twice = more_uids_than(seen, 1);
        ensure!(
            twice.is_empty(),
            "{kind} created twice in one release: {twice:?}"
        );
    }
    Ok(())
}

#[test]
fn rollout_crash_safe_release_and_rollback() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(crash_release_and_rollback)
}

async fn crash_release_and_rollback() -> anyhow::Result<()> {
    let (mut cc, ns) = CrashCluster::start("rollout-crash").await?;

    // Pods ready a second after they start: the stable LWS rolls group by group at the end,
    // so the kill below lands while the canary gives its groups back.
    let v1 = with_ready_delay(&stable_lws(4, "vllm:1"), "1s");
    release_setup(&ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
    let baseline = uids(&ns, STABLE).await?;
    let watched = Watched::start(&ns);

    // Release 1: kill when the canary LWS first exists (mid-scale).
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_for_all_canary(&ns, |c| !c.is_empty()).await?;
    cc.kill_and_restart("as the canary LWS appeared").await?;
    wait_paused_at(&ns, 1).await?;
    wait_route(&ns, split_route(5)).await?;
    ensure!(
        uids(&ns, STABLE).await? == baseline,
        "a stable pod was replaced"
    );

    // Kill as step 2 scales the canary, and again as its traffic changes.
    approve(&ns).await?;
    wait_for_all_canary(&ns, |c| c.iter().any(|l| l.spec.replicas == Some(2))).await?;
    cc.kill_and_restart("as the canary scaled to 2 groups")
        .await?;
    wait_rollout(&ns, "step 2 routing traffic", |r| {
        step(r).0 == 2 && step(r).1 == "StepTrafficRouting"
    })
    .await?;
    cc.kill_and_restart("during step 2's traffic change")
        .await?;
    // (Step 2's 5 s pause may be over by the time the restarted manager is back.)

    // Kill during finalisation, mid-shrink: the stable LWS is rolling and the canary has given
    // back some of its 4 groups, not all it will.
    wait_rollout(&ns, "finalising", |r| {
        !finalising(r).is_empty() && phase(r) == "Progressing"
    })
    .await?;
    wait_for_all_canary(&ns, |c| {
        c.iter()
            .any(|l| l.spec.replicas.is_some_and(|n| (2..4).contains(&n)))
    })
    .await?;
    cc.kill_and_restart("during finalisation, as the canary gave groups back")
        .await?;
    ended_uninterrupted(&ns, "release 1 finished", "vllm:2", &watched).await?;

    // Release 2, rolled back: kill as the rollback starts.
    let v2 = with_image(&v1, "vllm:2");
    let before = uids(&ns, STABLE).await?;
    apply_lws(&ns, &with_image(&v1, "vllm:3")).await?;
    wait_paused_at(&ns, 1).await?;
    apply_lws(&ns, &v2).await?;
    wait_rollout(&ns, "rollback finalising", |r| !finalising(r).is_empty()).await?;
    cc.kill_and_restart("during the rollback").await?;
    wait_rollout(&ns, "rolled back", finished("False")).await?;
    nothing_left(&ns).await?;
    ensure!(
        uids(&ns, STABLE).await? == before,
        "the rollback touched a stable group"
    );

    let twice = more_uids_than(&watched.canary_lws, 1);
    ensure!(twice.is_empty(), "canary LWS created twice: {twice:?}");
    // The second release makes its own BatchRelease and canary Service: two uids at most.
    for (what, seen) in [
        ("BatchRelease", &watched.brs),
        ("Service", &watched.services),
    ] {
        let thrice = more_uids_than(seen, 2);
        ensure!(
            thrice.is_empty(),
            "{what} created twice in one release: {thrice:?}"
        );
    }
    one_canary_per_release(&watched)?;
    drop(watched);

    // Release 3: disable the Rollout mid-release and kill the manager as it starts disabling.
    let watched = Watched::start(&ns);
    let (brs, services) = (&watched.brs, &watched.services);
    let v4 = with_image(&v1, "vllm:4");
    let before = uids(&ns, STABLE).await?;
    apply_lws(&ns, &v4).await?;
    wait_paused_at(&ns, 1).await?;
    let known = snapshot(&[brs, services]);
    ensure!(
        uids(&ns, STABLE).await? == before,
        "a stable pod was replaced before the Rollout was disabled"
    );
    set_disabled(&ns, true).await?;
    wait_rollout(&ns, "disabling", |r| {
        r.spec.disabled && phase(r) != "Healthy" && phase(r) != "Progressing"
    })
    .await?;
    cc.kill_and_restart("while the Rollout was being disabled")
        .await?;
    wait_rollout(&ns, "Disabled", |r| phase(r) == "Disabled").await?;
    nothing_left(&ns).await?;
    released_to(&ns, 4, "vllm:4").await?;
    created_once(&[("BatchRelease", brs), ("Service", services)], &known)?;
    set_disabled(&ns, false).await?;
    wait_rollout(&ns, "Healthy again", |r| phase(r) == "Healthy").await?;

    // Release 4: delete the Rollout mid-release and kill the manager as it starts terminating.
    let before = uids(&ns, STABLE).await?;
    // Release 3's status (step 1 paused) stays until the Rollout takes the new template up:
    // wait for a pause of this release's own canary revision.
    let old_revision = canary_revision(&ns.api::<Rollout>().get(STABLE).await?);
    apply_lws(&ns, &with_image(&v1, "vllm:5")).await?;
    wait_rollout(&ns, "paused at step 1 of release 4", |r| {
        step(r) == (1, "StepPaused".to_string()) && canary_revision(r) != old_revision
    })
    .await?;
    let known = snapshot(&[brs, services]);
    ensure!(
        uids(&ns, STABLE).await? == before,
        "a stable pod was replaced before the Rollout was deleted"
    );
    ns.api::<Rollout>()
        .delete(STABLE, &DeleteParams::default())
        .await?;
    cc.kill_and_restart("while the Rollout was being deleted")
        .await?;
    wait_for(&ns.api::<Rollout>(), STABLE, WAIT, |r: Option<&Rollout>| {
        r.is_none()
    })
    .await
    .context("the Rollout's finalizer is removed after the restart")?;
    nothing_left(&ns).await?;
    released_to(&ns, 4, "vllm:5").await?;
    created_once(&[("BatchRelease", brs), ("Service", services)], &known)?;
    let twice = more_uids_than(&watched.canary_lws, 1);
    ensure!(twice.is_empty(), "canary LWS created twice: {twice:?}");
    one_canary_per_release(&watched)?;
    cc.finish();
    Ok(())
}

/// Two releases watched, two canary LWSs (one name each).
fn one_canary_per_release(watched: &Watched) -> anyhow::Result<()> {
    let canaries = watched.canary_lws.lock().unwrap();
    ensure!(canaries.len() == 2, "one canary per release: {canaries:?}");
    Ok(())
}

fn canary_revision(r: &Rollout) -> String {
    r.status
        .as_ref()
        .and_then(|s| s.canary_status.as_ref())
        .map(|c| c.canary_revision.clone())
        .unwrap_or_default()
}

/// Every uid seen so far, per kind, to tell one release's creations from earlier ones.
fn snapshot(seen: &[&Seen]) -> Vec<BTreeMap<String, BTreeSet<String>>> {
    seen.iter().map(|s| s.lock().unwrap().clone()).collect()
}

/// Since `known`, no object name got more than one new uid (nothing created twice).
fn created_once(
    seen: &[(&str, &Seen)],
    known: &[BTreeMap<String, BTreeSet<String>>],
) -> anyhow::Result<()> {
    for ((what, seen), known) in seen.iter().zip(known) {
        let twice: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, uids)| {
                let old = known.get(*name);
                uids.iter()
                    .filter(|u| old.is_none_or(|o| !o.contains(*u)))
                    .count()
                    > 1
            })
            .map(|(n, _)| n.clone())
            .collect();
        ensure!(
            twice.is_empty(),
            "{what} created twice in one release: {twice:?}"
        );
    }
    Ok(())
}
