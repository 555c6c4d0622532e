//! The LWS controller under a real Kueue (v0.19.2, its LeaderWorkerSet and pod integrations):
//! what Kueue's own e2e suite (`test/e2e/singlecluster/leaderworkerset_test.go`) expects of the
//! upstream LWS controller, checked against ours. Every group of an LWS with a
//! `kueue.x-k8s.io/queue-name` label is a Workload; its pods are created behind Kueue's
//! scheduling gate and run once Kueue admits the Workload against the test's ClusterQueue
//! (`nvidia.com/gpu` quota, one GPU a pod). docs/kueue.md.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use lws_rollout::api::{
    LeaderWorkerSet,
    kueue::{Workload, condition},
};
use serde_json::json;

use crate::{
    harness::{TestNs, wait_for, wait_for_all, with_ns},
    kueue_support::{
        FLAVOR, WAIT, admitted, assert_group_gated, gated, kueue_or_skip, queued_lws, uid_of,
        wait_workloads, with_queues,
    },
    lws_support::{NAME, available_with, image, label, pod_ready, pods_of, uids},
};

/// `readyReplicas`, `replicas` and the Available condition as the LWS reports them.
fn counts(l: &LeaderWorkerSet) -> (i32, i32, Option<String>) {
    let s = l.status.clone().unwrap_or_default();
    let available = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Available")
        .map(|c| c.status.clone());
    (
        s.ready_replicas.unwrap_or(0),
        s.replicas.unwrap_or(0),
        available,
    )
}

/// Waits until the LWS reports `ready` of `replicas` groups and is Available (condition True)
/// or not (False or not set yet, as upstream), for its current generation.
async fn wait_counts(
    ns: &TestNs,
    name: &str,
    ready: i32,
    replicas: i32,
    available: bool,
) -> anyhow::Result<LeaderWorkerSet> {
    wait_for(&ns.api(), name, WAIT, |l: Option<&LeaderWorkerSet>| {
        l.is_some_and(|l| {
            let (r, n, a) = counts(l);
            l.status.as_ref().and_then(|s| s.observed_generation) == l.metadata.generation
                && (r, n) == (ready, replicas)
                && (a.as_deref() == Some("True")) == available
        })
    })
    .await?
    .context("the LWS vanished")
}

/// The pods of `lws` once there are `count` of them, none terminating.
async fn settled(ns: &TestNs, lws: &str, count: usize) -> anyhow::Result<Vec<Pod>> {
    let pods = wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={lws}"), WAIT, |p| {
        p.len() == count && p.iter().all(|p| p.metadata.deletion_timestamp.is_none())
    })
    .await?;
    Ok(pods.iter().map(|p| p.as_ref().clone()).collect())
}

/// Every pod ran the gate: Kueue ungated it and put its flavor's node labels on it.
fn admitted_by_kueue(pods: &[Pod]) -> anyhow::Result<()> {
    for p in pods {
        let selector = p
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default();
        if gated(p)
            || selector
                .get("cloud.google.com/gke-nodepool")
                .map(String::as_str)
                != Some(FLAVOR)
        {
            bail!(
                "pod {} was not admitted through Kueue (gated: {}, nodeSelector {selector:?})",
                p.metadata.name.as_deref().unwrap_or_default(),
                gated(p)
            );
        }
    }
    Ok(())
}

/// Kueue's "should admit group with leader only", "… with leader and workers" and "… multiple
/// leaders and workers that fits": every group is one Workload (labelled with the LWS's uid),
/// admitted, its pods ungated onto the flavor's nodes; deleting an LWS takes its pods and
/// Workloads and leaves the other LWS alone.
#[test]
fn kueue_admits_leader_only_and_leader_worker_groups() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_admits_leader_only_and_leader_worker_groups_body)
}

