//! The lws-rollout manager binary.

use std::net::SocketAddr;

use clap::Parser;
use lws_rollout::manager::{self, Config, WebhookConfig, WebhookReach};
use tracing_subscriber::EnvFilter;

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
    /// Name of the MutatingWebhookConfiguration the manager keeps current.
    #[arg(
        long,
        env = "LWS_ROLLOUT_WEBHOOK_CONFIGURATION",
        default_value = "lws-rollout"
    )]
    webhook_configuration: String,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "LWS_ROLLOUT_LOG_JSON")]
    log_json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
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
    });
    let config = Config {
        health_addr: args.health_addr,
        webhook,
    };
    manager::run(config, shutdown_signal()).await?;
    Ok(())
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
