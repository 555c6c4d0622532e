//! Blue-green releases of an LWS by a Rollout (examples/rollout-bluegreen.yaml, applied as it
//! is) against the real control plane, with real requests through the proxy when the traffic
//! layer runs: the second LWS beside the user's untouched one, the preview by header, the
//! switch, promotion that keeps the user's LWS (it rolls while the second serves everything),
//! a rollback and a disable — each without one failed request.

use anyhow::{Context, ensure};
use lws_rollout::api::{LeaderWorkerSet, Rollout};
use serde_json::Value;

use crate::harness::{TestNs, wait_for, with_ns, yaml_documents};
use crate::lws_support::{
    REVISION, available_with, create_available, image, label, settled_pods, uids,
};
use crate::rollout_support::*;
use crate::traffic_driver::{
    Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip, wait_until_served,
};

/// The example's HTTPRoute (the worked example's).
const EXAMPLE_ROUTE: &str = "vllm";
/// Requests per second through the proxy.
const RATE: u32 = 100;
/// Groups of the user's LWS.
const GROUPS: i32 = 2;

/// The Rollout of examples/rollout-bluegreen.yaml, exactly as shipped.
fn example_rollout() -> anyhow::Result<Value> {
    let mut docs = yaml_documents("examples/rollout-bluegreen.yaml")?;
    ensure!(docs.len() == 1 && docs[0]["kind"] == "Rollout", "{docs:?}");
    Ok(docs.remove(0))
}

/// An answer from the second LWS.
fn is_new(o: &Outcome) -> bool {
    o.lws
        .as_deref()
        .is_some_and(|l| l.starts_with(&format!("{STABLE}-canary-")))
}

fn blue_green(r: &Rollout) -> Option<&lws_rollout::api::rollout::BlueGreenStatus> {
    r.status.as_ref()?.blue_green_status.as_ref()
}

type Traffic = ReleaseTraffic<fn(&Outcome) -> bool>;

/// Argo CD's health of `r` (its own evaluator, docs/argocd.md's customization) is `want`.
pub(crate) async fn argocd_reads(r: &Rollout, want: &str) -> anyhow::Result<()> {
    let Some(bin) = crate::lws_argocd::argocd_tool() else {
        return Ok(());
    };
    let (health, why) = crate::rollout_argocd::rollout_health_with_customization(&bin, r).await?;
    ensure!(
        health == want,
        "Argo CD reads {health} ({why}), want {want}: {:?}",
        r.status
    );
    Ok(())
}

/// The user's LWS (available), its Service and the example's route, the example Rollout
/// Healthy; requests flowing when the traffic layer runs (plain, and previewers' with the
/// example's header).
async fn setup(ns: &TestNs, test: &str) -> anyhow::Result<Option<Traffic>> {
    create_available(ns, &stable_lws(GROUPS, "vllm:1")).await?;
    create_service(ns).await?;
    create_route_named(ns, EXAMPLE_ROUTE).await?;
    create_rollout(ns, &example_rollout()?).await?;
    let r = wait_rollout(ns, "Healthy", |r| phase(r) == "Healthy").await?;
    argocd_reads(&r, "Healthy").await?;
    let s = r.status.as_ref().context("status")?;
    ensure!(
        s.canary_status.is_none()
            && blue_green(&r).is_some_and(|b| b.common.current_step_state == "Completed"),
        "a blue-green Rollout reads completed in blueGreenStatus only: {s:?}"
    );
    let Some(t) = traffic_or_skip(test) else {
        return Ok(None);
    };
    let plain = RequestSpec::new(&host(ns));
    let preview = RequestSpec::new(&host(ns)).header("x-preview", "new");
    wait_until_served(&t, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
    let traffic = ReleaseTraffic::start(
        &t,
        plain,
        Some(preview),
        RATE,
        is_new as fn(&Outcome) -> bool,
    );
    Ok(Some(traffic))
}

/// Starts the release and waits for step 1 (the whole new side, previewers only).
async fn to_preview(ns: &TestNs, traffic: Option<&Traffic>) -> anyhow::Result<String> {
    apply_lws(ns, &with_image(&stable_lws(GROUPS, "vllm:1"), "vllm:2")).await?;
    let r = wait_paused_at(ns, 1).await?;
    argocd_reads(&r, "Suspended").await?;
    let bg = blue_green(&r).context("blueGreenStatus")?;
    ensure!(
        bg.updated_replicas == GROUPS && bg.updated_ready_replicas == GROUPS,
        "step 1 is every group: {bg:?}"
    );
    ensure!(r.status.as_ref().is_some_and(|s| s.canary_status.is_none()));
    let second = the_canary(ns).await?;
    ensure!(second.spec.replicas == Some(GROUPS));
    let name = second.metadata.name.clone().context("name")?;
    if let Some(t) = traffic {
        // Plain requests stay on the user's groups; previewers reach only the new side.
        t.assert_step(0, 200).await?;
    }
    Ok(name)
}

#[test]
fn rollout_bluegreen_example_previews_switches_and_promotes_losing_no_request() -> anyhow::Result<()>
{
    on_big_stack(|| {
        with_ns("rollout-bluegreen", |ns| async move {
            let traffic = setup(&ns, "rollout_bluegreen_example (requests)").await?;
            let user = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
            let user_uid = user.metadata.uid.clone();
            let user_pods = uids(&ns, STABLE).await?;
            let second = to_preview(&ns, traffic.as_ref()).await?;
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted"
            );

            // The switch: approve (kubectl-kruise's patch of blueGreenStatus) → 100% new.
            let asked = traffic.as_ref().map(|t| t.elapsed());
            approve(&ns).await?;
            wait_paused_at(&ns, 2).await?;
            if let (Some(t), Some(asked)) = (&traffic, asked) {
                t.assert_step(100, 200).await?;
                eprintln!(
                    "blue-green approve → 100% of requests on the new side: {:?}",
                    t.switched_after(asked, is_new)
                );
            }
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted before promotion"
            );

            // Promotion: the stable Service serves the second LWS's leaders while the user's
            // LWS rolls; then everything comes back to the user's LWS and the second goes.
            // That rolling takes seconds on fake nodes, so the endpoints are watched from
            // before the approve: a watch started after it may list them already back.
            let second_leaders = ready_leader_ips(&ns, &second).await?;
            ensure!(
                second_leaders.len() == GROUPS as usize,
                "{second_leaders:?}"
            );
            let (served, promoting) =
                tokio::join!(wait_endpoints(&ns, SERVICE, &second_leaders), async {
                    approve(&ns).await?;
                    wait_rollout(&ns, "promoting", |r| finalising(r) == "ResumeWorkload").await
                });
            let promoting = promoting?;
            served?;
            argocd_reads(&promoting, "Progressing").await?;
            let done = wait_rollout(&ns, "release finished", finished("True")).await?;
            argocd_reads(&done, "Healthy").await?;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                available_with(GROUPS, GROUPS),
            )
            .await?;
            ensure!(
                settled_pods(&ns, STABLE, 2 * GROUPS as usize)
                    .await?
                    .iter()
                    .all(|p| image(p) == "vllm:2")
            );
            nothing_left(&ns).await?;
            let leaders = ready_leader_ips(&ns, STABLE).await?;
            wait_endpoints(&ns, SERVICE, &leaders).await?;
            // GitOps owns the user's LWS: the same object, the spec it applied.
            let after = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
            ensure!(
                after.metadata.uid == user_uid,
                "the user's LWS was replaced"
            );
            ensure!(after.spec.replicas == Some(GROUPS));
            if let Some(t) = traffic {
                // Everything (previewers' too) on the user's LWS, on the new template; not
                // one request failed.
                let promoted = settled_pods(&ns, STABLE, 2 * GROUPS as usize).await?;
                let revision = label(&promoted[0], REVISION)
                    .context("revision")?
                    .to_string();
                let w = t.assert_rolled_back(200).await?;
                w.assert_all("served by the promoted user's LWS", |o| {
                    o.lws.as_deref() == Some(STABLE) && o.revision.as_deref() == Some(&revision)
                })?;
                let all = t.finish().await?;
                eprintln!("rollout_bluegreen_example requests: {}", all.summary());
            }
            Ok(())
        })
    })
}

