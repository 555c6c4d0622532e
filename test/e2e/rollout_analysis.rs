//! Releases that judge themselves (docs/analysis.md) against the real control plane, under
//! request load through the real proxy, with a real Prometheus scraping the proxy's counters and
//! the pods' vLLM metrics: a good model is released to the end with no human action, a bad one
//! (errors, or a slow time to first token) rolls itself back at its first step with only the
//! canary's share of requests failing and no user group restarted, and an analysis that cannot
//! read its metrics pauses for a person instead of rolling back.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use kube::api::PostParams;
use lws_rollout::api::analysis::{AnalysisRun, AnalysisTemplate};
use serde_json::{Value, json};

use crate::harness::{TestNs, kubeconfig_path, wait_for_all, with_ns, yaml_documents};
use crate::lws_support::uids;
use crate::rollout_canary::{RATE, is_canary};
use crate::rollout_support::*;
use crate::traffic_driver::{
    Outcome, ReleaseTraffic, RequestSpec, Traffic, traffic_or_skip, wait_until_served,
};

/// The analysis annotation (`lws-rollout.x-k8s.io/analysis`).
const ANALYSIS: &str = "lws-rollout.x-k8s.io/analysis";
/// The example template's name.
const TEMPLATE: &str = "vllm-serving";
/// Canary share of the first step.
const FIRST_SHARE: f64 = 0.2;

/// The cluster's Prometheus (`<state>/prometheus/url`, written by `test/cluster/up.sh`), or
/// `None` after printing one SKIPPED line with the reason.
pub fn prometheus_or_skip(test: &str) -> Option<String> {
    let state = std::path::PathBuf::from(kubeconfig_path().ok()?)
        .parent()?
        .join("prometheus");
    if let Ok(why) = std::fs::read_to_string(state.join("skipped")) {
        eprintln!("SKIPPED {test}: no Prometheus: {}", why.trim());
        return None;
    }
    match std::fs::read_to_string(state.join("url")) {
        Ok(url) => Some(url.trim().to_string()),
        Err(e) => {
            eprintln!("SKIPPED {test}: no Prometheus ({}: {e})", state.display());
            None
        }
    }
}

/// Prometheus and the traffic layer, or `None` (SKIPPED printed).
fn parts(test: &str) -> Option<(String, Traffic)> {
    let prom = prometheus_or_skip(test)?;
    let traffic = traffic_or_skip(test)?;
    Some((prom, traffic))
}

/// The three steps: one group with 20% of the requests, half the groups with half, all — and
/// no `pause`: every step's analysis is its approval.
fn steps() -> Value {
    json!([
        {"replicas": 1, "traffic": "20%"},
        {"replicas": "50%", "traffic": "50%"},
        {"replicas": "100%", "traffic": "100%"}
    ])
}

