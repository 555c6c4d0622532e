//! The lws-rollout manager binary.

use std::net::SocketAddr;

use clap::Parser;
use lws_rollout::{
    lws::controller as lws_controller,
    manager::{self, Config, WebhookConfig, WebhookReach, leader::LeaderElection},
};
use tracing_subscriber::{filter::Targets, layer::SubscriberExt, util::SubscriberInitExt};

/// LeaderWorkerSet controller with Kruise-Rollout compatible progressive delivery.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, env = "LWS_ROLLOUT_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
    /// Listen address of the admission webhook (TLS).
    #[arg(long, env = "LWS_ROLLOUT_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    webhook_addr: SocketAddr,
    /// Out of cluster: the API server calls the webhook at https://<host>:<port>.
    #[arg(
        long,
        env = "LWS_ROLLOUT_WEBHOOK_HOST",
        conflicts_with = "webhook_service"
    )]
    webhook_host: Option<String>,
    /// In cluster: the webhook Service, as <namespace>/<name>:<port>.
    #[arg(long, env = "LWS_ROLLOUT_WEBHOOK_SERVICE")]
    webhook_service: Option<String>,
    /// Name of the Mutating- and ValidatingWebhookConfiguration the manager keeps current.
    #[arg(
        long,
        env = "LWS_ROLLOUT_WEBHOOK_CONFIGURATION",
        default_value = "lws-rollout"
    )]
    webhook_configuration: String,
    /// ClusterRole that owns the webhook configurations, so the garbage collector deletes them
    /// with it (the Helm chart passes its own: `helm uninstall` then leaves no webhook behind).
    /// Unset: they stay until deleted by hand.
    #[arg(long, env = "LWS_ROLLOUT_WEBHOOK_OWNER")]
    webhook_owner: Option<String>,
    /// Secret (in the manager's namespace) that shares the webhook certificate between replicas.
    #[arg(
        long,
        env = "LWS_ROLLOUT_WEBHOOK_SECRET",
        default_value = "lws-rollout-webhook-cert"
    )]
    webhook_secret: String,
    /// Run the controllers only while holding a Lease, so several replicas can run (each
    /// serves the webhooks; one reconciles). `--leader-elect=false` for a single process.
    #[arg(long, env = "LWS_ROLLOUT_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the Lease (default: the pod's namespace in a cluster, else `default`).
    #[arg(long, env = "LWS_ROLLOUT_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(
        long,
        env = "LWS_ROLLOUT_LEADER_ELECTION_ID",
        default_value = "lws-rollout"
    )]
    leader_election_id: String,
    /// Worker threads of the async runtime; 0 runs everything on the main thread.
    #[arg(long, env = "LWS_ROLLOUT_WORKER_THREADS", default_value_t = 0)]
    worker_threads: usize,
    /// The LWS controller's per-LWS trigger window: the first event after a quiet window
    /// reconciles at once, the window's other events in one reconcile at its end.
    #[arg(long, env = "LWS_ROLLOUT_RECONCILE_WINDOW_MS", default_value_t = lws_controller::RECONCILE_WINDOW.as_millis() as u64)]
    lws_reconcile_window_ms: u64,
    /// LWS reconciles that run at once (0: unbounded).
    #[arg(long, env = "LWS_ROLLOUT_LWS_CONCURRENCY", default_value_t = lws_controller::RECONCILE_CONCURRENCY)]
    lws_concurrency: u16,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "LWS_ROLLOUT_LOG_JSON")]
    log_json: bool,
    /// Hand every LWS group to this gang scheduler, as upstream LWS's
    /// `gangSchedulingManagement.schedulerProvider` does: `volcano` (a Volcano PodGroup per
    /// group, and the `scheduling.k8s.io/group-name` annotation on its pods). Unset: only LWS
    /// that ask for native gang scheduling are gang-scheduled (docs/lws.md, "Gang scheduling").
    #[arg(long, env = "LWS_ROLLOUT_GANG_SCHEDULING_PROVIDER", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<lws_rollout::lws::volcano::GangProvider>()))]
    gang_scheduling_provider: Option<lws_rollout::lws::volcano::GangProvider>,
}

/// Exit code when another replica took the leader Lease: a designed exit (docs/install.md,
/// "Leader election"), so the process says so in one line and leaves without a backtrace; its
/// supervisor restarts it as a standby.
const EXIT_LOST_LEASE: u8 = 3;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let result = match runtime(&args) {
        Ok(rt) => rt.block_on(run(args)),
        Err(err) => Err(err.into()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => exit_for(&err),
    }
}

/// One line for a failure that ends the process (the cause chain, no backtrace: backtraces are
/// for panics), and its exit code.
fn exit_for(err: &anyhow::Error) -> std::process::ExitCode {
    let lost_lease = matches!(
        err.downcast_ref::<manager::Error>(),
        Some(manager::Error::LostLease)
    );
    let code = if lost_lease { EXIT_LOST_LEASE } else { 1 };
    if tracing::dispatcher::has_been_set() {
        tracing::error!(exit_code = code, "{err:#}");
    } else {
        // Before the logger exists (the runtime could not be built).
        eprintln!("lws-rollout: {err:#}");
    }
    std::process::ExitCode::from(code)
}

