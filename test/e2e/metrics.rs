//! `/metrics` of the suite's manager moves while it works: an LWS created and rolled to a new
//! template drives reconciles and admission requests. Also: the manager's log (a file, not a
//! terminal) holds no ANSI escape sequences.

use std::time::Duration;

use anyhow::{Context, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{
    harness::{wait_for, with_ns},
    lws_support::{apply, available_with, create_available, lws},
};

/// Set by test/run-tests.sh: the log of the suite's manager.
pub const MANAGER_LOG_ENV: &str = "LWS_E2E_MANAGER_LOG";

/// `GET /metrics` on `addr`: the status code and body, or `None` when nothing answers.
pub async fn scrape(addr: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The value of the series `series` (name and labels exactly as exposed), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The health address a manager logged at start (`serving /healthz, /readyz and /metrics`).
pub fn health_addr(log: &str) -> Option<String> {
    log.lines()
        .filter(|l| l.contains("serving /healthz, /readyz and /metrics"))
        .find_map(|l| {
            let at = l.find("addr=")? + "addr=".len();
            Some(
                l[at..]
                    .split_whitespace()
                    .next()?
                    .trim_matches('"')
                    .to_string(),
            )
        })
}

async fn scrape_ok(addr: &str) -> anyhow::Result<String> {
    match scrape(addr).await {
        Some((200, body)) => Ok(body),
        other => Err(anyhow!("GET http://{addr}/metrics answered {other:?}")),
    }
}

#[tokio::test]
async fn metrics_move_while_the_manager_works() -> anyhow::Result<()> {
    let log_path = std::env::var(MANAGER_LOG_ENV).map_err(|_| {
        anyhow!("{MANAGER_LOG_ENV} is not set: run the e2e tests with test/run-tests.sh")
    })?;
    let log = std::fs::read_to_string(&log_path).with_context(|| format!("reading {log_path}"))?;
    assert!(
        !log.contains('\u{1b}'),
        "the manager's log is a file, not a terminal: no ANSI escape sequences in {log_path}"
    );
    let addr = health_addr(&log).with_context(|| format!("no health address in {log_path}"))?;

    with_ns("metrics", |ns| async move {
        let before = scrape_ok(&addr).await?;
        let value = |text: &str, series: &str| sample(text, series).unwrap_or(0.0);
        let reconciles = r#"lws_rollout_reconciles_total{controller="lws"}"#;
        let durations = r#"lws_rollout_reconcile_duration_seconds_count{controller="lws"}"#;
        let pods_patched =
            r#"lws_rollout_webhook_requests_total{endpoint="/mutate-pod",outcome="patched"}"#;
        let lws_validated =
            r#"lws_rollout_webhook_requests_total{endpoint="/validate-lws",outcome="allowed"}"#;
        let lws_defaulted = r#"lws_rollout_webhook_request_duration_seconds_count{endpoint="/mutate-lws",outcome="allowed"}"#;
        let pod_events = r#"lws_rollout_watch_events_total{kind="Pod",outcome="delivered"}"#;
        // The groups' workers are created by the leader lane, beside the LWS's reconcile.
        let lane_created = r#"lws_rollout_leader_lane_jobs_total{outcome="created"}"#;

        let obj = lws("m", 2, 2, "vllm:1");
        create_available(&ns, &obj).await?;
        let mut next = obj.clone();
        next["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] =
            serde_json::json!("vllm:2");
        apply(&ns, &next).await?;
        wait_for(&ns.api(), "m", Duration::from_secs(120), available_with(2, 2)).await?;
        let after = scrape_ok(&addr).await?;

        for series in [
            reconciles,
            durations,
            pods_patched,
            lws_validated,
            lws_defaulted,
            pod_events,
            lane_created,
        ] {
            assert!(
                value(&after, series) > value(&before, series),
                "{series} moves: {} then {}",
                value(&before, series),
                value(&after, series)
            );
        }
        // 2 groups of 2 pods, created and then replaced: at least 8 pods defaulted.
        assert!(value(&after, pods_patched) - value(&before, pods_patched) >= 8.0);
        assert_eq!(sample(&after, "lws_rollout_leader"), Some(1.0), "the suite's manager leads");
        assert!(sample(&after, r#"lws_rollout_queue_depth{controller="lws"}"#).is_some());
        let expiry = sample(&after, "lws_rollout_webhook_certificate_expiry_timestamp_seconds")
            .context("certificate expiry exposed")?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        assert!(expiry > now, "the certificate in use has not expired: {expiry} <= {now}");
        assert!(after.ends_with("# EOF\n"), "a complete OpenMetrics exposition");
        Ok(())
    })
    .await
}
