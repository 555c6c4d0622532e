//! A whole canary release of an LWS driven by a Rollout against the real control plane: the
//! canary LWS, its groups per step, the Services' endpoints and the HTTPRoute's weights per
//! step, approval by `kubectl-kruise`'s status patch, the stable LWS held throughout (a failed
//! stable group comes back on the stable template), and finalisation.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use anyhow::{Context, ensure};
use futures::StreamExt;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    api::DeleteParams,
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::harness::{TestNs, wait_for, with_ns};
use crate::lws_support::{
    GROUP_INDEX, REVISION, WORKER_INDEX, available_with, create_available, image, label, pods_of,
    settled_pods, uids,
};
use crate::rollout_support::*;
use crate::traffic_driver::{
    Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip, wait_until_served,
};

/// Step 2's pause: long enough for a window of requests at 50%.
const PAUSE_SECONDS: i32 = 8;

/// 1 group + 5% + manual pause → 50% of the groups + 50% + a pause → everything.
pub fn three_steps() -> serde_json::Value {
    json!([
        {"replicas": 1, "traffic": "5%", "pause": {}},
        {"replicas": "50%", "traffic": "50%", "pause": {"duration": PAUSE_SECONDS}},
        {"replicas": "100%", "traffic": "100%"}
    ])
}

/// What the route did while the watch ran: every canary weight it gave, and whenever it
/// stopped sending anything to the canary, whether the stable LWS had every group on the new
/// template and ready at that moment, and how many groups the canary LWS still had.
#[derive(Debug, Default)]
struct RouteSeen {
    weights: Vec<i64>,
    back_to_stable: Vec<String>,
}

fn guard_route_to_stable(ns: &TestNs) -> (tokio::task::JoinHandle<()>, Arc<Mutex<RouteSeen>>) {
    let seen = Arc::new(Mutex::new(RouteSeen::default()));
    let out = seen.clone();
    let ns = ns.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(
            ns.api::<HttpRoute>(),
            watcher::Config::default().fields(&format!("metadata.name={ROUTE}")),
        )
        .applied_objects()
        .default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut canary_had_weight = false;
        while let Some(Ok(route)) = stream.next().await {
            let route = serde_json::to_value(route).unwrap_or_default();
            let canary_weight: i64 = route["spec"]["rules"][0]["backendRefs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["name"] == format!("{SERVICE}-canary"))
                .filter_map(|b| b["weight"].as_i64())
                .sum();
            if canary_weight > 0 {
                canary_had_weight = true;
                let mut seen = out.lock().unwrap();
                if seen.weights.last() != Some(&canary_weight) {
                    seen.weights.push(canary_weight);
                }
            } else if canary_had_weight {
                canary_had_weight = false;
                let lws = ns.api::<LeaderWorkerSet>().get(STABLE).await.ok();
                let status = lws.and_then(|l| l.status).unwrap_or_default();
                let canary_groups = the_canary(&ns).await.ok().and_then(|c| c.spec.replicas);
                out.lock().unwrap().back_to_stable.push(format!(
                    "ready={:?} updated={:?} canary={canary_groups:?}",
                    status.ready_replicas, status.updated_replicas
                ));
            }
        }
    });
    (task, seen)
}

/// The fewest groups (of any LWS in the namespace) whole and ready at once while the watch
/// ran, counted from the moment the watch had listed the pods; a group counts when all `size`
/// of its pods are ready and none is being deleted.
fn watch_fewest_serving_groups(
    ns: &TestNs,
    size: usize,
) -> (Arc<Mutex<Option<usize>>>, tokio::task::JoinHandle<()>) {
    let fewest: Arc<Mutex<Option<usize>>> = Arc::default();
    let sink = fewest.clone();
    let api = ns.api::<Pod>();
    let task = tokio::spawn(async move {
        // pod name -> (LWS, group) while the pod is ready and not terminating.
        let mut ready: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut listed = false;
        let mut events = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(Ok(event)) = events.next().await {
            let mut note = |p: &Pod| {
                let name = p.metadata.name.clone().unwrap_or_default();
                let serving = p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .into_iter()
                        .flatten()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                let group = (
                    label(p, "leaderworkerset.sigs.k8s.io/name").map(str::to_string),
                    label(p, GROUP_INDEX).map(str::to_string),
                );
                match (serving, group) {
                    (true, (Some(lws), Some(index))) => {
                        ready.insert(name, (lws, index));
                    }
                    _ => {
                        ready.remove(&name);
                    }
                }
            };
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => note(&p),
                watcher::Event::Delete(p) => {
                    ready.remove(&p.metadata.name.clone().unwrap_or_default());
                }
                watcher::Event::InitDone => listed = true,
                watcher::Event::Init => {
                    ready.clear();
                    listed = false;
                }
            }
            if !listed {
                continue;
            }
            let mut per_group: BTreeMap<&(String, String), usize> = BTreeMap::new();
            for group in ready.values() {
                *per_group.entry(group).or_default() += 1;
            }
            let whole = per_group.values().filter(|n| **n >= size).count();
            let mut fewest = sink.lock().unwrap();
            *fewest = Some(fewest.map_or(whole, |f| f.min(whole)));
        }
    });
    (fewest, task)
}

