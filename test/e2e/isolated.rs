//! A local cluster of a test's own (`test/cluster/up.sh` in a temporary directory), for tests
//! that must not share the suite's cluster with the global manager `test/run-tests.sh` runs —
//! e.g. a test where the upstream LWS controller owns the LWS objects.
//!
//! The control-plane binaries come from `LWS_E2E_BIN_DIR` (set by `test/run-tests.sh`), so no
//! build happens here. Dropping an [`IsolatedCluster`] stops exactly the processes `up.sh`
//! recorded (and any other controller whose PID was recorded in its `pids/`), on every exit path
//! including a panic; after a failure its logs are kept and their path is printed.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::{Api, Client, Config, api::PostParams};

use crate::harness::{TestNs, wait_for};

/// Environment variable naming the directory of control-plane binaries.
pub const BIN_DIR_ENV: &str = "LWS_E2E_BIN_DIR";

/// The repository root.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The control-plane binary directory, or a clear error.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    std::env::var(BIN_DIR_ENV).map(PathBuf::from).map_err(|_| {
        anyhow!("{BIN_DIR_ENV} is not set: run the e2e tests with test/run-tests.sh, which builds the control plane")
    })
}

/// A running cluster of one test's own.
pub struct IsolatedCluster {
    /// The state directory (`pids/`, `logs/`, `kubeconfig`).
    pub dir: PathBuf,
    /// Path of the admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// An admin client.
    pub client: Client,
    /// The control-plane binary directory.
    pub bin_dir: PathBuf,
    failed: bool,
    stopped: bool,
    started: std::time::Instant,
    /// This cluster's place among those running at once, given back once it is stopped.
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Environment variable bounding how many clusters of their own tests run at once.
pub const CLUSTERS_AT_ONCE_ENV: &str = "LWS_E2E_ISOLATED_AT_ONCE";

/// A cluster of its own costs a control plane's start and its watches on the shared cores, and
/// libtest starts tests in name order, which puts several such tests side by side: more than
/// two at once starve the clusters every test waits on. A test waiting for a place starts its
/// cluster, and its clock, once one is free.
fn clusters_at_once() -> std::sync::Arc<tokio::sync::Semaphore> {
    static SLOTS: std::sync::OnceLock<std::sync::Arc<tokio::sync::Semaphore>> =
        std::sync::OnceLock::new();
    SLOTS
        .get_or_init(|| {
            let n = std::env::var(CLUSTERS_AT_ONCE_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(2);
            std::sync::Arc::new(tokio::sync::Semaphore::new(n))
        })
        .clone()
}

impl IsolatedCluster {
    /// Starts a cluster in a fresh temporary directory named after `name` and installs our CRDs.
    /// `env` is passed to `up.sh` (e.g. `LWS_CLUSTER_NODE_PODS`).
    pub async fn start(name: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let slot = clusters_at_once()
            .acquire_owned()
            .await
            .context("waiting for a place among the isolated clusters")?;
        let mut cluster = match Self::start_once(name, env).await {
            // Free ports are probed, then bound: a concurrent cluster can take one in between.
            // The failed attempt has been stopped (Drop); one more try with fresh ports.
            Err(err) if format!("{err:#}").contains("up.sh") => {
                eprintln!("isolated cluster {name}: retrying once after: {err:#}");
                Self::start_once(name, env).await
            }
            other => other,
        }?;
        cluster.slot = Some(slot);
        Ok(cluster)
    }

    async fn start_once(name: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let started = std::time::Instant::now();
        let bin_dir = bin_dir()?;
        let dir = std::env::temp_dir().join(format!(
            "lws-e2e-cluster-{name}-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos()
        ));
        let mut up = tokio::process::Command::new("bash");
        up.arg(repo().join("test/cluster/up.sh"))
            .arg(&dir)
            .env("LWS_ROLLOUT_BIN_DIR", &bin_dir)
            // These tests need no proxy or pod addresses; the shared cluster has them.
            .env("LWS_CLUSTER_TRAFFIC", "0")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            up.env(k, v);
        }
        let out = up.output().await.context("running test/cluster/up.sh")?;
        // From here on, Drop stops whatever up.sh left running.
        let mut cluster = Self {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            client: Client::try_from(Config::new("http://127.0.0.1:1".parse()?))?,
            bin_dir,
            failed: true,
            stopped: false,
            started,
            slot: None,
        };
        if !out.status.success() {
            bail!(
                "test/cluster/up.sh {} failed: {}",
                cluster.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let crds = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(r#". "$1/test/cluster/lib.sh" && install_crds "$2/kubectl""#)
            .arg("install-crds")
            .arg(repo())
            .arg(&cluster.bin_dir)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdin(Stdio::null())
            .output()
            .await?;
        if !crds.status.success() {
            bail!(
                "installing CRDs failed: {}",
                String::from_utf8_lossy(&crds.stderr)
            );
        }
        cluster.client = lws_rollout::k8s::client::from_kubeconfig(&cluster.kubeconfig).await?;
        cluster.failed = false;
        Ok(cluster)
    }

    /// Kills `component` (`kube-apiserver`, `etcd`, …) with SIGKILL, keeps it down for
    /// `outage`, starts it again with the same command line and data, and returns once it
    /// serves again (`test/cluster/restart.sh`).
    pub async fn restart(
        &self,
        component: &str,
        outage: std::time::Duration,
    ) -> anyhow::Result<()> {
        let outage = outage.as_secs().to_string();
        self.script("test/cluster/restart.sh", &[component, &outage], &[])
            .await
    }

    /// Runs the repository's `script` (a path from the repository root) with bash against this
    /// cluster: its state directory first, then `args`, with `env` and the control-plane
    /// binaries (`LWS_ROLLOUT_BIN_DIR`); an error carrying its stderr when it fails.
    pub async fn script(
        &self,
        script: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg(repo().join(script))
            .arg(&self.dir)
            .args(args)
            .env("LWS_ROLLOUT_BIN_DIR", &self.bin_dir)
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd
            .output()
            .await
            .with_context(|| format!("running {script}"))?;
        if !out.status.success() {
            bail!(
                "{script} {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// A namespace `name` of this cluster, created and returned once its default
    /// ServiceAccount exists (pods of a namespace without it are refused).
    pub async fn namespace(&self, name: &str) -> anyhow::Result<TestNs> {
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(name.to_string());
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let ns = TestNs {
            client: self.client.clone(),
            name: name.to_string(),
        };
        wait_for(
            &ns.api::<ServiceAccount>(),
            "default",
            std::time::Duration::from_secs(60),
            |sa: Option<&ServiceAccount>| sa.is_some(),
        )
        .await
        .with_context(|| format!("the default ServiceAccount of namespace {name}"))?;
        Ok(ns)
    }

    /// Starts a cluster (as [`IsolatedCluster::start`]), runs `test` against it and stops it:
    /// when the test fails its logs are kept and the last lines of every controller's log
    /// (ours, `logs/manager-*.log`, and upstream's) are printed; a control-plane process that
    /// exited on its own during the test, and was started again as a kubelet would, is named
    /// (its own log says why it exited). Tests that need a cluster of their own use this rather
    /// than starting and stopping one themselves.
    pub async fn run<F>(name: &str, env: &[(&str, &str)], test: F) -> anyhow::Result<()>
    where
        F: for<'c> FnOnce(
            &'c IsolatedCluster,
        ) -> futures::future::BoxFuture<'c, anyhow::Result<()>>,
    {
        let mut cluster = Self::start(name, env).await?;
        let result = test(&cluster).await;
        for line in cluster.supervised_restarts() {
            eprintln!("isolated cluster {name}: {line}");
        }
        if result.is_err() {
            cluster.keep_logs();
            for (log, tail) in cluster.controller_log_tails() {
                eprintln!("isolated cluster {name}: last lines of {log}:\n{tail}");
            }
        }
        cluster.stop();
        result
    }

    /// The last lines of each controller's log: our managers' (`logs/manager-<tag>.log`,
    /// [`ManagerProcess`]) and upstream LWS's (`logs/lws-upstream.log`).
    pub fn controller_log_tails(&self) -> Vec<(String, String)> {
        let Ok(logs) = std::fs::read_dir(self.dir.join("logs")) else {
            return Vec::new();
        };
        let mut tails: Vec<(String, String)> = logs
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .map(|n| n.to_string_lossy())
                    .is_some_and(|n| n.starts_with("manager-") || n == "lws-upstream.log")
            })
            .map(|path| {
                let name = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                (name, log_tail(&path))
            })
            .collect();
        tails.sort();
        tails
    }

    /// The control-plane processes `test/cluster/supervise.sh` started again after they exited
    /// on their own, one line each (`kube-scheduler: --- exited on its own …`).
    pub fn supervised_restarts(&self) -> Vec<String> {
        let Ok(logs) = std::fs::read_dir(self.dir.join("logs")) else {
            return Vec::new();
        };
        let mut lines: Vec<String> = logs
            .flatten()
            .filter_map(|entry| {
                let path = entry.path();
                let component = path.file_stem()?.to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&path).ok()?;
                Some(
                    text.lines()
                        .filter(|l| l.contains("started again by test/cluster/supervise.sh"))
                        .map(|l| format!("{component}: {l}"))
                        .collect::<Vec<_>>(),
                )
            })
            .flatten()
            .collect();
        lines.sort();
        lines
    }

    /// Marks the run as failed: the logs are kept when the cluster stops.
    pub fn keep_logs(&mut self) {
        self.failed = true;
    }

    /// Stops every process recorded under `pids/` (`test/cluster/down.sh`).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        crate::harness::record_time("isolated", self.started);
        // LWS_E2E_KEEP_LOGS=1 keeps them after a pass too (to read how a run went).
        let keep = self.failed
            || std::thread::panicking()
            || std::env::var("LWS_E2E_KEEP_LOGS").is_ok_and(|v| v == "1");
        let mut down = std::process::Command::new("bash");
        down.arg(repo().join("test/cluster/down.sh")).arg(&self.dir);
        if keep {
            down.arg("--keep-logs");
        }
        let _ = down.stdin(Stdio::null()).stdout(Stdio::null()).status();
        if keep {
            eprintln!("isolated cluster logs kept in {}/logs", self.dir.display());
        }
        self.slot = None;
    }
}

impl Drop for IsolatedCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Our manager, run against an isolated cluster; its PID is recorded under the cluster's
/// `pids/`, so stopping the cluster stops it too.
pub struct ManagerProcess {
    child: tokio::process::Child,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// Its PID.
    pub pid: u32,
}

impl ManagerProcess {
    /// Starts `lws-rollout` with the suite's out-of-cluster webhook flags plus `extra`.
    pub fn start(cluster: &IsolatedCluster, tag: &str, extra: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(cluster, tag, extra, &cluster.kubeconfig)
    }

    /// [`Self::start`] with another kubeconfig (e.g. one through a [`crate::partition`] proxy).
    pub fn start_with(
        cluster: &IsolatedCluster,
        tag: &str,
        extra: &[&str],
        kubeconfig: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let log = cluster.dir.join(format!("logs/manager-{tag}.log"));
        let file = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(crate::harness::manager_bin())
            .args([
                "--health-addr=127.0.0.1:0",
                "--webhook-addr=127.0.0.1:0",
                "--webhook-host=127.0.0.1",
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting lws-rollout")?;
        let pid = child.id().context("manager pid")?;
        std::fs::write(
            cluster.dir.join(format!("pids/manager-{tag}.pid")),
            pid.to_string(),
        )?;
        Ok(Self { child, log, pid })
    }

    /// Whether it still runs (has not exited on its own).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` (e.g. "TERM", "KILL").
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()?;
        if !status.success() {
            bail!("kill -{signal} {} failed", self.pid);
        }
        Ok(())
    }

    /// Waits for the process to exit (bounded).
    pub async fn exited(
        &mut self,
        within: std::time::Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .with_context(|| format!("manager {} still runs after {within:?}", self.pid))?
            .context("waiting for the manager")
    }

    /// The leader-election identity this process uses (`<host>_<pid>`).
    pub fn identity_suffix(&self) -> String {
        format!("_{}", self.pid)
    }

    /// Whether its log contains `text` yet.
    pub fn logged(&self, text: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .contains(text)
    }

    /// The lines of its log that contain `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_string)
            .collect()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

/// The last 30 lines of the log at `path` (empty when it cannot be read).
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
