//! Two manager replicas: one holds the leader Lease and reconciles, the other stands by and
//! takes over — at once when the holder stops gracefully (it releases the lease), within the
//! lease duration when the holder is killed. In a cluster of its own, so the suite's manager is
//! not part of the election.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::wait_for,
    isolated::{IsolatedCluster, ManagerProcess},
    metrics,
};

/// Whether the Lease is held by the manager whose identity ends with `suffix`.
pub fn held_by(suffix: String) -> impl Fn(Option<&Lease>) -> bool {
    move |l: Option<&Lease>| {
        l.and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            .is_some_and(|h| h.ends_with(&suffix))
    }
}

fn ready(n: i32) -> impl Fn(Option<&LeaderWorkerSet>) -> bool {
    move |l: Option<&LeaderWorkerSet>| {
        l.and_then(|l| l.status.as_ref())
            .is_some_and(|s| s.ready_replicas == Some(n) && s.replicas == Some(n))
    }
}

async fn scale(api: &Api<LeaderWorkerSet>, n: i32) -> anyhow::Result<()> {
    api.patch_scale(
        "fo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": n}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_standby_replica_takes_over_when_the_leader_stops_or_dies() -> anyhow::Result<()> {
    IsolatedCluster::run("failover", &[], |c| Box::pin(fail_over(c))).await
}

async fn fail_over(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    // Every manager this test starts; their logs are under the cluster's logs/.
    let mut managers: Vec<ManagerProcess> = Vec::new();
    let managers = &mut managers;
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let lws_api: Api<LeaderWorkerSet> = Api::namespaced(cluster.client.clone(), "default");

    managers.push(ManagerProcess::start(cluster, "a", &[])?);
    let a_suffix = managers[0].identity_suffix();
    wait_for(
        &leases,
        "lws-rollout",
        Duration::from_secs(60),
        held_by(a_suffix),
    )
    .await
    .context("the first replica takes the lease")?;
    managers.push(ManagerProcess::start(cluster, "b", &[])?);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !managers[1].logged("standing by until this replica holds the leader lease") {
        if tokio::time::Instant::now() > deadline {
            bail!("the second replica did not stand by");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let lws: LeaderWorkerSet = serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "fo"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": "vllm:1"}]}}}}
    }))?;
    lws_api.create(&PostParams::default(), &lws).await?;
    wait_for(&lws_api, "fo", Duration::from_secs(60), ready(1)).await?;

    // Both replicas' /metrics are scraped throughout the hand-over: never a 500 (a replica
    // that has exited may refuse the connection), and the standby's leader gauge goes 0 → 1.
    let addrs = [&managers[0], &managers[1]].map(|m| {
        std::fs::read_to_string(&m.log)
            .ok()
            .and_then(|l| metrics::health_addr(&l))
    });
    let [Some(a_addr), Some(b_addr)] = addrs else {
        bail!("a replica logged no health address: {addrs:?}");
    };
    let (stop_scraping, mut scraping) = tokio::sync::watch::channel(false);
    let scraper = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            for (replica, addr) in [("a", &a_addr), ("b", &b_addr)] {
                if let Some((status, body)) = metrics::scrape(addr).await {
                    seen.push((
                        replica,
                        status,
                        metrics::sample(&body, "lws_rollout_leader"),
                    ));
                }
            }
            tokio::select! {
                _ = scraping.changed() => return seen,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Graceful stop: the lease is released, the standby takes it without waiting it out.
    let stopped_at = tokio::time::Instant::now();
    managers[0].signal("TERM")?;
    let b_suffix = managers[1].identity_suffix();
    wait_for(
        &leases,
        "lws-rollout",
        Duration::from_secs(10),
        held_by(b_suffix),
    )
    .await
    .context("the standby takes a released lease at once")?;
    let handover = stopped_at.elapsed();
    assert!(
        handover < Duration::from_secs(5),
        "a released lease is taken at once, not after it would expire; took {handover:?}"
    );
    let status = managers[0].exited(Duration::from_secs(15)).await?;
    assert!(status.success(), "the old leader exits cleanly: {status}");
    // One more scrape round of b as the leader, then stop.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_scraping.send(true);
    let seen = scraper.await?;
    let failed: Vec<_> = seen
        .iter()
        .filter(|(_, status, _)| *status != 200)
        .collect();
    assert!(
        failed.is_empty(),
        "scrapes during the leader change all succeed: {failed:?}"
    );
    let b_leader: Vec<f64> = seen
        .iter()
        .filter(|(replica, ..)| *replica == "b")
        .filter_map(|(_, _, leader)| *leader)
        .collect();
    assert_eq!(
        b_leader.first(),
        Some(&0.0),
        "the standby reports it does not lead: {b_leader:?}"
    );
    assert_eq!(
        b_leader.last(),
        Some(&1.0),
        "then that it leads: {b_leader:?}"
    );
    scale(&lws_api, 2).await?;
    wait_for(&lws_api, "fo", Duration::from_secs(60), ready(2))
        .await
        .context("the new leader reconciles")?;

    // Killed holder: a new replica takes over once the unrenewed lease expires (15 s).
    managers.push(ManagerProcess::start(cluster, "c", &[])?);
    managers[1].signal("KILL")?;
    let c_suffix = managers[2].identity_suffix();
    wait_for(
        &leases,
        "lws-rollout",
        Duration::from_secs(45),
        held_by(c_suffix),
    )
    .await
    .context("a killed holder's lease expires and is taken")?;
    scale(&lws_api, 1).await?;
    wait_for(&lws_api, "fo", Duration::from_secs(60), ready(1))
        .await
        .context("the third leader reconciles")?;

    // A holder that cannot renew (here another identity took the Lease from under it; an
    // API-server outage looks the same from inside) stops with its designed exit: code 3, one
    // line saying why, no backtrace.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    leases
        .patch(
            "lws-rollout",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"holderIdentity": "someone-else", "renewTime": now}}),
            ),
        )
        .await?;
    let status = managers[2].exited(Duration::from_secs(40)).await?;
    assert_eq!(status.code(), Some(3), "lost lease exit code: {status}");
    let log = std::fs::read_to_string(&managers[2].log)?;
    assert!(
        log.contains("lost the leader lease"),
        "{}",
        managers[2].log_tail()
    );
    assert!(
        !log.contains("stack backtrace") && !log.contains("Stack backtrace"),
        "a designed exit prints no backtrace: {}",
        managers[2].log_tail()
    );
    Ok(())
}
