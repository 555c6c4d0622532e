//! Ways a release ends other than success, against the real control plane: the template
//! reverted (rollback), a third template, the Rollout disabled or deleted, the LWS deleted.
//! Each leaves nothing behind and never touches a stable group.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use anyhow::{Context, ensure};
use futures::StreamExt;
use kube::{
    api::DeleteParams,
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::{LeaderWorkerSet, Rollout};

use crate::harness::{TestNs, wait_for, with_ns};
use crate::lws_support::{create_available, image, settled_pods, uids};
use crate::rollout_canary::{RATE, is_canary, three_steps};
use crate::rollout_support::*;
use crate::traffic_driver::{Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip};

/// Starts a release of `vllm:2` over 4 stable groups and waits for step 1's pause with 5%.
/// Returns the stable LWS as created and its pods' uids from before the release.
pub async fn paused_release(
    ns: &TestNs,
) -> anyhow::Result<(serde_json::Value, BTreeMap<String, String>)> {
    let v1 = stable_lws(4, "vllm:1");
    release_setup(ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
    let before = uids(ns, STABLE).await?;
    apply_lws(ns, &with_image(&v1, "vllm:2")).await?;
    wait_paused_at(ns, 1).await?;
    wait_route(ns, split_route(5)).await?;
    Ok((v1, before))
}

/// Records, each time a canary LWS is being deleted, what the route sent to the canary then.
fn guard_canary_deletion(ns: &TestNs) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let ns = ns.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(
            ns.api::<LeaderWorkerSet>(),
            watcher::Config::default().labels(&format!("{CANARY_LABEL}={STABLE}")),
        )
        .default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut reported = std::collections::BTreeSet::new();
        while let Some(Ok(event)) = stream.next().await {
            // An object without finalizers goes at once: its Delete event is all there is.
            let (lws, going) = match event {
                watcher::Event::Delete(lws) => (lws, true),
                watcher::Event::Apply(lws) | watcher::Event::InitApply(lws) => {
                    let going = lws.metadata.deletion_timestamp.is_some();
                    (lws, going)
                }
                _ => continue,
            };
            let name = lws.metadata.name.clone().unwrap_or_default();
            if going && reported.insert(name.clone()) {
                let route = route_backends(&ns).await.unwrap_or_default();
                out.lock().unwrap().push(format!("{name}: {route:?}"));
            }
        }
    });
    (task, seen)
}

/// A canary was seen going away, and the route sent nothing to it when it did.
fn canary_left_after_traffic(seen: &[String]) -> bool {
    !seen.is_empty()
        && seen.iter().all(|s| {
            !s.contains(&format!("\"{SERVICE}-canary\", Some("))
                || s.contains(&format!("\"{SERVICE}-canary\", Some(0))"))
        })
}

