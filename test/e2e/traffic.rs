//! Real requests through the local cluster's proxy (Traefik, Gateway API and nginx-style
//! canary Ingresses) to pods that answer (test/podagent): what a release's users would see.
//! Skipped, with one SKIPPED line each, when up.sh could not start the traffic layer.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::harness::{TestNs, wait_for, with_ns};
use crate::lws_support::{available_with, create_available, pods_of};
use crate::traffic_driver::{
    Driver, Outcome, ReleaseTraffic, RequestSpec, Traffic, run, traffic_or_skip, wait_until_served,
};

const PORT: i32 = 8080;

/// An LWS whose pods (leader and workers) serve HTTP on 8080.
fn serving_lws(name: &str, replicas: i32, size: i32) -> serde_json::Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": "model:v1",
                "ports": [{"name": "http", "containerPort": PORT}]}]}}}}
    })
}

/// A Service of the leaders of `lws`, or of one group's leader.
async fn leader_service(
    ns: &TestNs,
    name: &str,
    lws: &str,
    group: Option<i32>,
) -> anyhow::Result<()> {
    let mut selector = json!({"leaderworkerset.sigs.k8s.io/name": lws, "leaderworkerset.sigs.k8s.io/worker-index": "0"});
    if let Some(g) = group {
        selector["leaderworkerset.sigs.k8s.io/group-index"] = json!(g.to_string());
    }
    let svc = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": 80, "targetPort": PORT}]}
    });
    ns.api::<Service>()
        .patch(
            name,
            &PatchParams::apply("e2e-traffic"),
            &Patch::Apply(&svc),
        )
        .await?;
    Ok(())
}

async fn apply_route(ns: &TestNs, route: serde_json::Value) -> anyhow::Result<()> {
    let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "httproutes"),
    );
    let name = route["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply("e2e-traffic"),
        &Patch::Apply(&route),
    )
    .await?;
    Ok(())
}

/// An HTTPRoute on the cluster's Gateway for `host` with the given rules.
fn http_route(t: &Traffic, name: &str, host: &str, rules: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": t.gateway_name, "namespace": t.gateway_namespace}],
            "hostnames": [host], "rules": rules}
    })
}

fn backend(svc: &str, weight: i32) -> serde_json::Value {
    json!({"name": svc, "port": 80, "weight": weight})
}

fn host(ns: &TestNs) -> String {
    format!("{}.lws.test", ns.name)
}

fn group(o: &Outcome) -> Option<String> {
    o.group.clone()
}

/// Two groups of one LWS, each behind its own Service (`g0`, `g1`).
async fn two_group_services(ns: &TestNs) -> anyhow::Result<()> {
    create_available(ns, &serving_lws("model", 2, 2)).await?;
    leader_service(ns, "g0", "model", Some(0)).await?;
    leader_service(ns, "g1", "model", Some(1)).await?;
    Ok(())
}

