//! The operations views against the suite's manager's `/metrics`: a release paused at a step
//! shows in the per-Rollout series under its namespace and name; every metric docs/install.md
//! documents is exported and every exported one is documented; and every metric the chart's
//! Grafana dashboard and alert rules query is one the manager exports, in PromQL that Debian's
//! `promtool` (test/cluster/build-prometheus.sh) accepts.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context, anyhow, ensure};
use serde_json::json;

use crate::{
    harness::with_ns,
    helm_chart::render,
    isolated::repo,
    lws_support::{apply, create_available, lws},
    metrics::{MANAGER_LOG_ENV, health_addr, sample, scrape},
    rollout_tools::{create_rollout, paused_at, rollout, wait_rollout},
};

/// Families that may have no series yet, so are not in the exposition at all: no reconcile
/// need have failed in the suite's run.
const MAY_BE_EMPTY: &[&str] = &["lws_rollout_reconcile_errors_total"];

/// The suite's manager's health address, from its log.
fn manager_addr() -> anyhow::Result<String> {
    let path = std::env::var(MANAGER_LOG_ENV).map_err(|_| {
        anyhow!("{MANAGER_LOG_ENV} is not set: run the e2e tests with test/run-tests.sh")
    })?;
    let log = std::fs::read_to_string(&path)?;
    health_addr(&log).with_context(|| format!("no health address in {path}"))
}

/// Every sample name the exposition can hold, from its `# TYPE` lines: a counter's `_total`, a
/// histogram's `_bucket`, `_sum` and `_count`, a gauge's own name.
fn exported_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .flat_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next().unwrap_or_default().to_string();
            match parts.next() {
                Some("counter") => vec![format!("{name}_total")],
                Some("histogram") => ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|s| format!("{name}{s}"))
                    .collect(),
                _ => vec![name],
            }
        })
        .collect()
}

/// The metric names in the "Metrics" table of docs/install.md (`lws_rollout_` + first cell).
fn documented_names() -> anyhow::Result<BTreeSet<String>> {
    let doc = std::fs::read_to_string(repo().join("docs/install.md"))?;
    let section = doc
        .split_once("\n## Metrics\n")
        .context("docs/install.md has a Metrics section")?
        .1
        .split("\n## ")
        .next()
        .unwrap_or_default();
    Ok(section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter(|l| {
            let kind = l.split('|').nth(2).unwrap_or_default().trim();
            ["counter", "gauge", "histogram"].contains(&kind)
        })
        .filter_map(|l| l.split('`').nth(1))
        .map(|n| format!("lws_rollout_{n}"))
        .collect())
}

/// Every `lws_rollout_…` name in `text`.
fn referenced_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("lws_rollout_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The chart's alert rules (the PrometheusRule's `spec`) and its dashboard's queries.
fn shipped_queries() -> anyhow::Result<(serde_json::Value, Vec<String>)> {
    let docs = render(
        "lws-system",
        &[
            "metrics.prometheusRule.enabled=true",
            "metrics.grafanaDashboard.enabled=true",
        ],
    )?;
    let rules = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .map(|d| d["spec"].clone());
    // `helm template` knows no cluster: the rule is rendered only with the API version given.
    let rules = match rules {
        Some(r) => r,
        None => {
            let out = crate::helm_chart::helm(&[
                "template",
                "lws-rollout",
                concat!(env!("CARGO_MANIFEST_DIR"), "/charts/lws-rollout"),
                "--kube-version",
                "v1.36.3",
                "--api-versions",
                "monitoring.coreos.com/v1/PrometheusRule",
                "--set",
                "metrics.prometheusRule.enabled=true",
            ])?;
            ensure!(out.status.success(), "helm template failed");
            let text = String::from_utf8(out.stdout)?;
            let doc = text
                .split("\n---")
                .find(|d| d.contains("kind: PrometheusRule"))
                .context("a PrometheusRule")?;
            let value: serde_json::Value = serde_yaml::from_str(doc)?;
            value["spec"].clone()
        }
    };
    let dashboard = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "lws-rollout-dashboard")
        .context("the dashboard ConfigMap")?;
    let json: serde_json::Value = serde_json::from_str(
        dashboard["data"]["lws-rollout.json"]
            .as_str()
            .context("the dashboard JSON")?,
    )?;
    let queries = json["panels"]
        .as_array()
        .context("panels")?
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    Ok((rules, queries))
}

