//! Benchmark driver: our LWS controller and the upstream LWS controller (the version
//! test/upstream/versions.env pins, v0.9.0), one after the
//! other, each on a fresh local cluster (`test/cluster/up.sh`) with only the controller under
//! test running. Prints one Markdown table (and writes JSON). Entry point: `test/bench/run.sh`;
//! method and results: `docs/performance.md`.
//!
//! Scenarios (sizes are flags):
//! - S1 create: `--lws` LWS × `--groups` groups × `--size` pods created at once; time until all
//!   report Available; the controller's own latencies; CPU-seconds, peak RSS, API requests.
//! - S2 update: an image change on all of them (default strategy); time until every pod runs
//!   the new image and every LWS is Available again; CPU-seconds, API requests.
//! - S3 noise: `--noise-pods` bare pods bound to KWOK nodes in another namespace; the
//!   controller's idle RSS before and after.
//! - S4 admission: the pod webhook's latency from the apiserver's admission histogram over S1+S2.
//! - S5 release (ours only: upstream LWS has no Rollouts): `--rollouts` canary Rollouts released
//!   through manual pauses; approve → next write and batch ready → next step write, and the
//!   manager's writes per step (`release.rs`).
//! - S5 pair (`s5pair`, ours only): the same release of DisaggregatedSets (a prefill and a
//!   decode role each), released as one pair; approve → both roles' new LWS written besides.
//!
//! `--scenarios` picks which run (S2 needs S1; S4 is read over whichever of S1/S2 ran).
//!
//! Measurements: wall times from watches (the bench's own watchers, first-seen instants), CPU
//! from `/proc/PID/stat`, memory from `/proc/PID/status` (VmHWM, VmRSS), API requests from the
//! apiserver's audit log restricted to the controller's own user (`lws-bench-controller`, a
//! client certificate made for the run), webhook latency from
//! `apiserver_admission_webhook_admission_duration_seconds`.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{
    admissionregistration::v1::MutatingWebhookConfiguration,
    apps::v1::StatefulSet,
    core::v1::{Namespace, Pod, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::LeaderWorkerSet;
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;

mod release;

const CONTROLLER_USER: &str = "lws-bench-controller";
const NS: &str = "bench";
const NOISE_NS: &str = "noise";
const IMAGE_V1: &str = "registry.k8s.io/pause:3.10";
const IMAGE_V2: &str = "registry.k8s.io/pause:3.9";
const OUR_WEBHOOK: &str = "mpod.lws-rollout.x-k8s.io";
const UPSTREAM_WEBHOOK: &str = "mpod.kb.io";
const UPSTREAM_VALIDATING_WEBHOOK: &str = "vpod.kb.io";

/// Our LWS controller side by side with upstream LWS on the same local control plane.
#[derive(Debug, Parser, Clone)]
struct Args {
    /// The upstream version the upstream binary is (for the table's header).
    #[arg(long, env = "LWS_UPSTREAM_VERSION", default_value = "v0.9.0")]
    upstream_version: String,
    /// Number of LWS objects (S1, S2). The issue's full size is 200 (with --noise-pods 10000);
    /// the default fits the 2-core machine's ~15 minutes (docs/performance.md).
    #[arg(long, default_value_t = 60)]
    lws: usize,
    /// Groups (replicas) per LWS.
    #[arg(long, default_value_t = 4)]
    groups: usize,
    /// Pods per group (leader + workers).
    #[arg(long, default_value_t = 4)]
    size: usize,
    /// Unrelated pods for S3 (0 skips S3).
    #[arg(long, default_value_t = 5_000)]
    noise_pods: usize,
    /// Which scenarios run: s1..s5 and s5pair (S2 needs S1; s5pair is not in the default).
    #[arg(long, value_delimiter = ',', default_value = "s1,s2,s3,s4,s5")]
    scenarios: Vec<String>,
    /// S5 and S5 pair: Rollouts released at once (ours only).
    #[arg(long, default_value_t = 6)]
    rollouts: usize,
    /// S5: groups of each released LWS (the steps are 1 group, 2 groups, 100%); S5 pair: of
    /// each role.
    #[arg(long, default_value_t = 3)]
    release_groups: usize,
    /// S5 and S5 pair: pods per group.
    #[arg(long, default_value_t = 2)]
    release_size: usize,
    /// S5: the Rollouts' style, `canary`, `partition` or `bluegreen` (S5 pair always runs
    /// canary style, the new pair beside the stable one).
    #[arg(long, default_value = "canary")]
    release_style: String,
    /// Which controllers, in order: ours, upstream.
    #[arg(long, value_delimiter = ',', default_value = "ours,upstream")]
    sides: Vec<String>,
    /// Our manager binary.
    #[arg(long, default_value = "target/release/lws-rollout")]
    manager_bin: PathBuf,
    /// The upstream manager binary (test/upstream/build.sh); needed for --sides upstream.
    #[arg(long)]
    upstream_bin: Option<PathBuf>,
    /// Control-plane binaries (test/cluster/build.sh).
    #[arg(long)]
    bin_dir: PathBuf,
    /// Where each side's cluster state goes (one subdirectory per side).
    #[arg(long)]
    state_root: PathBuf,
    /// The repository (its test/ scripts and crds/): this crate lives at tools/lws-bench.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))]
    repo: PathBuf,
    /// Limit for each wait, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Parallel requests the bench uses to create objects.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seconds to let the controller settle before reading its idle memory.
    #[arg(long, default_value_t = 10)]
    settle: u64,
    /// Keep each side's cluster logs (they are kept anyway when a side fails).
    #[arg(long)]
    keep_logs: bool,
    /// Audit the controller's write requests with their bodies (level Request) and every
    /// user's creates and deletes of StatefulSets and pods (garbage collector, StatefulSet
    /// controller), to explain churn. Costs the apiserver more; figures stay the controller's.
    #[arg(long)]
    audit_detail: bool,
}

impl Args {
    fn has(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

/// Percentiles of a set of durations, in milliseconds.
#[derive(Debug, Default, Clone, Serialize)]
struct Dist {
    n: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn dist(mut v: Vec<Duration>) -> Dist {
    if v.is_empty() {
        return Dist::default();
    }
    v.sort();
    let at = |q: f64| {
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1].as_secs_f64() * 1000.0
    };
    Dist {
        n: v.len(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// A webhook's latency from the apiserver's histogram (linear within buckets, like PromQL's
/// `histogram_quantile`).
#[derive(Debug, Default, Clone, Serialize)]
struct WebhookLatency {
    name: String,
    calls: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

#[derive(Debug, Default, Clone, Serialize)]
struct Requests {
    total: u64,
    by_verb: BTreeMap<String, u64>,
    /// `resource[/subresource] verb` → count, e.g. `statefulsets create`.
    by_resource: BTreeMap<String, u64>,
    user_agents: Vec<String>,
}

#[derive(Debug, Default, Clone, Serialize)]
struct SideResult {
    side: String,
    version: String,
    idle_rss_mib: f64,
    s1_available_s: f64,
    s1_all_pods_ready_s: f64,
    s1_lws_to_leader_sts: Dist,
    s1_leader_pod_to_worker_sts: Dist,
    s1_pods_ready_to_available: Dist,
    s1_cpu_s: f64,
    s1_peak_rss_mib: f64,
    s1_requests: Requests,
    s2_updated_s: f64,
    /// S2 did not finish within --timeout (the time and figures are then up to the timeout).
    s2_timed_out: bool,
    s2_cpu_s: f64,
    s2_peak_rss_mib: f64,
    s2_requests: Requests,
    s3_rss_before_mib: f64,
    s3_rss_after_mib: f64,
    s3_cpu_s: f64,
    s3_requests: Requests,
    s4_mutating: WebhookLatency,
    s4_validating: Option<WebhookLatency>,
    s5: Option<release::ReleaseResult>,
    s5pair: Option<release::ReleaseResult>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    for p in [&mut args.manager_bin, &mut args.state_root, &mut args.repo] {
        if p.is_relative() {
            *p = std::env::current_dir()?.join(&*p);
        }
    }
    std::fs::create_dir_all(&args.state_root)?;
    for s in &args.scenarios {
        if !matches!(s.as_str(), "s1" | "s2" | "s3" | "s4" | "s5" | "s5pair") {
            bail!("--scenarios takes s1..s5 and s5pair, got {s:?}");
        }
    }
    if args.has("s2") && !args.has("s1") {
        bail!("S2 updates the LWSs S1 creates: --scenarios s2 needs s1");
    }
    let mut results = Vec::new();
    for side in args.sides.clone() {
        if side != "ours" && side != "upstream" {
            bail!("--sides takes ours and/or upstream, got {side:?}");
        }
        eprintln!("[bench] === {side} ===");
        let result = run_side(&args, &side)
            .await
            .with_context(|| format!("side {side}"))?;
        eprintln!("[bench] {side}: {}", serde_json::to_string(&result)?);
        results.push(result);
    }
    if let Some(path) = &args.json {
        let out = json!({
            "sizes": {"lws": args.lws, "groups": args.groups, "size": args.size, "noise_pods": args.noise_pods,
                "rollouts": args.rollouts, "release_groups": args.release_groups, "release_size": args.release_size},
            "scenarios": args.scenarios,
            "results": results,
        });
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    }
    println!("{}", table(&args, &results));
    Ok(())
}

/// A fresh cluster for one side; stopped (exactly its recorded processes) on drop.
struct Cluster {
    dir: PathBuf,
    repo: PathBuf,
    keep_logs: bool,
    ok: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let keep = self.keep_logs || !self.ok;
        let mut down = Command::new("bash");
        down.arg(self.repo.join("test/cluster/down.sh"))
            .arg(&self.dir);
        if keep {
            down.arg("--keep-logs");
        }
        let _ = down.stdin(Stdio::null()).stdout(Stdio::null()).status();
        if keep {
            eprintln!("[bench] logs kept in {}/logs", self.dir.display());
        }
    }
}

async fn client_for(path: &Path) -> anyhow::Result<Client> {
    let mut config = lws_rollout::k8s::client::config_from_kubeconfig(path)
        .await
        .with_context(|| format!("reading {path:?}"))?;
    // Lists of thousands of pods on a loaded 2-core machine.
    config.read_timeout = Some(Duration::from_secs(300));
    Ok(Client::try_from(config)?)
}

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn run_side(args: &Args, side: &str) -> anyhow::Result<SideResult> {
    let dir = args.state_root.join(side);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&args.state_root)?;
    let policy = args.state_root.join(format!("audit-policy-{side}.yaml"));
    let detail = if args.audit_detail {
        format!(
            "- level: Request\n  users: [\"{CONTROLLER_USER}\"]\n  \
             verbs: [create, update, patch, delete]\n\
             - level: Metadata\n  users: [\"{CONTROLLER_USER}\"]\n\
             - level: Metadata\n  verbs: [create, delete]\n  \
             resources: [{{group: apps, resources: [statefulsets]}}, {{group: \"\", resources: [pods]}}]\n"
        )
    } else {
        format!("- level: Metadata\n  users: [\"{CONTROLLER_USER}\"]\n")
    };
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
             {detail}- level: None\n"
        ),
    )?;
    // S5's LWSs hold at most twice their pods (stable and canary) plus the stable's surge; S5
    // pair's sets as much per role.
    let released_workloads = 1 + if args.has("s5pair") { 2 } else { 0 };
    let total_pods = args.lws * args.groups * args.size
        + args.noise_pods
        + args.rollouts * args.release_groups * args.release_size * 3 * released_workloads;
    let node_pods = (total_pods / 4 + 200).max(110).to_string();
    eprintln!("[bench] starting a fresh cluster in {}", dir.display());
    let mut cluster = Cluster {
        dir: dir.clone(),
        repo: args.repo.clone(),
        keep_logs: args.keep_logs,
        ok: false,
    };
    // A second try when a free port was taken in between (other clusters on the machine).
    for attempt in 1..=2 {
        let up = run(
            Command::new("bash")
                .arg(args.repo.join("test/cluster/up.sh"))
                .arg(&dir)
                .env("LWS_ROLLOUT_BIN_DIR", &args.bin_dir)
                .env("LWS_CLUSTER_NODE_PODS", &node_pods)
                .env("LWS_CLUSTER_AUDIT_POLICY", &policy)
                .stderr(Stdio::inherit()),
            "test/cluster/up.sh",
        );
        match up {
            Ok(_) => break,
            Err(err) if attempt == 1 => eprintln!("[bench] {err:#}; trying once more"),
            Err(err) => return Err(err),
        }
    }
    run(
        Command::new("bash")
            .arg("-c")
            .arg(r#". "$1/test/cluster/lib.sh" && install_crds "$2/kubectl""#)
            .arg("install-crds")
            .arg(&args.repo)
            .arg(&args.bin_dir)
            .env("KUBECONFIG", dir.join("kubeconfig")),
        "installing CRDs",
    )?;
    let controller_kubeconfig = controller_kubeconfig(&dir)?;
    let client = client_for(&dir.join("kubeconfig")).await?;
    for ns in [NS, NOISE_NS, release::NS] {
        create_namespace(&client, ns).await?;
    }

    // The controller under test, alone against this cluster.
    let (pid, version) = match side {
        "ours" => start_ours(args, &dir, &controller_kubeconfig, &client).await?,
        _ => start_upstream(args, &dir, &controller_kubeconfig)?,
    };
    let proc_ = Proc { pid };
    let mut result = SideResult {
        side: side.into(),
        version,
        ..Default::default()
    };
    let settle = Duration::from_secs(args.settle);
    tokio::time::sleep(settle).await;
    result.idle_rss_mib = proc_.rss_mib()?;

    let watch = Watch::start(client.clone());
    watch.wait_synced().await;
    let audit = Audit {
        path: dir.join("logs/audit.log"),
    };
    let timeout = Duration::from_secs(args.timeout);
    let metrics_before = apiserver_metrics(&dir)?;

    let names: Vec<String> = (0..args.lws).map(|i| format!("lws-{i:04}")).collect();
    let lws_api: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), NS);
    let expected_pods = args.groups * args.size;

    // ---- S1 create ----
    if args.has("s1") {
        eprintln!(
            "[bench] S1: creating {} LWS x {} groups x size {}",
            args.lws, args.groups, args.size
        );
        let cpu0 = proc_.cpu_s()?;
        let a0 = audit.offset();
        let t0 = Instant::now();
        stream::iter(names.iter().cloned())
            .map(|name| {
                let api = lws_api.clone();
                let (groups, size) = (args.groups, args.size);
                async move {
                    let lws: LeaderWorkerSet =
                        serde_json::from_value(lws_manifest(&name, groups, size))?;
                    api.create(&PostParams::default(), &lws)
                        .await
                        .with_context(|| format!("creating LWS {name}"))?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(args.concurrency)
            .try_collect::<Vec<_>>()
            .await?;
        watch
            .wait_until(timeout, "S1: every LWS Available", |s| {
                s.all_done(&names, args.groups, expected_pods, IMAGE_V1)
            })
            .await?;
        result.s1_available_s = t0.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        result.s1_cpu_s = proc_.cpu_s()? - cpu0;
        result.s1_peak_rss_mib = proc_.hwm_mib()?;
        result.s1_requests = audit.count(a0, audit.offset())?;
        {
            let s = watch.state.lock().expect("state");
            result.s1_all_pods_ready_s = s
                .pod_ready
                .values()
                .max()
                .map(|t| t.duration_since(t0).as_secs_f64())
                .unwrap_or_default();
            let mut lws_to_sts = Vec::new();
            let mut pod_to_worker = Vec::new();
            let mut ready_to_available = Vec::new();
            for name in &names {
                if let (Some(c), Some(s)) = (s.lws_seen.get(name), s.sts_seen.get(name)) {
                    lws_to_sts.push(s.saturating_duration_since(*c));
                }
                let mut last_ready: Option<Instant> = None;
                for g in 0..args.groups {
                    let leader = format!("{name}-{g}");
                    if let (Some(p), Some(w)) = (s.pod_seen.get(&leader), s.sts_seen.get(&leader)) {
                        pod_to_worker.push(w.saturating_duration_since(*p));
                    }
                    for w in 0..args.size {
                        let pod = if w == 0 {
                            leader.clone()
                        } else {
                            format!("{leader}-{w}")
                        };
                        if let Some(r) = s.pod_ready.get(&pod) {
                            last_ready = last_ready.max(Some(*r));
                        }
                    }
                }
                if let (Some(r), Some(a)) = (last_ready, s.lws_available.get(name)) {
                    ready_to_available.push(a.saturating_duration_since(r));
                }
            }
            result.s1_lws_to_leader_sts = dist(lws_to_sts);
            result.s1_leader_pod_to_worker_sts = dist(pod_to_worker);
            result.s1_pods_ready_to_available = dist(ready_to_available);
        }
        eprintln!("[bench] S1 done in {:.1}s", result.s1_available_s);
    }

    // ---- S2 update ----
    if args.has("s2") {
        eprintln!("[bench] S2: image change on all {} LWS", args.lws);
        let hwm_before_s2 = proc_.hwm_mib()?;
        let cpu0 = proc_.cpu_s()?;
        let a0 = audit.offset();
        let t0 = Instant::now();
        stream::iter(names.iter().cloned())
        .map(|name| {
            let api = lws_api.clone();
            async move {
                let patch = json!({"spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {
                    "containers": [{"name": "model", "image": IMAGE_V2}]}}}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("updating LWS {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
        if let Err(err) = watch
            .wait_until(
                timeout,
                "S2: every pod on the new image, every LWS Available",
                |s| s.all_done(&names, args.groups, expected_pods, IMAGE_V2),
            )
            .await
        {
            // Reported as such in the table; the other scenarios still run.
            eprintln!("[bench] {err}");
            result.s2_timed_out = true;
        }
        result.s2_updated_s = t0.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        result.s2_cpu_s = proc_.cpu_s()? - cpu0;
        result.s2_peak_rss_mib = proc_.hwm_mib()?.max(hwm_before_s2);
        result.s2_requests = audit.count(a0, audit.offset())?;
        eprintln!("[bench] S2 done in {:.1}s", result.s2_updated_s);
    }

    // ---- S4 admission (over S1 + S2) ----
    if args.has("s4") {
        let metrics_after = apiserver_metrics(&dir)?;
        let (mutating, validating) = match side {
            "ours" => (OUR_WEBHOOK, None),
            _ => (UPSTREAM_WEBHOOK, Some(UPSTREAM_VALIDATING_WEBHOOK)),
        };
        result.s4_mutating = webhook_latency(&metrics_before, &metrics_after, mutating, "admit");
        result.s4_validating =
            validating.map(|v| webhook_latency(&metrics_before, &metrics_after, v, "validating"));
    }

    // ---- S3 noise ----
    if args.has("s3") && args.noise_pods > 0 {
        eprintln!(
            "[bench] S3: {} unrelated pods in namespace {NOISE_NS}",
            args.noise_pods
        );
        tokio::time::sleep(settle).await;
        result.s3_rss_before_mib = proc_.rss_mib()?;
        let cpu0 = proc_.cpu_s()?;
        let a0 = audit.offset();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NOISE_NS);
        stream::iter(0..args.noise_pods)
            .map(|i| {
                let api = pods.clone();
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": format!("noise-{i:05}"), "labels": {"app": "noise"}},
                        "spec": {"nodeName": format!("kwok-node-{}", i % 4),
                            "containers": [{"name": "c", "image": IMAGE_V1}]}
                    }))?;
                    api.create(&PostParams::default(), &pod)
                        .await
                        .with_context(|| format!("creating noise pod {i}"))?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(args.concurrency)
            .try_collect::<Vec<_>>()
            .await?;
        let n = args.noise_pods;
        watch
            .wait_until(timeout, "S3: every noise pod Running", |s| {
                s.noise_running.len() >= n
            })
            .await?;
        // Let the controller settle (and Go's GC run) before reading its resident memory.
        tokio::time::sleep(settle).await;
        result.s3_rss_after_mib = proc_.rss_mib()?;
        result.s3_cpu_s = proc_.cpu_s()? - cpu0;
        result.s3_requests = audit.count(a0, audit.offset())?;
    }

    watch.stop();

    // ---- S5 release and S5 pair (ours only: upstream LWS has no Rollouts) ----
    for (scenario, pair) in [("s5", false), ("s5pair", true)] {
        if !args.has(scenario) || side != "ours" {
            continue;
        }
        eprintln!(
            "[bench] {scenario}: releasing {} Rollouts of {} groups x size {}{}",
            args.rollouts,
            args.release_groups,
            args.release_size,
            if pair { " per role" } else { "" }
        );
        let sizes = release::Sizes {
            rollouts: args.rollouts,
            groups: args.release_groups,
            size: args.release_size,
            blue_green: !pair && args.release_style == "bluegreen",
            partition: !pair && args.release_style == "partition",
            pair,
        };
        let r = release::run(&client, sizes, timeout, args.concurrency, &audit, &|| {
            proc_.cpu_s()
        })
        .await?;
        eprintln!("[bench] {scenario} done in {:.1}s", r.release_s);
        if pair {
            result.s5pair = Some(r);
        } else {
            result.s5 = Some(r);
        }
    }

    match side {
        "ours" => proc_.stop(),
        _ => {
            run(
                Command::new("bash")
                    .arg(args.repo.join("test/upstream/stop.sh"))
                    .arg(&dir)
                    .env("LWS_ROLLOUT_BIN_DIR", &args.bin_dir),
                "test/upstream/stop.sh",
            )?;
        }
    }
    cluster.ok = true;
    drop(cluster);
    Ok(result)
}

fn lws_manifest(name: &str, groups: usize, size: usize) -> serde_json::Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": size,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": IMAGE_V1}]}}}}
    })
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    api.create(&PostParams::default(), &ns).await?;
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sa.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            bail!("no default ServiceAccount in {name} after 60s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// A kubeconfig for the controller under test: its own client certificate (user
/// `lws-bench-controller`, group system:masters), so the audit policy records exactly its requests.
fn controller_kubeconfig(dir: &Path) -> anyhow::Result<PathBuf> {
    let pki = dir.join("pki");
    // An X.509 v3 client certificate (rustls refuses v1 ones).
    std::fs::write(
        pki.join("controller.cnf"),
        "[req]\ndistinguished_name = dn\n[dn]\n[ext]\nbasicConstraints = CA:FALSE\n\
         keyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = clientAuth\n",
    )?;
    run(
        Command::new("openssl")
            .current_dir(&pki)
            .args(["req", "-newkey", "rsa:2048", "-nodes", "-keyout"])
            .arg("controller.key")
            .args(["-out", "controller.csr", "-subj"])
            .arg(format!("/O=system:masters/CN={CONTROLLER_USER}")),
        "openssl req",
    )?;
    run(
        Command::new("openssl").current_dir(&pki).args([
            "x509",
            "-req",
            "-in",
            "controller.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "controller.crt",
            "-days",
            "30",
            "-extfile",
            "controller.cnf",
            "-extensions",
            "ext",
        ]),
        "openssl x509",
    )?;
    let admin = std::fs::read_to_string(dir.join("kubeconfig"))?;
    let b64 = |f: &str| -> anyhow::Result<String> {
        let out = run(Command::new("base64").arg("-w0").arg(pki.join(f)), "base64")?;
        Ok(out.trim().to_string())
    };
    let mut lines = Vec::new();
    for line in admin.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("client-certificate-data:") {
            lines.push(format!(
                "{indent}client-certificate-data: {}",
                b64("controller.crt")?
            ));
        } else if trimmed.starts_with("client-key-data:") {
            lines.push(format!(
                "{indent}client-key-data: {}",
                b64("controller.key")?
            ));
        } else {
            lines.push(line.to_string());
        }
    }
    let path = dir.join("controller.kubeconfig");
    std::fs::write(&path, lines.join("\n") + "\n")?;
    Ok(path)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn start_ours(
    args: &Args,
    dir: &Path,
    kubeconfig: &Path,
    client: &Client,
) -> anyhow::Result<(u32, String)> {
    let health = format!("127.0.0.1:{}", free_port()?);
    let log = std::fs::File::create(dir.join("logs/manager.log"))?;
    let child = Command::new(&args.manager_bin)
        .arg(format!("--health-addr={health}"))
        .args(["--webhook-addr=127.0.0.1:0", "--webhook-host=127.0.0.1"])
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", args.manager_bin.display()))?;
    let pid = child.id();
    std::fs::write(dir.join("pids/manager.pid"), pid.to_string())?;
    // Not waited on: down.sh or Proc::stop ends it; reap it in the background.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if http_status(&health, "/readyz").await == Some(200) {
            break;
        }
        if !Path::new(&format!("/proc/{pid}")).exists() || Instant::now() > deadline {
            bail!(
                "our manager did not become ready (log: {}/logs/manager.log)",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    configs
        .get("lws-rollout")
        .await
        .context("our manager is ready but its webhook configuration is missing")?;
    let version = run(
        Command::new(&args.manager_bin).arg("--version"),
        "--version",
    )?;
    Ok((pid, version.trim().to_string()))
}

fn start_upstream(args: &Args, dir: &Path, kubeconfig: &Path) -> anyhow::Result<(u32, String)> {
    let upstream_bin = args
        .upstream_bin
        .as_ref()
        .context("--sides upstream needs --upstream-bin")?;
    run(
        Command::new("bash")
            .arg(args.repo.join("test/upstream/start.sh"))
            .arg(dir)
            .env("LWS_UPSTREAM_BIN", upstream_bin)
            .env("LWS_ROLLOUT_BIN_DIR", &args.bin_dir)
            .env("LWS_UPSTREAM_KUBECONFIG", kubeconfig)
            // Info level, like ours (its shipped kustomization uses the chattier level 2).
            .env("LWS_UPSTREAM_ARGS", "--zap-log-level=info")
            .stderr(Stdio::inherit()),
        "test/upstream/start.sh",
    )?;
    let pid: u32 = std::fs::read_to_string(dir.join("pids/lws-upstream.pid"))?
        .trim()
        .parse()?;
    let version = run(
        Command::new(upstream_bin).arg("--version"),
        "upstream --version",
    )?;
    let version = version
        .lines()
        .next()
        .unwrap_or_default()
        .replace("Version: ", "lws ");
    Ok((pid, version))
}

/// Status code of `GET path` on a plain HTTP/1.0 server, or None if nothing answers.
async fn http_status(addr: &str, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// The controller process.
struct Proc {
    pid: u32,
}

impl Proc {
    fn status_kib(&self, field: &str) -> anyhow::Result<f64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .with_context(|| format!("controller pid {} is gone", self.pid))?;
        let line = text
            .lines()
            .find(|l| l.starts_with(field))
            .ok_or_else(|| anyhow!("no {field} in /proc/{}/status", self.pid))?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .unwrap_or("0")
            .parse::<f64>()?)
    }
    fn rss_mib(&self) -> anyhow::Result<f64> {
        Ok(self.status_kib("VmRSS:")? / 1024.0)
    }
    fn hwm_mib(&self) -> anyhow::Result<f64> {
        Ok(self.status_kib("VmHWM:")? / 1024.0)
    }
    /// utime + stime of the whole process (all threads), in seconds.
    fn cpu_s(&self) -> anyhow::Result<f64> {
        let text = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .with_context(|| format!("controller pid {} is gone", self.pid))?;
        let after = &text[text.rfind(')').unwrap_or(0) + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
        Ok(ticks / clk_tck())
    }
    fn stop(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        for _ in 0..100 {
            if !Path::new(&format!("/proc/{}", self.pid)).exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The apiserver's audit log, restricted by the policy to the controller's user.
struct Audit {
    path: PathBuf,
}

impl Audit {
    fn offset(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }
    /// Calls `f` with each audit event between two offsets and the offset its line starts at.
    fn for_each(
        &self,
        from: u64,
        to: u64,
        mut f: impl FnMut(u64, &serde_json::Value),
    ) -> anyhow::Result<()> {
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(from))?;
        let mut text = String::new();
        file.take(to - from).read_to_string(&mut text)?;
        let mut offset = from;
        for line in text.split_inclusive('\n') {
            // With --audit-detail the log also holds other users' requests.
            if let Ok(ev) = serde_json::from_str::<serde_json::Value>(line)
                && ev["user"]["username"].as_str() == Some(CONTROLLER_USER)
            {
                f(offset, &ev);
            }
            offset += line.len() as u64;
        }
        Ok(())
    }

    /// Requests in the log between two offsets: every completed non-watch request and every
    /// started watch (long-running requests have no completion until they end).
    fn count(&self, from: u64, to: u64) -> anyhow::Result<Requests> {
        let mut r = Requests::default();
        let mut agents = HashSet::new();
        self.for_each(from, to, |_, ev| {
            let verb = ev["verb"].as_str().unwrap_or_default();
            let stage = ev["stage"].as_str().unwrap_or_default();
            let counted = if verb == "watch" {
                stage == "ResponseStarted"
            } else {
                stage == "ResponseComplete"
            };
            if !counted {
                return;
            }
            r.total += 1;
            *r.by_verb.entry(verb.to_string()).or_default() += 1;
            let obj = &ev["objectRef"];
            let resource = match obj["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", obj["resource"].as_str().unwrap_or_default()),
                None => obj["resource"].as_str().unwrap_or_default().to_string(),
            };
            *r.by_resource
                .entry(format!("{resource} {verb}"))
                .or_default() += 1;
            agents.insert(ev["userAgent"].as_str().unwrap_or("(none)").to_string());
        })?;
        r.user_agents = agents.into_iter().collect();
        r.user_agents.sort();
        Ok(r)
    }
}

/// The apiserver's /metrics text (admin client certificate).
fn apiserver_metrics(dir: &Path) -> anyhow::Result<String> {
    let kubeconfig = std::fs::read_to_string(dir.join("kubeconfig"))?;
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .ok_or_else(|| anyhow!("no server in kubeconfig"))?
        .to_string();
    let pki = dir.join("pki");
    run(
        Command::new("curl")
            .arg("-sf")
            .arg("--cacert")
            .arg(pki.join("ca.crt"))
            .arg("--cert")
            .arg(pki.join("admin.crt"))
            .arg("--key")
            .arg(pki.join("admin.key"))
            .arg(format!("{server}/metrics")),
        "curl apiserver /metrics",
    )
}

/// Cumulative bucket counts `le -> count` of the admission histogram for one webhook's pod
/// CREATE calls.
fn buckets(metrics: &str, name: &str, kind: &str) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    let prefix = "apiserver_admission_webhook_admission_duration_seconds_bucket{";
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        if label("name").as_deref() != Some(name)
            || label("type").as_deref() != Some(kind)
            || label("operation").as_deref() != Some("CREATE")
        {
            continue;
        }
        let (Some(le), Ok(v)) = (label("le"), value.trim().parse::<f64>()) else {
            continue;
        };
        *out.entry(le).or_default() += v;
    }
    out
}

fn webhook_latency(before: &str, after: &str, name: &str, kind: &str) -> WebhookLatency {
    let b = buckets(before, name, kind);
    let a = buckets(after, name, kind);
    let mut finite: Vec<(f64, f64)> = Vec::new();
    let mut total = 0.0;
    for (le, count) in &a {
        let delta = count - b.get(le).copied().unwrap_or(0.0);
        if le == "+Inf" {
            total = delta;
        } else if let Ok(bound) = le.parse::<f64>() {
            finite.push((bound, delta));
        }
    }
    finite.sort_by(|x, y| x.0.total_cmp(&y.0));
    let quantile = |q: f64| -> Option<f64> {
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut prev_bound, mut prev_count) = (0.0, 0.0);
        for (bound, count) in &finite {
            if *count >= rank {
                let width = count - prev_count;
                let frac = if width > 0.0 {
                    (rank - prev_count) / width
                } else {
                    1.0
                };
                return Some((prev_bound + (bound - prev_bound) * frac) * 1000.0);
            }
            (prev_bound, prev_count) = (*bound, *count);
        }
        Some(prev_bound * 1000.0)
    };
    WebhookLatency {
        name: name.into(),
        calls: total,
        p50_ms: quantile(0.50),
        p99_ms: quantile(0.99),
    }
}