#[test]
fn rollout_canary_release_end_to_end() -> anyhow::Result<()> {
    on_big_stack(canary_release)
}

async fn canary_release() -> anyhow::Result<()> {
    with_ns("rollout-canary", |ns| {
        Box::pin(async move {
            // Each pod takes a second to become ready (as a server loading its model would), so
            // the stable LWS rolls group by group at the end and the canary's give-back shows.
            let v1 = with_ready_delay(&stable_lws(4, "vllm:1"), "1s");
            release_setup(&ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
            ensure!(
                route_backends(&ns).await? == users_route(),
                "Healthy leaves the route alone"
            );
            ensure!(canaries(&ns).await?.is_empty() && batch_release(&ns).await?.is_none());
            let stable_revision = label(&pods_of(&ns, STABLE).await?[0], REVISION)
                .context("revision")?
                .to_string();
            let mut stable_uids = uids(&ns, STABLE).await?;
            ensure!(stable_uids.len() == 8);
            // Real requests through the proxy for the whole release, when the traffic layer runs.
            let release = match traffic_or_skip("rollout_canary_release_end_to_end (requests)") {
                Some(t) => {
                    let plain = RequestSpec::new(&host(&ns));
                    wait_until_served(&t, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
                    let traffic = ReleaseTraffic::start(
                        &t,
                        plain,
                        None,
                        RATE,
                        is_canary as fn(&Outcome) -> bool,
                    );
                    traffic.assert_step(0, 200).await?;
                    Some(traffic)
                }
                None => None,
            };

            // The release starts with the template change.
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            let r = wait_paused_at(&ns, 1).await?;
            let cs = r
                .status
                .as_ref()
                .and_then(|s| s.canary_status.clone())
                .context("canaryStatus")?;
            ensure!(
                cs.canary_replicas == 1 && cs.canary_ready_replicas == 1,
                "{cs:?}"
            );
            ensure!(phase(&r) == "Progressing");

            // The canary LWS: owned by the BatchRelease, Kruise's label, one group, the patch on
            // the leader template only.
            let br = batch_release(&ns).await?.context("BatchRelease")?;
            let canary = the_canary(&ns).await?;
            let cname = canary.metadata.name.clone().context("name")?;
            ensure!(cname.starts_with(&format!("{STABLE}-canary-")), "{cname}");
            let owner = canary.metadata.owner_references.clone().unwrap_or_default();
            ensure!(
                owner.len() == 1
                    && owner[0].kind == "BatchRelease"
                    && owner[0].uid == br.metadata.uid.clone().unwrap_or_default()
                    && owner[0].controller == Some(true),
                "{owner:?}"
            );
            let bro = br.metadata.owner_references.clone().unwrap_or_default();
            ensure!(bro.len() == 1 && bro[0].kind == "Rollout", "{bro:?}");
            ensure!(canary.spec.replicas == Some(1));
            let tmpl = serde_json::to_value(&canary.spec.leader_worker_template)?;
            ensure!(
                tmpl["leaderTemplate"]["metadata"]["labels"]["release"] == "canary",
                "{tmpl:#}"
            );
            ensure!(
                tmpl["leaderTemplate"]["metadata"]["annotations"]["rollouts.kruise.io/origin"]
                    == "canary"
            );
            ensure!(
                tmpl["workerTemplate"]["metadata"]["labels"]
                    .get("release")
                    .is_none(),
                "{tmpl:#}"
            );
            let cpods = settled_pods(&ns, &cname, 2).await?;
            for p in &cpods {
                ensure!(image(p) == "vllm:2");
                ensure!(
                    label(p, REVISION) != Some(stable_revision.as_str()),
                    "the canary has its own revision"
                );
                let leader = label(p, WORKER_INDEX) == Some("0");
                ensure!(
                    (label(p, "release") == Some("canary")) == leader,
                    "release label on leaders only: {:?}",
                    p.metadata.labels
                );
            }

            // Traffic: 5% to the canary Service, whose endpoints are the ready canary leader; the
            // stable Service is pinned to the stable leaders.
            wait_route(&ns, split_route(5)).await?;
            let stable_leaders = ready_leader_ips(&ns, STABLE).await?;
            ensure!(stable_leaders.len() == 4);
            wait_endpoints(&ns, SERVICE, &stable_leaders).await?;
            wait_endpoints(
                &ns,
                &format!("{SERVICE}-canary"),
                &ready_leader_ips(&ns, &cname).await?,
            )
            .await?;

            if let Some(r) = &release {
                r.assert_step(5, 400).await?;
            }

            // The stable LWS is held: not one pod replaced, every one on the old image.
            ensure!(
                uids(&ns, STABLE).await? == stable_uids,
                "a stable pod was replaced"
            );
            ensure!(
                pods_of(&ns, STABLE)
                    .await?
                    .iter()
                    .all(|p| image(p) == "vllm:1")
            );

            // A stable group whose worker fails comes back, on the stable template.
            ns.api::<Pod>()
                .delete(&format!("{STABLE}-1-1"), &DeleteParams::default())
                .await?;
            let pods = crate::harness::wait_for_all(
                &ns.api::<Pod>(),
                &format!("{}={STABLE}", crate::lws_support::NAME),
                WAIT,
                |pods| {
                    pods.len() == 8
                        && pods.iter().all(|p| {
                            p.metadata.deletion_timestamp.is_none()
                                && crate::lws_support::pod_ready(p)
                        })
                        && pods
                            .iter()
                            .filter(|p| label(p, GROUP_INDEX) == Some("1"))
                            .all(|p| {
                                !stable_uids
                                    .values()
                                    .any(|u| Some(u) == p.metadata.uid.as_ref())
                            })
                },
            )
            .await
            .context("stable group 1 recreated")?;
            for p in &pods {
                ensure!(
                    image(p) == "vllm:1" && label(p, REVISION) == Some(stable_revision.as_str()),
                    "recreated on the stable template: {:?}",
                    p.metadata.name
                );
            }
            // The old worker StatefulSet may make one more worker before the group restart
            // deletes it; judge once the worker belongs to the group's current StatefulSet.
            let now = settled_group(&ns, &format!("{STABLE}-1")).await?;
            let changed: Vec<&String> = now
                .iter()
                .filter(|(n, u)| stable_uids.get(*n) != Some(*u))
                .map(|(n, _)| n)
                .collect();
            ensure!(
                changed == [&format!("{STABLE}-1"), &format!("{STABLE}-1-1")],
                "only group 1 was recreated: {changed:?}"
            );
            stable_uids = now;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                available_with(4, 0),
            )
            .await
            .ok();

            // Approval exactly as kubectl-kruise sends it: step 2, two canary groups, 50%.
            approve(&ns).await?;
            wait_paused_at(&ns, 2).await?;
            let canary = the_canary(&ns).await?;
            ensure!(
                canary.spec.replicas == Some(2),
                "50% of 4 groups: {:?}",
                canary.spec.replicas
            );
            wait_route(&ns, split_route(50)).await?;
            let canary_leaders = ready_leader_ips(&ns, &cname).await?;
            ensure!(canary_leaders.len() == 2);
            wait_endpoints(&ns, &format!("{SERVICE}-canary"), &canary_leaders).await?;
            wait_endpoints(&ns, SERVICE, &ready_leader_ips(&ns, STABLE).await?).await?;
            if let Some(r) = &release {
                r.assert_step(50, 200).await?;
            }
            ensure!(
                uids(&ns, STABLE).await? == stable_uids,
                "a stable pod was replaced before finalisation"
            );

            // The pause ends by itself; step 3 (100%) has no pause: finalisation follows.
            let (guard, transitions) = guard_route_to_stable(&ns);
            let (fewest, serving) = watch_fewest_serving_groups(&ns, 2);
            let done = wait_rollout(&ns, "release finished", finished("True")).await;
            guard.abort();
            serving.abort();
            let done = done?;
            ensure!(
                done.status
                    .as_ref()
                    .and_then(|s| s.canary_status.as_ref())
                    .map(|c| c.common.current_step_index)
                    == Some(3)
            );
            let seen = std::mem::take(&mut *transitions.lock().unwrap());
            // The canary gave its groups back as the stable LWS rolled, down to one (the
            // stable's maxUnavailable), and its share of the route shrank with them.
            ensure!(
                !seen.back_to_stable.is_empty()
                    && seen
                        .back_to_stable
                        .iter()
                        .all(|s| s == "ready=Some(4) updated=Some(4) canary=Some(1)"),
                "traffic went back to stable only once its groups were ready, with the canary \
                 down to one group: {seen:?}"
            );
            let after_full: Vec<i64> = seen
                .weights
                .iter()
                .skip_while(|w| **w < 100)
                .skip(1)
                .copied()
                .collect();
            let mut shares: Vec<i64> = after_full.clone();
            shares.dedup();
            ensure!(
                after_full.iter().all(|w| [75, 50, 25].contains(w))
                    && after_full.windows(2).all(|p| p[1] <= p[0])
                    && shares.len() >= 2,
                "after 100% the canary's share followed its groups (100 × ready canary groups \
                 ÷ 4, never back up, at least two steps seen): {:?}",
                seen.weights
            );
            let fewest = *fewest.lock().unwrap();
            ensure!(
                fewest >= Some(4),
                "never fewer groups serving than the stable LWS has: fewest {fewest:?}"
            );
            // The stable LWS rolled to the new template by its own strategy.
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                available_with(4, 4),
            )
            .await?;
            let pods = settled_pods(&ns, STABLE, 8).await?;
            ensure!(pods.iter().all(|p| image(p) == "vllm:2"));
            nothing_left(&ns).await?;
            let leaders = ready_leader_ips(&ns, STABLE).await?;
            ensure!(leaders.len() == 4);
            wait_endpoints(&ns, SERVICE, &leaders).await?;
            if let Some(r) = release {
                // After the release every request reaches the (rolled) stable LWS, and not one
                // request failed from before the template change to here.
                r.assert_step(0, 200).await?;
                let all = r.finish().await?;
                eprintln!(
                    "rollout_canary_release_end_to_end requests: {}",
                    all.summary()
                );
            }

            // Events name the step transitions.
            let events = event_reasons(&ns).await?;
            for want in ["step(1/3)", "step(2/3)", "step(3/3)"] {
                ensure!(
                    events.iter().any(|(_, m)| m.contains(want)),
                    "an Event for {want}: {events:?}"
                );
            }
            Ok(())
        })
    })
    .await
}

