//! The manager process: connects to the cluster, checks that our CRDs are served, runs the
//! controllers and serves health endpoints until asked to stop (see `docs/architecture.md`).

pub mod health;

use std::{future::Future, net::SocketAddr};

use kube::{Api, Client, api::ListParams};
use thiserror::Error;
use tracing::info;

use crate::api::{BatchRelease, LeaderWorkerSet, Rollout};

/// Settings of one manager run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `/healthz` and `/readyz` are served.
    pub health_addr: SocketAddr,
}

/// Why the manager could not start or keep running.
#[derive(Debug, Error)]
pub enum Error {
    /// No kubeconfig and not in a cluster, or the config is unusable.
    #[error("cannot build a Kubernetes client (set KUBECONFIG or run in a cluster): {0}")]
    Client(#[source] kube::Error),
    /// The API server did not answer.
    #[error("the Kubernetes API server is not reachable: {0}")]
    Unreachable(#[source] kube::Error),
    /// A CRD of ours is not installed.
    #[error(
        "the {kind} CRD is not served by the cluster ({source}); install it with: kubectl apply --server-side -f crds/"
    )]
    CrdMissing {
        /// Kind whose list failed.
        kind: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The health server failed.
    #[error("health server on {addr}: {source}")]
    Health {
        /// Listen address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs the manager until `shutdown` completes.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let client = Client::try_default().await.map_err(Error::Client)?;
    let version = client
        .apiserver_version()
        .await
        .map_err(Error::Unreachable)?;
    info!(server = %version.git_version, "connected to the API server");
    // A CRD applied a moment ago can be Established before its endpoint answers: retry briefly.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match check_crds(&client).await {
            Ok(()) => break,
            Err(err) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %err, "waiting for the CRDs");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(err) => return Err(err),
        }
    }

    let health = health::Health::default();
    let listener = tokio::net::TcpListener::bind(config.health_addr)
        .await
        .map_err(|source| Error::Health {
            addr: config.health_addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Health {
        addr: config.health_addr,
        source,
    })?;
    info!(%addr, "serving /healthz and /readyz");
    health.set_ready(true);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let controllers = tokio::spawn({
        let client = client.clone();
        let mut stop = stop_rx.clone();
        async move {
            crate::lws::controller::run(client, async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            })
            .await
        }
    });

    let on_stop = {
        let health = health.clone();
        async move {
            shutdown.await;
            let _ = stop_tx.send(true);
            // Stop advertising readiness first so load balancers drain before we exit.
            health.set_ready(false);
            info!("shutting down");
        }
    };
    axum::serve(listener, health.router())
        .with_graceful_shutdown(on_stop)
        .await
        .map_err(|source| Error::Health { addr, source })?;
    // Let in-flight reconciles finish (graceful shutdown of the controllers).
    let _ = controllers.await;
    info!("stopped");
    Ok(())
}

/// Lists one object of each kind: proves the CRDs are installed and we may read them.
async fn check_crds(client: &Client) -> Result<(), Error> {
    probe::<LeaderWorkerSet>(client, "LeaderWorkerSet").await?;
    probe::<Rollout>(client, "Rollout").await?;
    probe::<BatchRelease>(client, "BatchRelease").await
}

async fn probe<K>(client: &Client, kind: &'static str) -> Result<(), Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Api::<K>::all(client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map(|_| ())
        .map_err(|source| Error::CrdMissing { kind, source })
}
