//! S5 release (ours only: upstream LWS has no Rollouts): `--rollouts` canary Rollouts, each
//! releasing an LWS of `--release-groups` groups × `--release-size` pods through three steps
//! (1 group, paused; 2 groups, paused; 100%) with `enableExtraWorkloadForCanary` — or, with
//! `--release-style bluegreen`, blue-green Rollouts with the same steps, the last one paused
//! too (blue-green always pauses; its approval starts the promotion); with `--release-style
//! partition`, partition-style canaries (no second LWS: the groups move in place). The bench
//! approves each pause as soon as it sees it and measures, from its own watches:
//! - approve (the status patch sent) → the controller's next spec write to the BatchRelease
//!   or the canary LWS (a new `metadata.generation` seen on either; partition style: a new
//!   release partition on the user's LWS too, the write that moves the next groups);
//! - canary batch ready (canary LWS `readyReplicas == replicas`; partition style: the
//!   BatchRelease's batch turning Ready, as it reads the moved groups) → the Rollout's next
//!   step write (a new step index, step state or phase);
//!
//! and counts the manager's writes per step and Rollout from the audit log (create, update,
//! patch, delete; Events and Leases left out), split at the instants the bench approved.
//!
//! S5 pair (`--scenarios s5pair`) runs the same release on DisaggregatedSets instead: each a
//! prefill and a decode role of `--release-groups` groups × `--release-size` pods, released as
//! one pair by a canary Rollout with the same steps (a step's groups are of each role). There
//! the release writes the batch on the set (`release-groups`) and the set's controller scales
//! the new revision's LWS of each role, so it measures besides: approve → the set's
//! `release-groups` written, and approve → both roles' new LWS written (the later of the two);
//! a batch is ready when both roles' new LWSs are.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt, future, stream};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::disaggregatedset::{
    RELEASE_GROUPS_ANNOTATION, REVISION_LABEL, ROLE_LABEL, SET_NAME_LABEL,
};
use lws_rollout::api::{BatchRelease, DisaggregatedSet, LeaderWorkerSet, Rollout};
use lws_rollout::lws::labels::RELEASE_PARTITION;
use serde::Serialize;
use serde_json::json;
use tokio::sync::Notify;

use crate::{Audit, Dist, dist};

pub const NS: &str = "release";
const IMAGE_V1: &str = "registry.k8s.io/pause:3.10";
const IMAGE_V2: &str = "registry.k8s.io/pause:3.9";
const CANARY_LABEL: &str = "rollouts.kruise.io/canary-deployment";
/// The steps: 1 group, 2 groups, everything; a manual pause after the first two (canary) or
/// after all three (blue-green).
const STEPS: usize = 3;
/// A DisaggregatedSet's roles, released as one pair.
const ROLES: [&str; 2] = ["prefill", "decode"];

#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub rollouts: usize,
    pub groups: usize,
    pub size: usize,
    /// Blue-green Rollouts instead of canary ones.
    pub blue_green: bool,
    /// Partition-style canary Rollouts (no second LWS).
    pub partition: bool,
    /// DisaggregatedSets (a prefill/decode pair, `groups` groups per role) released by canary
    /// Rollouts, instead of LWSs.
    pub pair: bool,
}

impl Sizes {
    fn pauses(&self) -> usize {
        if self.blue_green { STEPS } else { STEPS - 1 }
    }

    /// The bench's names for its workloads and Rollouts: `<prefix>-NNNN`.
    fn prefix(&self) -> &'static str {
        if self.pair { "pair" } else { "rel" }
    }

    fn style(&self) -> &'static str {
        if self.blue_green {
            "bluegreen"
        } else if self.partition {
            "partition"
        } else {
            "canary"
        }
    }

    /// The kind released, as the API server knows it.
    fn workload(&self) -> ApiResource {
        if self.pair {
            ApiResource::erase::<DisaggregatedSet>(&())
        } else {
            ApiResource::erase::<LeaderWorkerSet>(&())
        }
    }

    /// The sub-status kubectl-kruise approves.
    fn status_field(&self) -> &'static str {
        if self.blue_green {
            "blueGreenStatus"
        } else {
            "canaryStatus"
        }
    }
}