async fn kueue_admits_leader_only_and_leader_worker_groups_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_admits_leader_only_and_leader_worker_groups")? {
        return Ok(());
    }
    with_ns("kueue-admit", |ns| async move {
        // 2 groups of 1 + 2 groups of 3 = 8 GPUs: exactly the quota.
        with_queues(&ns, 8, |_q| async {
            crate::lws_support::apply(&ns, &queued_lws("solo", 2, 1, "vllm:1")).await?;
            crate::lws_support::apply(&ns, &queued_lws("group", 2, 3, "vllm:1")).await?;
            wait_for(&ns.api(), "solo", WAIT, available_with(2, 2)).await?;
            wait_for(&ns.api(), "group", WAIT, available_with(2, 2)).await?;
            for (lws, pods) in [("solo", 2), ("group", 6)] {
                let uid = uid_of(&ns, lws).await?;
                let w =
                    wait_workloads(&ns, &uid, "two admitted", |w| admitted(w) == [0, 1]).await?;
                assert_eq!(w.len(), 2, "{lws}: one Workload a group");
                admitted_by_kueue(&settled(&ns, lws, pods).await?)?;
            }
            let solo_pods = uids(&ns, "solo").await?;
            let group_uid = uid_of(&ns, "group").await?;
            ns.api::<LeaderWorkerSet>()
                .delete("group", &DeleteParams::foreground())
                .await?;
            wait_for_all(&ns.api::<Pod>(), &format!("{NAME}=group"), WAIT, |p| {
                p.is_empty()
            })
            .await?;
            wait_workloads(&ns, &group_uid, "gone with their LWS", |w| w.is_empty()).await?;
            assert_eq!(
                uids(&ns, "solo").await?,
                solo_pods,
                "the other LWS is untouched"
            );
            Ok(())
        })
        .await
    })
    .await
}

/// Quota for 2 of 3 groups: the third stays gated (its pods Pending behind Kueue's gate, its
/// Workload not admitted and saying why) while the LWS reports 2 ready of 3; scaled through the
/// scale subresource to 2 its Workload goes; scaled back up through `spec.replicas` it waits
/// again; raising the quota admits it. Kueue's "should allow to scale up / scale down".
#[test]
fn kueue_gates_groups_beyond_quota_and_scales_both_ways() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_gates_groups_beyond_quota_and_scales_both_ways_body)
}

async fn kueue_gates_groups_beyond_quota_and_scales_both_ways_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_gates_groups_beyond_quota_and_scales_both_ways")? {
        return Ok(());
    }
    with_ns("kueue-quota", |ns| async move {
        with_queues(&ns, 4, |q| {
            let ns = ns.clone();
            async move {
                let name = "vllm";
                crate::lws_support::apply(&ns, &queued_lws(name, 3, 2, "vllm:1")).await?;
                wait_counts(&ns, name, 2, 3, false).await?;
                let uid = uid_of(&ns, name).await?;
                // Which 2 of the 3 Kueue admits is its choice; the third waits with a reason.
                let w = wait_workloads(&ns, &uid, "2 admitted, 1 waiting with a reason", |w| {
                    w.len() == 3
                        && admitted(w).len() == 2
                        && w.iter().any(|w| {
                            w.condition(condition::QUOTA_RESERVED)
                                .is_some_and(|c| c.status == "False" && !c.message.is_empty())
                        })
                })
                .await?;
                let waiting = w
                    .iter()
                    .find(|w| w.admission_wait().is_some())
                    .context("a waiting Workload")?;
                let gated_group = waiting.group_index().context("group index")?;
                let why = waiting.admission_wait().unwrap_or_default();
                assert!(
                    why.contains("nvidia.com/gpu"),
                    "Kueue says what is short: {why}"
                );
                let pods = settled(&ns, name, 6).await?;
                assert_group_gated(&pods, name, gated_group)?;
                for group in admitted(&w) {
                    let of_group: Vec<Pod> = pods
                        .iter()
                        .filter(|p| {
                            label(p, crate::lws_support::GROUP_INDEX) == Some(&group.to_string())
                        })
                        .cloned()
                        .collect();
                    assert!(of_group.iter().all(pod_ready), "group {group} runs");
                    admitted_by_kueue(&of_group)?;
                }

                // Scale subresource down to 2: group 2's Workload and pods go.
                ns.api::<LeaderWorkerSet>()
                    .patch_scale(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": 2}})),
                    )
                    .await?;
                wait_counts(&ns, name, 2, 2, true).await?;
                wait_workloads(&ns, &uid, "two left", |w| {
                    w.len() == 2 && admitted(w) == [0, 1]
                })
                .await?;
                settled(&ns, name, 4).await?;

                // spec.replicas up to 3: group 2 waits again.
                ns.api::<LeaderWorkerSet>()
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": 3}})),
                    )
                    .await?;
                wait_counts(&ns, name, 2, 3, false).await?;
                let pods = settled(&ns, name, 6).await?;
                assert_group_gated(&pods, name, 2)?;

                // Quota frees: group 2 comes up.
                q.set_gpus(6).await?;
                wait_counts(&ns, name, 3, 3, true).await?;
                wait_workloads(&ns, &uid, "all admitted", |w| admitted(w) == [0, 1, 2]).await?;
                admitted_by_kueue(&settled(&ns, name, 6).await?)?;

                // Scale subresource down to 1, spec.replicas back to 2.
                ns.api::<LeaderWorkerSet>()
                    .patch_scale(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": 1}})),
                    )
                    .await?;
                wait_counts(&ns, name, 1, 1, true).await?;
                wait_workloads(&ns, &uid, "one left", |w| {
                    w.len() == 1 && admitted(w) == [0]
                })
                .await?;
                Ok(())
            }
        })
        .await
    })
    .await
}