/// Pod name → uid of the stable LWS once its 8 pods are settled and the worker of `group`
/// (its StatefulSet's name) is owned by the StatefulSet that exists now.
async fn settled_group(ns: &TestNs, group: &str) -> anyhow::Result<BTreeMap<String, String>> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let pods = settled_pods(ns, STABLE, 8).await?;
        let sts = ns.api::<StatefulSet>().get_opt(group).await?;
        let owner_ok = sts.as_ref().is_some_and(|sts| {
            sts.metadata.deletion_timestamp.is_none()
                && pods
                    .iter()
                    .filter(|p| p.metadata.name.as_deref() == Some(&format!("{group}-1")))
                    .all(|p| {
                        p.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| Some(&o.uid) == sts.metadata.uid.as_ref())
                    })
        });
        if owner_ok && pods.iter().all(crate::lws_support::pod_ready) {
            return uids(ns, STABLE).await;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "group {group} never settled on its current StatefulSet"
        );
        // settled_pods above waits on a watch; this only bounds the rare second pass.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Requests per second through the proxy during a release.
pub const RATE: u32 = 100;

/// An answer from a canary leader.
pub fn is_canary(o: &Outcome) -> bool {
    o.lws
        .as_deref()
        .is_some_and(|l| l.starts_with(&format!("{STABLE}-canary-")))
}

