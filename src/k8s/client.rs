//! Building a Kubernetes client: every binary and test of this crate uses these, so every
//! request carries our User-Agent (kube-rs sends none) and the audit log can tell ours apart.

use std::path::Path;

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// The user agent of every request.
pub const USER_AGENT: &str = concat!("lws-rollout/", env!("CARGO_PKG_VERSION"));

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
    Client::try_from(with_user_agent(config))
}

/// The client configuration of one kubeconfig file, with our User-Agent (for tools that
/// adjust it before building a client).
pub async fn config_from_kubeconfig(path: &Path) -> Result<Config, kube::Error> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(kube::Error::InferKubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    Ok(with_user_agent(config))
}

/// A client from one kubeconfig file (tests and tools that talk to several clusters).
pub async fn from_kubeconfig(path: &Path) -> Result<Client, kube::Error> {
    Client::try_from(config_from_kubeconfig(path).await?)
}