/// A template update rolls group by group under a quota that fits exactly the LWS's groups:
/// each new group's pods are created behind Kueue's gate and admitted again, no group is left
/// waiting, and the Workloads stay one a group. Kueue's "should allow to update the PodTemplate".
#[test]
fn kueue_rolling_update_readmits_each_new_group() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_rolling_update_readmits_each_new_group_body)
}

async fn kueue_rolling_update_readmits_each_new_group_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_rolling_update_readmits_each_new_group")? {
        return Ok(());
    }
    with_ns("kueue-roll", |ns| async move {
        with_queues(&ns, 4, |_q| async {
            let name = "vllm";
            let v1 = queued_lws(name, 2, 2, "vllm:1");
            crate::lws_support::apply(&ns, &v1).await?;
            wait_for(&ns.api(), name, WAIT, available_with(2, 2)).await?;
            let before = uids(&ns, name).await?;
            let uid = uid_of(&ns, name).await?;
            let mut v2 = v1.clone();
            for t in ["leaderTemplate", "workerTemplate"] {
                v2["spec"]["leaderWorkerTemplate"][t]["spec"]["containers"][0]["image"] =
                    json!("vllm:2");
            }
            crate::lws_support::apply(&ns, &v2).await?;
            let lws = wait_for(
                &ns.api(),
                name,
                Duration::from_secs(150),
                available_with(2, 2),
            )
            .await?;
            assert!(lws.is_some());
            let pods = settled(&ns, name, 4).await?;
            assert!(
                pods.iter().all(|p| image(p) == "vllm:2" && pod_ready(p)),
                "all groups rolled"
            );
            let after: BTreeMap<String, String> = uids(&ns, name).await?;
            for (pod, old) in &before {
                assert_ne!(after.get(pod), Some(old), "{pod} was replaced");
            }
            admitted_by_kueue(&pods)?;
            let w = wait_workloads(&ns, &uid, "two admitted", |w| admitted(w) == [0, 1]).await?;
            assert_eq!(w.len(), 2, "still one Workload a group: {w:#?}");
            Ok(())
        })
        .await
    })
    .await
}

/// Kueue's "shouldn't delete deactivated Workload": a user deactivates a group's Workload; Kueue
/// evicts the group (its pods come back gated, the LWS reports it unready), and our controller
/// neither deletes nor replaces the Workload; activated again, the same Workload is admitted
/// and the group runs.
#[test]
fn kueue_deactivated_workload_is_kept() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_deactivated_workload_is_kept_body)
}