/// The analysis annotation of examples/rollout-canary-analysis.yaml with the test cluster's
/// Prometheus and a test's pace (a measurement every 2 s, two per step, over 10 s windows; one
/// without data tolerated, the example's default).
fn annotation(prometheus: &str, extra: &[(&str, &str)]) -> anyhow::Result<String> {
    let example = yaml_documents("examples/rollout-canary-analysis.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "Rollout")
        .context("the example's Rollout")?;
    let mut a: Value = serde_json::from_str(
        example["metadata"]["annotations"][ANALYSIS]
            .as_str()
            .context("the example's analysis annotation")?,
    )?;
    let mut args = vec![
        json!({"name": "prometheus-address", "value": prometheus}),
        json!({"name": "interval", "value": "2s"}),
        json!({"name": "initial-delay", "value": "5s"}),
        json!({"name": "count", "value": "2"}),
        json!({"name": "window", "value": "10s"}),
    ];
    args.extend(extra.iter().map(|(k, v)| json!({"name": k, "value": v})));
    a["args"] = json!(args);
    Ok(a.to_string())
}

fn analysed_rollout(annotation: String) -> Value {
    let mut r = rollout(steps(), Some(gateway_routing()));
    r["metadata"]["annotations"] = json!({ ANALYSIS: annotation });
    r
}

/// The example template, created in the test's namespace.
async fn create_template(ns: &TestNs) -> anyhow::Result<()> {
    let doc = yaml_documents("examples/analysistemplate-vllm.yaml")?
        .into_iter()
        .find(|d| d["kind"] == "AnalysisTemplate")
        .context("the example's template")?;
    let t: AnalysisTemplate = serde_json::from_value(doc)?;
    ns.api::<AnalysisTemplate>()
        .create(&PostParams::default(), &t)
        .await?;
    Ok(())
}

/// `lws` whose leader containers (the ones that answer) carry `env`: the test pod agent's
/// faults (`AGENT_ERROR_RATIO`, `AGENT_TTFT_MS`), set the way a user would change a model.
fn with_env(lws: &Value, env: &[(&str, &str)]) -> Value {
    let mut lws = lws.clone();
    lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"] = env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    lws
}

/// The stable LWS, its Service and route, the template and the analysed Rollout, Healthy; and
/// requests at a steady rate through the proxy, answered by the stable groups.
async fn setup(
    ns: &TestNs,
    traffic: &Traffic,
    annotation: String,
) -> anyhow::Result<(Value, ReleaseTraffic<fn(&Outcome) -> bool>)> {
    let v1 = stable_lws(2, "vllm:1");
    create_template(ns).await?;
    release_setup(ns, &v1, &analysed_rollout(annotation)).await?;
    let plain = RequestSpec::new(&host(ns));
    wait_until_served(traffic, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
    let t = ReleaseTraffic::start(
        traffic,
        plain,
        None,
        RATE,
        is_canary as fn(&Outcome) -> bool,
    );
    Ok((v1, t))
}

/// This Rollout's AnalysisRuns as `(uid, phase, measurements)`.
async fn runs(ns: &TestNs) -> anyhow::Result<Vec<(String, String, usize)>> {
    Ok(ns
        .api::<AnalysisRun>()
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|r| {
            let s = r.status.unwrap_or_default();
            let taken = s.metric_results.iter().map(|m| m.measurements.len()).sum();
            (
                r.metadata.uid.unwrap_or_default(),
                s.phase.unwrap_or_default(),
                taken,
            )
        })
        .collect())
}

#[test]
fn rollout_analysis_a_good_model_releases_itself_to_the_end() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-good", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_a_good_model_releases_itself")
            else {
                return Ok(());
            };
            let (v1, t) = setup(&ns, &traffic, annotation(&prom, &[])?).await?;
            let user_pods = uids(&ns, STABLE).await?;
            let started = Instant::now();
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_rollout(&ns, "step 1 analysed", |r| {
                step(r) == (1, "StepMetricsAnalysis".to_string())
            })
            .await?;
            let at_step_one = t.assert_step(20, 150).await?;
            ensure!(at_step_one.failures().is_empty());
            let done = wait_for_rollout(
                &ns,
                "released to the end",
                Duration::from_secs(240),
                finished("True"),
            )
            .await?;
            let took = started.elapsed();
            eprintln!(
                "rollout_analysis: template change to Healthy with three analysed steps: {:.1}s",
                took.as_secs_f64()
            );
            ensure!(phase(&done) == "Healthy");
            let runs = runs(&ns).await?;
            ensure!(
                runs.len() == 3 && runs.iter().all(|(_, p, n)| p == "Successful" && *n >= 4),
                "one Successful run per step, every metric measured twice: {runs:?}"
            );
            ensure!(
                uids(&ns, STABLE).await? != user_pods,
                "the user's groups took the new template at the end"
            );
            t.finish().await?;
            nothing_left(&ns).await?;
            Ok(())
        })
    })
}