/// The manager's writes in one step, summed over the Rollouts.
#[derive(Debug, Default, Clone, Serialize)]
pub struct StepWrites {
    /// 1-based step; the last one includes the finalising (stable LWS released, canary removed).
    pub step: usize,
    /// Writes to the Rollout, its BatchRelease and the LWS specs (canary and stable) — for a
    /// pair the set itself instead (its LWSs are its controller's) — per Rollout: the release
    /// controllers' own writes.
    pub release_per_rollout: f64,
    /// Everything else the manager wrote for that Rollout's objects (the LWS controller making
    /// the canary's StatefulSets and Services, LWS status; for a pair also the set's
    /// controller scaling its LWSs and the set's status), per Rollout.
    pub lws_per_rollout: f64,
    /// `resource[/subresource] verb` → count, over all Rollouts.
    pub by_resource: BTreeMap<String, u64>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct ReleaseResult {
    /// `canary`, `partition` or `bluegreen`.
    pub style: String,
    /// `lws`, or `pair` (DisaggregatedSets of a prefill and a decode role, `groups` each).
    pub workload: String,
    pub rollouts: usize,
    pub groups: usize,
    pub size: usize,
    pub steps: usize,
    /// Not every Rollout completed within --timeout (the figures are then partial).
    pub timed_out: bool,
    /// Template change → every Rollout Healthy with its last step Completed.
    pub release_s: f64,
    pub approve_to_write: Dist,
    /// Partition style: approve → the user's LWS's next release partition (the write that
    /// lets the next groups move); pair: approve → the set's next `release-groups`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approve_to_moved: Option<Dist>,
    /// Pair: approve → both roles' new LWS written (the later of the two first writes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approve_to_pair_written: Option<Dist>,
    pub ready_to_step: Dist,
    pub cpu_s: f64,
    pub writes: Vec<StepWrites>,
}

/// A Rollout as last seen: (step index, step state, phase), and whether it reflects its spec.
#[derive(Debug, Default, Clone, PartialEq)]
struct Step {
    index: i32,
    state: String,
    phase: String,
}

#[derive(Default)]
struct State {
    synced: usize,
    rollouts: HashMap<String, (Step, bool)>,
    /// Rollout name → instants its (step, phase) changed.
    rollout_changes: HashMap<String, Vec<Instant>>,
    /// Rollout name (the stable LWS's name: the bench names them alike) → instants a new
    /// generation of its BatchRelease or canary LWS was first seen, with the object's uid.
    spec_writes: HashMap<String, Vec<Instant>>,
    generations: HashMap<String, i64>,
    /// Canary LWS name → whether it was last seen with all its groups ready.
    canary_ready: HashMap<String, bool>,
    /// Rollout name → instants its canary LWS turned ready.
    ready_at: HashMap<String, Vec<Instant>>,
    /// The annotation that moves the next groups, last seen per workload (partition style:
    /// the user's LWS's release partition; pair: the set's `release-groups`), and per
    /// BatchRelease the batch last seen Ready (partition style).
    partitions: HashMap<String, String>,
    ready_batches: HashMap<String, i32>,
    /// Workload name → instants a new such annotation was first seen on it.
    moved_at: HashMap<String, Vec<Instant>>,
    /// Pair: a set's LWS name → (set, role, revision).
    pair_lws: HashMap<String, (String, String, String)>,
    /// Pair: set → the revision it ran before the template change (recorded by the bench
    /// before it changes the template; every other revision's LWSs are the new pair's).
    stable_revisions: HashMap<String, String>,
    /// Pair: set → role → instants a new generation of the role's new LWS was first seen.
    role_writes: HashMap<String, BTreeMap<String, Vec<Instant>>>,
    /// Pair: set → whether every role's new LWS was last seen with all its groups ready.
    pair_ready: HashMap<String, bool>,
}

impl State {
    /// The single revision every role of `set` runs, once the bench has seen all of them.
    fn settled_revision(&self, set: &str) -> Option<String> {
        let seen: BTreeSet<(&str, &str)> = self
            .pair_lws
            .values()
            .filter(|(s, ..)| s == set)
            .map(|(_, role, rev)| (role.as_str(), rev.as_str()))
            .collect();
        let revisions: BTreeSet<&str> = seen.iter().map(|(_, rev)| *rev).collect();
        let all_roles = ROLES.iter().all(|r| seen.iter().any(|(role, _)| role == r));
        (all_roles && revisions.len() == 1)
            .then(|| revisions.into_iter().next().unwrap_or_default().to_string())
    }
}

/// Runs S5 against a cluster whose manager is `cpu_s`'s process; `audit` is its audit log.
pub async fn run(
    client: &Client,
    sizes: Sizes,
    timeout: Duration,
    concurrency: usize,
    audit: &Audit,
    cpu_s: &dyn Fn() -> anyhow::Result<f64>,
) -> anyhow::Result<ReleaseResult> {
    let names: Vec<String> = (0..sizes.rollouts)
        .map(|i| format!("{}-{i:04}", sizes.prefix()))
        .collect();
    let workload_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &sizes.workload());
    let ro_api: Api<Rollout> = Api::namespaced(client.clone(), NS);
    let state = Arc::new(Mutex::new(State::default()));
    let changed = Arc::new(Notify::new());
    let tasks = start_watches(client, &state, &changed, sizes);
    wait(
        &state,
        &changed,
        Duration::from_secs(60),
        "S5 watchers synced",
        |s| s.synced >= tasks.len(),
    )
    .await?;