/// promtool checks the rules, and the dashboard's queries as recording rules.
fn promtool_accepts(rules: &serde_json::Value, queries: &[String]) -> anyhow::Result<()> {
    let out = std::process::Command::new("bash")
        .arg(repo().join("test/cluster/build-prometheus.sh"))
        .output()?;
    if !out.status.success() {
        eprintln!(
            "SKIPPED promtool check: Prometheus not available: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return Ok(());
    }
    let prometheus = String::from_utf8(out.stdout)?;
    let promtool = std::path::Path::new(prometheus.trim()).with_file_name("promtool");
    let mut groups = rules["groups"].as_array().cloned().unwrap_or_default();
    let recorded: Vec<serde_json::Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({"record": format!("dashboard:query_{i}"), "expr": q.replace("$namespace", ".*")}))
        .collect();
    groups.push(json!({"name": "dashboard", "rules": recorded}));
    let file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("lws-rollout-rules-{}.yaml", std::process::id()));
    std::fs::write(&file, serde_yaml::to_string(&json!({"groups": groups}))?)?;
    let out = std::process::Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()?;
    ensure!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn a_release_shows_in_the_rollout_series_and_every_shipped_metric_is_exported()
-> anyhow::Result<()> {
    let addr = manager_addr()?;
    with_ns("metrics-rollouts", |ns| async move {
        create_available(&ns, &lws("vllm", 2, 2, "model:v1")).await?;
        create_rollout(
            &ns,
            &rollout(
                "vllm",
                "vllm",
                json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            ),
        )
        .await?;
        apply(&ns, &lws("vllm", 2, 2, "model:v2")).await?;
        wait_rollout(&ns, "vllm", "paused at step 1", paused_at(1)).await?;

        let id = format!(r#"namespace="{}",name="vllm""#, ns.name);
        let want = [
            (format!(r#"lws_rollout_rollout_phase{{{id},phase="Progressing"}}"#), 1.0),
            (format!("lws_rollout_rollout_step{{{id}}}"), 1.0),
            (format!("lws_rollout_rollout_steps{{{id}}}"), 2.0),
            (format!(r#"lws_rollout_rollout_step_state{{{id},state="StepPaused"}}"#), 1.0),
            (format!("lws_rollout_rollout_paused{{{id}}}"), 0.0),
        ];
        // The status write and the cache that /metrics reads are apart by one watch event.
        let text = crate::harness::eventually(
            Duration::from_secs(30),
            &format!("the paused release in the Rollout series: {want:?}"),
            || async {
                let text = match scrape(&addr).await {
                    Some((200, body)) => body,
                    other => anyhow::bail!("GET /metrics answered {other:?}"),
                };
                let ok = want.iter().all(|(s, v)| sample(&text, s) == Some(*v));
                Ok((ok, text))
            },
        )
        .await?;
        let age = sample(&text, &format!("lws_rollout_rollout_step_state_age_seconds{{{id}}}"))
            .context("time in the step state")?;
        ensure!((0.0..600.0).contains(&age), "time in StepPaused: {age}");
        ensure!(
            text.lines().any(|l| l.starts_with(&format!(
                r#"lws_rollout_rollout_condition{{{id},type="Progressing",status="True""#
            ))),
            "the Progressing condition as a series"
        );

        // Documented == exported.
        let mut exported = exported_names(&text);
        let documented = documented_names()?;
        let undocumented: Vec<_> = exported.iter().filter(|n| !documented.contains(*n)).collect();
        let missing: Vec<_> = documented.iter().filter(|n| !exported.contains(*n)).collect();
        // A histogram is documented by its family name (`…_seconds`), exported as its parts.
        let undocumented: Vec<_> = undocumented
            .into_iter()
            .filter(|n| {
                !["_bucket", "_sum", "_count"].iter().any(|s| {
                    n.strip_suffix(s)
                        .is_some_and(|family| documented.contains(family))
                })
            })
            .collect();
        let missing: Vec<_> = missing
            .into_iter()
            .filter(|n| !exported.contains(&format!("{n}_count")))
            .filter(|n| !MAY_BE_EMPTY.contains(&n.as_str()))
            .collect();
        ensure!(
            undocumented.is_empty() && missing.is_empty(),
            "docs/install.md's Metrics table and /metrics differ: exported but undocumented \
             {undocumented:?}, documented but not exported {missing:?}"
        );

        // The dashboard and the alert rules query only what is exported.
        exported.extend(MAY_BE_EMPTY.iter().map(|n| n.to_string()));
        let (rules, queries) = shipped_queries()?;
        let mut used = referenced_names(&serde_json::to_string(&rules)?);
        for q in &queries {
            used.extend(referenced_names(q));
        }
        ensure!(used.len() > 5, "the shipped views query metrics: {used:?}");
        let unknown: Vec<_> = used.iter().filter(|n| !exported.contains(*n)).collect();
        ensure!(
            unknown.is_empty(),
            "the chart's dashboard or alert rules query metrics the manager does not export: {unknown:?}"
        );
        promtool_accepts(&rules, &queries)?;
        Ok(())
    })
    .await
}