async fn kueue_deactivated_workload_is_kept_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_deactivated_workload_is_kept")? {
        return Ok(());
    }
    with_ns("kueue-deactivate", |ns| async move {
        with_queues(&ns, 4, |_q| async {
            let name = "vllm";
            crate::lws_support::apply(&ns, &queued_lws(name, 1, 3, "vllm:1")).await?;
            wait_for(&ns.api(), name, WAIT, available_with(1, 1)).await?;
            let uid = uid_of(&ns, name).await?;
            let w = wait_workloads(&ns, &uid, "admitted", |w| admitted(w) == [0]).await?;
            let wl_name = w[0].metadata.name.clone().context("workload name")?;
            let wl_uid = w[0].metadata.uid.clone();
            let api = ns.api::<Workload>();
            api.patch(
                &wl_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"active": false}})),
            )
            .await?;
            wait_counts(&ns, name, 0, 1, false).await?;
            let pods = wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={name}"), WAIT, |p| {
                p.len() == 3
                    && p.iter()
                        .all(|p| gated(p) && p.metadata.deletion_timestamp.is_none())
            })
            .await?;
            assert_eq!(pods.len(), 3);
            // Watched for a while: the Workload is neither deleted nor replaced.
            let kept = tokio::time::timeout(
                Duration::from_secs(8),
                wait_workloads(&ns, &uid, "replaced or deleted", |w| {
                    w.len() != 1 || w[0].metadata.uid != wl_uid || w[0].spec.active != Some(false)
                }),
            )
            .await;
            if let Ok(Ok(w)) = kept {
                bail!("the deactivated Workload changed: {w:#?}");
            }
            api.patch(
                &wl_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"active": true}})),
            )
            .await?;
            wait_for(&ns.api(), name, WAIT, available_with(1, 1)).await?;
            let w =
                wait_workloads(&ns, &uid, "the same one admitted", |w| admitted(w) == [0]).await?;
            assert_eq!(w[0].metadata.uid, wl_uid, "the same Workload");
            Ok(())
        })
        .await
    })
    .await
}

/// RecreateGroupOnPodRestart under Kueue: a deleted worker of an admitted group takes the group
/// down and it comes back whole (new pods, admitted again); a deleted worker of a group that
/// waits for quota brings its group back gated, with no churn beyond that one recreation.
#[test]
fn kueue_recreate_group_on_pod_restart_with_gated_pods() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(kueue_recreate_group_on_pod_restart_with_gated_pods_body)
}