/// Like [`wait_rollout`] with a longer bound: a whole analysed release.
async fn wait_for_rollout(
    ns: &TestNs,
    what: &str,
    within: Duration,
    cond: impl Fn(&lws_rollout::api::Rollout) -> bool,
) -> anyhow::Result<lws_rollout::api::Rollout> {
    crate::harness::wait_for(
        &ns.api(),
        STABLE,
        within,
        move |r: Option<&lws_rollout::api::Rollout>| r.is_some_and(&cond),
    )
    .await
    .with_context(|| format!("Rollout: {what}"))?
    .context("Rollout gone")
}

/// A bad model rolls itself back at step 1: `metric` failed, the message names it with its
/// value and condition; only the canary's share of requests failed while it served; no user
/// group restarted; the revision is not retried; Argo CD reads Degraded.
async fn rolls_back(
    ns: &TestNs,
    traffic: &Traffic,
    prom: &str,
    fault: &[(&str, &str)],
    metric: &str,
    condition_text: &str,
    again: bool,
) -> anyhow::Result<()> {
    let (v1, t) = setup(ns, traffic, annotation(prom, &[])?).await?;
    let user_pods = uids(ns, STABLE).await?;
    let from = t.elapsed();
    apply_lws(ns, &with_env(&with_image(&v1, "vllm:2-bad"), fault)).await?;
    let failed = wait_for_rollout(
        ns,
        "rolled back by its analysis",
        Duration::from_secs(120),
        |r| condition(r, "Progressing").is_some_and(|c| c.0 == "False" && c.1 == "AnalysisFailed"),
    )
    .await?;
    let msg = condition(&failed, "Progressing").context("condition")?.2;
    ensure!(
        msg.contains(metric) && msg.contains(condition_text) && msg.contains("value ["),
        "the message names the metric, its value and the condition: {msg}"
    );
    ensure!(
        step(&failed).0 == 1,
        "rolled back at step 1: {:?}",
        step(&failed)
    );
    wait_event(ns, "AnalysisMeasurementFailed", metric).await?;
    if let Some(bin) = crate::lws_argocd::argocd_tool() {
        let (health, why) =
            crate::rollout_argocd::rollout_health_with_customization(&bin, &failed).await?;
        ensure!(
            health == "Degraded" && why.contains("AnalysisFailed"),
            "Argo CD reads {health}: {why}"
        );
    }
    wait_rollout(ns, "canary removed", |r| finalising(r) == "END").await?;
    wait_for_all_canary(ns, |c| c.is_empty()).await?;
    let after = t.assert_rolled_back(200).await?;
    ensure!(after.failures().is_empty());
    // Only requests the canary answered failed: at most the first step's share of those sent
    // while it served (a slow model fails none, it only answers late).
    let release = t.elapsed();
    let whole = t.report();
    let during: Vec<&Outcome> = whole
        .outcomes
        .iter()
        .filter(|o| o.at >= from && o.at <= release)
        .collect();
    let failed_n = during.iter().filter(|o| o.failed()).count();
    eprintln!(
        "rollout_analysis ({metric}): {failed_n} of {} requests failed while the bad canary served",
        during.len()
    );
    ensure!(
        (failed_n as f64) <= FIRST_SHARE * during.len() as f64,
        "{failed_n} of {} requests failed during the release: more than the canary's {}% share",
        during.len(),
        FIRST_SHARE * 100.0
    );
    ensure!(
        whole
            .outcomes
            .iter()
            .filter(|o| o.failed())
            .all(|o| o.at >= from && o.at <= release),
        "a request failed outside the bad canary's time"
    );
    ensure!(uids(ns, STABLE).await? == user_pods, "a user pod restarted");
    // Not retried: the workload stays held, no new release starts by itself.
    ensure!(batch_release(ns).await?.is_none());
    let lws = ns
        .api::<lws_rollout::api::LeaderWorkerSet>()
        .get(STABLE)
        .await?;
    ensure!(
        lws.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("rollouts.kruise.io/stable-revision"),
        "the workload stays on its stable revision until its template changes"
    );
    ensure!(runs(ns).await?.len() == 1, "one run, at step 1");
    // The template goes back: a cancel that moves no group.
    apply_lws(ns, &v1).await?;
    wait_rollout(ns, "cancelled", finished("False")).await?;
    nothing_left(ns).await?;
    ensure!(uids(ns, STABLE).await? == user_pods, "a user pod restarted");
    if again {
        // The same bad template once more is a new release: the run the last one left is
        // replaced, never believed, and the new one fails on its own measurements.
        let before = runs(ns).await?;
        apply_lws(ns, &with_env(&with_image(&v1, "vllm:2-bad"), fault)).await?;
        wait_for_rollout(ns, "rolled back again", Duration::from_secs(120), |r| {
            condition(r, "Progressing").is_some_and(|c| c.0 == "False" && c.1 == "AnalysisFailed")
        })
        .await?;
        let after = ns
            .api::<AnalysisRun>()
            .list(&Default::default())
            .await?
            .items;
        ensure!(
            after.len() == 1
                && after[0].metadata.uid.as_deref() != Some(before[0].0.as_str())
                && after[0]
                    .status
                    .as_ref()
                    .is_some_and(|s| s.phase.as_deref() == Some("Failed")),
            "a fresh run made the verdict: before {before:?}"
        );
        apply_lws(ns, &v1).await?;
        wait_rollout(ns, "cancelled again", finished("False")).await?;
        ensure!(uids(ns, STABLE).await? == user_pods, "a user pod restarted");
    }
    t.stop().await;
    Ok(())
}

