//! The manager process: connects to the cluster, checks that our CRDs are served, runs the
//! controllers and serves health endpoints until asked to stop (see `docs/architecture.md`).

pub mod caches;
pub mod health;
pub mod leader;
pub mod metrics;

use std::{
    future::{Future, IntoFuture},
    net::SocketAddr,
};

use futures::{FutureExt, StreamExt};
use kube::{Api, Client, api::ListParams};
use thiserror::Error;
use tracing::{info, warn};

use crate::api::{BatchRelease, LeaderWorkerSet, Rollout};

/// How long in-flight reconciles get to finish after a shutdown signal.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(8);

/// Settings of one manager run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `/healthz` and `/readyz` are served.
    pub health_addr: SocketAddr,
    /// The pod webhook, when enabled.
    pub webhook: Option<WebhookConfig>,
    /// Leader election, when enabled (several replicas); without it this process always runs
    /// the controllers.
    pub leader_election: Option<leader::LeaderElection>,
    /// The gang scheduler every LWS group is handed to (upstream's
    /// `gangSchedulingManagement.schedulerProvider`); none: only LWS that ask for native gang
    /// scheduling are gang-scheduled.
    pub gang_scheduling_provider: Option<crate::lws::volcano::GangProvider>,
    /// The LWS controller's tuning.
    pub lws: crate::lws::controller::Tuning,
}

/// How the webhook is served and reached.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Listen address of the TLS server (port 0 picks a free one).
    pub addr: SocketAddr,
    /// How the API server reaches it.
    pub reach: WebhookReach,
    /// Name of the Mutating- and ValidatingWebhookConfiguration.
    pub configuration_name: String,
    /// The ClusterRole that owns them, so they go when it goes (the Helm chart's own, deleted
    /// by `helm uninstall`); none: they stay until deleted by hand.
    pub configuration_owner: Option<String>,
    /// Namespace of the Secret that shares the certificate between replicas.
    pub secret_namespace: String,
    /// Name of that Secret.
    pub secret_name: String,
}

