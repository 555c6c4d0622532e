//! Canary releases of an LWS under a real Kueue: the canary LWS waits in the stable LWS's
//! LocalQueue (so it is admitted against the same quota), a canary group Kueue cannot admit
//! holds its step with a Rollout message and Event that say so in Kueue's words, rollback,
//! disable and delete free the canary's quota, and the stable groups are never re-admitted
//! (no stable pod restarts, the same Workloads throughout). docs/kueue.md.

use std::collections::BTreeMap;

use anyhow::{Context, ensure};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use lws_rollout::api::{LeaderWorkerSet, Rollout, kueue::QUEUE_LABEL};
use serde_json::{Value, json};

use crate::{
    harness::{TestNs, wait_for, wait_for_all, with_ns},
    kueue_support::{
        QUEUE, WAIT, admitted, assert_group_gated, kueue_or_skip, queued_lws, uid_of,
        wait_workloads, with_queues,
    },
    lws_support::{NAME, available_with, pods_of, uids},
    rollout_support::{
        CANARY_LABEL, STABLE, approve, canaries, condition, create_rollout, finished, rollout,
        set_disabled, step, the_canary, wait_event, wait_paused_at, wait_rollout,
    },
};

/// Steps of one canary group each time: 1 group (pause), 2 groups (pause), all.
pub fn steps() -> Value {
    json!([
        {"replicas": 1, "pause": {}},
        {"replicas": 2, "pause": {}},
        {"replicas": "100%"}
    ])
}

/// The stable LWS ([`STABLE`], 2 groups of 2 pods, a GPU a pod) on `image`, in [`QUEUE`].
pub fn stable(image: &str) -> Value {
    queued_lws(STABLE, 2, 2, image)
}

pub fn on_image(lws: &Value, image: &str) -> Value {
    let mut lws = lws.clone();
    for t in ["leaderTemplate", "workerTemplate"] {
        lws["spec"]["leaderWorkerTemplate"][t]["spec"]["containers"][0]["image"] = json!(image);
    }
    lws
}

/// Names and uids of the stable LWS's Workloads.
async fn stable_workloads(ns: &TestNs, uid: &str) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(crate::kueue_support::workloads(ns, uid)
        .await?
        .into_iter()
        .map(|w| {
            (
                w.metadata.name.unwrap_or_default(),
                w.metadata.uid.unwrap_or_default(),
            )
        })
        .collect())
}

/// The ClusterQueue's `status.admittedWorkloads`, once it equals `want`.
async fn wait_admitted_count(ns: &TestNs, cq: &str, want: i64) -> anyhow::Result<()> {
    let res = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "ClusterQueue"),
        "clusterqueues",
    );
    let api: Api<DynamicObject> = Api::all_with(ns.client.clone(), &res);
    wait_for(&api, cq, WAIT, move |o: Option<&DynamicObject>| {
        o.is_some_and(|o| o.data["status"]["admittedWorkloads"].as_i64() == Some(want))
    })
    .await
    .with_context(|| format!("ClusterQueue {cq} admits {want} Workloads"))?;
    Ok(())
}

/// The stable LWS (available, every group admitted) and a Rollout of [`steps`] reading Healthy.
/// Returns the stable LWS's uid.
pub async fn setup(ns: &TestNs, v1: &Value) -> anyhow::Result<String> {
    crate::lws_support::apply(ns, v1).await?;
    wait_for(&ns.api(), STABLE, WAIT, available_with(2, 2)).await?;
    let uid = uid_of(ns, STABLE).await?;
    wait_workloads(ns, &uid, "stable admitted", |w| admitted(w) == [0, 1]).await?;
    create_rollout(ns, &rollout(steps(), None)).await?;
    Ok(uid)
}

/// What the stable side must never lose to a release: its pods (no restart, no re-admission)
/// and its Workloads (the same objects, still admitted).
pub struct StableUntouched {
    pods: BTreeMap<String, String>,
    workloads: BTreeMap<String, String>,
    uid: String,
}