/// What the bench's own watchers have seen, with first-seen instants.
#[derive(Default)]
struct State {
    synced: usize,
    lws_seen: HashMap<String, Instant>,
    lws_available: HashMap<String, Instant>,
    /// Per LWS: Available, ready and updated groups as last seen.
    lws_status: HashMap<String, (bool, i32, i32)>,
    sts_seen: HashMap<String, Instant>,
    pod_seen: HashMap<String, Instant>,
    pod_ready: HashMap<String, Instant>,
    /// Per LWS name: pod name -> (image, ready).
    pods: HashMap<String, HashMap<String, (String, bool)>>,
    noise_running: HashSet<String>,
}

impl State {
    /// Every LWS Available with all groups ready and updated, and exactly its pods, all Ready
    /// on `image`.
    fn all_done(&self, names: &[String], groups: usize, pods: usize, image: &str) -> bool {
        names.iter().all(|n| {
            let status_ok = self
                .lws_status
                .get(n)
                .is_some_and(|(avail, ready, updated)| {
                    *avail && *ready == groups as i32 && *updated == groups as i32
                });
            let pods_ok = self.pods.get(n).is_some_and(|p| {
                p.len() == pods && p.values().all(|(img, ready)| *ready && img == image)
            });
            status_ok && pods_ok
        })
    }
}

