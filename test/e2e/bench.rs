//! The benchmark harness works (`lws-bench`, run at full size by `test/bench/run.sh`): a tiny
//! run against both controllers, each on a cluster of its own, yields every figure, S5's release
//! figures and a prefill/decode pair's (S5 pair) included (ours only). It asserts the harness — never a speed.

use std::process::Stdio;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{
    isolated::{bin_dir, repo},
    upstream::UPSTREAM_BIN_ENV,
};

#[tokio::test]
async fn the_benchmark_harness_measures_both_controllers_end_to_end() -> anyhow::Result<()> {
    let upstream = std::env::var(UPSTREAM_BIN_ENV).with_context(|| {
        format!("{UPSTREAM_BIN_ENV} is not set: run the e2e tests with test/run-tests.sh")
    })?;
    let state = std::env::temp_dir().join(format!("lws-e2e-bench-{}", std::process::id()));
    let json_path = state.join("results.json");
    std::fs::create_dir_all(&state)?;
    let (lws, groups, size, noise) = (3usize, 2usize, 2usize, 40usize);
    let rollouts = 2usize;
    let out = tokio::process::Command::new(lws_bench())
        .args([
            format!("--lws={lws}"),
            format!("--groups={groups}"),
            format!("--size={size}"),
            format!("--noise-pods={noise}"),
            "--settle=1".into(),
            "--timeout=90".into(),
            format!("--rollouts={rollouts}"),
            "--release-groups=3".into(),
            "--release-size=1".into(),
            "--scenarios=s1,s2,s3,s4,s5,s5pair".into(),
        ])
        .arg("--manager-bin")
        .arg(crate::harness::manager_bin())
        .arg("--upstream-bin")
        .arg(upstream)
        .arg("--bin-dir")
        .arg(bin_dir()?)
        .arg("--state-root")
        .arg(&state)
        .arg("--repo")
        .arg(repo())
        .arg("--json")
        .arg(&json_path)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("lws-bench failed:\n{stderr}");
    }
    let table = String::from_utf8_lossy(&out.stdout);
    for row in [
        "S1 time until all Available",
        "S1 controller CPU",
        "S2 API requests by the controller",
        "S3 idle RSS after the unrelated pods",
        "S4 pod mutating webhook p99",
        "S5 approve → next BatchRelease/canary LWS write",
        "S5 canary batch ready → Rollout's next step write",
    ] {
        assert!(table.contains(row), "table has {row:?}:\n{table}");
    }

    let results: Value = serde_json::from_str(&std::fs::read_to_string(&json_path)?)?;
    let sides = results["results"].as_array().context("results")?;
    assert_eq!(sides.len(), 2, "{results:#}");
    for (r, side, agent) in [
        (&sides[0], "ours", "lws-rollout/"),
        (&sides[1], "upstream", "lws/v0.9.0"),
    ] {
        assert_eq!(r["side"], side);
        let f = |k: &str| r[k].as_f64().unwrap_or(-1.0);
        for k in [
            "idle_rss_mib",
            "s1_available_s",
            "s1_peak_rss_mib",
            "s2_updated_s",
            "s3_rss_after_mib",
        ] {
            assert!(f(k) > 0.0, "{side}: {k} measured: {r:#}");
        }
        assert!(f("s1_cpu_s") >= 0.0 && f("s2_cpu_s") >= 0.0, "{r:#}");
        // Every LWS and every group got its latencies measured.
        assert_eq!(r["s1_lws_to_leader_sts"]["n"], lws, "{side}: {r:#}");
        assert_eq!(r["s1_leader_pod_to_worker_sts"]["n"], lws * groups, "{r:#}");
        assert_eq!(r["s1_pods_ready_to_available"]["n"], lws, "{r:#}");
        // Requests are the controller's own (its user agent), counted from the audit log.
        for s in ["s1_requests", "s2_requests"] {
            assert!(r[s]["total"].as_u64().unwrap_or(0) > 0, "{side} {s}: {r:#}");
            let agents = r[s]["user_agents"].as_array().context("agents")?;
            assert!(
                agents
                    .iter()
                    .all(|a| a.as_str().unwrap_or_default().starts_with(agent)),
                "{side} {s}: only the controller's requests are counted: {agents:?}"
            );
        }
        // Its pod webhook was called for every pod created (S1 + S2), at least.
        let calls = r["s4_mutating"]["calls"].as_f64().unwrap_or(0.0);
        assert!(
            calls >= (2 * lws * groups * size) as f64,
            "{side}: webhook calls {calls}: {r:#}"
        );
        assert!(r["s4_mutating"]["p99_ms"].as_f64().is_some(), "{r:#}");
    }
    // S5, ours only: every approval (two pauses) and every canary batch (three steps) of every
    // Rollout got its latency, and every step its writes from the audit log.
    let s5 = &sides[0]["s5"];
    assert_eq!(s5["timed_out"], false, "{s5:#}");
    assert!(s5["release_s"].as_f64().unwrap_or(0.0) > 0.0, "{s5:#}");
    assert_eq!(s5["approve_to_write"]["n"], 2 * rollouts, "{s5:#}");
    assert_eq!(s5["ready_to_step"]["n"], 3 * rollouts, "{s5:#}");
    let steps = s5["writes"].as_array().context("writes")?;
    assert_eq!(steps.len(), 3, "{s5:#}");
    for w in steps {
        assert!(
            w["release_per_rollout"].as_f64().unwrap_or(0.0) > 0.0,
            "{w:#}"
        );
        let by = w["by_resource"].as_object().context("by_resource")?;
        assert!(by.keys().all(|k| !k.starts_with("events")), "{w:#}");
    }
    // S5 pair, ours only: the same release of prefill/decode sets; every approval is also
    // seen as both roles' new LWSs written.
    let pair = &sides[0]["s5pair"];
    assert_eq!(pair["timed_out"], false, "{pair:#}");
    assert_eq!(pair["workload"], "pair", "{pair:#}");
    for k in [
        "approve_to_write",
        "approve_to_moved",
        "approve_to_pair_written",
    ] {
        assert_eq!(pair[k]["n"], 2 * rollouts, "{k}: {pair:#}");
    }
    assert_eq!(pair["ready_to_step"]["n"], 3 * rollouts, "{pair:#}");
    for scenario in ["s5", "s5pair"] {
        assert!(
            sides[1][scenario].is_null(),
            "upstream has no Rollouts: {:#}",
            sides[1]
        );
    }

    // Each side's cluster stopped: no recorded processes left.
    for side in ["ours", "upstream"] {
        assert!(
            !state.join(side).join("pids").exists(),
            "{side}'s cluster was stopped"
        );
    }
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}

/// `lws-bench` is a workspace member of its own (test tooling), built beside our binaries.
fn lws_bench() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_BIN_EXE_lws-rollout")).with_file_name("lws-bench")
}
