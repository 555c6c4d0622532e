//! The manager cut off from the API server while both keep running: a network partition of
//! the manager alone, made without touching the host's network. The holder reaches the API
//! server through a TCP relay of the test's own on loopback; cutting the relay stops every byte
//! in both directions while the connections stay open — the requests hang, nothing fails fast,
//! as when packets are dropped on the way. The holder must give up the lead within its term
//! (docs/install.md) although its Lease renewals never answer, before the standby, which still
//! reaches the API server, takes over; the release goes on under the standby as if nothing
//! happened.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

use crate::{
    harness::{eventually, wait_for},
    isolated::{IsolatedCluster, ManagerProcess},
    lws_support::uids,
    rollout_canary::three_steps,
    rollout_crash::{Watched, ended_uninterrupted},
    rollout_support::*,
};

/// A TCP relay to the API server whose traffic can be stopped (`cut`) and let through again.
struct Relay {
    addr: std::net::SocketAddr,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: std::net::SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (open, gate) = watch::channel(true);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let gate = gate.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, gate.clone()), pipe(sr, cw, gate));
                });
            }
        });
        Ok(Self { addr, open, task })
    }

    /// Stops every byte, both ways, on every connection (new ones are accepted and hang too).
    fn cut(&self) {
        self.open.send_replace(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding what it read while the gate is closed.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut gate: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if gate.wait_for(|open| *open).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if gate.wait_for(|open| *open).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A copy of `kubeconfig` whose server is `relay` (the API server's certificate names
/// 127.0.0.1, so TLS holds through the relay).
fn kubeconfig_through(kubeconfig: &Path, relay: std::net::SocketAddr) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("a server line in the kubeconfig")?
        .to_string();
    let through = kubeconfig.with_file_name("kubeconfig-relay");
    std::fs::write(&through, text.replace(&server, &format!("https://{relay}")))?;
    Ok(through)
}

/// The API server's address in `kubeconfig`.
fn api_server(kubeconfig: &Path) -> anyhow::Result<std::net::SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig)?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .context("an https server line in the kubeconfig")?
        .parse()
        .context("the API server address")
}

/// The time at the start of the first log line of `manager` containing `text`.
fn logged_at(manager: &ManagerProcess, text: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    manager
        .log_lines(text)
        .first()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn chaos_the_holder_cut_off_from_the_api_server_stops_before_the_standby_leads()
-> anyhow::Result<()> {
    on_big_stack(cut_off)
}

async fn cut_off() -> anyhow::Result<()> {
    IsolatedCluster::run("partition", &[], |c| {
        Box::pin(release_through_a_partition(c))
    })
    .await
}

async fn release_through_a_partition(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let relay = Relay::start(api_server(&cluster.kubeconfig)?).await?;
    let through = kubeconfig_through(&cluster.kubeconfig, relay.addr)?;
    let mut holder = ManagerProcess::start_with(cluster, "holder", &[], &through)?;
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let held_by = |suffix: String| {
        move |l: Option<&Lease>| {
            l.and_then(|l| l.spec.as_ref()?.holder_identity.as_deref())
                .is_some_and(|h| h.ends_with(&suffix))
        }
    };
    wait_for(
        &leases,
        "lws-rollout",
        Duration::from_secs(60),
        held_by(holder.identity_suffix()),
    )
    .await
    .context("the replica behind the relay takes the Lease")?;
    let standby = ManagerProcess::start(cluster, "standby", &[])?;
    let ns = cluster.namespace("partition").await?;

    let v1 = stable_lws(4, "vllm:1");
    release_setup(&ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
    let baseline = uids(&ns, STABLE).await?;
    let watched = Watched::start(&ns);
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_paused_at(&ns, 1).await?;
    ensure!(
        standby.logged("standing by until this replica holds the leader lease"),
        "the second replica stands by:\n{}",
        standby.log_tail()
    );

    // The partition: the holder's requests, its Lease renewals included, hang from now on.
    let cut = Instant::now();
    relay.cut();
    let status = holder.exited(Duration::from_secs(40)).await?;
    let stopped_after = cut.elapsed();
    ensure!(
        status.code() == Some(3),
        "the holder cut off should end its term with code 3, not {status}:\n{}",
        holder.log_tail()
    );
    wait_for(
        &leases,
        "lws-rollout",
        Duration::from_secs(60),
        held_by(standby.identity_suffix()),
    )
    .await
    .context("the standby takes the Lease")?;
    let took_over_after = cut.elapsed();
    // Never two leaders: the holder's term ended, and its in-flight reconciles were dropped a
    // second later (`AFTER_TERM`), before the standby started its controllers.
    let stopped = logged_at(&holder, "lost the leader lease: stopping the controllers")
        .context("the holder's line as its term ended")?;
    // The standby logs its start once its Lease write has returned, which can be a moment
    // after the Lease this test watches shows it (a CI run read the log before the line).
    let started = eventually(
        Duration::from_secs(20),
        "the standby's start line",
        || async {
            let at = logged_at(
                &standby,
                "holding the leader lease: starting the controllers",
            );
            Ok((at.is_some(), at))
        },
    )
    .await?
    .context("the standby's start line")?;
    let gap = started.duration_since(stopped);
    ensure!(
        gap >= k8s_openapi::jiff::SignedDuration::from_secs(1),
        "the holder's term ended at {stopped}, only {gap:?} before the standby started at {started}"
    );
    eprintln!(
        "partition: the holder cut off exited {} ms after the cut; the standby led {} ms after it",
        stopped_after.as_millis(),
        took_over_after.as_millis()
    );
    ensure!(
        uids(&ns, STABLE).await? == baseline,
        "a stable pod was replaced during the partition"
    );

    // The release goes on under the standby.
    approve(&ns).await?;
    wait_rollout(&ns, "step 2 under the standby", |r| step(r).0 == 2).await?;
    ended_uninterrupted(
        &ns,
        "release finished under the standby",
        "vllm:2",
        &watched,
    )
    .await?;
    Ok(())
}