impl StableUntouched {
    pub async fn record(ns: &TestNs, uid: &str) -> anyhow::Result<Self> {
        Ok(Self {
            pods: uids(ns, STABLE).await?,
            workloads: stable_workloads(ns, uid).await?,
            uid: uid.to_string(),
        })
    }

    pub async fn check(&self, ns: &TestNs, when: &str) -> anyhow::Result<()> {
        ensure!(
            uids(ns, STABLE).await? == self.pods,
            "{when}: a stable pod was replaced"
        );
        ensure!(
            stable_workloads(ns, &self.uid).await? == self.workloads,
            "{when}: the stable Workloads changed"
        );
        let w = crate::kueue_support::workloads(ns, &self.uid).await?;
        ensure!(
            w.iter().all(|w| w.admission_wait().is_none()),
            "{when}: a stable Workload is not admitted: {w:#?}"
        );
        Ok(())
    }
}

/// Quota for the stable groups plus one canary group: the canary LWS carries the queue, its
/// first group is admitted from the same LocalQueue; the second cannot be, and the release
/// holds at step 2 saying why (Rollout condition and Event, from the Workload); a rollback
/// removes the canary and its Workloads, and the stable side never moves.
#[test]
fn kueue_canary_waits_in_the_stable_queue_and_says_why() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_canary_waits_in_the_stable_queue_and_says_why_body)
}

async fn kueue_canary_waits_in_the_stable_queue_and_says_why_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_canary_waits_in_the_stable_queue_and_says_why")? {
        return Ok(());
    }
    with_ns("kueue-canary", |ns| {
        Box::pin(async move {
            with_queues(&ns, 6, |q| {
                let ns = ns.clone();
                async move {
                    // The stable LWS serves at a WorkloadPriorityClass of the team's.
                    let priority = format!("e2e-{}", ns.name);
                    let wpc: Api<DynamicObject> = Api::all_with(
                        ns.client.clone(),
                        &ApiResource::from_gvk_with_plural(
                            &GroupVersionKind::gvk(
                                "kueue.x-k8s.io",
                                "v1beta2",
                                "WorkloadPriorityClass",
                            ),
                            "workloadpriorityclasses",
                        ),
                    );
                    let class: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                        "metadata": {"name": priority}, "value": 100
                    }))?;
                    wpc.create(&Default::default(), &class).await?;
                    let mut v1 = stable("vllm:1");
                    v1["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = json!(priority);
                    let stable_uid = setup(&ns, &v1).await?;
                    let untouched = StableUntouched::record(&ns, &stable_uid).await?;

                    crate::lws_support::apply(&ns, &on_image(&v1, "vllm:2")).await?;
                    wait_paused_at(&ns, 1).await?;
                    let canary = the_canary(&ns).await?;
                    ensure!(
                        canary
                            .metadata
                            .labels
                            .clone()
                            .unwrap_or_default()
                            .get(QUEUE_LABEL)
                            == Some(&QUEUE.to_string()),
                        "the canary waits in the stable's queue: {:?}",
                        canary.metadata.labels
                    );
                    let canary_uid = canary.metadata.uid.clone().context("canary uid")?;
                    let cw = wait_workloads(&ns, &canary_uid, "canary group 0 admitted", |w| {
                        admitted(w) == [0]
                    })
                    .await?;
                    ensure!(cw[0].spec.queue_name.as_deref() == Some(QUEUE));
                    // …and at the stable's priority (Kueue resolved the class for its Workloads).
                    let canary_wl: Api<DynamicObject> = Api::namespaced_with(
                        ns.client.clone(),
                        &ns.name,
                        &ApiResource::from_gvk_with_plural(
                            &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload"),
                            "workloads",
                        ),
                    );
                    let full = canary_wl
                        .get(cw[0].metadata.name.as_deref().unwrap_or_default())
                        .await?;
                    ensure!(
                        full.data["spec"]["priority"] == json!(100)
                            && full.data["spec"]["priorityClassRef"]["name"] == json!(priority),
                        "the canary's Workload runs at the stable's priority: {}",
                        full.data["spec"]
                    );
                    wait_admitted_count(&ns, &q.cluster_queue, 3).await?;
                    untouched.check(&ns, "step 1").await?;

                    // Step 2 wants a second canary group: no quota left.
                    approve(&ns).await?;
                    let r = wait_rollout(&ns, "a message naming Kueue's reason", |r| {
                        condition(r, "Progressing").is_some_and(|c| {
                            c.2.contains(&format!(
                                "canary group 1 waits for Kueue admission in queue {QUEUE}: "
                            ))
                        })
                    })
                    .await?;
                    let message = condition(&r, "Progressing")
                        .map(|c| c.2)
                        .unwrap_or_default();
                    ensure!(
                        message.contains("nvidia.com/gpu"),
                        "Kueue's words: {message}"
                    );
                    ensure!(
                        step(&r).0 == 2 && step(&r).1 != "StepPaused",
                        "{:?}",
                        step(&r)
                    );
                    let event = wait_event(
                        &ns,
                        "CanaryNotReady",
                        "canary group 1 waits for Kueue admission in queue",
                    )
                    .await?;
                    ensure!(!event.is_empty());
                    let pods =
                        pods_of(&ns, &canary.metadata.name.clone().unwrap_or_default()).await?;
                    assert_group_gated(
                        &pods,
                        canary.metadata.name.as_deref().unwrap_or_default(),
                        1,
                    )?;
                    untouched.check(&ns, "step 2, canary waiting").await?;

                    // Rollback: the canary and its Workloads go, its quota is free again.
                    crate::lws_support::apply(&ns, &v1).await?;
                    wait_rollout(&ns, "rolled back", finished("False")).await?;
                    wait_for_all(
                        &ns.api::<LeaderWorkerSet>(),
                        &format!("{CANARY_LABEL}={STABLE}"),
                        WAIT,
                        |c| c.is_empty(),
                    )
                    .await?;
                    wait_workloads(&ns, &canary_uid, "canary Workloads gone", |w| w.is_empty())
                        .await?;
                    wait_for_all(
                        &ns.api::<k8s_openapi::api::core::v1::Pod>(),
                        &format!(
                            "{NAME}={}",
                            canary.metadata.name.clone().unwrap_or_default()
                        ),
                        WAIT,
                        |p| p.is_empty(),
                    )
                    .await?;
                    wait_admitted_count(&ns, &q.cluster_queue, 2).await?;
                    untouched.check(&ns, "after the rollback").await?;
                    let _ = wpc.delete(&priority, &DeleteParams::background()).await;
                    Ok(())
                }
            })
            .await
        })
    })
    .await
}