#[test]
fn rollout_analysis_a_model_answering_errors_rolls_itself_back() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-errors", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_a_model_answering_errors") else {
                return Ok(());
            };
            rolls_back(
                &ns,
                &traffic,
                &prom,
                &[("AGENT_ERROR_RATIO", "0.5")],
                "error-ratio",
                "result[0] < 0.05",
                true,
            )
            .await
        })
    })
}

#[test]
fn rollout_analysis_a_model_slow_to_first_token_rolls_itself_back() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-ttft", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_a_model_slow_to_first_token")
            else {
                return Ok(());
            };
            rolls_back(
                &ns,
                &traffic,
                &prom,
                &[("AGENT_TTFT_MS", "900")],
                "ttft-p95",
                "result[0] < 0.5",
                false,
            )
            .await
        })
    })
}

/// A TCP forwarder to Prometheus that the test can cut: from the manager's side, Prometheus
/// goes away (connections refused) and comes back on the same address, without disturbing the
/// other tests that share the cluster's Prometheus.
struct Cuttable {
    addr: std::net::SocketAddr,
    upstream: std::net::SocketAddr,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Cuttable {
    async fn start(upstream: &str) -> anyhow::Result<Self> {
        let upstream: std::net::SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .context("Prometheus URL is http://<ip>:<port>")?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut c = Cuttable {
            addr,
            upstream,
            task: None,
        };
        c.serve(listener);
        Ok(c)
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let upstream = self.upstream;
        self.task = Some(tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                conns.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }

    /// Prometheus unreachable: the listener and every connection through it closed.
    fn cut(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    /// Reachable again, on the same address.
    async fn restore(&mut self) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        self.serve(listener);
        Ok(())
    }
}

#[test]
fn rollout_analysis_unreachable_prometheus_pauses_and_never_rolls_back() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-unreachable", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_unreachable_prometheus") else {
                return Ok(());
            };
            let mut prometheus = Cuttable::start(&prom).await?;
            let (v1, t) = setup(&ns, &traffic, annotation(&prometheus.url(), &[])?).await?;
            // Two errors in a row are tolerated, the third pauses.
            let template = ns.api::<AnalysisTemplate>();
            let mut tpl = template.get(TEMPLATE).await?;
            for m in &mut tpl.spec.metrics {
                m.consecutive_error_limit =
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
            }
            template
                .replace(TEMPLATE, &PostParams::default(), &tpl)
                .await?;
            let user_pods = uids(&ns, STABLE).await?;
            prometheus.cut();
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            let paused = wait_for_rollout(
                &ns,
                "paused by its analysis",
                Duration::from_secs(120),
                |r| step(r) == (1, "StepPaused".to_string()),
            )
            .await?;
            let msg = paused
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default();
            ensure!(
                msg.contains("unreachable") && msg.contains("approve"),
                "the message says Prometheus is unreachable and what to do: {msg}"
            );
            ensure!(
                condition(&paused, "Progressing").is_some_and(|c| c.0 == "True"),
                "never a rollback: {:?}",
                condition(&paused, "Progressing")
            );
            wait_event(&ns, "AnalysisWaiting", "unreachable").await?;
            ensure!(batch_release(&ns).await?.is_some(), "the canary stays");
            // Prometheus back, a person approves: the release goes on, analysed again.
            prometheus.restore().await?;
            approve(&ns).await?;
            wait_for_rollout(
                &ns,
                "released to the end",
                Duration::from_secs(240),
                finished("True"),
            )
            .await?;
            ensure!(uids(&ns, STABLE).await? != user_pods);
            let runs = runs(&ns).await?;
            ensure!(
                runs.iter().any(|(_, p, _)| p == "Error")
                    && runs.iter().filter(|(_, p, _)| p == "Successful").count() == 2,
                "step 1 in Error, steps 2 and 3 Successful: {runs:?}"
            );
            t.finish().await?;
            Ok(())
        })
    })
}

