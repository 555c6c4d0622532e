//! A cluster of a test's own, for tests that must control the manager process (kill it,
//! restart it) without fighting the suite's global manager on the shared cluster.
//!
//! [`IsolatedCluster::start`] runs `test/cluster/up.sh` in a fresh temporary state directory
//! with the control-plane binaries the suite already has (`LWS_E2E_BIN_DIR`, passed on as
//! `LWS_ROLLOUT_BIN_DIR` so nothing is rebuilt), installs the CRDs with `lib.sh`'s
//! `install_crds`, and starts, SIGKILLs and restarts our manager binary. Dropping it (also
//! when the test fails or panics) kills the manager and runs `test/cluster/down.sh`, which
//! stops exactly the processes `up.sh` started; logs are kept and their path printed unless
//! the test called [`IsolatedCluster::finish`].

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::{Context, bail};
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// Environment variable naming the control-plane binaries (set by `test/run-tests.sh`).
pub const BIN_DIR_ENV: &str = "LWS_E2E_BIN_DIR";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A control plane started for one test, and the manager under test against it.
pub struct IsolatedCluster {
    state: PathBuf,
    kubeconfig: PathBuf,
    manager: Option<Child>,
    manager_args: Vec<String>,
    starts: u32,
    passed: bool,
}

impl IsolatedCluster {
    /// Starts a cluster (about 10 s on a warm machine) and installs the CRDs. The manager is
    /// not started: see [`Self::start_manager`].
    pub async fn start() -> anyhow::Result<Self> {
        let bin = std::env::var(BIN_DIR_ENV).map_err(|_| {
            anyhow::anyhow!("{BIN_DIR_ENV} is not set: run the e2e tests with test/run-tests.sh, which provides the control-plane binaries")
        })?;
        let state = std::env::temp_dir().join(format!(
            "lws-e2e-isolated-{}-{:08x}",
            std::process::id(),
            rand_u32()
        ));
        // From here on, Drop cleans up whatever up.sh managed to start.
        let mut cluster = Self {
            kubeconfig: state.join("kubeconfig"),
            state,
            manager: None,
            manager_args: vec![
                "--health-addr=127.0.0.1:0".into(),
                "--webhook-addr=127.0.0.1:0".into(),
                "--webhook-host=127.0.0.1".into(),
            ],
            starts: 0,
            passed: false,
        };
        let up = tokio::process::Command::new("bash")
            .arg(repo().join("test/cluster/up.sh"))
            .arg(&cluster.state)
            .env("LWS_ROLLOUT_BIN_DIR", &bin)
            .stdin(Stdio::null())
            .output()
            .await
            .context("running test/cluster/up.sh")?;
        if !up.status.success() {
            bail!(
                "test/cluster/up.sh {} failed: {}",
                cluster.state.display(),
                String::from_utf8_lossy(&up.stderr)
            );
        }
        let printed = String::from_utf8_lossy(&up.stdout).trim().to_string();
        if !printed.is_empty() {
            cluster.kubeconfig = PathBuf::from(printed);
        }
        let crds = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(r#". "$1/test/cluster/lib.sh" && install_crds "$2/kubectl""#)
            .arg("install-crds")
            .arg(repo())
            .arg(&bin)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdin(Stdio::null())
            .output()
            .await
            .context("installing the CRDs")?;
        if !crds.status.success() {
            bail!(
                "installing the CRDs failed: {}",
                String::from_utf8_lossy(&crds.stderr)
            );
        }
        Ok(cluster)
    }

    /// Replaces the manager's command-line flags (by default: health and webhook on loopback
    /// ports of its choice, webhook reached at 127.0.0.1 — as `test/run-tests.sh` runs it).
    #[allow(dead_code)]
    pub fn set_manager_args(&mut self, args: &[&str]) {
        self.manager_args = args.iter().map(|a| a.to_string()).collect();
    }

    /// Path of the cluster's kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client for this cluster.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Starts the manager (each start logs to its own `logs/manager-<n>.log`); its PID is
    /// recorded where `down.sh` looks for it.
    pub fn start_manager(&mut self) -> anyhow::Result<u32> {
        if self.manager.is_some() {
            bail!("the manager is already running");
        }
        self.starts += 1;
        let log_path = self.log_path(self.starts);
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let child = Command::new(env!("CARGO_BIN_EXE_lws-rollout"))
            .args(&self.manager_args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the manager")?;
        let pid = child.id();
        std::fs::write(self.state.join("pids/manager.pid"), pid.to_string())?;
        self.manager = Some(child);
        Ok(pid)
    }

    /// SIGKILLs the manager (no graceful shutdown, as a crash or an OOM kill) and reaps it.
    pub fn kill_manager(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.manager.take() else {
            bail!("the manager is not running");
        };
        if let Some(status) = child.try_wait()? {
            bail!(
                "the manager had already exited ({status}); its log:\n{}",
                self.manager_log_tail()
            );
        }
        child.kill().context("SIGKILL to the manager")?;
        child.wait()?;
        let _ = std::fs::remove_file(self.state.join("pids/manager.pid"));
        Ok(())
    }

    /// Stops everything and deletes the state, logs included. Without this call (a test that
    /// failed, by error or panic), the logs are kept and their path printed.
    pub fn finish(mut self) {
        self.passed = true;
    }

    /// SIGKILL, then a fresh start.
    pub fn restart_manager(&mut self) -> anyhow::Result<u32> {
        self.kill_manager()?;
        self.start_manager()
    }

    /// The manager still runs (it has not exited on its own).
    pub fn manager_running(&mut self) -> bool {
        self.manager
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn log_path(&self, start: u32) -> PathBuf {
        self.state.join(format!("logs/manager-{start}.log"))
    }

    /// The last lines of the current (or last) manager's log.
    pub fn manager_log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path(self.starts)).unwrap_or_default();
        let lines: Vec<_> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for IsolatedCluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.manager.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let failed = !self.passed || std::thread::panicking();
        let mut down = Command::new("bash");
        down.arg(repo().join("test/cluster/down.sh"))
            .arg(&self.state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if failed {
            down.arg("--keep-logs");
            eprintln!(
                "isolated cluster: logs kept in {}/logs; last manager lines:\n{}",
                self.state.display(),
                self.manager_log_tail()
            );
        }
        let _ = down.status();
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() as u32
}