    // Stable workloads Available, then their Rollouts Healthy (the webhook must know a Rollout
    // controls the workload before its template changes).
    stream::iter(names.iter().cloned())
        .map(|name| {
            let (workload, ro) = (workload_api.clone(), ro_api.clone());
            async move {
                let obj: DynamicObject =
                    serde_json::from_value(workload_manifest(&name, sizes, IMAGE_V1))?;
                workload
                    .create(&PostParams::default(), &obj)
                    .await
                    .with_context(|| format!("creating {name}"))?;
                let r: Rollout = serde_json::from_value(rollout_manifest(&name, sizes))?;
                ro.create(&PostParams::default(), &r)
                    .await
                    .with_context(|| format!("creating Rollout {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    wait(
        &state,
        &changed,
        timeout,
        "S5: every Rollout Healthy",
        |s| {
            names.iter().all(|n| {
                s.rollouts
                    .get(n)
                    .is_some_and(|(st, observed)| *observed && st.phase == "Healthy")
            })
        },
    )
    .await?;
    if sizes.pair {
        // Every LWS a set runs now is its stable pair's; those of any other revision are the
        // new pair's.
        wait(
            &state,
            &changed,
            timeout,
            "S5 pair: both roles of every set seen",
            |s| names.iter().all(|n| s.settled_revision(n).is_some()),
        )
        .await?;
        let mut s = state.lock().expect("state");
        for n in &names {
            let revision = s.settled_revision(n).unwrap_or_default();
            s.stable_revisions.insert(n.clone(), revision);
        }
    }

    // The release: a new image on every workload; each Rollout approved at each pause.
    let cpu0 = cpu_s()?;
    let a0 = audit.offset();
    let t0 = Instant::now();
    stream::iter(names.iter().cloned())
        .map(|name| {
            let workload = workload_api.clone();
            async move {
                let patch = json!({"spec": workload_manifest(&name, sizes, IMAGE_V2)["spec"]});
                workload
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("updating {name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let deadline = Instant::now() + timeout;
    let drives = names.iter().map(|name| {
        drive(
            name.clone(),
            ro_api.clone(),
            state.clone(),
            changed.clone(),
            audit,
            deadline,
            sizes,
        )
    });
    let outcomes = future::join_all(drives).await;
    let release_s = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu = cpu_s()? - cpu0;
    for t in &tasks {
        t.abort();
    }
    let mut timed_out = false;
    let mut approvals: HashMap<String, Vec<(Instant, u64)>> = HashMap::new();
    for (name, outcome) in names.iter().zip(outcomes) {
        let (marks, done) = outcome;
        if !done {
            timed_out = true;
        }
        approvals.insert(name.clone(), marks);
    }
    if timed_out {
        eprintln!("[bench] S5: not every Rollout completed within {timeout:?}");
    }

    let s = state.lock().expect("state");
    let mut approve_to_write = Vec::new();
    let mut approve_to_moved = Vec::new();
    let mut approve_to_pair_written = Vec::new();
    let mut ready_to_step = Vec::new();
    let no_roles = BTreeMap::new();
    for name in &names {
        let writes = s.spec_writes.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let moved = s.moved_at.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let roles = s.role_writes.get(name).unwrap_or(&no_roles);
        for (at, _) in approvals.get(name).into_iter().flatten() {
            if let Some(w) = writes.iter().find(|w| *w > at) {
                approve_to_write.push(w.duration_since(*at));
            }
            if let Some(m) = moved.iter().find(|m| *m > at) {
                approve_to_moved.push(m.duration_since(*at));
            }
            // Each role's first write after the approval; the pair is written with the later.
            let firsts: Vec<Instant> = ROLES
                .iter()
                .filter_map(|role| roles.get(*role)?.iter().find(|w| *w > at).copied())
                .collect();
            if firsts.len() == ROLES.len()
                && let Some(last) = firsts.iter().max()
            {
                approve_to_pair_written.push(last.duration_since(*at));
            }
        }
        let changes = s
            .rollout_changes
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for ready in s.ready_at.get(name).into_iter().flatten() {
            if let Some(c) = changes.iter().find(|c| *c > ready) {
                ready_to_step.push(c.duration_since(*ready));
            }
        }
    }
    drop(s);

    // Per Rollout, the audit log from the template change to the end, cut at its approvals.
    let end = audit.offset();
    let cuts: HashMap<&str, Vec<u64>> = names
        .iter()
        .map(|n| {
            let mut c: Vec<u64> = approvals[n].iter().map(|(_, off)| *off).collect();
            c.push(end);
            (n.as_str(), c)
        })
        .collect();
    // One slice per approval and one after the last (blue-green: the promotion on its own).
    let mut writes: Vec<StepWrites> = (1..=sizes.pauses() + 1)
        .map(|step| StepWrites {
            step,
            ..Default::default()
        })
        .collect();
    audit.for_each(a0, end, |offset, ev| {
        let verb = ev["verb"].as_str().unwrap_or_default();
        if !matches!(verb, "create" | "update" | "patch" | "delete")
            || ev["stage"].as_str() != Some("ResponseComplete")
        {
            return;
        }
        let obj = &ev["objectRef"];
        let resource = obj["resource"].as_str().unwrap_or_default();
        if matches!(resource, "events" | "leases") || obj["namespace"].as_str() != Some(NS) {
            return;
        }
        let name = obj["name"].as_str().unwrap_or_default();
        // The bench's names are `<prefix>-NNNN` and everything made for one starts with its name.
        let Some(owner) = names
            .iter()
            .find(|n| name == n.as_str() || name.starts_with(&format!("{n}-")))
        else {
            return;
        };
        let step = cuts[owner.as_str()].iter().position(|c| offset < *c);
        let Some(w) = step.and_then(|i| writes.get_mut(i)) else {
            return;
        };
        let sub = obj["subresource"].as_str().unwrap_or_default();
        let key = if sub.is_empty() {
            format!("{resource} {verb}")
        } else {
            format!("{resource}/{sub} {verb}")
        };
        *w.by_resource.entry(key).or_default() += 1;
        // A pair's LWSs are its set's controller's; the release writes the set.
        let released = if sizes.pair {
            "disaggregatedsets"
        } else {
            "leaderworkersets"
        };
        let release = matches!(resource, "rollouts" | "batchreleases")
            || (resource == released && sub.is_empty());
        if release {
            w.release_per_rollout += 1.0;
        } else {
            w.lws_per_rollout += 1.0;
        }
    })?;
    for w in &mut writes {
        w.release_per_rollout /= names.len().max(1) as f64;
        w.lws_per_rollout /= names.len().max(1) as f64;
    }

    Ok(ReleaseResult {
        style: sizes.style().into(),
        workload: if sizes.pair { "pair" } else { "lws" }.into(),
        rollouts: sizes.rollouts,
        groups: sizes.groups,
        size: sizes.size,
        steps: STEPS,
        timed_out,
        release_s,
        approve_to_write: dist(approve_to_write),
        approve_to_moved: (sizes.partition || sizes.pair).then(|| dist(approve_to_moved)),
        approve_to_pair_written: sizes.pair.then(|| dist(approve_to_pair_written)),
        ready_to_step: dist(ready_to_step),
        cpu_s: cpu,
        writes,
    })
}

/// Approves each of the Rollout's pauses as soon as it is seen; returns (instant the approval
/// was sent, audit offset just before) per pause, and whether the release completed.
async fn drive(
    name: String,
    api: Api<Rollout>,
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    audit: &Audit,
    deadline: Instant,
    sizes: Sizes,
) -> (Vec<(Instant, u64)>, bool) {
    let mut marks = Vec::new();
    let left = || deadline.saturating_duration_since(Instant::now());
    for step in 1..=sizes.pauses() as i32 {
        let paused = wait(&state, &changed, left(), "paused", |s| {
            s.rollouts.get(&name).is_some_and(|(st, observed)| {
                *observed
                    && st.phase == "Progressing"
                    && st.index == step
                    && st.state == "StepPaused"
            })
        })
        .await;
        if paused.is_err() {
            return (marks, false);
        }
        let offset = audit.offset();
        // From the moment it is sent: the controller may react before the response is read.
        let sent = Instant::now();
        let approve = json!({"status": {sizes.status_field(): {"currentStepState": "StepReady"}}});
        if let Err(err) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&approve))
            .await
        {
            eprintln!("[bench] S5: approving {name} at step {step}: {err}");
            return (marks, false);
        }
        marks.push((sent, offset));
    }
    let done = wait(&state, &changed, left(), "completed", |s| {
        s.rollouts.get(&name).is_some_and(|(st, observed)| {
            *observed && st.phase == "Healthy" && st.state == "Completed"
        })
    })
    .await
    .is_ok();
    (marks, done)
}

async fn wait(
    state: &Mutex<State>,
    changed: &Notify,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&State) -> bool,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let notified = changed.notified();
        if cond(&state.lock().expect("state")) {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            if cond(&state.lock().expect("state")) {
                return Ok(());
            }
            bail!("timed out after {timeout:?}: {what}");
        }
    }
}

fn start_watches(
    client: &Client,
    state: &Arc<Mutex<State>>,
    changed: &Arc<Notify>,
    sizes: Sizes,
) -> Vec<tokio::task::JoinHandle<()>> {
    let partition = sizes.partition;
    let rollouts: Api<Rollout> = Api::namespaced(client.clone(), NS);
    let brs: Api<BatchRelease> = Api::namespaced(client.clone(), NS);
    let lws: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), NS);
    let mut tasks = vec![
        spawn(rollouts, state, changed, |s, r: &Rollout, now| {
            let name = r.name_any();
            let status = r.status.clone().unwrap_or_default();
            let common = status
                .canary_status
                .as_ref()
                .map(|c| &c.common)
                .or(status.blue_green_status.as_ref().map(|b| &b.common));
            let step = common
                .map(|c| Step {
                    index: c.current_step_index,
                    state: c.current_step_state.to_string(),
                    phase: status.phase.to_string(),
                })
                .unwrap_or_else(|| Step {
                    phase: status.phase.to_string(),
                    ..Default::default()
                });
            let observed = status.observed_generation == r.metadata.generation;
            if s.rollouts.get(&name).is_some_and(|(old, _)| *old != step) {
                s.rollout_changes.entry(name.clone()).or_default().push(now);
            }
            s.rollouts.insert(name, (step, observed));
        }),
        spawn(brs, state, changed, move |s, b: &BatchRelease, now| {
            // Named after its Rollout (which the bench names after the LWS).
            let owner = b
                .owner_references()
                .iter()
                .find(|o| o.kind == "Rollout")
                .map(|o| o.name.clone())
                .unwrap_or_else(|| b.name_any());
            if new_generation(s, &format!("br/{}", b.name_any()), b.metadata.generation) {
                s.spec_writes.entry(owner.clone()).or_default().push(now);
            }
            // Partition style has no canary LWS: its batch is ready when the BatchRelease,
            // reading the moved groups, says so.
            let batch = b.status.as_ref().and_then(|st| st.canary_status.as_ref());
            if partition
                && let Some(c) = batch
                && c.current_batch_state.as_deref() == Some("Ready")
                && s.ready_batches.get(&owner) != Some(&c.current_batch)
            {
                s.ready_batches.insert(owner.clone(), c.current_batch);
                s.ready_at.entry(owner).or_default().push(now);
            }
        }),
        spawn(lws, state, changed, |s, l: &LeaderWorkerSet, now| {
            if let Some(set) = l.labels().get(SET_NAME_LABEL).cloned() {
                return on_pair_lws(s, l, set, now);
            }
            let Some(stable) = l.labels().get(CANARY_LABEL).cloned() else {
                // A user's LWS: in partition style the release moves its groups by a new
                // release partition (an annotation: no new generation).
                let name = l.name_any();
                if let Some(p) = l.annotations().get(RELEASE_PARTITION)
                    && s.partitions.insert(name.clone(), p.clone()).as_ref() != Some(p)
                {
                    s.spec_writes.entry(name.clone()).or_default().push(now);
                    s.moved_at.entry(name).or_default().push(now);
                }
                return;
            };
            let name = l.name_any();
            if new_generation(s, &format!("lws/{name}"), l.metadata.generation) {
                s.spec_writes.entry(stable.clone()).or_default().push(now);
            }
            let is_ready = all_groups_ready(l);
            let was = s.canary_ready.insert(name, is_ready).unwrap_or(false);
            if is_ready && !was {
                s.ready_at.entry(stable).or_default().push(now);
            }
        }),
    ];
    if sizes.pair {
        // The release moves a pair's next groups by the set's release-groups (an annotation:
        // no new generation).
        let sets: Api<DisaggregatedSet> = Api::namespaced(client.clone(), NS);
        tasks.push(spawn(
            sets,
            state,
            changed,
            |s, d: &DisaggregatedSet, now| {
                let name = d.name_any();
                if let Some(groups) = d.annotations().get(RELEASE_GROUPS_ANNOTATION)
                    && s.partitions.insert(name.clone(), groups.clone()).as_ref() != Some(groups)
                {
                    s.spec_writes.entry(name.clone()).or_default().push(now);
                    s.moved_at.entry(name).or_default().push(now);
                }
            },
        ));
    }
    tasks
}

/// At least as many groups ready as asked for: a canary giving groups back at the end (spec
/// first, then its status) is not a batch turning ready again.
fn all_groups_ready(l: &LeaderWorkerSet) -> bool {
    let want = l.spec.replicas.unwrap_or(1);
    let ready = l.status.as_ref().and_then(|st| st.ready_replicas);
    want > 0 && ready.unwrap_or(0) >= want
}

/// One of a set's LWSs seen: once the bench has recorded the set's stable revision, an LWS of
/// another revision is the new pair's role; its new generations are the pair's writes, and the
/// pair's batch is ready when every role's new LWS is.
fn on_pair_lws(s: &mut State, l: &LeaderWorkerSet, set: String, now: Instant) {
    let name = l.name_any();
    let label = |key: &str| l.labels().get(key).cloned().unwrap_or_default();
    let (role, revision) = (label(ROLE_LABEL), label(REVISION_LABEL));
    s.pair_lws
        .insert(name.clone(), (set.clone(), role.clone(), revision.clone()));
    let Some(stable) = s.stable_revisions.get(&set).cloned() else {
        return;
    };
    if revision == stable {
        return;
    }
    if new_generation(s, &format!("lws/{name}"), l.metadata.generation) {
        s.spec_writes.entry(set.clone()).or_default().push(now);
        let roles = s.role_writes.entry(set.clone()).or_default();
        roles.entry(role).or_default().push(now);
    }
    s.canary_ready.insert(name, all_groups_ready(l));
    let complete = ROLES.iter().all(|want| {
        s.pair_lws.iter().any(|(n, (st, role, rev))| {
            *st == set && role == want && *rev != stable && s.canary_ready.get(n) == Some(&true)
        })
    });
    let was = s.pair_ready.insert(set.clone(), complete).unwrap_or(false);
    if complete && !was {
        s.ready_at.entry(set).or_default().push(now);
    }
}

/// Whether `key` shows a generation not seen before (recorded).
fn new_generation(s: &mut State, key: &str, generation: Option<i64>) -> bool {
    let generation = generation.unwrap_or(0);
    if s.generations.get(key).is_some_and(|g| *g >= generation) {
        return false;
    }
    s.generations.insert(key.to_string(), generation);
    true
}

fn spawn<K>(
    api: Api<K>,
    state: &Arc<Mutex<State>>,
    changed: &Arc<Notify>,
    on_apply: impl Fn(&mut State, &K, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (state, changed) = (state.clone(), changed.clone());
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let Ok(ev) = ev else { continue };
            {
                let mut s = state.lock().expect("state");
                match &ev {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        on_apply(&mut s, o, now)
                    }
                    watcher::Event::InitDone => s.synced += 1,
                    watcher::Event::Delete(_) | watcher::Event::Init => {}
                }
            }
            changed.notify_waiters();
        }
    })
}