/// A malformed analysis annotation is refused at admission with what is allowed; a template
/// that does not exist makes the release wait (never roll back) and it starts once created.
#[test]
fn rollout_analysis_bad_input_is_refused_or_waits() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-input", |ns| async move {
            let mut bad = analysed_rollout(r#"{"templates": []}"#.into());
            bad["metadata"]["name"] = json!("refused");
            let err = create_rollout(&ns, &bad).await.expect_err("refused");
            ensure!(
                err.to_string().contains("names no template"),
                "the refusal says why: {err}"
            );
            let v1 = stable_lws(1, "vllm:1");
            let annotation = json!({"templates": [{"templateName": "not-yet"}],
                "args": [{"name": "prometheus-address", "value": "http://127.0.0.1:9"}]})
            .to_string();
            let mut r = analysed_rollout(annotation);
            r["spec"]["strategy"]["canary"]["steps"] = json!([{"replicas": 1}]);
            release_setup(&ns, &v1, &r).await?;
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_rollout(&ns, "waiting for its template", |r| {
                step(r) == (1, "StepMetricsAnalysis".to_string())
                    && r.status
                        .as_ref()
                        .and_then(|s| s.message.as_deref())
                        .is_some_and(|m| m.contains("AnalysisTemplate not-yet not found"))
            })
            .await?;
            wait_event(&ns, "AnalysisWaiting", "not-yet").await?;
            // The address is unreachable: the measurement errors, and the step pauses (a
            // person decides) — it never rolls back.
            ns.api::<AnalysisTemplate>()
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                        "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate",
                        "metadata": {"name": "not-yet"},
                        "spec": {"args": [{"name": "prometheus-address"}],
                            "metrics": [{"name": "up", "successCondition": "result[0] == 1",
                                "consecutiveErrorLimit": 0,
                                "provider": {"prometheus": {"address": "{{args.prometheus-address}}", "query": "vector(1)"}}}]}
                    }))?,
                )
                .await?;
            let paused = wait_rollout(&ns, "paused: Prometheus unreachable", |r| {
                step(r) == (1, "StepPaused".to_string())
            })
            .await?;
            ensure!(condition(&paused, "Progressing").is_some_and(|c| c.0 == "True"));
            let runs = wait_for_all(&ns.api::<AnalysisRun>(), "", WAIT, |runs| {
                runs.iter()
                    .any(|r| r.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Error"))
            })
            .await?;
            let message = runs[0]
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default();
            ensure!(
                message.contains("unreachable"),
                "the run says why: {message}"
            );
            Ok(())
        })
    })
}

