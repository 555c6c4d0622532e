//! The lws-rollout manager binary.

use std::net::SocketAddr;

use clap::Parser;
use lws_rollout::manager::{self, Config};
use tracing_subscriber::EnvFilter;

/// LeaderWorkerSet controller with Kruise-Rollout compatible progressive delivery.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, env = "LWS_ROLLOUT_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
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
    manager::run(
        Config {
            health_addr: args.health_addr,
        },
        shutdown_signal(),
    )
    .await?;
    Ok(())
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