/// The released workload at `image`: an LWS, or a set of a prefill and a decode role of the
/// same shape. Its `spec` is also the template change's merge patch.
fn workload_manifest(name: &str, sizes: Sizes, image: &str) -> serde_json::Value {
    let lws_spec = json!({"replicas": sizes.groups, "leaderWorkerTemplate": {"size": sizes.size,
        "workerTemplate": {"spec": {"containers": [{"name": "model", "image": image}]}}}});
    let ar = sizes.workload();
    let spec = if sizes.pair {
        let roles: Vec<_> = ROLES
            .iter()
            .map(|role| json!({"name": role, "spec": lws_spec}))
            .collect();
        json!({ "roles": roles })
    } else {
        lws_spec
    };
    json!({
        "apiVersion": ar.api_version, "kind": ar.kind,
        "metadata": {"name": name},
        "spec": spec
    })
}

fn rollout_manifest(name: &str, sizes: Sizes) -> serde_json::Value {
    let strategy = if sizes.blue_green {
        json!({"blueGreen": {"steps": [
            {"replicas": 1, "pause": {}},
            {"replicas": 2, "pause": {}},
            {"replicas": "100%", "pause": {}},
        ]}})
    } else {
        json!({"canary": {"enableExtraWorkloadForCanary": !sizes.partition, "steps": [
            {"replicas": 1, "pause": {}},
            {"replicas": 2, "pause": {}},
            {"replicas": "100%"},
        ]}})
    };
    let ar = sizes.workload();
    json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": name},
        "spec": {
            "workloadRef": {"apiVersion": ar.api_version, "kind": ar.kind, "name": name},
            "strategy": strategy
        }
    })
}
