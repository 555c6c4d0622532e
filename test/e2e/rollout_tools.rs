//! Shared by the e2e tests that drive real releases with outside tools (kubectl-lws, Kruise's
//! kubectl-kruise, Argo CD's health evaluation): where the tools are, how to run them against
//! the suite's cluster, a typed Rollout manifest, and a gate keeper for held-back pods. Waits
//! on a Rollout are `rollout_support`'s.

use std::{
    process::{Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    api::{ListParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::Rollout;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{
    harness::{TestNs, kubeconfig_path},
    lws_support::HOLD_GATE,
};

/// Environment variable naming kubectl-kruise (`test/tools/build-kruise.sh`).
pub const KRUISE_BIN_ENV: &str = "LWS_E2E_KRUISE_BIN";
/// Environment variable naming argocd-health (`test/tools/build-argocd-health.sh`).
pub const ARGOCD_HEALTH_BIN_ENV: &str = "LWS_E2E_ARGOCD_HEALTH_BIN";

/// The path of an outside tool, or `None` after printing one line saying the test is skipped
/// and why (the tool could not be built here: no Go toolchain or module proxy).
pub fn tool(env: &str, what: &str, script: &str) -> Option<String> {
    match std::env::var(env) {
        Ok(path) if !path.is_empty() => Some(path),
        _ => {
            eprintln!(
                "SKIPPED: {what} is not available ({env} is not set: {script} could not build it, see its output in test/run-tests.sh's log)"
            );
            None
        }
    }
}

/// The kubectl-lws binary cargo built for this test run.
pub fn kubectl_lws() -> &'static str {
    env!("CARGO_BIN_EXE_kubectl-lws")
}

/// Runs a kubectl-style tool against the suite's cluster (`KUBECONFIG`), in namespace `ns`.
pub async fn run(bin: &str, ns: &str, args: &[&str]) -> anyhow::Result<Output> {
    let out = tokio::process::Command::new(bin)
        .args(args)
        .args(["-n", ns])
        .env("KUBECONFIG", kubeconfig_path()?)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {bin}"))?;
    Ok(out)
}

/// Runs `kubectl lws <args>` with the suite's kubectl and kubectl-lws's directory first on
/// `PATH`: kubectl's own plugin lookup finds `kubectl-lws`.
pub async fn kubectl_plugin(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let kubectl = crate::isolated::bin_dir()?.join("kubectl");
    let plugin_dir = std::path::Path::new(kubectl_lws())
        .parent()
        .context("kubectl-lws has a directory")?
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(plugin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let out = tokio::process::Command::new(&kubectl)
        .arg("lws")
        .args(args)
        .args(["-n", ns])
        .env("KUBECONFIG", kubeconfig_path()?)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running kubectl lws")?;
    if !out.status.success() {
        bail!(
            "kubectl lws {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`run`], failing unless the tool exits 0; returns its stdout.
pub async fn run_ok(bin: &str, ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = run(bin, ns, args).await?;
    if !out.status.success() {
        bail!(
            "{bin} {args:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A running `kubectl-lws rollout status`: its stdout lines are collected as they come.
pub struct StatusWatch {
    child: tokio::process::Child,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl StatusWatch {
    /// Starts `kubectl-lws rollout status <name> --timeout <timeout>`.
    pub fn start(ns: &str, name: &str, timeout: &str) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(kubectl_lws())
            .args(["rollout", "status", name, "--timeout", timeout, "-n", ns])
            .env("KUBECONFIG", kubeconfig_path()?)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting kubectl-lws rollout status")?;
        let stdout = child.stdout.take().context("stdout")?;
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().expect("lines").push(line);
            }
        });
        Ok(Self {
            child,
            lines,
            reader,
        })
    }

    /// Waits for it to exit (at most `timeout`); returns its exit code and every line it printed.
    pub async fn finish(mut self, timeout: Duration) -> anyhow::Result<(i32, Vec<String>)> {
        let status = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status?,
            Err(_) => bail!(
                "kubectl-lws rollout status did not exit within {timeout:?}; it printed: {:#?}",
                self.lines.lock().expect("lines")
            ),
        };
        let _ = self.reader.await;
        let lines = self.lines.lock().expect("lines").clone();
        Ok((status.code().unwrap_or(-1), lines))
    }
}

/// A canary Rollout (canary LWS per release) of LWS `lws` with these steps.
pub fn rollout(name: &str, lws: &str, steps: serde_json::Value) -> Rollout {
    serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": name},
        "spec": {
            "workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": lws},
            "strategy": {"canary": {"enableExtraWorkloadForCanary": true, "steps": steps}}
        }
    }))
    .expect("a valid Rollout")
}

/// The images of every pod of the LWS `name` (its own groups, not a canary's).
pub async fn images(ns: &TestNs, name: &str) -> anyhow::Result<Vec<String>> {
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{}={name}", lws_rollout::lws::labels::NAME)))
        .await?;
    Ok(pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(crate::lws_support::image)
        .collect())
}

/// Lets pods held back by [`HOLD_GATE`] start once opened: while open, every gated pod of the
/// namespace (present or future) has its scheduling gates removed.
pub struct GateKeeper {
    open: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl GateKeeper {
    /// Starts closed.
    pub fn start(ns: &TestNs) -> Self {
        let open = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(tokio::sync::Notify::new());
        let api = ns.api::<Pod>();
        let (o, w) = (open.clone(), wake.clone());
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api.clone(), watcher::Config::default())
                .default_backoff()
                .boxed();
            let ungate: json_patch::Patch =
                serde_json::from_value(json!([{"op": "remove", "path": "/spec/schedulingGates"}]))
                    .expect("patch");
            loop {
                tokio::select! {
                    ev = events.next() => if ev.is_none() { return },
                    _ = w.notified() => {},
                }
                if !o.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(pods) = api.list(&ListParams::default()).await else {
                    continue;
                };
                for pod in pods.items {
                    let gated = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.scheduling_gates.as_ref())
                        .is_some_and(|g| g.iter().any(|g| g.name == HOLD_GATE));
                    if gated {
                        let name = pod.metadata.name.unwrap_or_default();
                        // A lost race (pod gone, gate already removed) is retried on the next event.
                        let _ = api
                            .patch(
                                &name,
                                &PatchParams::default(),
                                &Patch::<()>::Json(ungate.clone()),
                            )
                            .await;
                    }
                }
            }
        });
        Self { open, wake, task }
    }

    /// From now on, held pods start.
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

impl Drop for GateKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