/// The async runtime. One thread by default: the controllers and the caches' drivers already
/// run as one task (kube-runtime polls reconciles inside its controller stream), so more
/// worker threads bought nothing but cross-thread wake-ups and one glibc malloc arena per
/// thread, i.e. memory held in several arenas at once. `--worker-threads N` gives a multi-threaded runtime, e.g. for a
/// webhook under heavy load.
fn runtime(args: &Args) -> std::io::Result<tokio::runtime::Runtime> {
    match args.worker_threads {
        0 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let (filter, bad_filter) = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    // Logs go to stderr; colour only when a person watches it (a terminal, and no NO_COLOR),
    // so `lws-rollout 2> file` or a container log holds plain text, not escape sequences.
    let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let ansi = stderr_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    if args.log_json {
        let fmt = tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr);
        tracing_subscriber::registry().with(fmt).with(filter).init();
    } else {
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        tracing_subscriber::registry().with(fmt).with(filter).init();
    }
    if let Some(err) = bad_filter {
        tracing::warn!("RUST_LOG is not a target filter ({err}); logging at info");
    }
    let reach = match (&args.webhook_host, &args.webhook_service) {
        (Some(host), _) => Some(WebhookReach::Host(host.clone())),
        (None, Some(service)) => Some(parse_service(service)?),
        (None, None) => {
            tracing::warn!(
                "no --webhook-host or --webhook-service: LWS pods get no labels or LWS_* variables from us"
            );
            None
        }
    };
    let webhook = reach.map(|reach| WebhookConfig {
        addr: args.webhook_addr,
        reach,
        configuration_name: args.webhook_configuration.clone(),
        configuration_owner: args.webhook_owner.clone(),
        secret_namespace: own_namespace(),
        secret_name: args.webhook_secret.clone(),
    });
    let leader_election = args.leader_elect.then(|| LeaderElection {
        namespace: args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(own_namespace),
        lease_name: args.leader_election_id.clone(),
        identity: LeaderElection::default_identity(),
    });
    let config = Config {
        health_addr: args.health_addr,
        webhook,
        leader_election,
        gang_scheduling_provider: args.gang_scheduling_provider,
        lws: lws_controller::Tuning {
            reconcile_window: std::time::Duration::from_millis(args.lws_reconcile_window_ms),
            concurrency: args.lws_concurrency,
        },
    };
    manager::run(config, shutdown_signal()).await?;
    Ok(())
}

/// The namespace we run in: `POD_NAMESPACE`, the service account's, or `default` outside a
/// cluster.
fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|ns| ns.trim().to_string())
        })
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// `<namespace>/<name>:<port>`.
fn parse_service(text: &str) -> anyhow::Result<WebhookReach> {
    let (namespace, rest) = text.split_once('/').ok_or_else(|| {
        anyhow::anyhow!("--webhook-service must be <namespace>/<name>:<port>, got {text:?}")
    })?;
    let (name, port) = rest.split_once(':').unwrap_or((rest, "443"));
    let port = port
        .parse()
        .map_err(|_| anyhow::anyhow!("--webhook-service port must be a number, got {port:?}"))?;
    Ok(WebhookReach::Service {
        namespace: namespace.into(),
        name: name.into(),
        port,
    })
}

/// Completes on SIGTERM (kubelet, kill) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// The log filter from `RUST_LOG` (default `info`): `level` or `target=level` directives,
/// comma-separated (`info,lws_rollout=debug`). A target filter rather than tracing's
/// `EnvFilter`: that one also matches span names and field values with regular expressions,
/// which no deployment of ours uses, and its regex engine was a large share of the binary, all of
/// it resident. A filter that does not parse logs at `info` and says why.
fn log_filter(env: Option<&str>) -> (Targets, Option<String>) {
    let default = || Targets::new().with_default(tracing::Level::INFO);
    match env.map(str::trim).filter(|v| !v.is_empty()) {
        None => (default(), None),
        Some(text) => match text.parse::<Targets>() {
            Ok(targets) => (targets, None),
            Err(err) => (default(), Some(err.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;
    use tracing::Level;

    #[test]
    fn log_filter_reads_levels_and_targets() {
        let (f, err) = log_filter(None);
        assert!(err.is_none());
        assert!(f.would_enable("kube_runtime", &Level::INFO));
        assert!(!f.would_enable("kube_runtime", &Level::DEBUG));

        let (f, err) = log_filter(Some("warn,lws_rollout=debug"));
        assert!(err.is_none());
        assert!(f.would_enable("lws_rollout::lws", &Level::DEBUG));
        assert!(!f.would_enable("kube_runtime", &Level::INFO));
        assert!(f.would_enable("kube_runtime", &Level::WARN));

        let (f, err) = log_filter(Some("lws_rollout=loud"));
        assert!(err.is_some(), "a bad level is reported");
        assert!(f.would_enable("lws_rollout", &Level::INFO));
    }
}