async fn kueue_recreate_group_on_pod_restart_with_gated_pods_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_recreate_group_on_pod_restart_with_gated_pods")? {
        return Ok(());
    }
    with_ns("kueue-restart", |ns| async move {
        with_queues(&ns, 3, |_q| async {
            let name = "vllm";
            // Quota for one group (3 pods); the other waits. Which one Kueue admits first is
            // its choice.
            crate::lws_support::apply(&ns, &queued_lws(name, 2, 3, "vllm:1")).await?;
            wait_counts(&ns, name, 1, 2, false).await?;
            let uid = uid_of(&ns, name).await?;
            let w = wait_workloads(&ns, &uid, "one admitted", |w| {
                w.len() == 2 && admitted(w).len() == 1
            })
            .await?;
            let (run, wait) = if admitted(&w) == [0] { (0, 1) } else { (1, 0) };
            let pods = settled(&ns, name, 6).await?;
            assert_group_gated(&pods, name, wait)?;
            let before = uids(&ns, name).await?;
            let worker = |group: i32| format!("{name}-{group}-1");
            let members = |group: i32| -> Vec<String> {
                (0..3)
                    .map(|i| {
                        if i == 0 {
                            format!("{name}-{group}")
                        } else {
                            format!("{name}-{group}-{i}")
                        }
                    })
                    .collect()
            };

            // The admitted group: a deleted worker recreates the whole group.
            ns.api::<Pod>()
                .delete(&worker(run), &DeleteParams::default())
                .await?;
            let running = members(run);
            wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={name}"), WAIT, |p| {
                running.iter().all(|n| {
                    p.iter().any(|p| {
                        p.metadata.name.as_ref() == Some(n)
                            && p.metadata.uid != before.get(n).cloned()
                            && pod_ready(p)
                    })
                })
            })
            .await
            .context("the admitted group recreated whole and ready")?;
            wait_counts(&ns, name, 1, 2, false).await?;

            // The gated group: a deleted worker takes it down too (the policy does not wait
            // for admission), and it comes back whole and gated.
            ns.api::<Pod>()
                .delete(&worker(wait), &DeleteParams::default())
                .await?;
            let waiting = members(wait);
            let pods = wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={name}"), WAIT, |p| {
                p.len() == 6
                    && p.iter().all(|p| p.metadata.deletion_timestamp.is_none())
                    && waiting.iter().all(|n| {
                        p.iter().any(|p| {
                            p.metadata.name.as_ref() == Some(n)
                                && p.metadata.uid != before.get(n).cloned()
                        })
                    })
            })
            .await
            .context("the waiting group recreated whole")?;
            let pods: Vec<Pod> = pods.iter().map(|p| p.as_ref().clone()).collect();
            assert_group_gated(&pods, name, wait)?;
            let settled_uids = uids(&ns, name).await?;
            // No crash loop: the gated group stays as it is now.
            let churn = tokio::time::timeout(
                Duration::from_secs(6),
                wait_for_all(&ns.api::<Pod>(), &format!("{NAME}={name}"), WAIT, |p| {
                    p.len() != 6
                        || p.iter().any(|p| {
                            settled_uids.get(p.metadata.name.as_deref().unwrap_or_default())
                                != p.metadata.uid.as_ref()
                        })
                }),
            )
            .await;
            if let Ok(Ok(p)) = churn {
                bail!(
                    "pods kept changing after the gated group came back: {} pods",
                    p.len()
                );
            }
            let all = pods_of(&ns, name).await?;
            assert_group_gated(&all, name, wait)?;
            Ok(())
        })
        .await
    })
    .await
}

/// Kueue v0.19's `LWSImmutableGroupSize`: a group-size change of an LWS Kueue manages is refused
/// where it is written (the user's apply), so no rolling update starts, no revision is made and
/// every pod keeps running — a release can never be caught half-way by it (docs/kueue.md).
#[test]
fn kueue_refuses_a_group_size_change_before_anything_rolls() -> anyhow::Result<()> {
    crate::rollout_support::on_big_stack(
        kueue_refuses_a_group_size_change_before_anything_rolls_body,
    )
}

async fn kueue_refuses_a_group_size_change_before_anything_rolls_body() -> anyhow::Result<()> {
    if !kueue_or_skip("kueue_refuses_a_group_size_change_before_anything_rolls")? {
        return Ok(());
    }
    with_ns("kueue-size", |ns| async move {
        with_queues(&ns, 4, |_q| async {
            crate::lws_support::apply(&ns, &queued_lws("sized", 2, 2, "vllm:1")).await?;
            wait_for(&ns.api(), "sized", WAIT, available_with(2, 2)).await?;
            let before = uids(&ns, "sized").await?;
            let revisions = crate::lws_support::lws_revisions(&ns).await?;
            match crate::lws_support::apply(&ns, &queued_lws("sized", 2, 3, "vllm:1")).await {
                Err(e) if format!("{e:#}").contains("field is immutable") => {}
                other => {
                    bail!("a size change under Kueue: expected Kueue's refusal, got {other:?}")
                }
            }
            let lws = ns.api::<LeaderWorkerSet>().get("sized").await?;
            assert_eq!(lws.spec.leader_worker_template.size, Some(2));
            assert_eq!(uids(&ns, "sized").await?, before, "no pod replaced");
            assert_eq!(
                crate::lws_support::lws_revisions(&ns).await?,
                revisions,
                "no revision made"
            );
            Ok(())
        })
        .await
    })
    .await
}