/// `spec.disabled` and deleting the Rollout mid-release free the canary's quota the same way
/// (its Workloads go; the ClusterQueue admits only the stable groups), and the quota freed is
/// real: an LWS that waited for it is admitted at once.
#[test]
fn kueue_disable_and_delete_free_the_canary_quota() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_disable_and_delete_free_the_canary_quota_body)
}

async fn kueue_disable_and_delete_free_the_canary_quota_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_disable_and_delete_free_the_canary_quota")? {
        return Ok(());
    }
    with_ns("kueue-free", |ns| {
        Box::pin(async move {
            with_queues(&ns, 6, |q| {
                let ns = ns.clone();
                async move {
                    let v1 = stable("vllm:1");
                    let stable_uid = setup(&ns, &v1).await?;
                    let untouched = StableUntouched::record(&ns, &stable_uid).await?;
                    // Round 1: disable.
                    crate::lws_support::apply(&ns, &on_image(&v1, "vllm:2")).await?;
                    wait_paused_at(&ns, 1).await?;
                    let canary = the_canary(&ns).await?;
                    let canary_uid = canary.metadata.uid.clone().context("uid")?;
                    wait_workloads(&ns, &canary_uid, "canary admitted", |w| admitted(w) == [0])
                        .await?;
                    // Another LWS of the team waits for the one group of quota left... none is left.
                    crate::lws_support::apply(&ns, &queued_lws("other", 1, 2, "vllm:1")).await?;
                    let other_uid = uid_of(&ns, "other").await?;
                    wait_workloads(&ns, &other_uid, "other waiting", |w| {
                        w.len() == 1 && admitted(w).is_empty()
                    })
                    .await?;
                    untouched.check(&ns, "before disable").await?;
                    set_disabled(&ns, true).await?;
                    wait_workloads(&ns, &canary_uid, "canary Workloads gone", |w| w.is_empty())
                        .await?;
                    wait_workloads(
                        &ns,
                        &other_uid,
                        "other admitted with the freed quota",
                        |w| admitted(w) == [0],
                    )
                    .await?;
                    wait_for(&ns.api(), "other", WAIT, available_with(1, 1)).await?;
                    // Disabled: the stable LWS now rolls to its template by its own strategy.
                    wait_for(&ns.api(), STABLE, WAIT, available_with(2, 2)).await?;

                    // Round 2: free the other LWS's quota, enable, release v3, delete the Rollout.
                    ns.api::<LeaderWorkerSet>()
                        .delete("other", &DeleteParams::background())
                        .await?;
                    wait_workloads(&ns, &other_uid, "other gone", |w| w.is_empty()).await?;
                    set_disabled(&ns, false).await?;
                    wait_rollout(&ns, "Healthy again", |r: &Rollout| {
                        r.status.as_ref().map(|s| s.phase.as_str()) == Some("Healthy")
                    })
                    .await?;
                    crate::lws_support::apply(&ns, &on_image(&v1, "vllm:3")).await?;
                    // (A re-enabled Rollout still shows the step it was disabled at until it
                    // starts the new release: wait for the new canary first.)
                    wait_for_all(
                        &ns.api::<LeaderWorkerSet>(),
                        &format!("{CANARY_LABEL}={STABLE}"),
                        WAIT,
                        |c| c.len() == 1,
                    )
                    .await?;
                    wait_paused_at(&ns, 1).await?;
                    let canary = the_canary(&ns).await?;
                    let canary_uid = canary.metadata.uid.clone().context("uid")?;
                    wait_workloads(&ns, &canary_uid, "canary admitted", |w| admitted(w) == [0])
                        .await?;
                    wait_admitted_count(&ns, &q.cluster_queue, 3).await?;
                    ns.api::<Rollout>()
                        .delete(STABLE, &DeleteParams::background())
                        .await?;
                    wait_workloads(&ns, &canary_uid, "canary Workloads gone", |w| w.is_empty())
                        .await?;
                    wait_admitted_count(&ns, &q.cluster_queue, 2).await?;
                    ensure!(canaries(&ns).await?.is_empty());
                    // The hold released: the stable LWS rolls to v3 by its own strategy.
                    wait_for(&ns.api(), STABLE, WAIT, available_with(2, 2)).await?;
                    Ok(())
                }
            })
            .await
        })
    })
    .await
}