#[tokio::test]
async fn rollout_canary_nginx_ingress_weight_header_cookie() -> anyhow::Result<()> {
    use k8s_openapi::api::networking::v1::Ingress;
    with_ns("rollout-nginx", |ns| Box::pin(async move {
        let v1 = stable_lws(2, "vllm:1");
        create_available(&ns, &v1).await?;
        create_service(&ns).await?;
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"ingressClassName": "nginx", "rules": [{"host": "models.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": SERVICE, "port": {"number": 80}}}}]}}]}
        }))?;
        ns.api::<Ingress>().create(&Default::default(), &ing).await?;
        let before = ns.api::<Ingress>().get("web").await?;
        let steps = json!([
            {"replicas": 1, "traffic": "5%", "pause": {},
             "matches": [{"headers": [{"type": "Exact", "name": "x-canary", "value": "always"}]},
                         {"headers": [{"type": "Exact", "name": "canary-by-cookie", "value": "canary"}]}]},
            {"replicas": "100%", "traffic": "100%"}
        ]);
        let routing = json!({"service": SERVICE, "gracePeriodSeconds": crate::rollout_support::GRACE_SECONDS, "ingress": {"classType": "nginx", "name": "web"}});
        create_rollout(&ns, &rollout(steps, Some(routing))).await?;
        apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
        wait_paused_at(&ns, 1).await?;
        let canary = ns.api::<Ingress>().get("web-canary").await.context("canary Ingress")?;
        let a = canary.metadata.annotations.clone().unwrap_or_default();
        let nginx = |k: &str| a.get(&format!("nginx.ingress.kubernetes.io/{k}")).cloned().unwrap_or_default();
        ensure!(nginx("canary") == "true" && nginx("canary-weight") == "5", "{a:?}");
        ensure!(nginx("canary-by-header") == "x-canary" && nginx("canary-by-header-value") == "always", "{a:?}");
        ensure!(nginx("canary-by-cookie") == "canary", "{a:?}");
        let backend = serde_json::to_value(&canary.spec)?["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"].clone();
        ensure!(backend == format!("{SERVICE}-canary"), "{backend}");
        wait_endpoints(&ns, &format!("{SERVICE}-canary"), &ready_leader_ips(&ns, &the_canary(&ns).await?.metadata.name.unwrap_or_default()).await?).await?;
        approve(&ns).await?;
        wait_rollout(&ns, "finished", finished("True")).await?;
        wait_for(&ns.api::<Ingress>(), "web-canary", WAIT, |i: Option<&Ingress>| i.is_none()).await?;
        let after = ns.api::<Ingress>().get("web").await?;
        ensure!(after.metadata.resource_version == before.metadata.resource_version, "the user's Ingress is never written");
        nothing_left(&ns).await?;
        Ok(())
    }))
    .await
}