#[tokio::test]
async fn httproute_weights_split_80_20_over_1000_requests() -> anyhow::Result<()> {
    let Some(t) = traffic_or_skip("httproute_weights_split_80_20_over_1000_requests") else {
        return Ok(());
    };
    with_ns("traffic-weights", |ns| async move {
        two_group_services(&ns).await?;
        let h = host(&ns);
        apply_route(
            &ns,
            http_route(
                &t,
                "split",
                &h,
                json!([{"backendRefs": [backend("g0", 80), backend("g1", 20)]}]),
            ),
        )
        .await?;
        let spec = RequestSpec::new(&h);
        wait_until_served(&t, &spec, group, &["0", "1"], Duration::from_secs(60)).await?;
        let report = run(&t, spec, 1000, 250).await?;
        eprintln!("80/20: {}", report.summary());
        report.assert_no_failures("80/20 split")?;
        report.assert_share(
            "group 1 (weight 20)",
            |o| o.group.as_deref() == Some("1"),
            0.20,
            1000,
        )?;
        // Only the leaders answer: the route's Services select worker-index 0.
        report.assert_all("leaders only", |o| {
            o.pod
                .as_deref()
                .is_some_and(|p| p == "model-0" || p == "model-1")
        })?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn httproute_header_match_sends_every_matching_request_to_one_side() -> anyhow::Result<()> {
    let Some(t) =
        traffic_or_skip("httproute_header_match_sends_every_matching_request_to_one_side")
    else {
        return Ok(());
    };
    with_ns("traffic-header", |ns| async move {
        two_group_services(&ns).await?;
        let h = host(&ns);
        let rules = json!([
            {"matches": [{"headers": [{"name": "x-canary", "value": "true"}]}], "backendRefs": [backend("g1", 1)]},
            {"backendRefs": [backend("g0", 1)]}
        ]);
        apply_route(&ns, http_route(&t, "by-header", &h, rules)).await?;
        let canary = RequestSpec::new(&h).header("x-canary", "true");
        let plain = RequestSpec::new(&h);
        wait_until_served(&t, &canary, group, &["1"], Duration::from_secs(60)).await?;
        wait_until_served(&t, &plain, group, &["0"], Duration::from_secs(60)).await?;
        let with = run(&t, canary, 300, 250).await?;
        with.assert_no_failures("header-matched")?;
        with.assert_all("header-matched requests reach group 1 only", |o| o.group.as_deref() == Some("1"))?;
        let without = run(&t, plain, 300, 250).await?;
        without.assert_no_failures("unmatched")?;
        without.assert_all("unmatched requests reach group 0 only", |o| o.group.as_deref() == Some("0"))?;
        Ok(())
    })
    .await
}

fn ingress(
    t: &Traffic,
    name: &str,
    host: &str,
    svc: &str,
    annotations: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"ingressClassName": t.ingress_class, "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": svc, "port": {"number": 80}}}}]}}]}
    })
}