struct Watch {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

const NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";

impl Watch {
    fn start(client: Client) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let changed = Arc::new(Notify::new());
        let mut tasks = Vec::new();

        let lws: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), NS);
        tasks.push(spawn_watch(
            lws,
            state.clone(),
            changed.clone(),
            |s, l: &LeaderWorkerSet, now| {
                let name = l.name_any();
                s.lws_seen.entry(name.clone()).or_insert(now);
                let st = l.status.clone().unwrap_or_default();
                let avail = st
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Available" && c.status == "True");
                if avail {
                    s.lws_available.entry(name.clone()).or_insert(now);
                }
                s.lws_status.insert(
                    name,
                    (
                        avail,
                        st.ready_replicas.unwrap_or(0),
                        st.updated_replicas.unwrap_or(0),
                    ),
                );
            },
            |_, _| {},
        ));
        let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
        tasks.push(spawn_watch(
            sts,
            state.clone(),
            changed.clone(),
            |s, o: &StatefulSet, now| {
                s.sts_seen.entry(o.name_any()).or_insert(now);
            },
            |_, _| {},
        ));
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        tasks.push(spawn_watch(
            pods,
            state.clone(),
            changed.clone(),
            |s, p: &Pod, now| {
                let name = p.name_any();
                s.pod_seen.entry(name.clone()).or_insert(now);
                let ready = pod_ready(p);
                if ready {
                    s.pod_ready.entry(name.clone()).or_insert(now);
                }
                let image = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                if let Some(lws) = p.labels().get(NAME_LABEL) {
                    s.pods.entry(lws.clone()).or_default().insert(
                        name,
                        (image, ready && p.metadata.deletion_timestamp.is_none()),
                    );
                }
            },
            |s, p: &Pod| {
                let name = p.name_any();
                if let Some(lws) = p.labels().get(NAME_LABEL)
                    && let Some(m) = s.pods.get_mut(lws)
                {
                    m.remove(&name);
                }
                // A replaced pod is a new pod (S2 recreates groups under the same names).
                s.pod_ready.remove(&name);
            },
        ));
        let noise: Api<Pod> = Api::namespaced(client, NOISE_NS);
        tasks.push(spawn_watch(
            noise,
            state.clone(),
            changed.clone(),
            |s, p: &Pod, _| {
                if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                    s.noise_running.insert(p.name_any());
                }
            },
            |s, p: &Pod| {
                s.noise_running.remove(&p.name_any());
            },
        ));
        Self {
            state,
            changed,
            tasks,
        }
    }

    async fn wait_synced(&self) {
        let n = self.tasks.len();
        self.wait_until(Duration::from_secs(60), "watchers synced", |s| {
            s.synced >= n
        })
        .await
        .ok();
    }

    async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        cond: impl Fn(&State) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if cond(&self.state.lock().expect("state")) {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                // One last look, then give up.
                if cond(&self.state.lock().expect("state")) {
                    return Ok(());
                }
                bail!("timed out after {timeout:?}: {what}");
            }
        }
    }

    fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Ready as the controllers read it (`k8s::pod::ready`), of a pod the driver watches whole.