/// Lines of the suite's manager log (`LWS_E2E_MANAGER_LOG`) about `ns` that report a write
/// an admission webhook refused.
fn refused_writes(ns: &TestNs) -> Vec<String> {
    let Ok(path) = std::env::var("LWS_E2E_MANAGER_LOG") else {
        return Vec::new();
    };
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains(&ns.name) && (l.contains("denied the request") || l.contains("kb.io"))
        })
        .map(str::to_string)
        .collect()
}

/// Kueue's validation and ours meet without a fight. Kueue's LWS webhook refuses, for an LWS
/// with a queue name, any change of the queue name and of the pod templates' scheduling shape
/// (requests, ports, node selector, affinity, tolerations). A release of an LWS whose groups
/// are partly suspended (one gated for lack of quota) therefore: is refused at the user's own
/// write when it changes a request (nothing of a release starts); and with a new image runs to
/// the end, the canary waiting visibly while quota is short, without a single write of ours
/// refused (the manager's log, the Events).
#[test]
fn kueue_release_of_a_partly_suspended_lws_needs_no_refused_write() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_release_of_a_partly_suspended_lws_body)
}

async fn kueue_release_of_a_partly_suspended_lws_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_release_of_a_partly_suspended_lws_needs_no_refused_write")? {
        return Ok(());
    }
    with_ns("kueue-suspended", |ns| {
        Box::pin(async move {
            with_queues(&ns, 4, |q| {
                let ns = ns.clone();
                async move {
                    // 3 groups of 2 GPUs, quota for 2: one group stays suspended.
                    let v1 = queued_lws(STABLE, 3, 2, "vllm:1");
                    crate::lws_support::apply(&ns, &v1).await?;
                    let uid = uid_of(&ns, STABLE).await?;
                    wait_workloads(&ns, &uid, "2 of 3 admitted", |w| {
                        w.len() == 3 && admitted(w).len() == 2
                    })
                    .await?;
                    create_rollout(
                        &ns,
                        &rollout(json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]), None),
                    )
                    .await?;

                    // A new GPU count: Kueue refuses the user's write; no release starts.
                    let mut more = v1.clone();
                    for t in ["leaderTemplate", "workerTemplate"] {
                        more["spec"]["leaderWorkerTemplate"][t]["spec"]["containers"][0]["resources"] =
                            json!({"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}});
                    }
                    let refused = crate::lws_support::apply(&ns, &more).await;
                    let err = format!("{:#}", refused.err().context("Kueue lets a request change through")?);
                    ensure!(err.contains("vleaderworkerset.kb.io") && err.contains("immutable"), "{err}");
                    ensure!(canaries(&ns).await?.is_empty(), "no canary for a refused write");
                    let lws = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
                    ensure!(
                        !lws.metadata.annotations.unwrap_or_default().contains_key("rollouts.kruise.io/stable-revision"),
                        "no hold for a refused write"
                    );

                    // A new image: allowed. The canary's group waits for quota, visibly.
                    crate::lws_support::apply(&ns, &on_image(&v1, "vllm:2")).await?;
                    wait_rollout(&ns, "the canary waits for Kueue", |r| {
                        condition(r, "Progressing").is_some_and(|c| {
                            c.2.contains(&format!("canary group 0 waits for Kueue admission in queue {QUEUE}: "))
                        })
                    })
                    .await?;
                    // Two more GPUs: the stable's own suspended group was in the queue first.
                    q.set_gpus(6).await?;
                    wait_workloads(&ns, &uid, "the stable group admitted first", |w| {
                        admitted(w) == [0, 1, 2]
                    })
                    .await?;
                    wait_for(&ns.api(), STABLE, WAIT, |l: Option<&LeaderWorkerSet>| {
                        l.and_then(|l| l.status.as_ref()?.ready_replicas) == Some(3)
                    })
                    .await?;
                    let r = wait_rollout(&ns, "still waiting", |r| step(r).0 == 1).await?;
                    ensure!(
                        condition(&r, "Progressing")
                            .is_some_and(|c| c.2.contains("canary group 0 waits for Kueue admission")),
                        "{:?}",
                        condition(&r, "Progressing")
                    );
                    // Quota for the canary group too: step 1.
                    q.set_gpus(8).await?;
                    wait_paused_at(&ns, 1).await?;
                    // Quota for everything: 3 canary groups beside 3 stable ones.
                    q.set_gpus(12).await?;
                    approve(&ns).await?;
                    wait_rollout(&ns, "finished", finished("True")).await?;
                    wait_for(&ns.api(), STABLE, WAIT, available_with(3, 3)).await?;
                    let pods = pods_of(&ns, STABLE).await?;
                    ensure!(
                        pods.iter().all(|p| crate::lws_support::image(p) == "vllm:2"),
                        "every stable group rolled, the one suspended at the start included"
                    );
                    wait_workloads(&ns, &uid, "3 admitted", |w| admitted(w) == [0, 1, 2]).await?;
                    ensure!(canaries(&ns).await?.is_empty());
                    let refused = refused_writes(&ns);
                    ensure!(refused.is_empty(), "writes of ours refused: {refused:#?}");
                    let events = ns
                        .api::<k8s_openapi::api::core::v1::Event>()
                        .list(&Default::default())
                        .await?;
                    let denied: Vec<String> = events
                        .items
                        .iter()
                        .filter_map(|e| e.message.clone())
                        .filter(|m| m.contains("denied the request"))
                        .collect();
                    ensure!(denied.is_empty(), "{denied:#?}");
                    Ok(())
                }
            })
            .await
        })
    })
    .await
}

