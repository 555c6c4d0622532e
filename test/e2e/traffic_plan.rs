//! The pure traffic plan (`src/traffic`) executed against the real API server: a minimal
//! executor applies its writes exactly as described (JSON patch, server-side apply, delete with
//! a uid precondition), so these tests prove what unit tests cannot: that the objects the
//! server stores (with its defaults) read back as "in place" — no endless re-writes — that the
//! EndpointSlices of the canary Service hold exactly the ready canary leaders, and that a
//! restore gives the user's Service and HTTPRoute back exactly.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context, bail};
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
    networking::v1::Ingress,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use lws_rollout::api::rollout::{GatewayTrafficRouting, TrafficRoutingRef};
use lws_rollout::traffic::{
    intent::{CanaryRoute, TrafficIntent},
    observe::{OwnerInfo, TrafficObserved},
    plan::{TrafficPlan, plan},
    write::{Kind, Owned, Write},
};
use serde_json::{Value, json};

use crate::harness::{TestNs, wait_for_all, with_ns};
use crate::lws_support::{NAME, WORKER_INDEX, apply, available_with, pod_ready};

/// An LWS whose leader and worker pods all carry `app: vllm` (no leader template), so a
/// Service selecting `app: vllm` alone would send requests to workers too.
fn lws(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2,
            "workerTemplate": {"metadata": {"labels": {"app": "vllm"}},
                "spec": {"containers": [{"name": "model", "image": "vllm:1",
                    "ports": [{"name": "http", "containerPort": 8000}]}]}}}}
    })
}

async fn observe(ns: &TestNs) -> anyhow::Result<TrafficObserved> {
    let svc = ns.api::<Service>();
    let routes = ns.api::<HttpRoute>();
    let ingresses = ns.api::<Ingress>();
    Ok(TrafficObserved {
        stable_service: svc.get_opt("svc").await?,
        canary_service: svc.get_opt("svc-canary").await?,
        http_route: routes.get_opt("route").await?,
        ingress: ingresses.get_opt("web").await?,
        canary_ingress: ingresses.get_opt("web-canary").await?,
    })
}

/// Executes a plan's writes in order, as the traffic applier will.
async fn execute(ns: &TestNs, writes: &[Write]) -> anyhow::Result<()> {
    for w in writes {
        match w {
            Write::Patch {
                target,
                patch,
                field_manager,
            } => {
                let pp = PatchParams {
                    field_manager: Some(field_manager.to_string()),
                    ..Default::default()
                };
                let p = Patch::<()>::Json(patch.clone());
                match target.kind {
                    Kind::Service => drop(ns.api::<Service>().patch(&target.name, &pp, &p).await?),
                    Kind::HttpRoute => {
                        drop(ns.api::<HttpRoute>().patch(&target.name, &pp, &p).await?)
                    }
                    Kind::Ingress => bail!("the user's Ingress is never patched"),
                }
            }
            Write::Apply {
                object: Owned::Service(s),
                field_manager,
            } => {
                let name = s.metadata.name.clone().context("named")?;
                let pp = PatchParams::apply(field_manager).force();
                ns.api::<Service>()
                    .patch(&name, &pp, &Patch::Apply(s.as_ref()))
                    .await?;
            }
            Write::Apply {
                object: Owned::Ingress(i),
                field_manager,
            } => {
                let name = i.metadata.name.clone().context("named")?;
                let pp = PatchParams::apply(field_manager).force();
                ns.api::<Ingress>()
                    .patch(&name, &pp, &Patch::Apply(i.as_ref()))
                    .await?;
            }
            Write::Delete { target, uid } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match target.kind {
                    Kind::Service => drop(ns.api::<Service>().delete(&target.name, &dp).await?),
                    Kind::Ingress => drop(ns.api::<Ingress>().delete(&target.name, &dp).await?),
                    Kind::HttpRoute => bail!("the user's HTTPRoute is never deleted"),
                }
            }
        }
    }
    Ok(())
}

/// Plans, executes and re-observes until the plan is in place; fails after `passes`.
async fn converge(
    ns: &TestNs,
    routing: &TrafficRoutingRef,
    intent: &TrafficIntent,
    owner: &OwnerInfo,
    passes: usize,
) -> anyhow::Result<Vec<TrafficPlan>> {
    let mut seen = Vec::new();
    for _ in 0..=passes {
        let p = plan(routing, intent, &observe(ns).await?, owner);
        if p.in_place {
            seen.push(p);
            return Ok(seen);
        }
        anyhow::ensure!(p.problems.is_empty(), "problems: {:?}", p.problems);
        execute(ns, &p.writes).await?;
        seen.push(p);
    }
    bail!(
        "not in place after {passes} passes; last plan: {:#?}",
        seen.last()
    )
}

