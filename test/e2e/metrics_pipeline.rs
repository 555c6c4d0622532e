//! The test cluster's metrics pipeline (docs/local-cluster.md, "Metrics"), end to end: requests
//! sent through the real proxy show up in the real Prometheus exactly as many times as they were
//! answered — in Traefik's per-Service counters by status code, for a Gateway API route and an
//! nginx Ingress, and in the pods' vLLM counters selected by namespace and LWS labels — and a bad
//! model set only in the LWS template's env (`AGENT_ERROR_RATIO`) shows up as 500s in the proxy's
//! counter. What release analysis (docs/analysis.md) measures is only as true as this.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{TestNs, with_ns};
use crate::lws_support::{apply, create_available};
use crate::rollout_analysis::prometheus_or_skip;
use crate::traffic_driver::{Outcome, RequestSpec, Traffic, send, traffic_or_skip};

/// The Service's port and the pods' containerPort.
const PORT: i32 = 8080;
const SERVICE: &str = "svc";
const LWS: &str = "model";
/// Generous bound for the proxy to pick up a route and for Prometheus to scrape (every second).
const WAIT: Duration = Duration::from_secs(90);

/// One group of a leader and a worker; the leader answers on [`PORT`]. `env` goes into the
/// first container, where the pod agent reads its faults.
fn model(env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": LWS},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": "model:v1",
                "env": env, "ports": [{"name": "http", "containerPort": PORT}]}]}}}}
    })
}

/// `svc`: the leaders of [`LWS`], port 8080; an HTTPRoute (`<ns>.lws.test`) and an nginx
/// Ingress (`ingress.<ns>.lws.test`) to it.
async fn serve(ns: &TestNs, t: &Traffic) -> anyhow::Result<(String, String)> {
    let pp = PatchParams::apply("e2e-metrics");
    let svc = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE},
        "spec": {"selector": {"leaderworkerset.sigs.k8s.io/name": LWS, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                 "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]}
    });
    ns.api::<Service>()
        .patch(SERVICE, &pp, &Patch::Apply(&svc))
        .await?;
    let route_host = format!("{}.lws.test", ns.name);
    let ingress_host = format!("ingress.{}.lws.test", ns.name);
    let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
    let routes: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "httproutes"),
    );
    let route = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "route"},
        "spec": {"parentRefs": [{"name": t.gateway_name, "namespace": t.gateway_namespace}],
                 "hostnames": [route_host], "rules": [{"backendRefs": [{"name": SERVICE, "port": PORT}]}]}
    });
    routes.patch("route", &pp, &Patch::Apply(&route)).await?;
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "ing"},
        "spec": {"ingressClassName": t.ingress_class, "rules": [{"host": ingress_host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": SERVICE, "port": {"number": PORT}}}}]}}]}
    });
    ns.api::<Ingress>()
        .patch("ing", &pp, &Patch::Apply(&ingress))
        .await?;
    Ok((route_host, ingress_host))
}

/// Every request the test sent: those a pod answered by (host, HTTP status); those the proxy
/// answered itself (a route with no ready endpoint while the only group is replaced), which
/// Traefik counts on no Service; failures without a status by their error.
#[derive(Default, Debug)]
struct Tally {
    answered: BTreeMap<(String, u16), u64>,
    by_proxy: Vec<String>,
    unanswered: Vec<String>,
}

impl Tally {
    fn record(&mut self, host: &str, o: &Outcome) {
        match o.status {
            Some(s) if o.pod.is_some() => {
                *self.answered.entry((host.to_string(), s)).or_default() += 1
            }
            Some(s) => self.by_proxy.push(format!("{host}: {s}")),
            None => self.unanswered.push(format!("{host}: {o:?}")),
        }
    }

    fn count(&self, host: &str, status: u16) -> u64 {
        self.answered
            .get(&(host.to_string(), status))
            .copied()
            .unwrap_or(0)
    }

