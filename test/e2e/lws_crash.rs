//! Crash safety: the manager is SIGKILLed while it creates groups and while it rolls them, on
//! a cluster of the test's own (the suite's global manager must not take over meanwhile).
//! Every restart recomputes from the cluster alone, so the LWS must converge to exactly what
//! an uninterrupted run makes: no group made or replaced twice, one worker StatefulSet per
//! group, only the current revision left, a correct status.
//!
//! Kills happen as soon as a watch sees the progress they aim at, never after fixed sleeps.
//! Waits after a restart allow a little extra (`crash_support` has the kill-and-restart harness).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use kube::{
    Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use lws_rollout::api::LeaderWorkerSet;
use serde::de::DeserializeOwned;

use crate::{
    crash_support::CrashCluster,
    harness::{TestNs, wait_for},
    lws_support::{
        NAME, REVISION, StsRecorder, WORKER_INDEX, apply, available_with, image, label, leader_key,
        lws, lws_revisions, pod_ready, rolling_params,
    },
};

const LWS: &str = "cs";
const GROUPS: i32 = 3;
const SIZE: i32 = 3;
/// Extra time after a restart: the new manager lists everything before it acts.
const RESTART_BUDGET: Duration = Duration::from_secs(20);

/// Live view of the LWS's pods and StatefulSets, plus every uid each name ever had.
struct Tracker {
    pods: Store<Pod>,
    statefulsets: Store<StatefulSet>,
    uids: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Tracker {
    async fn start(ns: &TestNs) -> anyhow::Result<Self> {
        let uids = Arc::new(Mutex::new(BTreeMap::new()));
        let (pods, pods_task) = Self::follow::<Pod>(ns, "Pod", uids.clone());
        let (statefulsets, sts_task) = Self::follow::<StatefulSet>(ns, "StatefulSet", uids.clone());
        pods.wait_until_ready().await?;
        statefulsets.wait_until_ready().await?;
        Ok(Self {
            pods,
            statefulsets,
            uids,
            tasks: vec![pods_task, sts_task],
        })
    }

    fn follow<K>(
        ns: &TestNs,
        kind: &'static str,
        uids: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
    ) -> (Store<K>, tokio::task::JoinHandle<()>)
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().labels(&format!("{NAME}={LWS}"));
        let stream = reflector::reflector(writer, watcher(ns.api::<K>(), config))
            .default_backoff()
            .touched_objects();
        let task = tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Some(item) = stream.next().await {
                if let Ok(obj) = item {
                    let key = format!("{kind} {}", obj.name_any());
                    let uid = obj.uid().unwrap_or_default();
                    uids.lock()
                        .expect("uids")
                        .entry(key)
                        .or_default()
                        .insert(uid);
                }
            }
        });
        (store, task)
    }

    fn worker_statefulsets(&self) -> Vec<Arc<StatefulSet>> {
        self.statefulsets
            .state()
            .into_iter()
            .filter(|s| s.name_any() != LWS)
            .collect()
    }

    fn leader_sts(&self) -> Option<Arc<StatefulSet>> {
        self.statefulsets
            .state()
            .into_iter()
            .find(|s| s.name_any() == LWS)
    }

    /// Name → uid of the pods that are Ready now (running `revision` if given).
    fn ready_pods(&self, revision: Option<&str>) -> BTreeMap<String, String> {
        self.pods
            .state()
            .iter()
            .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
            .filter(|p| revision.is_none() || label(p, REVISION) == revision)
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect()
    }

    /// Groups whose leader and workers are all Ready.
    fn ready_groups(&self) -> usize {
        let ready = self.ready_pods(None);
        (0..GROUPS)
            .filter(|g| {
                (0..SIZE).all(|w| {
                    let name = if w == 0 {
                        format!("{LWS}-{g}")
                    } else {
                        format!("{LWS}-{g}-{w}")
                    };
                    ready.contains_key(&name)
                })
            })
            .count()
    }

    fn uids(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.uids.lock().expect("uids").clone()
    }

    /// Waits (polling the watch-fed view) until `cond` holds.
    async fn until(
        &self,
        timeout: Duration,
        what: &str,
        cond: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        while !cond(self) {
            if start.elapsed() > timeout {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; StatefulSets {:?}, ready pods {:?}",
                    self.statefulsets
                        .state()
                        .iter()
                        .map(|s| (s.name_any(), rolling_params(s)))
                        .collect::<Vec<_>>(),
                    self.ready_pods(None).keys().collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The pods and StatefulSets of a settled LWS: `cs`, `cs-<g>` per group, every pod Ready.
async fn check_settled(ns: &TestNs, want_image: &str, want_updated: i32) -> anyhow::Result<String> {
    let api = ns.api::<LeaderWorkerSet>();
    wait_for(
        &api,
        LWS,
        Duration::from_secs(120) + RESTART_BUDGET,
        available_with(GROUPS, want_updated),
    )
    .await?;
    let key = leader_key(ns, LWS).await?;
    let pods: Vec<Pod> = ns
        .api::<Pod>()
        .list(&kube::api::ListParams::default().labels(&format!("{NAME}={LWS}")))
        .await?
        .items;
    assert_eq!(
        pods.len(),
        (GROUPS * SIZE) as usize,
        "{GROUPS} groups of {SIZE}"
    );
    for pod in &pods {
        let name = pod.name_any();
        assert!(pod_ready(pod), "{name} is Ready");
        assert_eq!(image(pod), want_image, "{name}");
        assert_eq!(label(pod, REVISION), Some(key.as_str()), "{name}");
    }

    // Exactly one worker StatefulSet per group, owned by that group's current leader.
    let statefulsets: Vec<StatefulSet> = ns
        .api::<StatefulSet>()
        .list(&kube::api::ListParams::default().labels(&format!("{NAME}={LWS}")))
        .await?
        .items;
    let mut names: Vec<_> = statefulsets.iter().map(|s| s.name_any()).collect();
    names.sort();
    assert_eq!(names, ["cs", "cs-0", "cs-1", "cs-2"]);
    for sts in statefulsets.iter().filter(|s| s.name_any() != LWS) {
        let leader = pods
            .iter()
            .find(|p| p.name_any() == sts.name_any())
            .expect("leader of each worker StatefulSet");
        assert_eq!(label(leader, WORKER_INDEX), Some("0"));
        let owner = sts.owner_references().first().cloned().expect("owner");
        assert_eq!(
            (owner.kind.as_str(), Some(owner.uid.as_str())),
            ("Pod", leader.uid().as_deref()),
            "{} is owned by its current leader",
            sts.name_any()
        );
        assert_eq!(
            sts.labels().get(REVISION),
            Some(&key),
            "{} runs the current revision",
            sts.name_any()
        );
    }

    // Status, conditions exactly as after an uninterrupted run.
    let lws = api.get(LWS).await?;
    let status = lws.status.clone().unwrap_or_default();
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.updated_replicas
        ),
        (Some(GROUPS), Some(GROUPS), Some(GROUPS))
    );
    let conditions: BTreeMap<_, _> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect();
    assert_eq!(
        conditions.get("Available").map(String::as_str),
        Some("True")
    );
    for other in ["Progressing", "UpdateInProgress"] {
        assert_ne!(
            conditions.get(other).map(String::as_str),
            Some("True"),
            "{other}: {conditions:?}"
        );
    }
    assert_eq!(
        lws_revisions(ns).await?,
        [format!(
            "{LWS}-{key}-{}",
            if want_image == "vllm:1" { 1 } else { 2 }
        )],
        "exactly the current revision"
    );
    Ok(key)
}

/// Name → uid of the LWS's Ready pods, from the API.
async fn ready_pods_now(ns: &TestNs) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(ns
        .api::<Pod>()
        .list(&kube::api::ListParams::default().labels(&format!("{NAME}={LWS}")))
        .await?
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

fn assert_kept(before: &BTreeMap<String, String>, now: &BTreeMap<String, String>, when: &str) {
    for (pod, uid) in before {
        assert_eq!(
            now.get(pod),
            Some(uid),
            "{pod} was Ready when the manager was killed {when}, and must not be recreated"
        );
    }
}

#[tokio::test]
async fn the_controller_converges_after_sigkills_while_creating_and_rolling_groups()
-> anyhow::Result<()> {
    let mut cluster = CrashCluster::new("crash", &[]).await?;
    let ns = cluster.namespace("crash").await?;
    let tracker = Tracker::start(&ns).await?;
    eprintln!(
        "isolated cluster at {}",
        cluster.cluster.kubeconfig.display()
    );

    cluster.start_manager()?;
    apply(&ns, &lws(LWS, GROUPS, SIZE, "vllm:1")).await?;
    tracker
        .until(Duration::from_secs(60), "the leader StatefulSet", |t| {
            t.leader_sts().is_some()
        })
        .await?;
    // Every (replicas, partition) the leader StatefulSet goes through, across all restarts.
    let recorder = StsRecorder::start(&ns, LWS).await?;

    // 0. Killed as soon as the leader StatefulSet exists (revision made, no group yet).
    cluster
        .kill_and_restart("as the leader StatefulSet appeared")
        .await?;
    eprintln!(
        "kill 0: {} worker StatefulSets",
        tracker.worker_statefulsets().len()
    );

    // 1. Killed while it creates groups: right after the first worker StatefulSet appears.
    tracker
        .until(
            Duration::from_secs(60) + RESTART_BUDGET,
            "a first worker StatefulSet",
            |t| !t.worker_statefulsets().is_empty(),
        )
        .await?;
    let ready_at_kill1 = tracker.ready_pods(None);
    cluster
        .kill_and_restart("as the first worker StatefulSet appeared")
        .await?;
    eprintln!(
        "kill 1: {} worker StatefulSets, {} pods ready",
        tracker.worker_statefulsets().len(),
        ready_at_kill1.len()
    );

    // 2. Killed again once a first group is whole and Ready, before the rest may be.
    tracker
        .until(
            Duration::from_secs(60) + RESTART_BUDGET,
            "a first Ready group",
            |t| t.ready_groups() >= 1,
        )
        .await?;
    let ready_at_kill2 = tracker.ready_pods(None);
    cluster
        .kill_and_restart("once a first group was Ready")
        .await?;
    eprintln!("kill 2: {} groups ready", tracker.ready_groups());

    let old_key = check_settled(&ns, "vllm:1", GROUPS).await?;
    let created = ready_pods_now(&ns).await?;
    assert_kept(&ready_at_kill1, &created, "while creating groups");
    assert_kept(&ready_at_kill2, &created, "while creating groups");
    for (name, uids) in tracker.uids() {
        assert_eq!(uids.len(), 1, "{name} was made once, got uids {uids:?}");
    }
    assert_eq!(
        recorder.sequence(),
        [(GROUPS, 0)],
        "restarts never touched the leader StatefulSet's replicas or partition"
    );

    // 3. Killed during the rolling update: as soon as the leader StatefulSet carries the new
    //    revision (the first step of the update is written)…
    apply(&ns, &lws(LWS, GROUPS, SIZE, "vllm:2")).await?;
    tracker
        .until(Duration::from_secs(30), "the update's first step", |t| {
            t.leader_sts()
                .and_then(|s| s.labels().get(REVISION).cloned())
                .is_some_and(|k| k != old_key)
        })
        .await?;
    cluster
        .kill_and_restart("at the update's first step")
        .await?;
    let new_key = tracker
        .leader_sts()
        .and_then(|s| s.labels().get(REVISION).cloned())
        .expect("new key");
    eprintln!(
        "kill 3: leader StatefulSet at {:?}",
        tracker.leader_sts().map(|s| rolling_params(&s))
    );

    // 4. …and again once the update has reached the second group, with one updated group
    //    Ready.
    tracker
        .until(
            Duration::from_secs(60) + RESTART_BUDGET,
            "the partition at 1",
            |t| t.leader_sts().is_some_and(|s| rolling_params(&s).1 <= 1),
        )
        .await?;
    let ready_at_kill4 = tracker.ready_pods(Some(&new_key));
    cluster.kill_and_restart("with the partition at 1").await?;
    eprintln!(
        "kill 4: leader StatefulSet at {:?}, {} updated pods ready",
        tracker.leader_sts().map(|s| rolling_params(&s)),
        ready_at_kill4.len()
    );

    // 5. …and once more as soon as the last group is being replaced.
    tracker
        .until(
            Duration::from_secs(60) + RESTART_BUDGET,
            "the partition at 0",
            |t| t.leader_sts().is_some_and(|s| rolling_params(&s).1 == 0),
        )
        .await?;
    let ready_at_kill5 = tracker.ready_pods(Some(&new_key));
    cluster.kill_and_restart("with the partition at 0").await?;

    let key = check_settled(&ns, "vllm:2", GROUPS).await?;
    assert_eq!(key, new_key);
    // The update went exactly as without kills: one group at a time, the partition only
    // ever moving down (a restart that lost track would reset it or skip groups).
    assert_eq!(
        recorder.sequence(),
        [(3, 0), (3, 3), (3, 2), (3, 1), (3, 0)],
        "leader StatefulSet (replicas, partition) across the kills"
    );
    let rolled = ready_pods_now(&ns).await?;
    assert_kept(&ready_at_kill4, &rolled, "during the update");
    assert_kept(&ready_at_kill5, &rolled, "during the update");
    // Each pod and worker StatefulSet was made exactly twice: once per revision.
    for (name, uids) in tracker.uids() {
        let want = if name == format!("StatefulSet {LWS}") {
            1
        } else {
            2
        };
        assert_eq!(
            uids.len(),
            want,
            "{name}: made once per revision, got uids {uids:?}"
        );
    }
    assert!(cluster.manager_running(), "the last manager still runs");
    drop(tracker);
    cluster.finish();
    Ok(())
}
