//! The admission webhook server: TLS with a certificate the manager makes itself, the LWS pod
//! defaulting endpoint, the LWS defaulting and validating endpoints, the DisaggregatedSet
//! mutating endpoint (the release hold), the Rollout validating endpoint, the
//! DisaggregatedSetRoleScaler validating endpoint, and the webhook configurations that point
//! the API server at them.
//!
//! The certificate lives in a Secret every replica shares (see `secret`); each replica serves
//! it, server-side applies the configurations' caBundle from it, watches it for a renewal made
//! by another replica, and renews it itself when due.

pub mod certs;
pub mod disaggregatedset;
pub mod lws;
pub mod measure;
pub mod pods;
pub mod registration;
pub mod review;
pub mod role_scaler;
pub mod rollout;
pub mod secret;

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, routing::post};
use thiserror::Error;

/// Why the webhook server could not start.
#[derive(Debug, Error)]
pub enum Error {
    /// Certificate generation failed.
    #[error("the webhook certificate: {0}")]
    Cert(#[from] certs::CertError),
    /// The shared certificate Secret could not be read or written.
    #[error(transparent)]
    Secret(Box<secret::SecretError>),
    /// The TLS configuration was refused.
    #[error("configuring TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// The listener failed.
    #[error("webhook server on {addr}: {source}")]
    Io {
        /// Listen address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the webhook configuration failed.
    #[error("applying the webhook configurations: {0}")]
    Register(#[source] kube::Error),
    /// `--webhook-owner` names a ClusterRole that does not exist.
    #[error(
        "the webhook configurations' owner, ClusterRole {0}, does not exist (--webhook-owner; the Helm chart creates it, so the release is being uninstalled or the flag names another role)"
    )]
    OwnerMissing(String),
}

impl From<secret::SecretError> for Error {
    fn from(err: secret::SecretError) -> Self {
        Self::Secret(Box::new(err))
    }
}

/// What the endpoints ask the cluster: a client, and every Rollout from a cache this replica
/// keeps (a watch started with the server), so an LWS or Rollout admission reads memory instead
/// of listing the namespace's Rollouts on every request.
#[derive(Clone)]
pub struct Cluster {
    /// The client (the leader StatefulSet's revision when a hold starts).
    pub client: kube::Client,
    /// Every Rollout.
    pub rollouts: kube::runtime::reflector::Store<crate::api::rollout::Rollout>,
    /// The gang scheduler LWS pods are handed to (`--gang-scheduling-provider`): with
    /// Volcano, each LWS pod names its group's Volcano PodGroup.
    pub gang_provider: Option<crate::lws::volcano::GangProvider>,
}

/// How long an admission waits for the Rollout cache's first list (right after the start)
/// before it lists the Rollouts itself.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Cluster {
    /// The cache of Rollouts for `client`, and the watch that fills it (spawn it).
    pub fn new(client: kube::Client) -> (Self, impl std::future::Future<Output = ()> + Send) {
        use futures::StreamExt;
        use kube::runtime::{reflector, watcher};
        let (rollouts, writer) = reflector::store();
        let api = kube::Api::<crate::api::rollout::Rollout>::all(client.clone());
        let watch = reflector(
            writer,
            crate::k8s::watch::retried(watcher(api, watcher::Config::default())),
        )
        .for_each(|_| async {});
        (
            Self {
                client,
                rollouts,
                gang_provider: None,
            },
            watch,
        )
    }

    /// The Rollouts of `namespace`: from the cache once it has listed, else (the first
    /// seconds after a start) from the API server.
    pub async fn rollouts_in(
        &self,
        namespace: &str,
    ) -> Result<Vec<crate::api::rollout::Rollout>, kube::Error> {
        use kube::ResourceExt;
        if tokio::time::timeout(CACHE_WAIT, self.rollouts.wait_until_ready())
            .await
            .is_ok_and(|r| r.is_ok())
        {
            return Ok(self
                .rollouts
                .state()
                .iter()
                .filter(|r| r.namespace().as_deref() == Some(namespace))
                .map(|r| r.as_ref().clone())
                .collect());
        }
        Ok(
            kube::Api::<crate::api::rollout::Rollout>::namespaced(self.client.clone(), namespace)
                .list(&kube::api::ListParams::default())
                .await?
                .items,
        )
    }
}