/// The manager SIGKILLed mid-analysis, on a cluster of the test's own: the measurements taken
/// so far survive in the run, the restarted manager goes on from them, and no measurement is
/// recorded twice — the run ends with exactly its count, each at its own time. The queries go
/// to the suite's Prometheus (they need no data of this cluster: `vector(0.01)`).
#[test]
fn rollout_analysis_survives_a_manager_killed_mid_analysis() -> anyhow::Result<()> {
    on_big_stack(|| async move {
        let Some(prom) = prometheus_or_skip("rollout_analysis_survives_a_manager_killed") else {
            return Ok(());
        };
        let (mut cc, ns) = crate::crash_support::CrashCluster::start("analysis-crash").await?;
        let template: AnalysisTemplate = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate",
            "metadata": {"name": "steady"},
            "spec": {"metrics": [{"name": "steady", "interval": "2s", "count": 6,
                "successCondition": "result[0] < 0.05",
                "provider": {"prometheus": {"address": prom, "query": "vector(0.01)"}}}]}
        }))?;
        ns.api::<AnalysisTemplate>()
            .create(&PostParams::default(), &template)
            .await?;
        let v1 = stable_lws(1, "vllm:1");
        let mut r = rollout(json!([{"replicas": 1}]), None);
        r["metadata"]["annotations"] =
            json!({ ANALYSIS: json!({"templates": [{"templateName": "steady"}]}).to_string() });
        crate::lws_support::create_available(&ns, &v1).await?;
        create_rollout(&ns, &r).await?;
        apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
        let measured = |n: usize| {
            move |runs: &[std::sync::Arc<AnalysisRun>]| {
                runs.iter().any(|r| {
                    r.status
                        .as_ref()
                        .is_some_and(|s| s.metric_results.iter().any(|m| m.measurements.len() >= n))
                })
            }
        };
        wait_for_all(&ns.api::<AnalysisRun>(), "", WAIT, measured(2)).await?;
        let before = runs(&ns).await?;
        cc.kill_and_restart("mid-analysis").await?;
        let done = wait_rollout(&ns, "released", finished("True")).await?;
        ensure!(phase(&done) == "Healthy");
        let run = ns
            .api::<AnalysisRun>()
            .list(&Default::default())
            .await?
            .items;
        ensure!(run.len() == 1, "one run: {before:?}");
        let status = run[0].status.clone().unwrap_or_default();
        let m = &status.metric_results[0];
        ensure!(
            m.count == 6 && m.successful == 6 && m.measurements.len() == 6,
            "exactly six measurements, none twice: {m:?}"
        );
        let mut times: Vec<_> = m
            .measurements
            .iter()
            .map(|x| x.started_at.clone().map(|t| t.0))
            .collect();
        times.dedup();
        ensure!(
            times.len() == 6,
            "each measurement at its own time: {times:?}"
        );
        ensure!(
            before[0].2 >= 2 && status.phase.as_deref() == Some("Successful"),
            "the measurements before the kill counted: {before:?}"
        );
        cc.finish();
        Ok(())
    })
}

