//! Helpers shared by the LWS e2e tests of this directory (rolling updates, placement, storage,
//! lifecycle): LWS manifests, waits on status, a recorder of the leader StatefulSet's rolling
//! parameters, and a driver that lets held-back groups become ready one at a time.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::{ControllerRevision, StatefulSet},
    core::v1::Pod,
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::harness::{TestNs, condition, wait_for, wait_for_all};

/// Ready as the controllers read it (`k8s::pod::ready`), of a pod read whole from the API.
pub fn pod_ready(pod: &Pod) -> bool {
    lws_rollout::k8s::pod::ready(&lws_rollout::k8s::pod::CachedPod::from(pod))
}
pub use lws_rollout::lws::labels::{GROUP_INDEX, NAME, REVISION, WORKER_INDEX};

/// Scheduling gate the tests put on a new template: its pods stay Pending (unready) until the
/// test removes the gate, so the order in which groups become ready is the test's choice.
pub const HOLD_GATE: &str = "lws-rollout.test/hold";

/// An LWS of `replicas` groups of `size` pods running `image`.
pub fn lws(name: &str, replicas: i32, size: i32, image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size,
            "workerTemplate": {"spec": {"containers": [{"name": "model", "image": image}]}}}}
    })
}

/// `obj` with a new image whose pods are held back by [`HOLD_GATE`].
pub fn held_image(obj: &serde_json::Value, image: &str) -> serde_json::Value {
    let mut obj = obj.clone();
    let spec = &mut obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"];
    spec["containers"][0]["image"] = json!(image);
    spec["schedulingGates"] = json!([{"name": HOLD_GATE}]);
    obj
}

/// Server-side applies an LWS as the user `e2e-user`.
pub async fn apply(ns: &TestNs, obj: &serde_json::Value) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ns.api::<LeaderWorkerSet>()
        .patch(&name, &PatchParams::apply("e2e-user"), &Patch::Apply(obj))
        .await?;
    Ok(())
}

/// Available, with these ready and updated counts, for the current generation.
pub fn available_with(ready: i32, updated: i32) -> impl Fn(Option<&LeaderWorkerSet>) -> bool {
    move |l: Option<&LeaderWorkerSet>| {
        let Some(l) = l else { return false };
        let Some(status) = l.status.as_ref() else {
            return false;
        };
        status.ready_replicas == Some(ready)
            && status.updated_replicas == Some(updated)
            && condition(l, "Available").is_some_and(|c| c.0 == "True")
            && status.observed_generation == l.metadata.generation
    }
}

/// Applies an LWS and waits until all its groups are updated, ready and reported Available.
pub async fn create_available(
    ns: &TestNs,
    obj: &serde_json::Value,
) -> anyhow::Result<LeaderWorkerSet> {
    apply(ns, obj).await?;
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let replicas = obj["spec"]["replicas"].as_i64().unwrap_or(1) as i32;
    wait_for(
        &ns.api(),
        name,
        Duration::from_secs(120),
        available_with(replicas, replicas),
    )
    .await?
    .ok_or_else(|| anyhow::anyhow!("{name} vanished"))
}

/// Every pod of the LWS.
pub async fn pods_of(ns: &TestNs, name: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{NAME}={name}")))
        .await?
        .items)
}

/// Pod name → uid of every pod of the LWS.
pub async fn uids(ns: &TestNs, name: &str) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(pods_of(ns, name)
        .await?
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.metadata.uid.unwrap_or_default(),
            )
        })
        .collect())
}

/// Names of the ControllerRevisions an LWS controls (StatefulSets keep their own beside them).
pub async fn lws_revisions(ns: &TestNs) -> anyhow::Result<Vec<String>> {
    lws_revisions_in(&ns.api::<ControllerRevision>(), &ListParams::default()).await
}

/// The same, for any namespace and selector, sorted.
pub async fn lws_revisions_in(
    api: &Api<ControllerRevision>,
    lp: &ListParams,
) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<_> = api
        .list(lp)
        .await?
        .items
        .into_iter()
        .filter(owned_by_lws)
        .filter_map(|r| r.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

fn owned_by_lws(r: &ControllerRevision) -> bool {
    r.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "LeaderWorkerSet")
}

/// Waits until the revisions the LWS `name` controls (sorted names) satisfy `cond`, and returns
/// them: old ones are truncated right after the status says the update is done, not
/// necessarily at the same instant.
pub async fn lws_revisions_when(
    ns: &TestNs,
    name: &str,
    cond: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let names = |revs: &[Arc<ControllerRevision>]| {
        let mut names: Vec<_> = revs
            .iter()
            .filter(|r| owned_by_lws(r))
            .filter_map(|r| r.metadata.name.clone())
            .collect();
        names.sort();
        names
    };
    let revs = wait_for_all(
        &ns.api::<ControllerRevision>(),
        &format!("{NAME}={name}"),
        Duration::from_secs(30),
        |revs| cond(&names(revs)),
    )
    .await?;
    Ok(names(&revs))
}