#[tokio::test]
async fn rollout_rollback_mid_release() -> anyhow::Result<()> {
    with_ns("rollout-rollback", |ns| {
        Box::pin(async move {
            let (v1, stable_uids) = paused_release(&ns).await?;
            ensure!(uids(&ns, STABLE).await? == stable_uids);
            // Real requests through the proxy across the rollback, when the traffic layer runs.
            let release = match traffic_or_skip("rollout_rollback_mid_release (requests)") {
                Some(t) => {
                    let plain = RequestSpec::new(&host(&ns));
                    let traffic = ReleaseTraffic::start(
                        &t,
                        plain,
                        None,
                        RATE,
                        is_canary as fn(&Outcome) -> bool,
                    );
                    traffic.assert_step(5, 400).await?;
                    Some(traffic)
                }
                None => None,
            };
            let (guard, seen) = guard_canary_deletion(&ns);
            // Revert the template: a rollback.
            apply_lws(&ns, &v1).await?;
            let done = wait_rollout(&ns, "rolled back", finished("False")).await;
            nothing_left(&ns).await?;
            guard.abort();
            done?;
            if let Some(r) = release {
                r.assert_rolled_back(200).await?;
                let all = r.finish().await?;
                eprintln!("rollout_rollback_mid_release requests: {}", all.summary());
            }
            let seen = seen.lock().unwrap().clone();
            ensure!(
                canary_left_after_traffic(&seen),
                "traffic left the canary first: {seen:?}"
            );
            ensure!(
                uids(&ns, STABLE).await? == stable_uids,
                "no stable group touched"
            );
            ensure!(
                settled_pods(&ns, STABLE, 8)
                    .await?
                    .iter()
                    .all(|p| image(p) == "vllm:1")
            );
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_third_template_restarts_the_canary() -> anyhow::Result<()> {
    with_ns("rollout-third", |ns| {
        Box::pin(async move {
            let (v1, stable_uids) = paused_release(&ns).await?;
            let first = the_canary(&ns).await?.metadata.name.context("name")?;
            apply_lws(&ns, &with_image(&v1, "vllm:3")).await?;
            // A new canary on the third template, step 1 again; the first canary gone.
            let r = wait_rollout(&ns, "restarted on vllm:3", |r| {
                step(r) == (1, "StepPaused".into())
                    && r.status
                        .as_ref()
                        .and_then(|s| s.canary_status.as_ref())
                        .is_some_and(|c| !first.ends_with(&c.canary_revision))
            })
            .await?;
            let canary = the_canary(&ns).await.context("exactly one canary")?;
            let name = canary.metadata.name.clone().context("name")?;
            ensure!(name != first, "{name}");
            let revision = r
                .status
                .and_then(|s| s.canary_status)
                .map(|c| c.canary_revision)
                .unwrap_or_default();
            ensure!(name.ends_with(&revision), "{name} / {revision}");
            ensure!(
                settled_pods(&ns, &name, 2)
                    .await?
                    .iter()
                    .all(|p| image(p) == "vllm:3")
            );
            wait_route(&ns, split_route(5)).await?;
            ensure!(
                uids(&ns, STABLE).await? == stable_uids,
                "no stable group touched"
            );
            // And it finishes on the third template.
            approve(&ns).await?;
            wait_rollout(&ns, "finished", finished("True")).await?;
            released_to(&ns, 4, "vllm:3").await?;
            nothing_left(&ns).await?;
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_disabled_mid_release_releases_everything() -> anyhow::Result<()> {
    with_ns("rollout-disable", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            let (guard, seen) = guard_canary_deletion(&ns);
            set_disabled(&ns, true).await?;
            let done = wait_rollout(&ns, "Disabled", |r| phase(r) == "Disabled").await;
            nothing_left(&ns).await?;
            guard.abort();
            done?;
            let seen = seen.lock().unwrap().clone();
            ensure!(
                canary_left_after_traffic(&seen),
                "traffic left the canary first: {seen:?}"
            );
            // Released: the stable LWS rolls to its template by its own strategy.
            released_to(&ns, 4, "vllm:2").await?;
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_deleted_mid_release_releases_everything() -> anyhow::Result<()> {
    with_ns("rollout-delete", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            let (guard, seen) = guard_canary_deletion(&ns);
            ns.api::<Rollout>()
                .delete(STABLE, &DeleteParams::default())
                .await?;
            let gone = wait_for(&ns.api::<Rollout>(), STABLE, WAIT, |r: Option<&Rollout>| {
                r.is_none()
            })
            .await;
            nothing_left(&ns).await?;
            guard.abort();
            gone.context("the Rollout's finalizer is removed")?;
            let seen = seen.lock().unwrap().clone();
            ensure!(
                canary_left_after_traffic(&seen),
                "traffic left the canary first: {seen:?}"
            );
            released_to(&ns, 4, "vllm:2").await?;
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_workload_deleted_mid_release_cleans_up() -> anyhow::Result<()> {
    with_ns("rollout-lws-delete", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            ns.api::<LeaderWorkerSet>()
                .delete(STABLE, &DeleteParams::foreground())
                .await?;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                |l: Option<&LeaderWorkerSet>| l.is_none(),
            )
            .await?;
            nothing_left(&ns).await?;
            let r = wait_rollout(&ns, "Workload Not Found", |r| {
                phase(r) == "Initial"
                    && r.status.as_ref().and_then(|s| s.message.as_deref())
                        == Some("Workload Not Found")
            })
            .await?;
            ensure!(
                r.status.and_then(|s| s.canary_status).is_some(),
                "canaryStatus stays present"
            );
            Ok(())
        })
    })
    .await
}

/// Disabling a release that routes through an nginx canary Ingress: as Kruise, the canary
/// Ingress goes in the route-traffic-to-stable step, before the workload is released and
/// before the canary LWS goes — it never outlives the canary at weight 0.
#[tokio::test]
async fn rollout_disabled_removes_the_canary_ingress_before_the_canary() -> anyhow::Result<()> {
    use k8s_openapi::api::networking::v1::Ingress;
    with_ns("rollout-disable-nginx", |ns| {
        Box::pin(async move {
            let v1 = stable_lws(2, "vllm:1");
            create_available(&ns, &v1).await?;
            create_service(&ns).await?;
            let ing: Ingress = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web"},
                "spec": {"ingressClassName": "nginx", "rules": [{"host": "models.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": SERVICE, "port": {"number": 80}}}}]}}]}
            }))?;
            ns.api::<Ingress>().create(&Default::default(), &ing).await?;
            let routing = serde_json::json!({"service": SERVICE, "gracePeriodSeconds": crate::rollout_support::GRACE_SECONDS,
                "ingress": {"classType": "nginx", "name": "web"}});
            create_rollout(&ns, &rollout(three_steps(), Some(routing))).await?;
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_paused_at(&ns, 1).await?;
            ensure!(ns.api::<Ingress>().get_opt("web-canary").await?.is_some());
            // Whenever the canary LWS is seen going, is the canary Ingress still there?
            let seen = Arc::new(Mutex::new(Vec::new()));
            let out = seen.clone();
            let watch_ns = ns.clone();
            let guard = tokio::spawn(async move {
                let stream = watcher::watcher(
                    watch_ns.api::<LeaderWorkerSet>(),
                    watcher::Config::default().labels(&format!("{CANARY_LABEL}={STABLE}")),
                )
                .default_backoff();
                let mut stream = std::pin::pin!(stream);
                while let Some(Ok(event)) = stream.next().await {
                    let going = match event {
                        watcher::Event::Delete(_) => true,
                        watcher::Event::Apply(l) => l.metadata.deletion_timestamp.is_some(),
                        _ => false,
                    };
                    if going {
                        let ingress = watch_ns.api::<Ingress>().get_opt("web-canary").await;
                        out.lock()
                            .unwrap()
                            .push(ingress.map(|i| i.is_some()).unwrap_or(true));
                    }
                }
            });
            set_disabled(&ns, true).await?;
            let done = wait_rollout(&ns, "Disabled", |r| phase(r) == "Disabled").await;
            nothing_left(&ns).await?;
            guard.abort();
            done?;
            ensure!(ns.api::<Ingress>().get_opt("web-canary").await?.is_none());
            let seen = seen.lock().unwrap().clone();
            ensure!(
                !seen.is_empty() && seen.iter().all(|still_there| !still_there),
                "the canary Ingress was gone before the canary LWS went: {seen:?}"
            );
            Ok(())
        })
    })
    .await
}