/// The ready endpoint addresses of a Service's EndpointSlices equal `want` (watch-based).
async fn wait_for_endpoints(
    ns: &TestNs,
    service: &str,
    want: &BTreeSet<String>,
) -> anyhow::Result<()> {
    wait_for_all(
        &ns.api::<EndpointSlice>(),
        &format!("kubernetes.io/service-name={service}"),
        Duration::from_secs(60),
        |slices| {
            let ready: BTreeSet<String> = slices
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| e.addresses.iter().cloned())
                .collect();
            &ready == want
        },
    )
    .await
    .with_context(|| format!("endpoints of {service} = {want:?}"))?;
    Ok(())
}

async fn leader_ips(ns: &TestNs, lws: &str) -> anyhow::Result<BTreeSet<String>> {
    let pods = ns
        .api::<Pod>()
        .list(&kube::api::ListParams::default().labels(&format!("{NAME}={lws},{WORKER_INDEX}=0")))
        .await?;
    let ips: BTreeSet<String> = pods
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    anyhow::ensure!(!ips.is_empty(), "{lws} has no ready leader with an IP");
    Ok(ips)
}

/// What "the user's object is unchanged" means: everything but server bookkeeping.
fn users_part(v: Value) -> Value {
    json!({"labels": v["metadata"]["labels"], "annotations": v["metadata"]["annotations"], "spec": v["spec"]})
}