fn pod_ready(pod: &Pod) -> bool {
    lws_rollout::k8s::pod::ready(&lws_rollout::k8s::pod::CachedPod::from(pod))
}

fn spawn_watch<K>(
    api: Api<K>,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    on_apply: impl Fn(&mut State, &K, Instant) + Send + 'static,
    on_delete: impl Fn(&mut State, &K) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let Ok(ev) = ev else { continue };
            {
                let mut s = state.lock().expect("state");
                match &ev {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        on_apply(&mut s, o, now)
                    }
                    watcher::Event::Delete(o) => on_delete(&mut s, o),
                    watcher::Event::InitDone => s.synced += 1,
                    watcher::Event::Init => {}
                }
            }
            changed.notify_waiters();
        }
    })
}

fn ratio(ours: f64, upstream: f64) -> String {
    if upstream > 0.0 {
        format!("{:.2}", ours / upstream)
    } else {
        "–".into()
    }
}

fn opt_ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "–".into())
}

/// The Markdown table: one row per figure, a column per side.
fn table(args: &Args, results: &[SideResult]) -> String {
    let get = |side: &str| results.iter().find(|r| r.side == side);
    let ours = get("ours");
    let up = get("upstream");
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&SideResult) -> f64, fmt: &dyn Fn(f64) -> String| {
        let o = ours.map(f);
        let u = up.map(f);
        rows.push((
            label.to_string(),
            o.map(fmt).unwrap_or_else(|| "–".into()),
            u.map(fmt).unwrap_or_else(|| "–".into()),
            match (o, u) {
                (Some(o), Some(u)) => ratio(o, u),
                _ => "–".into(),
            },
        ));
    };
    let s1 = |v: f64| format!("{v:.1}");
    let ms = |v: f64| format!("{v:.0}");
    let mib = |v: f64| format!("{v:.1}");
    let n = |v: f64| format!("{v:.0}");
    row("idle RSS after start (MiB)", &|r| r.idle_rss_mib, &mib);
    row(
        "S1 time until all Available (s)",
        &|r| r.s1_available_s,
        &s1,
    );
    row(
        "S1 … of which until all pods Ready (KCM, scheduler, KWOK) (s)",
        &|r| r.s1_all_pods_ready_s,
        &s1,
    );
    row(
        "S1 LWS created → leader StatefulSet, p50 (ms)",
        &|r| r.s1_lws_to_leader_sts.p50_ms,
        &ms,
    );
    row(
        "S1 LWS created → leader StatefulSet, p99 (ms)",
        &|r| r.s1_lws_to_leader_sts.p99_ms,
        &ms,
    );
    row(
        "S1 leader pod created → worker StatefulSet, p50 (ms)",
        &|r| r.s1_leader_pod_to_worker_sts.p50_ms,
        &ms,
    );
    row(
        "S1 leader pod created → worker StatefulSet, p99 (ms)",
        &|r| r.s1_leader_pod_to_worker_sts.p99_ms,
        &ms,
    );
    row(
        "S1 group's pods all Ready → LWS Available, p50 (ms)",
        &|r| r.s1_pods_ready_to_available.p50_ms,
        &ms,
    );
    row(
        "S1 group's pods all Ready → LWS Available, p99 (ms)",
        &|r| r.s1_pods_ready_to_available.p99_ms,
        &ms,
    );
    row("S1 controller CPU (s)", &|r| r.s1_cpu_s, &|v| {
        format!("{v:.2}")
    });
    row("S1 controller peak RSS (MiB)", &|r| r.s1_peak_rss_mib, &mib);
    row(
        "S1 API requests by the controller",
        &|r| r.s1_requests.total as f64,
        &n,
    );
    row(
        "S2 time until all updated and Available (s; > = did not finish)",
        &|r| r.s2_updated_s,
        &s1,
    );
    row("S2 controller CPU (s)", &|r| r.s2_cpu_s, &|v| {
        format!("{v:.2}")
    });
    row(
        "S2 API requests by the controller",
        &|r| r.s2_requests.total as f64,
        &n,
    );
    // Each S2 update replaces every group once; the writes a correct roll needs per group are
    // one worker StatefulSet create, a leader StatefulSet partition patch and a status patch.
    let replaced = (args.lws * args.groups).max(1) as f64;
    let per_group = |key: &'static str| {
        move |r: &SideResult| {
            r.s2_requests
                .by_resource
                .iter()
                .filter(|(k, _)| k.ends_with(key))
                .map(|(_, v)| *v)
                .sum::<u64>() as f64
                / replaced
        }
    };
    let two = |v: f64| format!("{v:.2}");
    row(
        "S2 StatefulSet creates per group replaced",
        &|r| {
            r.s2_requests
                .by_resource
                .get("statefulsets create")
                .copied()
                .unwrap_or(0) as f64
                / replaced
        },
        &two,
    );
    row("S2 deletes per group replaced", &per_group(" delete"), &two);
    row("S2 patches per group replaced", &per_group(" patch"), &two);
    row("S2 updates per group replaced", &per_group(" update"), &two);
    if args.noise_pods > 0 {
        row(
            "S3 idle RSS before the unrelated pods (MiB)",
            &|r| r.s3_rss_before_mib,
            &mib,
        );
        row(
            "S3 idle RSS after the unrelated pods (MiB)",
            &|r| r.s3_rss_after_mib,
            &mib,
        );
        row(
            "S3 controller CPU while they arrive (s)",
            &|r| r.s3_cpu_s,
            &|v| format!("{v:.2}"),
        );
    }
    row(
        "S4 pod mutating webhook calls (S1+S2)",
        &|r| r.s4_mutating.calls,
        &n,
    );
    for (label, o, u, _) in rows.iter_mut() {
        if label.starts_with("S2 time") {
            if ours.is_some_and(|r| r.s2_timed_out) {
                *o = format!("> {o}");
            }
            if up.is_some_and(|r| r.s2_timed_out) {
                *u = format!("> {u}");
            }
        }
    }
    // Only the scenarios that ran (labels start with their name, e.g. "S1 ").
    rows.retain(|(label, ..)| {
        let scenario = label.split(' ').next().unwrap_or_default().to_lowercase();
        let named = scenario.len() == 2 && scenario.starts_with('s');
        !named || args.has(&scenario)
    });
    let mut out = String::new();
    out.push_str(&format!("Scenarios: {}.", args.scenarios.join(", ")));
    if ["s1", "s2", "s3", "s4"].iter().any(|s| args.has(s)) {
        out.push_str(&format!(
            " Sizes: {} LWS × {} groups × size {} ({} pods), {} unrelated pods.",
            args.lws,
            args.groups,
            args.size,
            args.lws * args.groups * args.size,
            args.noise_pods
        ));
    }
    if args.has("s5") {
        out.push_str(&format!(
            " S5: {} Rollouts of {} groups × size {}.",
            args.rollouts, args.release_groups, args.release_size
        ));
    }
    if args.has("s5pair") {
        out.push_str(&format!(
            " S5 pair: {} Rollouts of a DisaggregatedSet, prefill and decode {} groups × size {} each.",
            args.rollouts, args.release_groups, args.release_size
        ));
    }
    out.push_str("\n\n");
    out.push_str(&format!(
        "| figure | ours | upstream {} | ours / upstream |\n|---|---:|---:|---:|\n",
        args.upstream_version
    ));
    for (l, o, u, r) in rows {
        out.push_str(&format!("| {l} | {o} | {u} | {r} |\n"));
    }
    let w = |r: Option<&SideResult>, q: fn(&WebhookLatency) -> Option<f64>| {
        r.map(|r| opt_ms(q(&r.s4_mutating)))
            .unwrap_or_else(|| "–".into())
    };
    if args.has("s4") {
        out.push_str(&format!(
            "| S4 pod mutating webhook p50 (ms, apiserver histogram) | {} | {} | |\n",
            w(ours, |l| l.p50_ms),
            w(up, |l| l.p50_ms)
        ));
        out.push_str(&format!(
            "| S4 pod mutating webhook p99 (ms, apiserver histogram) | {} | {} | |\n",
            w(ours, |l| l.p99_ms),
            w(up, |l| l.p99_ms)
        ));
    }
    if let Some(v) = up.and_then(|u| u.s4_validating.as_ref()) {
        out.push_str(&format!(
            "| S4 upstream's extra pod validating webhook p50 / p99 (ms) | – | {} / {} | |\n",
            opt_ms(v.p50_ms),
            opt_ms(v.p99_ms)
        ));
    }
    for r in ours.into_iter().flat_map(|o| [&o.s5, &o.s5pair]).flatten() {
        out.push_str(&release_rows(r));
    }
    out.push('\n');
    for r in results {
        out.push_str(&format!(
            "{} ({}): requests S1 {:?}, S2 {:?}, S3 {:?}; user agents {:?}\n",
            r.side,
            r.version,
            r.s1_requests.by_verb,
            r.s2_requests.by_verb,
            r.s3_requests.by_verb,
            r.s1_requests.user_agents
        ));
        out.push_str(&format!(
            "{} S2 requests by resource: {:?}\n",
            r.side, r.s2_requests.by_resource
        ));
        for rel in [&r.s5, &r.s5pair].into_iter().flatten() {
            for w in &rel.writes {
                out.push_str(&format!(
                    "{} {} step {} writes (all Rollouts): {:?}\n",
                    r.side,
                    release_label(rel),
                    w.step,
                    w.by_resource
                ));
            }
        }
    }
    out
}

