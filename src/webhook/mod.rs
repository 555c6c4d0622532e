//! The admission webhook server: TLS with a certificate the manager makes itself, the LWS pod
//! defaulting endpoint, the LWS defaulting and validating endpoints, and the webhook
//! configurations that point the API server at them.
//!
//! The certificate is generated at start and the configuration's caBundle is server-side
//! applied with it, so nothing outlives the process but the configuration itself; a restarted
//! manager re-issues both. (Several replicas would each overwrite the caBundle: run one until
//! the certificate moves into a shared Secret.)

pub mod certs;
pub mod lws;
pub mod pods;
pub mod registration;

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, routing::post};
use thiserror::Error;

/// Why the webhook server could not start.
#[derive(Debug, Error)]
pub enum Error {
    /// Certificate generation failed.
    #[error("generating the webhook certificate: {0}")]
    Cert(#[from] rcgen::Error),
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
}

/// Routes of the webhook server.
pub fn router() -> Router {
    Router::new()
        .route(pods::PATH, post(pods::mutate))
        .route(lws::MUTATE_PATH, post(lws::mutate))
        .route(lws::VALIDATE_PATH, post(lws::validate))
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