    /// Sends `n` requests to `host`, one after the other (so none is in flight when the test
    /// reads the counters), and returns them.
    async fn send(&mut self, t: &Traffic, host: &str, n: usize) -> Vec<Outcome> {
        let spec = RequestSpec::new(host);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let o = send(t, &spec).await;
            self.record(host, &o);
            out.push(o);
        }
        out
    }

    /// Sends requests to `host` until one is answered 200 (the proxy has the route and the
    /// endpoints), counting every one sent.
    async fn until_served(&mut self, t: &Traffic, host: &str) -> anyhow::Result<Outcome> {
        let deadline = Instant::now() + WAIT;
        loop {
            let o = self.send(t, host, 1).await.remove(0);
            if o.status == Some(200) {
                return Ok(o);
            }
            ensure!(
                Instant::now() < deadline,
                "{host} not served after {WAIT:?}: last {o:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One instant query over Prometheus's HTTP API: the samples, each its labels and value.
async fn query(prometheus: &str, q: &str) -> anyhow::Result<Vec<(BTreeMap<String, String>, f64)>> {
    let addr = prometheus
        .strip_prefix("http://")
        .context("the Prometheus URL is http://<ip>:<port>")?;
    let encoded: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", q)
        .finish();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!(
            "GET /api/v1/query?{encoded} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no complete answer from Prometheus"))?;
    let head = String::from_utf8_lossy(&buf[..split]);
    ensure!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "chunked answer from Prometheus: {head}"
    );
    let doc: Value = serde_json::from_slice(&buf[split + 4..])
        .with_context(|| format!("Prometheus's answer to {q}: {head}"))?;
    ensure!(doc["status"] == "success", "query {q} refused: {doc}");
    let mut out = Vec::new();
    for s in doc["data"]["result"].as_array().into_iter().flatten() {
        let labels = s["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let value = s["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("sample of {q}: {s}"))?;
        out.push((labels, value));
    }
    Ok(out)
}

/// The sum of a query's samples (0 with none).
async fn total(prometheus: &str, q: &str) -> anyhow::Result<f64> {
    Ok(query(prometheus, q).await?.iter().map(|(_, v)| v).sum())
}

/// Waits until every query sums to its expected value (Prometheus scrapes every second). More
/// than expected fails at once: something counted requests the test never sent.
async fn wait_counts(prometheus: &str, want: &[(String, u64)]) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut got = Vec::new();
        for (q, n) in want {
            got.push((q.as_str(), total(prometheus, q).await?, *n));
        }
        if let Some((q, v, n)) = got.iter().find(|(_, v, n)| *v > *n as f64) {
            bail!("{q} = {v}, more than the {n} requests sent");
        }
        if got.iter().all(|(_, v, n)| *v == *n as f64) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("after {WAIT:?}, (query, value, requests sent): {got:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `service` label values Traefik gave this namespace's Service, by provider (the part
/// after `@`).
async fn traefik_services(
    prometheus: &str,
    ns: &TestNs,
) -> anyhow::Result<BTreeMap<String, String>> {
    let samples = query(
        prometheus,
        &format!(
            "count by (service) (traefik_service_requests_total{{service=~\".*{}.*\"}})",
            ns.name
        ),
    )
    .await?;
    Ok(samples
        .into_iter()
        .filter_map(|(l, _)| {
            let s = l.get("service")?.clone();
            Some((s.rsplit('@').next()?.to_string(), s))
        })
        .collect())
}

#[tokio::test]
async fn requests_through_the_proxy_are_counted_exactly_in_prometheus() -> anyhow::Result<()> {
    const TEST: &str = "requests_through_the_proxy_are_counted_exactly_in_prometheus";
    let Some(prom) = prometheus_or_skip(TEST) else {
        return Ok(());
    };
    let Some(t) = traffic_or_skip(TEST) else {
        return Ok(());
    };
    with_ns("metrics-pipeline", |ns| async move {
        create_available(&ns, &model(&[])).await?;
        let (route, ingress) = serve(&ns, &t).await?;
        let mut tally = Tally::default();
        let first = tally.until_served(&t, &route).await?;
        tally.until_served(&t, &ingress).await?;
        let old = first.revision.clone().context("the answer names its revision")?;
        let sent = tally.send(&t, &route, 50).await;
        ensure!(
            sent.iter().all(|o| o.status == Some(200)),
            "a healthy model answers every request: {:?}",
            sent.iter().find(|o| o.status != Some(200))
        );
        tally.send(&t, &ingress, 20).await;

        // Traefik's name for the Service, one per provider (the formats docs/local-cluster.md
        // gives), read once the counters have scraped.
        let n = &ns.name;
        let by_route = format!(
            "traefik_service_requests_total{{service=~\"httproute-{n}-route-.*-svc-{n}-{SERVICE}-[0-9]+@kubernetesgateway\",code=\"200\"}}"
        );
        let by_ingress = format!(
            "traefik_service_requests_total{{service=\"{n}-ing-{SERVICE}-{PORT}@kubernetesingressnginx\",code=\"200\"}}"
        );
        let success = format!(
            "vllm:request_success_total{{namespace=\"{n}\",leaderworkerset_sigs_k8s_io_name=\"{LWS}\",model_name=\"model:v1\"}}"
        );
        let of_revision = |hash: &str| {
            format!(
                "vllm:request_success_total{{namespace=\"{n}\",leaderworkerset_sigs_k8s_io_template_revision_hash=\"{hash}\"}}"
            )
        };
        let ok_route = tally.count(&route, 200);
        let ok_ingress = tally.count(&ingress, 200);
        let counted = wait_counts(
            &prom,
            &[
                (by_route.clone(), ok_route),
                (by_ingress, ok_ingress),
                (success, ok_route + ok_ingress),
                (of_revision(&old), ok_route + ok_ingress),
            ],
        )
        .await;
        let names = traefik_services(&prom, &ns).await?;
        eprintln!("Traefik's service labels for {n}/{SERVICE}:{PORT}: {names:?}");
        counted?;

        // A bad model, as a user would release one: only the template's env changes.
        apply(&ns, &model(&[("AGENT_ERROR_RATIO", "0.5")])).await?;
        let deadline = Instant::now() + WAIT;
        let mut new_answers: Vec<Outcome> = Vec::new();
        while new_answers.len() < 40 {
            ensure!(
                Instant::now() < deadline,
                "the new revision answered {} requests in {WAIT:?}",
                new_answers.len()
            );
            let o = tally.send(&t, &route, 1).await.remove(0);
            if o.revision.as_ref().is_some_and(|r| *r != old) {
                new_answers.push(o);
            } else if o.status != Some(200) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let failed = new_answers.iter().filter(|o| o.status == Some(500)).count();
        ensure!(
            failed == 20,
            "AGENT_ERROR_RATIO=0.5: every second request of the new pod fails, {failed} of 40 did"
        );
        let new = new_answers[0].revision.clone().unwrap_or_default();
        let errors = by_route.replace("code=\"200\"", "code=\"500\"");
        wait_counts(
            &prom,
            &[
                (by_route, tally.count(&route, 200)),
                (errors, tally.count(&route, 500)),
                // Failed requests are not vLLM successes.
                (of_revision(&new), 20),
            ],
        )
        .await?;
        ensure!(
            tally.unanswered.is_empty(),
            "requests without an answer: {:?}",
            tally.unanswered
        );
        eprintln!(
            "requests a pod answered, by (host, status): {:?}; answered by the proxy: {:?}",
            tally.answered, tally.by_proxy
        );
        Ok(())
    })
    .await
}