#[tokio::test]
async fn rollout_ab_by_header_only() -> anyhow::Result<()> {
    with_ns("rollout-ab", |ns| Box::pin(async move {
        let v1 = stable_lws(2, "vllm:1");
        let steps = json!([
            {"replicas": 1, "pause": {}, "matches": [{"headers": [{"type": "Exact", "name": "x-user-group", "value": "beta"}]}]},
            {"replicas": "100%", "traffic": "100%"}
        ]);
        release_setup(&ns, &v1, &rollout(steps, Some(gateway_routing()))).await?;
        apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
        wait_paused_at(&ns, 1).await?;
        // The user's rule untouched (no weights); one rule appended for the header.
        wait_route(&ns, vec![vec![(SERVICE.to_string(), Some(1))], vec![(format!("{SERVICE}-canary"), Some(1))]]).await?;
        let route = serde_json::to_value(ns.api::<HttpRoute>().get(ROUTE).await?)?;
        let header = &route["spec"]["rules"][1]["matches"][0]["headers"][0];
        ensure!(header["name"] == "x-user-group" && header["value"] == "beta", "{route:#}");
        approve(&ns).await?;
        wait_rollout(&ns, "finished", finished("True")).await?;
        nothing_left(&ns).await?;
        Ok(())
    }))
    .await
}