/// Partition style (the user's own groups moved in place, no second LWS): a bad model's
/// analysis fails at step 1 and the moved group goes back to the stable template — the style's
/// own rollback path — with the canary's share of requests at most failing meanwhile.
#[test]
fn rollout_analysis_partition_style_moves_a_bad_models_group_back() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-partition", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_partition_style") else {
                return Ok(());
            };
            let v1 = stable_lws(2, "vllm:1");
            create_template(&ns).await?;
            let mut r = analysed_rollout(annotation(&prom, &[])?);
            let canary = &mut r["spec"]["strategy"]["canary"];
            canary.as_object_mut().context("canary")?.retain(|k, _| {
                k != "enableExtraWorkloadForCanary" && k != "patchPodTemplateMetadata"
            });
            release_setup(&ns, &v1, &r).await?;
            let plain = RequestSpec::new(&host(&ns));
            wait_until_served(&traffic, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
            let t = ReleaseTraffic::start(
                &traffic,
                plain,
                None,
                RATE,
                is_canary as fn(&Outcome) -> bool,
            );
            apply_lws(
                &ns,
                &with_env(
                    &with_image(&v1, "vllm:2-bad"),
                    &[("AGENT_ERROR_RATIO", "0.5")],
                ),
            )
            .await?;
            wait_rollout(&ns, "a group moved", |r| {
                step(r).0 == 1 && step(r).1 == "StepMetricsAnalysis"
            })
            .await?;
            let failed = wait_for_rollout(
                &ns,
                "rolled back by its analysis",
                Duration::from_secs(120),
                |r| {
                    condition(r, "Progressing")
                        .is_some_and(|c| c.0 == "False" && c.1 == "AnalysisFailed")
                },
            )
            .await?;
            let msg = condition(&failed, "Progressing").context("condition")?.2;
            ensure!(msg.contains("error-ratio"), "{msg}");
            // Every group back on the stable template, whole and ready.
            crate::harness::wait_for_all(
                &ns.api::<k8s_openapi::api::core::v1::Pod>(),
                &format!("leaderworkerset.sigs.k8s.io/name={STABLE}"),
                WAIT,
                |pods| {
                    pods.len() == 4
                        && pods.iter().all(|p| {
                            crate::lws_support::pod_ready(p)
                                && p.metadata.deletion_timestamp.is_none()
                                && crate::lws_support::image(p) == "vllm:1"
                        })
                },
            )
            .await
            .context("the moved group back on vllm:1")?;
            let after = t.assert_rolled_back(200).await?;
            ensure!(after.failures().is_empty());
            let whole = t.stop().await;
            let failed_n = whole.failures().len();
            ensure!(
                (failed_n as f64) <= FIRST_SHARE * whole.total() as f64,
                "{failed_n} of {} requests failed: more than the moved group's share",
                whole.total()
            );
            Ok(())
        })
    })
}

/// Blue-green: the new side is analysed on previewers' requests before the switch, so a bad
/// model is rolled back without one plain request ever reaching it.
#[test]
fn rollout_analysis_blue_green_a_bad_new_side_never_takes_traffic() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-bluegreen", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_blue_green") else {
                return Ok(());
            };
            let v1 = stable_lws(2, "vllm:1");
            create_template(&ns).await?;
            crate::lws_support::create_available(&ns, &v1).await?;
            create_service(&ns).await?;
            create_route_named(&ns, "vllm").await?;
            let mut r = yaml_documents("examples/rollout-bluegreen.yaml")?.remove(0);
            let mut a: Value = serde_json::from_str(&annotation(&prom, &[])?)?;
            a["steps"] = json!([1]);
            r["metadata"]["annotations"] = json!({ ANALYSIS: a.to_string() });
            create_rollout(&ns, &r).await?;
            let user_pods = uids(&ns, STABLE).await?;
            let plain = RequestSpec::new(&host(&ns));
            let preview = RequestSpec::new(&host(&ns)).header("x-preview", "new");
            wait_until_served(&traffic, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
            let new_side = |o: &Outcome| {
                o.lws
                    .as_deref()
                    .is_some_and(|l| l.starts_with(&format!("{STABLE}-canary-")))
            };
            let t = ReleaseTraffic::start(
                &traffic,
                plain,
                Some(preview),
                RATE,
                new_side as fn(&Outcome) -> bool,
            );
            apply_lws(
                &ns,
                &with_env(
                    &with_image(&v1, "vllm:2-bad"),
                    &[("AGENT_ERROR_RATIO", "0.5")],
                ),
            )
            .await?;
            let failed = wait_for_rollout(
                &ns,
                "rolled back before the switch",
                Duration::from_secs(180),
                |r| {
                    condition(r, "Progressing")
                        .is_some_and(|c| c.0 == "False" && c.1 == "AnalysisFailed")
                },
            )
            .await?;
            ensure!(
                step(&failed).0 == 1,
                "rolled back at the preview step: {:?}",
                step(&failed)
            );
            wait_for_all_canary(&ns, |c| c.is_empty()).await?;
            let whole = t.stop().await;
            let plain: Vec<&Outcome> = whole
                .outcomes
                .iter()
                .filter(|o| o.label.is_empty())
                .collect();
            ensure!(
                plain.iter().all(|o| !o.failed() && !new_side(o)),
                "a plain request failed or reached the bad new side: {}",
                whole.summary()
            );
            ensure!(
                whole
                    .outcomes
                    .iter()
                    .any(|o| !o.label.is_empty() && new_side(o)),
                "previewers reached the new side (what the analysis judged)"
            );
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted"
            );
            Ok(())
        })
    })
}

