//! lws-podagent: test-only stand-in for the containers KWOK does not run.
//!
//! For every Running+Ready pod with a TCP containerPort whose pod IP is in the cluster's pod
//! range, it serves HTTP on podIP:port inside the test's network namespace and answers with
//! JSON naming the pod, its LWS, its revision hash, its image and the request. It also carries
//! the two TCP bridges between the host's loopback and the namespace's (API server in, proxy
//! entry point out). Started by test/cluster/up.sh; see docs/local-cluster.md.

mod bridge;
mod netns;
mod pods;
mod serve;
mod table;
mod vllm;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};

#[derive(Parser)]
#[command(
    about = "Makes Ready pods of the local test cluster answer HTTP inside its network namespace"
)]
struct Args {
    /// Name of the network namespace (under /var/run/netns) the pod addresses live in.
    #[arg(long)]
    netns: String,
    /// The cluster's pod range; the agent never listens outside it.
    #[arg(long)]
    pod_cidr: pods::Cidr,
    /// LISTEN=TARGET: accept inside the namespace on LISTEN, forward to TARGET on the host's
    /// loopback (repeatable).
    #[arg(long = "bridge-in")]
    bridge_in: Vec<String>,
    /// LISTEN=TARGET: accept on the host's loopback LISTEN, forward to TARGET inside the
    /// namespace (repeatable).
    #[arg(long = "bridge-out")]
    bridge_out: Vec<String>,
    /// How long a deleted pod keeps answering (a real server's preStop drain), in milliseconds.
    #[arg(long, default_value_t = 5000)]
    drain_ms: u64,
    /// Written once the bridges listen and the first pod list is served.
    #[arg(long)]
    ready_file: PathBuf,
    /// Where to keep Prometheus's file service discovery up to date: every serving leader
    /// address with its pod's labels (`vllm::targets`).
    #[arg(long)]
    prometheus_targets: Option<PathBuf>,
}

fn pair(s: &str) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let (l, t) = s
        .split_once('=')
        .with_context(|| format!("{s}: expected LISTEN=TARGET"))?;
    Ok((
        l.parse().with_context(|| format!("bad address {l}"))?,
        t.parse().with_context(|| format!("bad address {t}"))?,
    ))
}

#[tokio::main]
async fn main() {
    // One line on failure: up.sh reports the agent's last log line as the reason.
    if let Err(e) = run(Args::parse()).await {
        eprintln!("lws-podagent: {e:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let ns = netns::Netns::open(&args.netns).context("entering the test network namespace")?;

    for b in &args.bridge_in {
        let (listen, target) = pair(b)?;
        if !target.ip().is_loopback() {
            bail!("--bridge-in target {target} is not on loopback");
        }
        let l = ns
            .bind(listen)
            .await
            .with_context(|| format!("listening on {listen} in the namespace"))?;
        tokio::spawn(bridge::run(l, bridge::Target::Host(target)));
    }
    for b in &args.bridge_out {
        let (listen, target) = pair(b)?;
        if !listen.ip().is_loopback() {
            bail!("--bridge-out listen address {listen} is not on loopback");
        }
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        tokio::spawn(bridge::run(l, bridge::Target::Netns(ns.clone(), target)));
    }

    let client = Client::try_default()
        .await
        .context("kube client from KUBECONFIG")?;
    let api: Api<Pod> = Api::all(client);
    let drain = Duration::from_millis(args.drain_ms);
    let mut server = serve::Server::new(ns);
    let mut pods: HashMap<String, Pod> = HashMap::new();
    let mut relist: Option<HashMap<String, Pod>> = None;
    // Ready once the first full pod list is applied (an empty cluster counts too).
    let mut listed = false;
    let mut ready = false;
    let mut last_targets: Option<String> = None;
    let mut events = watcher(api, watcher::Config::default()).boxed();
    // Drains end, and failed binds are tried again, on time even when no pod event arrives.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let changed = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tick.tick() => server.time_bound(),
            ev = events.next() => {
                let mut changed = watched(ev, &mut pods, &mut relist, &mut listed)?;
                // A burst of events (a namespace deleted, a release step) is one table change:
                // the table is rebuilt from every pod, once per burst rather than per event.
                while let Some(ev) = events.next().now_or_never() {
                    changed |= watched(ev, &mut pods, &mut relist, &mut listed)?;
                }
                changed
            }
        };
        if !changed {
            continue;
        }
        let next = table::next(
            &server.table(),
            &pods,
            &args.pod_cidr,
            drain,
            Instant::now(),
        );
        server.apply(next).await;
        if let Some(path) = &args.prometheus_targets {
            let text = vllm::targets(&server.table());
            if last_targets.as_deref() != Some(text.as_str()) {
                // Renamed into place: Prometheus never reads half a file.
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, &text).context("writing the Prometheus targets")?;
                std::fs::rename(&tmp, path).context("writing the Prometheus targets")?;
                last_targets = Some(text);
            }
        }
        if listed && !ready {
            std::fs::write(&args.ready_file, b"ready\n").context("writing the ready file")?;
            ready = true;
        }
    }
}

/// Applies one pod watch event to `pods`; true when the pods may serve differently after it (a
/// relist counts once it is complete).
fn watched(
    ev: Option<Result<watcher::Event<Pod>, watcher::Error>>,
    pods: &mut HashMap<String, Pod>,
    relist: &mut Option<HashMap<String, Pod>>,
    listed: &mut bool,
) -> anyhow::Result<bool> {
    match ev {
        None => bail!("pod watch ended"),
        Some(Err(e)) => {
            eprintln!("pod watch: {e}");
            Ok(false)
        }
        Some(Ok(watcher::Event::Init)) => {
            *relist = Some(HashMap::new());
            Ok(false)
        }
        Some(Ok(watcher::Event::InitApply(p))) => {
            if let (Some(r), Some(uid)) = (relist.as_mut(), p.metadata.uid.clone()) {
                r.insert(uid, p);
            }
            Ok(false)
        }
        Some(Ok(watcher::Event::InitDone)) => {
            if let Some(r) = relist.take() {
                *pods = r;
            }
            *listed = true;
            Ok(true)
        }
        Some(Ok(watcher::Event::Apply(p))) => {
            if let Some(uid) = p.metadata.uid.clone() {
                pods.insert(uid, p);
            }
            Ok(true)
        }
        Some(Ok(watcher::Event::Delete(p))) => {
            if let Some(uid) = &p.metadata.uid {
                pods.remove(uid);
            }
            Ok(true)
        }
    }
}
