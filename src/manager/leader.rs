//! Leader election on a `coordination.k8s.io` Lease: of several manager replicas only the holder
//! runs the controllers; every replica serves the webhooks (they are stateless). A holder that
//! loses its lease stops at once (fail-stop, like kube-controller-manager): its replacement
//! rebuilds everything from the cluster, since no state lives only in memory.

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{info, warn};

/// Lease timing: a standby takes over at most this long after a holder vanished without
/// releasing (SIGKILL, node loss). A graceful stop releases the lease at once.
pub const LEASE_SECONDS: u64 = 15;
/// Renew this long before the lease expires.
const GRACE_SECONDS: u64 = 5;

/// Where the lease lives and who we are.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// Our identity in `holderIdentity`.
    pub identity: String,
}

impl LeaderElection {
    /// Identity: the pod name when running in a cluster, else host and process id, so two
    /// processes on one machine are distinct.
    pub fn default_identity() -> String {
        let host = std::env::var("POD_NAME").ok().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "lws-rollout".into())
        });
        format!("{host}_{}", std::process::id())
    }
}

/// A running election: `is_leader` follows the lease; dropping it (see [`Election::release`])
/// gives the lease up.
pub struct Election {
    /// True while we hold the lease.
    pub is_leader: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Election {
    /// Joins the election (creating the Lease if needed).
    pub async fn start(client: Client, cfg: &LeaderElection) -> Result<Self, LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client, &cfg.lease_name)
            .with_namespace(&cfg.namespace)
            .with_identity(&cfg.identity)
            .with_duration(LEASE_SECONDS)
            .with_grace(GRACE_SECONDS)
            .build()
            .await?;
        let (is_leader, task) = manager.watch().await;
        info!(lease = %cfg.lease_name, namespace = %cfg.namespace, identity = %cfg.identity, "joined leader election");
        Ok(Self { is_leader, task })
    }

    /// Gives the lease up so a standby takes over without waiting for it to expire.
    pub async fn release(self) {
        let Self { is_leader, task } = self;
        // Closing the channel makes the election task release the lease and return.
        drop(is_leader);
        match tokio::time::timeout(std::time::Duration::from_secs(5), task).await {
            Ok(Ok(Ok(_))) => info!("released the leader lease"),
            Ok(Ok(Err(err))) => warn!(error = %err, "could not release the leader lease"),
            Ok(Err(err)) => warn!(error = %err, "leader election task failed"),
            Err(_) => warn!("releasing the leader lease timed out; it expires on its own"),
        }
    }
}