/// `examples/lws-kueue-canary.yaml` under the quota arithmetic its comment (and docs/kueue.md)
/// states: 24 GPUs run the stable groups and step 1's canary group; step 2 waits for Kueue and
/// says so; 32 GPUs let the release finish.
#[test]
fn kueue_example_release_needs_quota_beside_the_stable_groups() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_example_body)
}

async fn kueue_example_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_example_release_needs_quota_beside_the_stable_groups")? {
        return Ok(());
    }
    with_ns("kueue-example", |ns| {
        Box::pin(async move {
            let queues = crate::kueue_support::Queues::create_on(&ns, 24, "pool-1").await?;
            let outcome = async {
                let docs = crate::harness::yaml_documents("examples/lws-kueue-canary.yaml")?;
                let lws = docs
                    .iter()
                    .find(|d| d["kind"] == "LeaderWorkerSet")
                    .context("LWS")?;
                let ro = docs
                    .iter()
                    .find(|d| d["kind"] == "Rollout")
                    .context("Rollout")?;
                crate::lws_support::apply(&ns, lws).await?;
                wait_for(&ns.api(), "llama", WAIT, available_with(2, 2)).await?;
                let r: Rollout = serde_json::from_value(ro.clone())?;
                ns.api::<Rollout>().create(&Default::default(), &r).await?;
                let rollouts = ns.api::<Rollout>();
                let wait =
                    |what: &'static str, cond: Box<dyn Fn(&Rollout) -> bool + Send + Sync>| {
                        let rollouts = rollouts.clone();
                        async move {
                            wait_for(&rollouts, "llama", WAIT, move |r: Option<&Rollout>| {
                                r.is_some_and(&cond)
                            })
                            .await
                            .with_context(|| format!("Rollout llama: {what}"))
                        }
                    };
                wait(
                    "Healthy",
                    Box::new(|r| r.status.as_ref().map(|s| s.phase.as_str()) == Some("Healthy")),
                )
                .await?;
                let mut v2 = lws.clone();
                for t in ["leaderTemplate", "workerTemplate"] {
                    v2["spec"]["leaderWorkerTemplate"][t]["spec"]["containers"][0]["image"] =
                        json!("vllm/vllm-openai:v0.11.1");
                }
                crate::lws_support::apply(&ns, &v2).await?;
                wait(
                    "paused at step 1",
                    Box::new(|r| step(r) == (1, "StepPaused".to_string())),
                )
                .await?;
                rollouts
                    .patch_status(
                        "llama",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(
                            json!({"status": {"canaryStatus": {"currentStepState": "StepReady"}}}),
                        ),
                    )
                    .await?;
                let r = wait(
                    "step 2 waiting for Kueue",
                    Box::new(|r| {
                        condition(r, "Progressing").is_some_and(|c| {
                            c.2.contains(
                                "canary group 1 waits for Kueue admission in queue gpu-team: ",
                            )
                        })
                    }),
                )
                .await?;
                eprintln!(
                    "kueue example, step 2 at 24 GPUs: {}",
                    r.and_then(|r| condition(&r, "Progressing"))
                        .map(|c| c.2)
                        .unwrap_or_default()
                );
                queues.set_gpus(32).await?;
                wait("finished", Box::new(finished("True"))).await?;
                wait_for(&ns.api(), "llama", WAIT, available_with(2, 2)).await?;
                anyhow::Ok(())
            }
            .await;
            queues.delete().await;
            outcome
        })
    })
    .await
}