/// Waits until the LWS `name` controls exactly the revisions `want`.
pub async fn wait_for_lws_revisions(
    ns: &TestNs,
    name: &str,
    want: &[String],
) -> anyhow::Result<()> {
    lws_revisions_when(ns, name, |names| names == want).await?;
    Ok(())
}

/// Waits until the LWS has exactly `count` pods and none of them is terminating (replaced pods
/// go a moment after the status counts their successors), and returns them.
pub async fn settled_pods(ns: &TestNs, name: &str, count: usize) -> anyhow::Result<Vec<Pod>> {
    let pods = wait_for_all(
        &ns.api::<Pod>(),
        &format!("{NAME}={name}"),
        Duration::from_secs(60),
        |pods| pods.len() == count && pods.iter().all(|p| p.metadata.deletion_timestamp.is_none()),
    )
    .await?;
    Ok(pods.iter().map(|p| p.as_ref().clone()).collect())
}

/// Waits until the objects of a kind in the namespace are exactly `want` (by name), or fails
/// after `timeout` with the names last seen.
pub async fn wait_for_names<K>(api: &Api<K>, timeout: Duration, want: &[&str]) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    wait_for_all(api, "", timeout, |objects| {
        let mut names: Vec<String> = objects
            .iter()
            .filter_map(|o| o.meta().name.clone())
            .collect();
        names.sort();
        names == want
    })
    .await?;
    Ok(())
}

/// The revision key the leader StatefulSet carries.
pub async fn leader_key(ns: &TestNs, name: &str) -> anyhow::Result<String> {
    ns.api::<StatefulSet>()
        .get(name)
        .await?
        .metadata
        .labels
        .unwrap_or_default()
        .get(REVISION)
        .cloned()
        .context("leader StatefulSet has no revision label")
}

pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

pub fn image(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers[0].image.clone())
        .unwrap_or_default()
}

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// (spec.replicas, rollingUpdate.partition) of a StatefulSet.
pub fn rolling_params(sts: &StatefulSet) -> (i32, i32) {
    let spec = sts.spec.as_ref();
    (
        spec.and_then(|s| s.replicas).unwrap_or(1),
        spec.and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0),
    )
}

/// Records every distinct (replicas, partition) the leader StatefulSet goes through, from a
/// watch (so short-lived steps are seen too). Stops when dropped.
pub struct StsRecorder {
    seen: Arc<Mutex<Vec<(i32, i32)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StsRecorder {
    /// Starts watching and returns once the current state is recorded.
    pub async fn start(ns: &TestNs, name: &str) -> anyhow::Result<Self> {
        let api: Api<StatefulSet> = ns.api();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            let mut stream = watcher(api, config)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(item) = stream.next().await {
                if let Ok(sts) = item {
                    let params = rolling_params(&sts);
                    let mut seen = sink.lock().expect("recorder lock");
                    if seen.last() != Some(&params) {
                        seen.push(params);
                    }
                }
            }
        });
        let recorder = Self { seen, task };
        let started = Instant::now();
        while recorder.sequence().is_empty() {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("the StatefulSet watch of {name} delivered nothing in 30s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(recorder)
    }

    /// What was recorded so far.
    pub fn sequence(&self) -> Vec<(i32, i32)> {
        self.seen.lock().expect("recorder lock").clone()
    }
}

impl Drop for StsRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const POLL: Duration = Duration::from_millis(100);

/// Groups whose leader is Ready and whose worker StatefulSet reports all workers ready and
/// available: the LWS's own notion of a ready group, used to see that the controller caught up.
async fn ready_groups(ns: &TestNs, name: &str, size: i32) -> anyhow::Result<i32> {
    let pods = pods_of(ns, name).await?;
    let workers: BTreeMap<String, StatefulSet> = ns
        .api::<StatefulSet>()
        .list(&ListParams::default().labels(&format!("{NAME}={name}")))
        .await?
        .items
        .into_iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), s))
        .collect();
    Ok(pods
        .iter()
        .filter(|p| label(p, WORKER_INDEX) == Some("0") && pod_ready(p))
        .filter(|leader| {
            size == 1
                || workers
                    .get(leader.metadata.name.as_deref().unwrap_or_default())
                    .and_then(|w| w.status.as_ref())
                    .is_some_and(|s| {
                        s.ready_replicas == Some(size - 1) && s.available_replicas == Some(size - 1)
                    })
        })
        .count() as i32)
}