/// Background analysis: a release paused for a person at step 1 is rolled back by its
/// background analysis as soon as the bad model's errors show, without anyone acting; the
/// background run is one for the whole release.
#[test]
fn rollout_analysis_background_rolls_back_while_a_step_waits_for_a_person() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-analysis-background", |ns| async move {
            let Some((prom, traffic)) = parts("rollout_analysis_background") else {
                return Ok(());
            };
            let v1 = stable_lws(2, "vllm:1");
            create_template(&ns).await?;
            let mut r = rollout(
                json!([{"replicas": 1, "traffic": "20%", "pause": {}}, {"replicas": "100%", "traffic": "100%", "pause": {}}]),
                Some(gateway_routing()),
            );
            let mut a: Value = serde_json::from_str(&annotation(&prom, &[("count", "20")])?)?;
            a.as_object_mut()
                .context("annotation")?
                .insert("startingStep".into(), json!(1));
            r["metadata"]["annotations"] =
                json!({ "lws-rollout.x-k8s.io/background-analysis": a.to_string() });
            release_setup(&ns, &v1, &r).await?;
            let user_pods = uids(&ns, STABLE).await?;
            let plain = RequestSpec::new(&host(&ns));
            wait_until_served(&traffic, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
            let t = ReleaseTraffic::start(
                &traffic,
                plain,
                None,
                RATE,
                is_canary as fn(&Outcome) -> bool,
            );
            apply_lws(
                &ns,
                &with_env(
                    &with_image(&v1, "vllm:2-bad"),
                    &[("AGENT_ERROR_RATIO", "0.5")],
                ),
            )
            .await?;
            wait_paused_at(&ns, 1).await?;
            let failed = wait_for_rollout(
                &ns,
                "rolled back by the background analysis",
                Duration::from_secs(120),
                |r| {
                    condition(r, "Progressing")
                        .is_some_and(|c| c.0 == "False" && c.1 == "AnalysisFailed")
                },
            )
            .await?;
            let msg = condition(&failed, "Progressing").context("condition")?.2;
            ensure!(
                msg.contains("background analysis") && msg.contains("error-ratio"),
                "{msg}"
            );
            wait_for_all_canary(&ns, |c| c.is_empty()).await?;
            t.assert_rolled_back(200).await?;
            t.stop().await;
            let runs = runs(&ns).await?;
            ensure!(
                runs.len() == 1 && runs[0].1 == "Failed",
                "one background run, Failed: {runs:?}"
            );
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted"
            );
            Ok(())
        })
    })
}
