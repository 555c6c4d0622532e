//! The manager binary starts against the cluster, answers its health endpoints, stands by while
//! another replica holds the leader lease, and stops cleanly on SIGTERM.

use std::{process::Stdio, time::Duration};

use anyhow::{Context, bail};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::Command,
};

use crate::harness::kubeconfig_path;

/// Status code of `GET path` on a plain HTTP/1.0 server, or None if nothing answers.
async fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::test]
async fn manager_becomes_ready_and_stops_on_sigterm() -> anyhow::Result<()> {
    let addr = format!("127.0.0.1:{}", free_port()?);
    let log_path = std::env::temp_dir().join(format!("lws-e2e-manager-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path)?;
    let log_tail = || {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        text.lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut child = Command::new(crate::harness::manager_bin())
        .arg(format!("--health-addr={addr}"))
        .env("KUBECONFIG", kubeconfig_path()?)
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .context("starting the manager")?;

    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if http_status(&addr, "/readyz").await == Some(200) {
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("manager exited before becoming ready: {status}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if ready.is_err() {
        bail!(
            "manager did not answer /readyz with 200 within 60s; its log:\n{}",
            log_tail()
        );
    }
    assert_eq!(http_status(&addr, "/healthz").await, Some(200));
    assert_eq!(http_status(&addr, "/nope").await, Some(404));

    // The suite's manager holds the leader lease, so this one is a ready standby that does not
    // reconcile beside it.
    let pid = child.id().context("manager pid")?;
    let standing_by = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if std::fs::read_to_string(&log_path)
                .unwrap_or_default()
                .contains("standing by until this replica holds the leader lease")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if standing_by.is_err() {
        bail!(
            "the second manager did not stand by; its log:\n{}",
            log_tail()
        );
    }
    let client = crate::harness::client().await?;
    let lease =
        kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client, "default")
            .get("lws-rollout")
            .await?;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        !holder.is_empty() && !holder.ends_with(&format!("_{pid}")),
        "the suite's manager keeps the lease, got holder {holder:?}"
    );

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    assert!(kill.success());
    let Ok(status) = tokio::time::timeout(Duration::from_secs(15), child.wait()).await else {
        bail!(
            "manager did not exit within 15s of SIGTERM; its log:\n{}",
            log_tail()
        );
    };
    let status = status?;
    assert!(status.success(), "clean exit on SIGTERM, got {status}");
    Ok(())
}

#[tokio::test]
async fn manager_without_a_cluster_fails_with_one_clear_line() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("lws-e2e-noconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let missing = dir.join("missing-kubeconfig");
    let out = Command::new(crate::harness::manager_bin())
        .arg("--health-addr=127.0.0.1:0")
        .env("KUBECONFIG", &missing)
        .env("HOME", &dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .await?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot build a Kubernetes client"),
        "stderr: {stderr}"
    );
    Ok(())
}