async fn apply_ingress(ns: &TestNs, obj: serde_json::Value) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // Force: the test changes the canary's annotations between phases.
    ns.api::<Ingress>()
        .patch(
            &name,
            &PatchParams::apply("e2e-traffic").force(),
            &Patch::Apply(&obj),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn nginx_canary_ingress_by_weight_header_and_cookie() -> anyhow::Result<()> {
    let Some(t) = traffic_or_skip("nginx_canary_ingress_by_weight_header_and_cookie") else {
        return Ok(());
    };
    with_ns("traffic-nginx", |ns| async move {
        two_group_services(&ns).await?;
        let h = host(&ns);
        apply_ingress(&ns, ingress(&t, "stable", &h, "g0", json!({}))).await?;
        let canary = |annotations: serde_json::Value| ingress(&t, "canary", &h, "g1", annotations);
        apply_ingress(
            &ns,
            canary(json!({"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "20"})),
        )
        .await?;
        let spec = RequestSpec::new(&h);
        wait_until_served(&t, &spec, group, &["0", "1"], Duration::from_secs(60)).await?;
        let report = run(&t, spec.clone(), 1000, 250).await?;
        eprintln!("nginx weight 20: {}", report.summary());
        report.assert_no_failures("nginx canary-weight 20")?;
        report.assert_share("canary (weight 20)", |o| o.group.as_deref() == Some("1"), 0.20, 1000)?;

        // By header: weight 0, so only requests carrying the header reach the canary.
        apply_ingress(
            &ns,
            canary(json!({"nginx.ingress.kubernetes.io/canary": "true",
                "nginx.ingress.kubernetes.io/canary-weight": "0",
                "nginx.ingress.kubernetes.io/canary-by-header": "x-canary",
                "nginx.ingress.kubernetes.io/canary-by-header-value": "yes"})),
        )
        .await?;
        let with = RequestSpec::new(&h).header("x-canary", "yes");
        // The switch is complete once plain requests no longer reach the canary.
        wait_until_served(&t, &with, group, &["1"], Duration::from_secs(60)).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let probe = run(&t, spec.clone(), 20, 200).await?;
            if probe.failures().is_empty() && probe.share(|o| o.group.as_deref() == Some("1")) == 0.0 {
                break;
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "canary-by-header not applied: {}", probe.summary());
        }
        let r = run(&t, with, 300, 250).await?;
        r.assert_no_failures("canary-by-header matched")?;
        r.assert_all("header-matched requests reach the canary only", |o| o.group.as_deref() == Some("1"))?;
        let r = run(&t, spec.clone(), 300, 250).await?;
        r.assert_no_failures("canary-by-header unmatched")?;
        r.assert_all("other requests reach the stable side only", |o| o.group.as_deref() == Some("0"))?;

        // By cookie: `always` sends the request to the canary, `never` keeps it away.
        apply_ingress(
            &ns,
            canary(json!({"nginx.ingress.kubernetes.io/canary": "true",
                "nginx.ingress.kubernetes.io/canary-weight": "0",
                "nginx.ingress.kubernetes.io/canary-by-cookie": "lws_canary"})),
        )
        .await?;
        let always = RequestSpec::new(&h).cookie("lws_canary", "always");
        wait_until_served(&t, &always, group, &["1"], Duration::from_secs(60)).await?;
        let r = run(&t, always, 200, 250).await?;
        r.assert_no_failures("canary-by-cookie always")?;
        r.assert_all("cookie=always reaches the canary only", |o| o.group.as_deref() == Some("1"))?;
        let r = run(&t, RequestSpec::new(&h).cookie("lws_canary", "never"), 200, 250).await?;
        r.assert_no_failures("canary-by-cookie never")?;
        r.assert_all("cookie=never stays on the stable side", |o| o.group.as_deref() == Some("0"))?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_pod_marked_failing_shows_up_as_failures() -> anyhow::Result<()> {
    let Some(t) = traffic_or_skip("a_pod_marked_failing_shows_up_as_failures") else {
        return Ok(());
    };
    with_ns("traffic-failing", |ns| async move {
        two_group_services(&ns).await?;
        let h = host(&ns);
        apply_route(
            &ns,
            http_route(
                &t,
                "half",
                &h,
                json!([{"backendRefs": [backend("g0", 50), backend("g1", 50)]}]),
            ),
        )
        .await?;
        let spec = RequestSpec::new(&h);
        wait_until_served(&t, &spec, group, &["0", "1"], Duration::from_secs(60)).await?;
        // The test-only annotation: the agent answers 500 for group 1's leader from now on.
        let patch =
            json!({"metadata": {"annotations": {"traffic.lws-rollout.test/status": "500"}}});
        ns.api::<Pod>()
            .patch("model-1", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // The agent sees the annotation through its pod watch: wait for the first 500.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while crate::traffic_driver::send(&t, &spec).await.status != Some(500) {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "model-1 never answered 500"
            );
        }
        let report = run(&t, spec, 400, 250).await?;
        eprintln!("failing pod: {}", report.summary());
        let failures = report.failures();
        anyhow::ensure!(
            failures
                .iter()
                .all(|f| f.status == Some(500) && f.pod.as_deref() == Some("model-1")),
            "every failure is model-1's 500: {}",
            report.summary()
        );
        // 50/50: about 200 of 400 fail (4 standard deviations: ±40).
        anyhow::ensure!(
            (160..=240).contains(&failures.len()),
            "about half fail: {}",
            report.summary()
        );
        report.assert_all("successes come from group 0", |o| {
            o.group.as_deref() == Some("0")
        })?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scaling_an_lws_up_and_down_under_load_loses_no_request() -> anyhow::Result<()> {
    let Some(t) = traffic_or_skip("scaling_an_lws_up_and_down_under_load_loses_no_request") else {
        return Ok(());
    };
    with_ns("traffic-scale", |ns| async move {
        create_available(&ns, &serving_lws("model", 2, 2)).await?;
        leader_service(&ns, "leaders", "model", None).await?;
        let h = host(&ns);
        apply_route(
            &ns,
            http_route(
                &t,
                "all",
                &h,
                json!([{"backendRefs": [backend("leaders", 1)]}]),
            ),
        )
        .await?;
        let spec = RequestSpec::new(&h);
        wait_until_served(&t, &spec, group, &["0", "1"], Duration::from_secs(60)).await?;

        let driver = Driver::start(&t, vec![spec], 100);
        let lws_api = ns.api::<LeaderWorkerSet>();
        let scale = |n: i32| json!({"spec": {"replicas": n}});
        lws_api
            .patch("model", &PatchParams::default(), &Patch::Merge(&scale(4)))
            .await?;
        wait_for(
            &lws_api,
            "model",
            Duration::from_secs(120),
            available_with(4, 4),
        )
        .await?;
        // The new groups are Ready: they must get requests (the proxy picked them up).
        let up = driver.elapsed();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while driver.report().since(up).counts_by(group).len() < 4 {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "new groups get no traffic: {}",
                driver.report().summary()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        lws_api
            .patch("model", &PatchParams::default(), &Patch::Merge(&scale(1)))
            .await?;
        wait_for(
            &lws_api,
            "model",
            Duration::from_secs(120),
            available_with(1, 1),
        )
        .await?;
        let gone = tokio::time::Instant::now();
        // Scaled down: the removed groups' pods are gone, and soon no request reaches them.
        let deadline = gone + Duration::from_secs(30);
        loop {
            let pods = pods_of(&ns, "model").await?;
            let after = driver.elapsed();
            tokio::time::sleep(Duration::from_secs(1)).await;
            if pods.len() == 2
                && driver
                    .report()
                    .since(after)
                    .counts_by(group)
                    .keys()
                    .all(|g| g == "0")
            {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "removed groups still answer: {}",
                driver.report().summary()
            );
        }
        let elapsed = driver.elapsed();
        let report = driver.stop().await;
        eprintln!("scale 2 -> 4 -> 1 in {elapsed:?}: {}", report.summary());
        report.assert_no_failures("scale 2 -> 4 -> 1 under load")?;
        // The load was real throughout: at least 80% of 100 requests a second were sent over
        // the whole change (a fixed count would judge how fast the scaling went, not the load).
        let expected = 100.0 * elapsed.as_secs_f64();
        anyhow::ensure!(
            report.total() as f64 >= 0.8 * expected && report.total() >= 100,
            "too few requests for {elapsed:?} at 100/s: {}",
            report.summary()
        );
        Ok(())
    })
    .await
}

/// A canary release done by hand (the Rollout controller will do these steps): the helper the
/// release e2e tests call, held to the same promises on a real route.
#[tokio::test]
async fn a_manual_canary_release_keeps_every_traffic_promise() -> anyhow::Result<()> {
    let Some(t) = traffic_or_skip("a_manual_canary_release_keeps_every_traffic_promise") else {
        return Ok(());
    };
    with_ns("traffic-release", |ns| async move {
        create_available(&ns, &serving_lws("stable", 2, 2)).await?;
        let mut canary = serving_lws("canary", 1, 2);
        canary["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = json!("model:v2");
        create_available(&ns, &canary).await?;
        // Not "stable"/"canary": those names belong to the LWSs' headless Services.
        leader_service(&ns, "stable-api", "stable", None).await?;
        leader_service(&ns, "canary-api", "canary", None).await?;
        let h = host(&ns);
        let route = |weight: i32, by_header: bool| {
            let mut rules = vec![];
            if by_header {
                rules.push(json!({"matches": [{"headers": [{"name": "x-canary", "value": "true"}]}],
                    "backendRefs": [backend("canary-api", 1)]}));
            }
            rules.push(json!({"backendRefs": [backend("stable-api", 100 - weight), backend("canary-api", weight)]}));
            http_route(&t, "model", &h, json!(rules))
        };
        apply_route(&ns, route(0, true)).await?;
        let plain = RequestSpec::new(&h);
        let matched = RequestSpec::new(&h).header("x-canary", "true");
        wait_until_served(&t, &plain, |o| o.lws.clone(), &["stable"], Duration::from_secs(60)).await?;
        wait_until_served(&t, &matched, |o| o.lws.clone(), &["canary"], Duration::from_secs(60)).await?;

        let release = ReleaseTraffic::start(&t, plain, Some(matched), 200, |o: &Outcome| o.lws.as_deref() == Some("canary"));
        release.assert_step(0, 200).await?;
        for weight in [20, 50] {
            apply_route(&ns, route(weight, true)).await?;
            release.assert_step(weight as u32, 400).await?;
        }
        // Rollback: all traffic back to stable, the header rule removed.
        apply_route(&ns, route(0, false)).await?;
        release.assert_rolled_back(200).await?;
        let report = release.finish().await?;
        eprintln!("manual release: {}", report.summary());
        Ok(())
    })
    .await
}