/// The rows' prefix: `S5`, or `S5 pair` for DisaggregatedSets.
fn release_label(r: &release::ReleaseResult) -> &'static str {
    if r.workload == "pair" {
        "S5 pair"
    } else {
        "S5"
    }
}

/// S5's rows (and S5 pair's): ours only (upstream LWS has no Rollouts).
fn release_rows(r: &release::ReleaseResult) -> String {
    let none = "– (no Rollouts)";
    let pair = r.workload == "pair";
    let s5 = release_label(r);
    let mut out = String::new();
    let mut row = |label: String, v: String| {
        out.push_str(&format!("| {s5} {label} | {v} | {none} | |\n"));
    };
    row(
        format!(
            "release of {} {} Rollouts ({} groups × size {}{}, {} steps), until all Completed (s{})",
            r.rollouts,
            r.style,
            r.groups,
            r.size,
            if pair {
                " of prefill and of decode"
            } else {
                ""
            },
            r.steps,
            if r.timed_out {
                "; > = did not finish"
            } else {
                ""
            }
        ),
        format!("{}{:.1}", if r.timed_out { "> " } else { "" }, r.release_s),
    );
    let d = |x: &Dist| format!("{:.0} / {:.0} (n={})", x.p50_ms, x.p99_ms, x.n);
    row(
        if pair {
            "approve → next BatchRelease/release-groups/new LWS write, p50 / p99 (ms)"
        } else {
            "approve → next BatchRelease/canary LWS write, p50 / p99 (ms)"
        }
        .into(),
        d(&r.approve_to_write),
    );
    row(
        if pair {
            "new pair's batch ready (both roles) → Rollout's next step write, p50 / p99 (ms)"
        } else {
            "canary batch ready → Rollout's next step write, p50 / p99 (ms)"
        }
        .into(),
        d(&r.ready_to_step),
    );
    if let Some(moved) = &r.approve_to_moved {
        row(
            if pair {
                "approve → the set's release-groups written, p50 / p99 (ms)"
            } else {
                "approve → the release partition that moves the next groups written, p50 / p99 (ms)"
            }
            .into(),
            d(moved),
        );
    }
    if let Some(written) = &r.approve_to_pair_written {
        row(
            "approve → both roles' new LWS written (the later), p50 / p99 (ms)".into(),
            d(written),
        );
    }
    row("controller CPU (s)".into(), format!("{:.2}", r.cpu_s));
    for w in &r.writes {
        row(
            format!(
                "{}{}: writes per Rollout by the release controllers / by the {}",
                if w.step > r.steps {
                    "promotion".to_string()
                } else {
                    format!("step {}", w.step)
                },
                if w.step > r.steps || (w.step == r.steps && r.style != "bluegreen") {
                    " (with finalising)"
                } else {
                    ""
                },
                if pair {
                    "DisaggregatedSet and LWS controllers"
                } else {
                    "LWS controller"
                }
            ),
            format!("{:.1} / {:.1}", w.release_per_rollout, w.lws_per_rollout),
        );
    }
    out
}
