//! The control plane fails in the middle of a release, on a cluster of the test's own with a
//! traffic layer of its own (the suite's cluster serves every other test). A canary release
//! meets an API-server restart at each of its phases, and etcd's: the API server is SIGKILLed
//! and restarted while a step waits for approval (down only while it starts: the manager rides
//! through); SIGKILLed again as the next step scales and kept down longer than the leader Lease
//! allows, with two replicas — the holder exits with code 3, the standby is SIGKILLed during the
//! outage and its replacement, started while the API server is still down, waits for it and
//! takes over; restarted as the last step moves traffic, and again as the release finalises
//! (the stable LWS rolling); and etcd is SIGKILLed and restarted while the stable LWS still
//! rolls. Requests go through the proxy from before the release to its end, and not one may
//! fail. The release must end as an uninterrupted one: no stable pod replaced before
//! finalisation, no canary LWS, BatchRelease or canary Service created twice, every group on
//! the new template. A blue-green release goes through two API-server restarts too: as its
//! step 2 grows the new side and turns the route to it, and as the switch finalises. How long
//! a release takes to move again once the API server is back is printed (docs/performance.md).
//!
//! The cluster's control plane is supervised as a kubelet supervises static pods
//! (`test/cluster/supervise.sh`): kube-scheduler exits by design when an API-server restart
//! leaves its cache contradicting an update, and without a restart the cluster would schedule
//! nothing more (the blue-green scenario once stalled that way).

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::{
    api::{apps::v1::StatefulSet, coordination::v1::Lease, core::v1::Pod},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;
// An outage up to RIDES_THROUGH passes unnoticed by the Lease holder (docs/install.md).
use lws_rollout::manager::leader::RIDES_THROUGH;

use crate::{
    failover::held_by,
    harness::{TestNs, wait_for},
    isolated::{IsolatedCluster, ManagerProcess},
    lws_support::uids,
    rollout_canary::{RATE, is_canary, three_steps},
    rollout_crash::{Watched, ended_uninterrupted},
    rollout_support::*,
    traffic_driver::{Outcome, ReleaseTraffic, RequestSpec, traffic_in, wait_until_served},
};

/// A restart with no time down (a control-plane upgrade): the API server is unreachable only
/// while it starts again.
const RESTART: Duration = Duration::ZERO;
/// Longer than the 13 s after which the Lease holder stops (docs/install.md).
const LONG_OUTAGE: Duration = Duration::from_secs(16);

#[test]
fn chaos_control_plane_restarts_mid_release_lose_nothing() -> anyhow::Result<()> {
    on_big_stack(control_plane_restarts)
}

async fn control_plane_restarts() -> anyhow::Result<()> {
    // With a traffic layer of its own: requests go through the proxy the whole time.
    IsolatedCluster::run("chaos", &[("LWS_CLUSTER_TRAFFIC", "1")], |c| {
        Box::pin(release_through_outages(c))
    })
    .await
}

async fn release_through_outages(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    // With leader election, as the chart runs it.
    let mut manager = ManagerProcess::start(cluster, "1", &[])?;
    let ns = cluster.namespace("chaos").await?;

    // Pods ready 2 s after they start, as a model server loading weights: the stable LWS's roll
    // at finalisation lasts long enough for two outages to land in it.
    // Every deleted pod answers for 30 s, the default termination grace period, as a server
    // with a preStop drain would: after an API-server restart the proxy's own watches
    // reconnect with client-go's backoff, which grows over this test's repeated outages, and
    // until they are back the proxy cannot learn that an endpoint left (EndpointSlices have
    // no acknowledgement a controller could wait for). In a real cluster the grace period
    // covers that blindness; the agent's default drain once did not: a few requests got
    // 502 as finalisation removed canary groups right after the third restart.
    let v1 = with_drain_ms(&with_ready_delay(&stable_lws(4, "vllm:1"), "2s"), 30_000);
    release_setup(&ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
    let requests = requests_through_the_proxy(cluster, &ns).await?;
    let baseline = uids(&ns, STABLE).await?;
    let watched = Watched::start(&ns);

    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_paused_at(&ns, 1).await?;

    // 1. The API server restarted at a step paused for approval: unreachable for as long as it
    //    takes to start (measured). Within the Lease's ride-through the manager keeps running;
    //    an approval sent as soon as the API server is back moves the release on.
    let down = restart_riding_through(cluster, &mut manager, "1b", "at step 1").await?;
    let back = Instant::now();
    ensure!(
        uids(&ns, STABLE).await? == baseline,
        "a stable pod was replaced during the outage"
    );
    approve(&ns).await?;
    wait_rollout(&ns, "step 2 started after the outage", |r| step(r).0 == 2).await?;
    eprintln!(
        "chaos: API server restarted ({} ms unreachable) -> approved step 2 started {} ms after \
         it was back",
        down.as_millis(),
        back.elapsed().as_millis()
    );

    // 2. Down for longer than the Lease allows, as step 2 scales the canary, with two replicas
    //    as the chart can run them. The holder exits with code 3, as documented. The standby is
    //    SIGKILLed while the API server is down, and its Deployment would start another at
    //    once: that one starts during the outage, waits for the API server instead of exiting
    //    (docs/install.md), and takes over when it is back.
    let standby = ManagerProcess::start(cluster, "standby", &[])?;
    wait_until_logged(&standby, "connected to the API server").await?;
    let (restarted, replacement) =
        tokio::join!(cluster.restart("kube-apiserver", LONG_OUTAGE), async {
            api_server_down(cluster).await?;
            standby.signal("KILL")?;
            let replacement = ManagerProcess::start(cluster, "2", &[])?;
            wait_until_logged(&replacement, "the API server does not answer yet").await?;
            anyhow::Ok(replacement)
        });
    restarted.context("restarting the API server at step 2")?;
    let mut replacement = replacement.context("a replica killed and replaced during the outage")?;
    let back = Instant::now();
    let status = manager.exited(Duration::from_secs(30)).await?;
    ensure!(
        status.code() == Some(3),
        "after a {LONG_OUTAGE:?} outage the manager should exit with code 3 (lost lease), not \
         {status}:\n{}",
        manager.log_tail()
    );
    ensure!(
        replacement.running(),
        "the replica started during the outage exited instead of waiting for the API server:\n{}",
        replacement.log_tail()
    );
    // What the outage left in the log a user reads: one line per failing dependency per
    // backoff step, not one per object and attempt. Each line says how many
    // failures with the same cause were folded into it, so the log also tells how many lines
    // there would have been.
    let lines: Vec<String> = ["reconcile failed", "cannot publish event"]
        .iter()
        .flat_map(|t| manager.log_lines(t))
        .collect();
    let folded: usize = lines
        .iter()
        .filter_map(|l| {
            let rest = l.split("same_error_since_last_line=").nth(1)?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    eprintln!(
        "chaos: the {LONG_OUTAGE:?} outage logged {} failure lines before the exit, folding {folded} \
         more with the same cause",
        lines.len()
    );
    wait_rollout(&ns, "step 3 moving traffic after the long outage", |r| {
        step(r) == (3, "StepTrafficRouting".to_string())
    })
    .await?;
    eprintln!(
        "chaos: API server back after a {LONG_OUTAGE:?} outage -> step 3 moving traffic in {} ms \
         (the replica started during the outage; step 2's pause included)",
        back.elapsed().as_millis()
    );

    // 3. Restarted as step 3 moves traffic: the route must still reach 100% to the canary.
    let down =
        restart_riding_through(cluster, &mut replacement, "3", "as step 3 moves traffic").await?;
    let back = Instant::now();
    wait_route(&ns, split_route(100)).await?;
    wait_rollout(&ns, "finalising after step 3", |r| {
        !finalising(r).is_empty()
    })
    .await?;
    eprintln!(
        "chaos: API server restarted as step 3 moved traffic ({} ms unreachable) -> finalising \
         {} ms after it was back",
        down.as_millis(),
        back.elapsed().as_millis()
    );

    // 4. Restarted at finalisation, as the stable LWS rolls to the new template group by group.
    let down = restart_riding_through(cluster, &mut replacement, "4", "at finalisation").await?;
    eprintln!(
        "chaos: API server restarted at finalisation ({} ms unreachable)",
        down.as_millis()
    );

    // 5. etcd restarted while the stable LWS still rolls (some groups on the new template, not
    //    all of them). Read off its leader StatefulSet, whose status kube-controller-manager
    //    writes as each leader is replaced: the LWS's own counters are paced (docs/lws.md), so
    //    a roll that finishes within one pace can go from 0 to 4 there without a step between.
    wait_for(
        &ns.api::<StatefulSet>(),
        STABLE,
        WAIT,
        |s: Option<&StatefulSet>| {
            s.and_then(|s| s.status.as_ref())
                .and_then(|s| s.updated_replicas)
                .is_some_and(|u| (1..4).contains(&u))
        },
    )
    .await
    .context("the stable LWS rolling at finalisation")?;
    cluster
        .restart("etcd", RESTART)
        .await
        .context("restarting etcd during finalisation")?;
    let _resync = KubeletResync::start(&ns);
    ended_uninterrupted(
        &ns,
        "release finished after the etcd outage",
        "vllm:2",
        &watched,
    )
    .await?;
    ensure!(
        replacement.running(),
        "the manager exited after etcd's restart:\n{}",
        replacement.log_tail()
    );
    if let Some(requests) = requests {
        let report = requests.finish().await?;
        eprintln!(
            "chaos: {} requests through the proxy over the release and its five outages, {} failed",
            report.outcomes.len(),
            report.failures().len()
        );
    }
    Ok(())
}

/// What a kubelet does and KWOK v0.8.0 does not: retry finishing a pod's deletion. KWOK retries
/// a failed stage only when the API server refused the connection or answered 503/504/429; the
/// API server's answer while etcd restarts is a 500 (`rpc error: code = Unavailable`), after
/// which KWOK drops the job and the pod stays Terminating for good, its StatefulSet unable to
/// recreate it (seen in CI: the stable LWS's roll stuck at 1/4 groups). A kubelet's
/// pod workers resync and delete it again. So, until dropped, every pod of the namespace still
/// terminating a few seconds after its deletion gets a metadata touch — a new watch event, on
/// which KWOK plays its delete stage again. The controller under test never sees anything it
/// would not see from a kubelet: a pod that terminates, late.
struct KubeletResync(tokio::task::JoinHandle<()>);

impl KubeletResync {
    const STUCK_AFTER: Duration = Duration::from_secs(5);

    fn start(ns: &TestNs) -> Self {
        let api = ns.api::<Pod>();
        Self(tokio::spawn(async move {
            for round in 0u64.. {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let Ok(pods) = api.list(&ListParams::default()).await else {
                    continue;
                };
                let now = Timestamp::now();
                for pod in pods {
                    let stuck = pod.metadata.deletion_timestamp.as_ref().is_some_and(|t| {
                        now.duration_since(t.0).unsigned_abs() > Self::STUCK_AFTER
                    });
                    if stuck {
                        let touch = json!({"metadata": {"annotations": {
                            "e2e.lws-rollout.x-k8s.io/kubelet-resync": round.to_string()
                        }}});
                        let _ = api
                            .patch(
                                &pod.name_any(),
                                &PatchParams::default(),
                                &Patch::Merge(&touch),
                            )
                            .await;
                    }
                }
            }
        }))
    }
}

impl Drop for KubeletResync {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[test]
fn chaos_blue_green_api_server_restarted_as_traffic_moves_and_at_the_switch() -> anyhow::Result<()>
{
    on_big_stack(blue_green_restarts)
}

async fn blue_green_restarts() -> anyhow::Result<()> {
    IsolatedCluster::run("chaos-bg", &[("LWS_CLUSTER_TRAFFIC", "1")], |c| {
        Box::pin(blue_green_through_outages(c))
    })
    .await
}

/// A blue-green release: the API server restarts as step 2 grows the new side and turns the
/// route to it, and again as the switch finalises. Requests through the proxy all along.
async fn blue_green_through_outages(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let mut manager = ManagerProcess::start(cluster, "1", &[])?;
    let ns = cluster.namespace("chaos-bg").await?;
    let v1 = stable_lws(4, "vllm:1");
    release_setup(
        &ns,
        &v1,
        &blue_green_rollout(blue_green_two_steps(), Some(gateway_routing())),
    )
    .await?;
    let requests = requests_through_the_proxy(cluster, &ns).await?;
    let baseline = uids(&ns, STABLE).await?;
    let watched = Watched::start(&ns);
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_paused_at(&ns, 1).await?;

    approve(&ns).await?;
    let down = restart_riding_through(cluster, &mut manager, "1b", "as traffic moves").await?;
    let back = Instant::now();
    wait_paused_at(&ns, 2).await?;
    wait_route(&ns, split_route(100)).await?;
    eprintln!(
        "chaos (blue-green): API server restarted as step 2 moved traffic ({} ms unreachable) -> \
         step 2 paused with all traffic on the new side {} ms after it was back",
        down.as_millis(),
        back.elapsed().as_millis()
    );
    ensure!(
        uids(&ns, STABLE).await? == baseline,
        "a user pod restarted before the switch"
    );

    approve(&ns).await?;
    wait_rollout(&ns, "switching", |r| {
        finalising(r) == "FinalisingStepRouteTrafficToNew"
    })
    .await?;
    restart_riding_through(cluster, &mut manager, "1c", "at the switch").await?;
    ended_uninterrupted(
        &ns,
        "blue-green release finished after the outages",
        "vllm:2",
        &watched,
    )
    .await?;
    if let Some(requests) = requests {
        let report = requests.finish().await?;
        eprintln!(
            "chaos (blue-green): {} requests through the proxy, {} failed",
            report.outcomes.len(),
            report.failures().len()
        );
    }
    Ok(())
}

/// Requests through the cluster's proxy from now to the end of the release, answered by the
/// stable LWS to begin with (`None`, after one SKIPPED line, without a traffic layer). The
/// outages must not fail one: the proxy and the pods keep serving what they were told last.
async fn requests_through_the_proxy(
    cluster: &IsolatedCluster,
    ns: &crate::harness::TestNs,
) -> anyhow::Result<Option<ReleaseTraffic<fn(&Outcome) -> bool>>> {
    match traffic_in(&cluster.dir) {
        Ok(t) => {
            let plain = RequestSpec::new(&host(ns));
            wait_until_served(&t, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
            Ok(Some(ReleaseTraffic::start(
                &t,
                plain,
                None,
                RATE,
                is_canary as fn(&Outcome) -> bool,
            )))
        }
        Err(reason) => {
            eprintln!("SKIPPED chaos (requests): traffic layer off: {reason}");
            Ok(None)
        }
    }
}

/// Restarts the API server at once (unreachable only while it starts) and returns how long it
/// was unreachable. Then the holder either renews the Lease (it rode the outage through) or its
/// term ends and it exits: one of the two shows within the term, and the test waits for it
/// rather than looking once (a holder whose term ends a few seconds after the API server is
/// back would otherwise exit unseen, leaving no replica to go on). Within the Lease's
/// ride-through the manager must renew; after a slower start (a loaded machine) it may instead
/// exit, with the designed code, and another (`tag`) is started as its Deployment would.
async fn restart_riding_through(
    cluster: &IsolatedCluster,
    manager: &mut ManagerProcess,
    tag: &str,
    when: &str,
) -> anyhow::Result<Duration> {
    let killed = Instant::now();
    cluster
        .restart("kube-apiserver", RESTART)
        .await
        .with_context(|| format!("restarting the API server {when}"))?;
    let down = killed.elapsed();
    let back = Timestamp::now();
    match renewed_or_exited(cluster, manager, back).await? {
        None => {}
        Some(status) => {
            ensure!(
                down >= RIDES_THROUGH,
                "the manager exited on a {down:?} API-server outage {when} ({status}), within \
                 the {RIDES_THROUGH:?} it rides through:\n{}",
                manager.log_tail()
            );
            ensure!(
                status.code() == Some(3),
                "exit after a {down:?} outage {when}: {status}:\n{}",
                manager.log_tail()
            );
            *manager = ManagerProcess::start(cluster, tag, &[])?;
        }
    }
    Ok(down)
}

/// Waits until `manager` has renewed the Lease after `back` (`None`: it still leads) or has
/// exited (its status), for at most a Lease's duration and the exit after it.
async fn renewed_or_exited(
    cluster: &IsolatedCluster,
    manager: &mut ManagerProcess,
    back: Timestamp,
) -> anyhow::Result<Option<std::process::ExitStatus>> {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let held = held_by(manager.identity_suffix());
    let log = manager.log.clone();
    let renewed = wait_for(
        &leases,
        "lws-rollout",
        Duration::from_secs(30),
        move |l: Option<&Lease>| {
            held(l)
                && l.and_then(|l| l.spec.as_ref())
                    .and_then(|s| s.renew_time.as_ref())
                    .is_some_and(|t| t.0 > back)
        },
    );
    tokio::select! {
        renewed = renewed => {
            renewed.with_context(|| {
                format!(
                    "the manager neither renewed the Lease nor exited after the outage; its log \
                     ends:\n{}",
                    crate::isolated::log_tail(&log)
                )
            })?;
            Ok(None)
        }
        status = manager.exited(Duration::from_secs(31)) => Ok(Some(status?)),
    }
}

/// Waits until the API server refuses connections (a restart has killed it).
async fn api_server_down(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.client.apiserver_version().await.is_ok() {
        ensure!(
            Instant::now() < deadline,
            "the API server still answers 30 s into its restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Waits until `manager`'s log has a line containing `text`.
async fn wait_until_logged(manager: &ManagerProcess, text: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while manager.log_lines(text).is_empty() {
        ensure!(
            Instant::now() < deadline,
            "the manager did not log {text:?} within 60 s:\n{}",
            manager.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