/// How the API server reaches the webhook.
#[derive(Debug, Clone)]
pub enum WebhookReach {
    /// `https://<host>:<bound port>`: a manager outside the cluster (local cluster, demo).
    Host(String),
    /// A Service `<namespace>/<name>` on `port`: a manager in the cluster.
    Service {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Port.
        port: i32,
    },
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
    /// The webhook could not be set up.
    #[error(transparent)]
    Webhook(#[from] crate::webhook::Error),
    /// Another replica holds the lease now; this one stops so that only one writes.
    #[error("lost the leader lease; exiting so that a single replica runs the controllers")]
    LostLease,
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

pub use crate::k8s::client::USER_AGENT;

/// Runs the manager until `shutdown` completes.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let client = crate::k8s::client::infer().await.map_err(Error::Client)?;
    // Created first and kept for the life of the process: see `metrics`.
    let metrics = crate::k8s::metrics::Metrics::new();
    // The health server answers from the start (live, not ready), so a manager waiting for
    // the API server is not taken for a hung one by its liveness probe.
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
    info!(%addr, "serving /healthz, /readyz and /metrics");
    // The health server stops accepting at once; a probe connection left open must not keep
    // the process alive, so it only gets a short grace.
    let health_server = tokio::spawn(
        axum::serve(listener, health.router().merge(metrics::router(&metrics))).into_future(),
    );
    let mut shutdown = std::pin::pin!(shutdown);
    let webhook = tokio::select! {
        started = connect(&client, &config, &metrics) => match started {
            Ok(webhook) => webhook,
            Err(err) => {
                health_server.abort();
                return Err(err);
            }
        },
        _ = &mut shutdown => {
            health_server.abort();
            info!("stopped before the API server answered");
            return Ok(());
        }
    };
    health.set_ready(true);

    let election = config
        .leader_election
        .as_ref()
        .map(|cfg| leader::Election::start(client.clone(), cfg));
    match &election {
        Some(election) => {
            tokio::spawn(follow_leadership(
                election.is_leader.clone(),
                metrics.clone(),
            ));
        }
        None => metrics.set_leader(true),
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut controllers = tokio::spawn(run_controllers(
        client.clone(),
        metrics.clone(),
        config.lws,
        stop_rx,
        election.as_ref().map(|e| e.is_leader.clone()),
        config.gang_scheduling_provider,
    ));

    let mut outcome = Ok(());
    tokio::select! {
        _ = &mut shutdown => info!("shutting down"),
        // Before a shutdown, controllers end only when the lease is lost.
        _ = &mut controllers => outcome = Err(Error::LostLease),
    }
    let _ = stop_tx.send(true);
    // Stop advertising readiness first so load balancers drain before we exit.
    health.set_ready(false);
    // Let in-flight reconciles finish (graceful shutdown of the controllers), but never hang a
    // pod termination on a stuck API call.
    if !controllers.is_finished()
        && tokio::time::timeout(SHUTDOWN_GRACE, controllers)
            .await
            .is_err()
    {
        tracing::warn!("controllers did not stop within {SHUTDOWN_GRACE:?}; exiting anyway");
    }
    // Only once our writes have stopped may a standby start its own.
    if let Some(election) = election {
        election.release().await;
    }
    health_server.abort();
    if let Some(handle) = webhook {
        handle.graceful_shutdown(Some(std::time::Duration::from_secs(5)));
    }
    info!("stopped");
    outcome
}

/// Runs the controllers while we lead (always, without leader election) until asked to stop.
async fn run_controllers(
    client: Client,
    metrics: crate::k8s::metrics::Metrics,
    lws_tuning: crate::lws::controller::Tuning,
    mut stop: tokio::sync::watch::Receiver<bool>,
    leader: Option<tokio::sync::watch::Receiver<bool>>,
    gang_provider: Option<crate::lws::volcano::GangProvider>,
) {
    if let Some(mut leader) = leader.clone() {
        info!("standing by until this replica holds the leader lease");
        tokio::select! {
            became = leader.wait_for(|is| *is) => if became.is_err() { return },
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        info!("holding the leader lease: starting the controllers");
    }
    let mut lost = leader.clone();
    let mut stop_controllers = stop;
    // True when the lease was lost, false on a shutdown.
    let lost_or_stopped = async move {
        match &mut lost {
            Some(leader) => {
                tokio::select! {
                    _ = leader.wait_for(|is| !*is) => true,
                    _ = stop_controllers.wait_for(|stopped| *stopped) => false,
                }
            }
            None => {
                let _ = stop_controllers.wait_for(|stopped| *stopped).await;
                false
            }
        }
    };
    // One set of caches per leadership term, shared by every controller; every controller
    // stops when the lease is lost or a shutdown begins.
    let (stop_all, _) = tokio::sync::broadcast::channel::<()>(1);
    let stopped = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    let pod_groups_served = caches::serves_pod_groups(&client).await;
    let analysis = caches::serves_analysis(&client).await;
    if !analysis {
        info!(
            "Argo's analysis kinds (argoproj.io/v1alpha1) are not served: Rollouts that ask for \
             analysis will say so; apply crds/argoproj.io/ and restart to enable it"
        );
    }
    let role_scalers = caches::serves_role_scalers(&client).await;
    let volcano_served = match gang_provider {
        Some(crate::lws::volcano::GangProvider::Volcano) => {
            let served = caches::serves_volcano_pod_groups(&client).await;
            if !served {
                warn!(
                    "--gang-scheduling-provider=volcano, but Volcano's PodGroups \
                     (scheduling.volcano.sh/v1beta1) are not served: every LWS says so in its \
                     status and no group is built; install Volcano and restart the manager"
                );
            }
            Some(served)
        }
        None => None,
    };
    let mut caches = caches::Caches::new(
        &client,
        caches::Served {
            analysis,
            pod_groups: pod_groups_served,
            role_scalers,
            volcano_pod_groups: volcano_served == Some(true),
        },
    );
    // The per-Rollout series come from this term's caches, and only while it lasts.
    metrics.set_release_view(Some(std::sync::Arc::new(
        crate::rollout::metrics::CachedReleases {
            rollouts: caches.rollouts.store(),
            runs: caches.analysis.as_ref().map(|a| a.runs.store()),
        },
    )));
    let lws = crate::lws::controller::run(
        client.clone(),
        crate::lws::controller::Caches {
            lws: &mut caches.lws,
            pods: &mut caches.pods,
            statefulsets: &mut caches.statefulsets,
            services: &mut caches.services,
            revisions: &mut caches.revisions,
            pod_groups: caches.pod_groups.as_mut(),
            volcano: match (volcano_served, caches.volcano_pod_groups.as_mut()) {
                (Some(true), Some(cache)) => crate::lws::controller::VolcanoCaches::Served(cache),
                (Some(_), _) => crate::lws::controller::VolcanoCaches::NotServed,
                (None, _) => crate::lws::controller::VolcanoCaches::Off,
            },
        },
        metrics.controller("lws"),
        lws_tuning,
        stopped(&stop_all),
    );
    let rollouts = crate::rollout::controller::run(
        client.clone(),
        crate::rollout::controller::Caches {
            rollouts: &mut caches.rollouts,
            batch_releases: &mut caches.batch_releases,
            lws: &mut caches.lws,
            revisions: &caches.revisions,
            analysis: caches.analysis.as_mut().map(|a| {
                crate::rollout::controller::AnalysisCaches {
                    templates: &mut a.templates,
                    cluster_templates: &mut a.cluster_templates,
                    runs: &mut a.runs,
                }
            }),
            sets: &mut caches.disaggregated_sets,
        },
        metrics.controller("rollout"),
        stopped(&stop_all),
    );
    let client_for_kueue = client.clone();
    let releases = crate::batchrelease::controller::run(
        client.clone(),
        crate::batchrelease::controller::Caches {
            batch_releases: &mut caches.batch_releases,
            lws: &mut caches.lws,
            pods: &mut caches.pods,
            revisions: &caches.revisions,
            workloads: &mut caches.workloads,
            pod_groups: caches.pod_groups.as_mut(),
            sets: &mut caches.disaggregated_sets,
        },
        metrics.controller("batchrelease"),
        stopped(&stop_all),
    );
    let kueue_waits = crate::kueue::controller::run(
        client_for_kueue,
        &mut caches.workloads,
        &mut caches.multikueue_copies,
        &mut caches.lws,
        stopped(&stop_all),
    );
    let sets = crate::disaggregatedset::controller::run(
        client.clone(),
        crate::disaggregatedset::controller::Caches {
            sets: &mut caches.disaggregated_sets,
            lws: &mut caches.lws,
            services: &mut caches.set_services,
            scalers: caches.role_scalers.as_mut(),
        },
        metrics.controller("disaggregatedset"),
        stopped(&stop_all),
    );
    let analysis_runs = caches.analysis.as_mut().map(|a| {
        crate::analysis::controller::run(
            client.clone(),
            &mut a.runs,
            metrics.controller("analysisrun"),
            stopped(&stop_all),
        )
    });
    let drivers = run_all(caches.drivers(&client, &metrics));
    let mut all = vec![
        lws.boxed(),
        rollouts.boxed(),
        releases.boxed(),
        kueue_waits.boxed(),
        sets.boxed(),
    ];
    if let Some(runs) = analysis_runs {
        all.push(runs.boxed());
    }
    let controllers = run_all(all);
    let stop = async move {
        let lost = lost_or_stopped.await;
        let _ = stop_all.send(());
        // The controllers now finish their in-flight reconciles and end the select, unless
        // one hangs (a request into a network partition never answers). After a lost lease
        // they are dropped before a standby may take over; on a shutdown the lease is
        // released only after them, so they get the shutdown's grace.
        let grace = if lost {
            warn!("lost the leader lease: stopping the controllers");
            leader::AFTER_TERM
        } else {
            SHUTDOWN_GRACE
        };
        tokio::time::sleep(grace).await;
        warn!("in-flight reconciles did not finish within {grace:?}; dropped");
    };
    // The watches keep running until the controllers have stopped.
    tokio::select! {
        _ = controllers => {},
        _ = drivers => {},
        _ = stop => {},
    }
    metrics.set_release_view(None);
}

/// Runs `futures` together until every one has finished, polling only those that were woken.
/// Joined (`join_all`, `join5`), every wake-up of any of them — each watch event, each
/// reconcile's reply — polled all fifteen drivers and controllers, each down to its HTTP/2
/// stream, a share of the manager's CPU the benchmark's profile shows.
async fn run_all(futures: Vec<futures::future::BoxFuture<'static, ()>>) {
    let mut running: futures::stream::FuturesUnordered<_> = futures.into_iter().collect();
    while running.next().await.is_some() {}
}

/// Mirrors the election into the `leader` gauge until the election ends.
async fn follow_leadership(
    mut is_leader: tokio::sync::watch::Receiver<bool>,
    metrics: crate::k8s::metrics::Metrics,
) {
    loop {
        metrics.set_leader(*is_leader.borrow_and_update());
        if is_leader.changed().await.is_err() {
            metrics.set_leader(false);
            return;
        }
    }
}

/// Starts the TLS webhook server with a fresh certificate and points the API server at it.
async fn start_webhook(
    client: &Client,
    cfg: &WebhookConfig,
    gang_provider: Option<crate::lws::volcano::GangProvider>,
    metrics: &crate::k8s::metrics::Metrics,
) -> Result<axum_server::Handle<SocketAddr>, Error> {
    use crate::webhook::{self, Error as WebhookError, registration::Endpoint};
    let listener = std::net::TcpListener::bind(cfg.addr).map_err(|source| WebhookError::Io {
        addr: cfg.addr,
        source,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| WebhookError::Io {
            addr: cfg.addr,
            source,
        })?;
    let port = listener
        .local_addr()
        .map_err(|source| WebhookError::Io {
            addr: cfg.addr,
            source,
        })?
        .port();
    let (hosts, endpoint) = match &cfg.reach {
        WebhookReach::Host(host) => (
            vec![host.clone()],
            Endpoint::Url(format!("https://{host}:{port}")),
        ),
        WebhookReach::Service {
            namespace,
            name,
            port,
        } => (
            vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
            Endpoint::Service {
                namespace: namespace.clone(),
                name: name.clone(),
                port: *port,
            },
        ),
    };
    // The owner is read before anything is written: with the chart's ClusterRole gone the
    // release is being uninstalled, and nothing of ours should be written again.
    let owner = match &cfg.configuration_owner {
        Some(role) => Some(webhook::registration::owner(client, role).await?),
        None => None,
    };
    let bundle = webhook::secret::load_or_issue(
        client,
        &cfg.secret_namespace,
        &cfg.secret_name,
        &hosts,
        owner.as_ref(),
    )
    .await
    .map_err(WebhookError::from)?;
    let tls = webhook::tls_config(&bundle.serving_cert().map_err(WebhookError::from)?)?;
    let handle = axum_server::Handle::new();
    let server =
        axum_server::from_tcp_rustls(listener, tls.clone()).map_err(|source| WebhookError::Io {
            addr: cfg.addr,
            source,
        })?;
    let serve_handle = handle.clone();
    let (mut cluster, rollout_watch) = webhook::Cluster::new(client.clone());
    cluster.gang_provider = gang_provider;
    tokio::spawn(rollout_watch);
    let router = webhook::router(cluster, metrics.clone());
    metrics.set_certificate_expiry(bundle.not_after.as_second());
    // The webhook serves on a thread and runtime of its own: a burst of pod admissions (TLS
    // handshakes, decoding, the defaults' diff) then takes a second core instead of holding up
    // the controllers' runtime, which must keep reading its watches while the API server waits.
    let serve = async move {
        if let Err(err) = server
            .handle(serve_handle)
            .serve(router.into_make_service())
            .await
        {
            tracing::error!(error = %err, "webhook server stopped");
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| WebhookError::Io {
            addr: cfg.addr,
            source,
        })?;
    std::thread::Builder::new()
        .name("webhook".into())
        .spawn(move || runtime.block_on(serve))
        .map_err(|source| WebhookError::Io {
            addr: cfg.addr,
            source,
        })?;
    webhook::registration::register(
        client,
        &cfg.configuration_name,
        &endpoint,
        &bundle.ca_cert_pem,
        cfg.configuration_owner.as_deref(),
    )
    .await?;
    info!(port, configuration = %cfg.configuration_name, "webhooks serving and registered");
    tokio::spawn(webhook::keep_certificate_current(
        client.clone(),
        webhook::CertificateSource {
            namespace: cfg.secret_namespace.clone(),
            name: cfg.secret_name.clone(),
            hosts,
            configuration_name: cfg.configuration_name.clone(),
            configuration_owner: cfg.configuration_owner.clone(),
            secret_owner: owner,
            endpoint,
        },
        bundle,
        tls,
        metrics.clone(),
    ));
    Ok(handle)
}

/// Everything the manager needs of the API server before it serves: the server answering,
/// our CRDs served, and (if configured) the webhooks registered with their certificate.
async fn connect(
    client: &Client,
    config: &Config,
    metrics: &crate::k8s::metrics::Metrics,
) -> Result<Option<axum_server::Handle<std::net::SocketAddr>>, Error> {
    let version = api_server_version(client).await?;
    info!(server = %version.git_version, "connected to the API server");
    // A CRD applied a moment ago can be Established before its endpoint answers: retry briefly.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match check_crds(client).await {
            Ok(()) => break,
            Err(err) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %err, "waiting for the CRDs");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(err) => return Err(err),
        }
    }
    match &config.webhook {
        Some(webhook) => Ok(Some(
            start_webhook(client, webhook, config.gang_scheduling_provider, metrics).await?,
        )),
        None => Ok(None),
    }
}

/// Longest wait between two attempts to reach the API server at start.
const CONNECT_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// The API server's version, waited for while it does not answer (connection refused, timed
/// out, 5xx), every 2 s at most: a manager started during an outage — a control-plane upgrade, or the restart
/// after its predecessor lost the Lease — comes up as soon as the API server does, where an
/// exit would put it in its Deployment's crash-loop backoff (10 s, 20 s, … 5 min). An answer
/// that will not change by waiting (401, 403, a bad request) ends the start at once.
async fn api_server_version(
    client: &Client,
) -> Result<k8s_openapi::apimachinery::pkg::version::Info, Error> {
    let mut wait = std::time::Duration::from_millis(250);
    loop {
        match client.apiserver_version().await {
            Ok(version) => return Ok(version),
            Err(kube::Error::Api(status)) if status.code < 500 => {
                return Err(Error::Unreachable(kube::Error::Api(status)));
            }
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?wait, "the API server does not answer yet");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(CONNECT_RETRY_MAX);
            }
        }
    }
}

/// Lists one object of each kind: proves the CRDs are installed and we may read them.
async fn check_crds(client: &Client) -> Result<(), Error> {
    probe::<LeaderWorkerSet>(client, "LeaderWorkerSet").await?;
    probe::<Rollout>(client, "Rollout").await?;
    probe::<BatchRelease>(client, "BatchRelease").await?;
    probe::<crate::api::DisaggregatedSet>(client, "DisaggregatedSet").await
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