/// One step of a scripted rollout: let `group` (held by [`HOLD_GATE`]) start, then wait until
/// the leader StatefulSet reaches `then` — the (replicas, partition) the update must move to
/// once that group is ready — or, for `None` (no move due), until the LWS status counts it.
/// With `held_until`, the group is only let go once the StatefulSet has reached that state
/// with the group still held: a move the controller must make while the group is unready.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub group: i32,
    pub then: Option<(i32, i32)>,
    pub held_until: Option<(i32, i32)>,
}

/// Shorthand for a [`Release`].
pub fn release(group: i32, then: Option<(i32, i32)>) -> Release {
    Release {
        group,
        then,
        held_until: None,
    }
}

impl Release {
    /// Keeps the group held until the leader StatefulSet is at `state`. Without it, a
    /// controller slow to react (the suite's load) may first see the group ready and skip
    /// the state, as the plan allows: the script then decides what it sees, not the load.
    pub fn held_until(self, state: (i32, i32)) -> Self {
        Release {
            held_until: Some(state),
            ..self
        }
    }
}

/// Runs a scripted rollout: for each step, waits until the group's leader is held (the update
/// has reached it), removes the gate from the leader and its workers as they appear, waits
/// until the whole group runs the leader's revision and is Ready, then waits for the
/// controller's reaction before the next group goes. Groups therefore become ready one at a
/// time and the controller sees each on its own, which makes the StatefulSet's sequence
/// deterministic; a controller that does something else fails the wait, naming the sequence
/// seen so far.
pub async fn release_in_order(
    ns: &TestNs,
    name: &str,
    size: i32,
    recorder: &StsRecorder,
    script: &[Release],
) -> anyhow::Result<()> {
    let step_timeout = Duration::from_secs(60);
    let lws_api = ns.api::<LeaderWorkerSet>();
    let pod_api = ns.api::<Pod>();
    let ungate = json!([{"op": "remove", "path": "/spec/schedulingGates"}]);
    for (n, step) in script.iter().enumerate() {
        let group = step.group;
        let leader_name = format!("{name}-{group}");
        let deadline = Instant::now() + step_timeout;
        let late = |what: &str| {
            anyhow::anyhow!(
                "step {n} ({step:?}): timed out after {step_timeout:?} {what}; StatefulSet sequence so far: {:?}",
                recorder.sequence()
            )
        };
        loop {
            let leader = pod_api.get_opt(&leader_name).await?;
            if leader.is_some_and(|l| gated(&l) && l.metadata.deletion_timestamp.is_none()) {
                break;
            }
            if Instant::now() > deadline {
                return Err(late("waiting for the update to reach the group"));
            }
            tokio::time::sleep(POLL).await;
        }
        if let Some(state) = step.held_until {
            while recorder.sequence().last() != Some(&state) {
                if Instant::now() > deadline {
                    return Err(late(&format!(
                        "for the StatefulSet to reach {state:?} with the group held"
                    )));
                }
                tokio::time::sleep(POLL).await;
            }
        }
        loop {
            let pods = pods_of(ns, name).await?;
            let members: Vec<&Pod> = pods
                .iter()
                .filter(|p| label(p, GROUP_INDEX) == Some(&group.to_string()))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            for pod in members.iter().filter(|p| gated(p)) {
                let pod_name = pod.metadata.name.clone().unwrap_or_default();
                // Someone else may have removed it meanwhile; the next round checks again.
                let _ = pod_api
                    .patch(
                        &pod_name,
                        &PatchParams::default(),
                        &Patch::<()>::Json(serde_json::from_value(ungate.clone())?),
                    )
                    .await;
            }
            let leader = members
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(leader_name.as_str()));
            let whole = leader.is_some_and(|leader| {
                let revision = label(leader, REVISION);
                let group: Vec<_> = members
                    .iter()
                    .filter(|p| label(p, REVISION) == revision)
                    .collect();
                group.len() == size as usize && group.iter().all(|p| !gated(p) && pod_ready(p))
            });
            if whole {
                break;
            }
            if Instant::now() > deadline {
                return Err(late("for the group to be Ready"));
            }
            tokio::time::sleep(POLL).await;
        }
        loop {
            let caught_up = match step.then {
                Some(state) => recorder.sequence().last() == Some(&state),
                None => {
                    let lws = lws_api.get(name).await?;
                    lws.status.as_ref().and_then(|s| s.ready_replicas)
                        == Some(ready_groups(ns, name, size).await?)
                }
            };
            if caught_up {
                break;
            }
            if Instant::now() > deadline {
                return Err(late("for the controller to act on the ready group"));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// Deep-merges `extra` into `target` (objects key by key; anything else, `null` included,
/// replaces), as a JSON merge patch would except that `null` is kept as a value.
pub fn merge(target: &mut serde_json::Value, extra: serde_json::Value) {
    match (target, extra) {
        (serde_json::Value::Object(t), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge(t.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (t, e) => *t = e,
    }
}