#[test]
fn rollout_bluegreen_scaled_then_rolled_back_after_the_switch_returns_traffic_at_once()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-bg-rollback", |ns| async move {
            let traffic = setup(&ns, "rollout_bluegreen_rollback (requests)").await?;
            to_preview(&ns, traffic.as_ref()).await?;
            // Scaled mid-release (a user, or an HPA): followed, not fought — the user's LWS
            // gets its group (on its held revision), the new side grows to match (100%).
            let scaled = stable_lws(GROUPS + 1, "vllm:1");
            apply_lws(&ns, &with_image(&scaled, "vllm:2")).await?;
            wait_event(&ns, "WorkloadScaled", "scaled from 2 to 3 groups").await?;
            wait_for_all_canary(&ns, |c| {
                c.len() == 1 && c[0].spec.replicas == Some(GROUPS + 1)
            })
            .await?;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                available_with(GROUPS + 1, 0),
            )
            .await?;
            let user_pods = uids(&ns, STABLE).await?;
            ensure!(
                settled_pods(&ns, STABLE, 2 * (GROUPS + 1) as usize)
                    .await?
                    .iter()
                    .all(|p| image(p) == "vllm:1"),
                "the new group runs the held revision"
            );
            approve(&ns).await?;
            wait_paused_at(&ns, 2).await?;
            if let Some(t) = &traffic {
                t.assert_step(100, 200).await?;
            }
            // The old template back: traffic returns to the user's groups, the second LWS goes,
            // and no user group ever restarted.
            let asked = traffic.as_ref().map(|t| t.elapsed());
            apply_lws(&ns, &scaled).await?;
            wait_rollout(&ns, "cancelled", finished("False")).await?;
            nothing_left(&ns).await?;
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted"
            );
            if let (Some(t), Some(asked)) = (traffic, asked) {
                eprintln!(
                    "blue-green template revert → 100% back on the user's groups: {:?}",
                    t.switched_after(asked, |o| !is_new(o))
                );
                t.assert_rolled_back(200).await?;
                t.finish().await?;
            }
            Ok(())
        })
    })
}

#[test]
fn rollout_bluegreen_disabled_mid_release_hands_the_lws_back_losing_no_request()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-bg-disable", |ns| async move {
            let traffic = setup(&ns, "rollout_bluegreen_disable (requests)").await?;
            to_preview(&ns, traffic.as_ref()).await?;
            set_disabled(&ns, true).await?;
            wait_rollout(&ns, "Disabled", |r| phase(r) == "Disabled").await?;
            // The user's LWS takes its template by its own rolloutStrategy.
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                available_with(GROUPS, GROUPS),
            )
            .await?;
            nothing_left(&ns).await?;
            if let Some(t) = traffic {
                t.assert_rolled_back(200).await?;
                t.finish().await?;
            }
            Ok(())
        })
    })
}