/// Routes of the webhook server; `cluster` answers the questions admission needs the cluster
/// for (does a Rollout control this LWS?); every request is counted in `metrics`.
pub fn router(cluster: Cluster, metrics: crate::k8s::metrics::Metrics) -> Router {
    Router::new()
        .route(pods::PATH, post(pods::mutate))
        .route(lws::MUTATE_PATH, post(lws::mutate))
        .route(lws::VALIDATE_PATH, post(lws::validate))
        .route(
            disaggregatedset::MUTATE_PATH,
            post(disaggregatedset::mutate),
        )
        .route(rollout::VALIDATE_PATH, post(rollout::validate))
        .route(role_scaler::VALIDATE_PATH, post(role_scaler::validate))
        .route_layer(axum::middleware::from_fn_with_state(
            metrics,
            measure::record,
        ))
        .with_state(cluster)
}

/// TLS settings for `certs`, using the ring provider the Kubernetes client uses too.
pub fn tls_config(
    serving: &certs::ServingCert,
) -> Result<axum_server::tls_rustls::RustlsConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![serving.cert_der.clone()], serving.key_der.clone_key())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(axum_server::tls_rustls::RustlsConfig::from_config(
        Arc::new(config),
    ))
}

/// Where the shared certificate lives and what it must serve.
pub struct CertificateSource {
    /// Secret namespace.
    pub namespace: String,
    /// Secret name.
    pub name: String,
    /// Hosts the serving certificate must cover.
    pub hosts: Vec<String>,
    /// Webhook configurations to keep the caBundle of.
    pub configuration_name: String,
    /// The ClusterRole that owns them, if any (`--webhook-owner`).
    pub configuration_owner: Option<String>,
    /// That ClusterRole as the Secret's owner, read once at start.
    pub secret_owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    /// How the API server reaches us.
    pub endpoint: registration::Endpoint,
}

/// Serves the newest certificate: follows the Secret (another replica's renewal, or a deleted
/// Secret re-issued) and renews it when due. Runs until the process ends.
pub async fn keep_certificate_current(
    client: kube::Client,
    source: CertificateSource,
    mut current: certs::Bundle,
    tls: axum_server::tls_rustls::RustlsConfig,
    metrics: crate::k8s::metrics::Metrics,
) {
    use futures::StreamExt;
    use k8s_openapi::{api::core::v1::Secret, jiff::Timestamp};
    use kube::runtime::{WatchStreamExt, watcher};

    let api = kube::Api::<Secret>::namespaced(client.clone(), &source.namespace);
    let changes = crate::k8s::watch::retried(watcher::watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={}", source.name)),
    ))
    .touched_objects();
    let mut changes = std::pin::pin!(changes);
    loop {
        let until_renewal = Timestamp::now()
            .duration_until(current.renew_at())
            .max(k8s_openapi::jiff::SignedDuration::ZERO)
            .unsigned_abs()
            // Sleeping for months is fine for tokio, but keep the timer sane.
            .min(std::time::Duration::from_secs(24 * 3600));
        let seen = tokio::select! {
            change = changes.next() => match change {
                Some(Ok(secret)) => secret::from_secret(&secret),
                Some(Err(err)) => {
                    tracing::warn!(error = %err, "watching the webhook certificate Secret");
                    continue;
                }
                None => return,
            },
            _ = tokio::time::sleep(until_renewal) => None,
        };
        // A usable bundle someone else wrote is taken as is; anything else (renewal due, the
        // Secret deleted or mangled) goes through load_or_issue, which renews when needed.
        let next = match seen {
            Some(bundle) if bundle.fits(&source.hosts, Timestamp::now()) => bundle,
            _ => {
                match secret::load_or_issue(
                    &client,
                    &source.namespace,
                    &source.name,
                    &source.hosts,
                    source.secret_owner.as_ref(),
                )
                .await
                {
                    Ok(bundle) => bundle,
                    Err(err) => {
                        tracing::warn!(error = %err, "cannot renew the webhook certificate; retrying in a minute");
                        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                        continue;
                    }
                }
            }
        };
        if next == current {
            continue;
        }
        let config = match next
            .serving_cert()
            .map_err(Error::from)
            .and_then(|c| tls_config(&c))
        {
            Ok(config) => config,
            Err(err) => {
                tracing::warn!(error = %err, "unusable webhook certificate");
                continue;
            }
        };
        tls.reload_from_config(config.get_inner());
        if next.ca_cert_pem != current.ca_cert_pem
            && let Err(err) = registration::register(
                &client,
                &source.configuration_name,
                &source.endpoint,
                &next.ca_cert_pem,
                source.configuration_owner.as_deref(),
            )
            .await
        {
            tracing::warn!(error = %err, "cannot update the webhook caBundle");
        }
        tracing::info!(not_after = %next.not_after, "serving the renewed webhook certificate");
        metrics.set_certificate_expiry(next.not_after.as_second());
        current = next;
    }
}
