//! The kill-and-restart harness of the crash tests: a cluster of the test's own (the suite's
//! manager must not take over meanwhile) with one manager of ours that a test SIGKILLs and
//! starts again, and watches that record every uid an object name ever had, so a test can
//! tell that a restart made nothing twice.
//!
//! The manager runs with `--leader-elect=false` (one replica: a restart must not wait out its
//! killed predecessor's lease).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::bail;
use futures::StreamExt;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;

use crate::{
    harness::TestNs,
    isolated::{IsolatedCluster, ManagerProcess},
};

/// A cluster of the test's own with a manager it kills and restarts. Dropped before
/// [`CrashCluster::finish`] (a failed or panicking test), it keeps the cluster's logs and
/// prints the last manager's last lines.
pub struct CrashCluster {
    /// The cluster (its client, kubeconfig and state directory).
    pub cluster: IsolatedCluster,
    manager: Option<ManagerProcess>,
    starts: u32,
    passed: bool,
}

impl CrashCluster {
    /// A fresh cluster named `name` (`env` goes to `test/cluster/up.sh`), no manager yet.
    pub async fn new(name: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Ok(Self {
            cluster: IsolatedCluster::start(name, env).await?,
            manager: None,
            starts: 0,
            passed: false,
        })
    }

    /// A fresh cluster named `name`, its manager running, and a namespace `name` on it.
    pub async fn start(name: &str) -> anyhow::Result<(Self, TestNs)> {
        let mut cc = Self::new(name, &[]).await?;
        cc.start_manager()?;
        let ns = cc.namespace(name).await?;
        Ok((cc, ns))
    }

    /// A namespace of this cluster, once its default ServiceAccount exists.
    pub async fn namespace(&self, name: &str) -> anyhow::Result<TestNs> {
        self.cluster.namespace(name).await
    }

    /// Starts a manager (the first, or a fresh one after [`Self::kill_manager`]).
    pub fn start_manager(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        self.manager = Some(ManagerProcess::start(
            &self.cluster,
            &self.starts.to_string(),
            &["--leader-elect=false"],
        )?);
        Ok(())
    }

    /// SIGKILL (no graceful shutdown, as a crash or an OOM kill), `at` naming the moment; an
    /// error when the manager had already exited on its own.
    pub async fn kill_manager(&mut self, at: &str) -> anyhow::Result<()> {
        if let Some(mut old) = self.manager.take() {
            if !old.running() {
                bail!(
                    "the manager exited on its own before {at}; its log:\n{}",
                    old.log_tail()
                );
            }
            old.signal("KILL")?;
            old.exited(Duration::from_secs(10)).await?;
            eprintln!("killed the manager {at}");
        }
        Ok(())
    }

    /// [`Self::kill_manager`], then a fresh manager.
    pub async fn kill_and_restart(&mut self, at: &str) -> anyhow::Result<()> {
        self.kill_manager(at).await?;
        self.start_manager()
    }

    /// Whether the current manager still runs (has not exited on its own).
    pub fn manager_running(&mut self) -> bool {
        self.manager.as_mut().is_some_and(ManagerProcess::running)
    }

    /// The test passed: the cluster's logs need not be kept.
    pub fn finish(mut self) {
        self.passed = true;
    }
}

impl Drop for CrashCluster {
    fn drop(&mut self) {
        if !self.passed {
            self.cluster.keep_logs();
            if let Some(m) = &self.manager {
                eprintln!("last manager lines:\n{}", m.log_tail());
            }
        }
    }
}

/// Object name → every uid it had.
pub type Seen = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

/// Every uid each object name of a kind ever had (in the namespace, matching `labels`).
pub fn track<K>(api: Api<K>, labels: &str) -> (tokio::task::JoinHandle<()>, Seen)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let seen: Seen = Arc::default();
    let out = seen.clone();
    let config = watcher::Config::default().labels(labels);
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(api, config)
            .touched_objects()
            .default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(obj)) = stream.next().await {
            out.lock()
                .unwrap()
                .entry(obj.name_any())
                .or_default()
                .insert(obj.uid().unwrap_or_default());
        }
    });
    (task, seen)
}

/// The names that had more than `n` uids.
pub fn more_uids_than(seen: &Seen, n: usize) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(_, u)| u.len() > n)
        .map(|(n, _)| n.clone())
        .collect()
}
