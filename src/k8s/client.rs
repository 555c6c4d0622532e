//! Building a Kubernetes client: every binary and test of this crate uses these, so every
//! request carries our User-Agent (kube-rs sends none) and the audit log can tell ours apart,
//! and every client speaks HTTP/2 to the API server when it offers it.
//!
//! What kube lacks (kube 4.2.0, https://docs.rs/kube/4.2.0): an HTTP/2 client to the API server;
//! delete the connector here when `Client::try_from(Config)` negotiates h2.
//!
//! Why our own stack: kube-rs builds an HTTP/1.1-only client, so every request in flight holds
//! a TLS connection of its own, and its pool keeps them all for 90 s: under a burst the manager
//! holds dozens of connections, each with its TLS and read buffers. client-go speaks
//! HTTP/2: one connection, every request and watch a stream on it. The same here, through
//! kube-rs's own layers (base URI, authentication, headers, server retries), with only the
//! connector and the hyper client built by us. A server that does not offer h2 in ALPN gets
//! HTTP/1.1 as before; a proxy URL in the kubeconfig falls back to kube-rs's own stack.
//!
//! Added to it: every response body loses its managedFields before kube-rs decodes it
//! ([`super::managed_fields`]): no code here reads them, and decoding them was a large share
//! of the manager's allocations. A client on kube-rs's own stack (a proxy URL) keeps them.
//!
//! Left out of kube-rs's stack on purpose: its `TraceLayer` (debug spans per request; our
//! errors are logged where they are handled) and `valid_until` (the expiry of an exec
//! credential's client certificate, which nothing here reads: the auth layer refreshes
//! tokens by itself).

use std::{path::Path, time::Duration};

use hyper_util::{
    client::legacy::connect::HttpConnector,
    rt::{TokioExecutor, TokioTimer},
};
use kube::{
    Client, Config,
    client::{ConfigExt, retry::RetryPolicy},
    config::{KubeConfigOptions, Kubeconfig},
};
use tower::{BoxError, ServiceBuilder, retry::RetryLayer};

/// The user agent of every request.
pub const USER_AGENT: &str = concat!("lws-rollout/", env!("CARGO_PKG_VERSION"));

/// How often an idle HTTP/2 connection is pinged, and how long a ping may go unanswered before
/// the connection is dropped (client-go's ReadIdleTimeout and PingTimeout): a connection that
/// died silently fails its watches within seconds instead of at the read timeout.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

fn with_user_agent(mut config: Config) -> Config {
    config.headers.push((
        "user-agent".parse().expect("valid header name"),
        USER_AGENT.parse().expect("valid header value"),
    ));
    config
}

/// A client from `KUBECONFIG` (or `~/.kube/config`) or the in-cluster service account.
pub async fn infer() -> Result<Client, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    build(with_user_agent(config))
}

/// The client configuration of one kubeconfig file, with our User-Agent (for tools that
/// adjust it before building a client with [`build`]).
pub async fn config_from_kubeconfig(path: &Path) -> Result<Config, kube::Error> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(kube::Error::InferKubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    Ok(with_user_agent(config))
}

/// A client from one kubeconfig file (tests and tools that talk to several clusters).
pub async fn from_kubeconfig(path: &Path) -> Result<Client, kube::Error> {
    build(config_from_kubeconfig(path).await?)
}

/// A client for `config` that negotiates HTTP/2 (see the module docs).
pub fn build(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // Every request shares one connection: a small frame (a new request's headers, a window
    // update, a ping's answer) must not wait for the ACK of the one before (Nagle), as Go's
    // net package, and so client-go, also ensures.
    http.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name: rustls::pki_types::ServerName<'static> =
                name.clone().try_into().map_err(|e| {
                    kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
                })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    // ALPN offers h2 and http/1.1; the server picks.
    let https = builder.enable_all_versions().wrap_connector(http);
    // The connect timeout covers TCP and the TLS handshake, as in kube-rs's stack.
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let hyper_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        // The pool would drop the shared HTTP/2 connection after 90 s without a *new* request,
        // even while watches stream on it, and open a second one; the pings find dead ones.
        .pool_idle_timeout(None)
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .map_response(super::managed_fields::response)
        .service(hyper_client);
    Ok(Client::new(service, config.default_namespace))
}