#[tokio::test]
async fn rollout_canary_keeps_exclusive_placement() -> anyhow::Result<()> {
    with_ns("rollout-placement", |ns| {
        Box::pin(async move {
            // One stable group per zone; the canary group must be placed the same way.
            let mut v1 = stable_lws(1, "vllm:1");
            v1["metadata"]["annotations"] = json!({"leaderworkerset.sigs.k8s.io/exclusive-topology": "topology.kubernetes.io/zone"});
            let steps = json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]);
            create_available(&ns, &v1).await?;
            create_rollout(&ns, &rollout(steps, None)).await?;
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_paused_at(&ns, 1).await?;
            let canary = the_canary(&ns).await?;
            let cname = canary.metadata.name.clone().context("name")?;
            ensure!(
                canary.metadata.annotations.unwrap_or_default().get("leaderworkerset.sigs.k8s.io/exclusive-topology").map(String::as_str)
                    == Some("topology.kubernetes.io/zone")
            );
            let nodes = ns.api_all::<k8s_openapi::api::core::v1::Node>();
            let mut zones = BTreeMap::new();
            for (lws, count) in [(STABLE, 2), (cname.as_str(), 2)] {
                let mut zs = std::collections::BTreeSet::new();
                for p in settled_pods(&ns, lws, count).await? {
                    let node = p.spec.and_then(|s| s.node_name).context("scheduled")?;
                    let n = nodes.get(&node).await?;
                    zs.insert(n.metadata.labels.unwrap_or_default().get("topology.kubernetes.io/zone").cloned().unwrap_or_default());
                }
                zones.insert(lws.to_string(), zs);
            }
            let (s, c) = (&zones[STABLE], &zones[&cname]);
            ensure!(s.len() == 1 && c.len() == 1 && s != c, "one zone per group, not shared: {zones:?}");
            Ok(())
        })
    })
    .await
}

/// The held stable LWS reports its groups as upstream LWS counts them: while the Rollout holds
/// it on the stable revision none of its groups is "updated" (Kruise's own e2e asserts the
/// workload's UpdatedReplicas stays 0 at every step), yet it stays Available; once released it
/// rolls, and every group counts.
#[tokio::test]
async fn rollout_held_lws_counts_no_group_as_updated() -> anyhow::Result<()> {
    with_ns("rollout-held-count", |ns| {
        Box::pin(async move {
            let seen: Arc<Mutex<Vec<(i32, bool)>>> = Arc::default();
            let sink = seen.clone();
            let api = ns.api::<LeaderWorkerSet>();
            // Every status of the stable LWS written while it is held and current.
            let recorder = tokio::spawn(async move {
                let mut events = watcher::watcher(
                    api,
                    watcher::Config::default().fields(&format!("metadata.name={STABLE}")),
                )
                .default_backoff()
                .applied_objects()
                .boxed();
                while let Some(Ok(lws)) = events.next().await {
                    let held = lws
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("rollouts.kruise.io/stable-revision"));
                    let status = lws.status.clone().unwrap_or_default();
                    if held && status.observed_generation == lws.metadata.generation {
                        let available = status
                            .conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Available" && c.status == "True");
                        sink.lock()
                            .unwrap()
                            .push((status.updated_replicas.unwrap_or(-1), available));
                    }
                }
            });
            let v1 = stable_lws(4, "vllm:1");
            let steps = json!([
                {"replicas": 1, "pause": {}},
                {"replicas": "50%", "pause": {}},
                {"replicas": "100%"}
            ]);
            release_setup(&ns, &v1, &rollout(steps, None)).await?;
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            for index in [1, 2] {
                wait_paused_at(&ns, index).await?;
                let lws = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
                let status = lws.status.unwrap_or_default();
                ensure!(
                    status.observed_generation == lws.metadata.generation
                        && status.updated_replicas == Some(0)
                        && status.ready_replicas == Some(4),
                    "step {index}: {status:?}"
                );
                approve(&ns).await?;
            }
            wait_rollout(&ns, "finished", finished("True")).await?;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                STABLE,
                WAIT,
                available_with(4, 4),
            )
            .await?;
            recorder.abort();
            let seen = seen.lock().unwrap().clone();
            ensure!(!seen.is_empty(), "saw the held LWS");
            ensure!(
                seen.iter().all(|(updated, _)| *updated == 0),
                "a held group counted as updated: {seen:?}"
            );
            ensure!(
                seen.iter().any(|(_, available)| *available),
                "held and Available: {seen:?}"
            );
            Ok(())
        })
    })
    .await
}