#[tokio::test]
async fn traffic_plan_release_and_restore_on_the_real_api_server() -> anyhow::Result<()> {
    with_ns("traffic-plan", |ns| async move {
        for (name, replicas) in [("vllm", 2), ("vllm-canary", 1)] {
            apply(&ns, &lws(name, replicas)).await?;
        }
        for (name, replicas) in [("vllm", 2), ("vllm-canary", 1)] {
            crate::harness::wait_for(&ns.api(), name, Duration::from_secs(120), available_with(replicas, replicas)).await?;
        }
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "svc", "labels": {"app": "vllm"}},
            "spec": {"selector": {"app": "vllm"}, "ports": [{"name": "http", "port": 80, "targetPort": 8000}]}
        }))?;
        ns.api::<Service>().create(&PostParams::default(), &svc).await?;
        let route: HttpRoute = serde_json::from_value(json!({
            "metadata": {"name": "route"},
            "spec": {"parentRefs": [{"name": "gw"}],
                     "rules": [{"backendRefs": [{"name": "svc", "port": 80}]},
                               {"matches": [{"path": {"type": "PathPrefix", "value": "/docs"}}],
                                "backendRefs": [{"name": "docs", "port": 80}]}]}
        }))?;
        ns.api::<HttpRoute>().create(&PostParams::default(), &route).await?;
        let before = observe(&ns).await?;
        // The Rollout that owns the canary objects: any object with a uid does for the
        // garbage collector's purposes here; the test deletes the canary itself.
        let owner = OwnerInfo {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "svc".into(),
            uid: before.stable_service.as_ref().and_then(|s| s.metadata.uid.clone()).context("uid")?,
        };
        let routing = TrafficRoutingRef {
            service: "svc".into(),
            gateway: Some(GatewayTrafficRouting { http_route_name: Some("route".into()) }),
            ..Default::default()
        };
        let stable_leaders = leader_ips(&ns, "vllm").await?;
        let canary_leaders = leader_ips(&ns, "vllm-canary").await?;
        anyhow::ensure!(stable_leaders.len() == 2 && canary_leaders.len() == 1);

        for route in [
            CanaryRoute { weight: Some(5), ..CanaryRoute::none() },
            CanaryRoute {
                weight: None,
                matches: vec![serde_json::from_value(json!({"headers": [{"name": "x-canary", "value": "yes"}]}))?],
                request_header_modifier: None,
            },
            CanaryRoute { weight: Some(100), ..CanaryRoute::none() },
        ] {
            let intent = TrafficIntent::Release {
                stable_lws: "vllm".into(),
                canary_lws: "vllm-canary".into(),
                route,
            };
            // Pin + canary Service, then the route, then in place: at most 3 passes, so
            // what the server stores (defaults and all) reads back as in place.
            let plans = converge(&ns, &routing, &intent, &owner, 3).await?;
            anyhow::ensure!(plans.len() <= 3, "{} passes", plans.len());
            wait_for_endpoints(&ns, "svc", &stable_leaders).await?;
            wait_for_endpoints(&ns, "svc-canary", &canary_leaders).await?;
        }
        let stored = serde_json::to_value(observe(&ns).await?.http_route)?;
        let refs = &stored["spec"]["rules"][0]["backendRefs"];
        anyhow::ensure!(refs[0]["weight"] == 0 && refs[1]["name"] == "svc-canary" && refs[1]["weight"] == 100, "{refs}");

        converge(&ns, &routing, &TrafficIntent::Restored, &owner, 3).await?;
        let after = observe(&ns).await?;
        anyhow::ensure!(after.canary_service.is_none(), "canary Service deleted");
        for (was, is) in [
            (serde_json::to_value(&before.stable_service)?, serde_json::to_value(&after.stable_service)?),
            (serde_json::to_value(&before.http_route)?, serde_json::to_value(&after.http_route)?),
        ] {
            anyhow::ensure!(users_part(was.clone()) == users_part(is.clone()), "changed:\n{was:#}\n{is:#}");
        }
        // Back to the user's selector: leaders and workers of both LWS.
        let all: BTreeSet<String> = ns
            .api::<Pod>()
            .list(&kube::api::ListParams::default().labels("app=vllm"))
            .await?
            .items
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        anyhow::ensure!(all.len() == 6, "six pods: {all:?}");
        wait_for_endpoints(&ns, "svc", &all).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn traffic_plan_nginx_canary_ingress_on_the_real_api_server() -> anyhow::Result<()> {
    with_ns("traffic-plan-ing", |ns| async move {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "svc"},
            "spec": {"selector": {"app": "vllm"}, "ports": [{"name": "http", "port": 80, "targetPort": 8000}]}
        }))?;
        ns.api::<Service>().create(&PostParams::default(), &svc).await?;
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "web", "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "8m"}},
            "spec": {"ingressClassName": "nginx", "rules": [{"host": "models.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "svc", "port": {"number": 80}}}},
                {"path": "/docs", "pathType": "Prefix", "backend": {"service": {"name": "docs", "port": {"number": 80}}}}
            ]}}]}
        }))?;
        ns.api::<Ingress>().create(&PostParams::default(), &ing).await?;
        let before = observe(&ns).await?;
        let owner = OwnerInfo {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "svc".into(),
            uid: before.stable_service.as_ref().and_then(|s| s.metadata.uid.clone()).context("uid")?,
        };
        let routing = TrafficRoutingRef {
            service: "svc".into(),
            ingress: Some(lws_rollout::api::rollout::IngressTrafficRouting { class_type: None, name: "web".into() }),
            ..Default::default()
        };
        let header = CanaryRoute {
            weight: Some(10),
            matches: vec![serde_json::from_value(json!({"headers": [{"name": "x-canary", "value": "yes"}]}))?],
            request_header_modifier: None,
        };
        for (route, want) in [
            (CanaryRoute { weight: Some(5), ..CanaryRoute::none() }, json!({"canary-weight": "5"})),
            (header, json!({"canary-weight": "10", "canary-by-header": "x-canary", "canary-by-header-value": "yes"})),
            (CanaryRoute::none(), json!({"canary-weight": "0"})),
        ] {
            let intent = TrafficIntent::Release { stable_lws: "vllm".into(), canary_lws: "vllm-canary".into(), route };
            let plans = converge(&ns, &routing, &intent, &owner, 3).await?;
            anyhow::ensure!(plans.len() <= 3, "{} passes", plans.len());
            let canary = observe(&ns).await?.canary_ingress.context("canary Ingress")?;
            let canary_annotations: serde_json::Map<String, Value> = canary
                .metadata
                .annotations
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("nginx.ingress.kubernetes.io/")?.to_string(), json!(v))))
                .filter(|(k, _)| k.starts_with("canary-"))
                .collect();
            anyhow::ensure!(Value::Object(canary_annotations.clone()) == want, "{canary_annotations:?} != {want}");
            let paths = serde_json::to_value(&canary.spec)?["rules"][0]["http"]["paths"].clone();
            anyhow::ensure!(paths.as_array().map(Vec::len) == Some(1) && paths[0]["backend"]["service"]["name"] == "svc-canary", "{paths}");
        }
        converge(&ns, &routing, &TrafficIntent::Restored, &owner, 3).await?;
        let after = observe(&ns).await?;
        anyhow::ensure!(after.canary_ingress.is_none() && after.canary_service.is_none());
        anyhow::ensure!(after.ingress == before.ingress, "the user's Ingress is never written");
        anyhow::ensure!(
            users_part(serde_json::to_value(&before.stable_service)?) == users_part(serde_json::to_value(&after.stable_service)?)
        );
        Ok(())
    })
    .await
}
