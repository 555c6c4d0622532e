//! What upstream LWS v0.9.0 added, on the shared cluster: `restartPolicy:
//! RecreateGroupAfterStart` (and v0.8's experimental annotation), conditions that carry the
//! generation they were computed for, and TPU variables in every TPU container.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{events_when, wait_for, wait_for_all, with_ns},
    lws_support::{HOLD_GATE, NAME, apply, available_with, create_available, lws, uids},
};

const AFTER_START_ANNOTATION: &str =
    "leaderworkerset.sigs.k8s.io/experimental-recreate-group-after-start";
const ROSTER: &str = "lws-rollout.x-k8s.io/worker-uids";

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn replaced(old_uid: String) -> impl Fn(Option<&Pod>) -> bool {
    move |p: Option<&Pod>| {
        p.is_none_or(|p| {
            p.metadata.deletion_timestamp.is_some()
                || p.metadata.uid.as_deref() != Some(old_uid.as_str())
        })
    }
}

/// A group whose workers cannot start yet (held Pending by a scheduling gate, as a group still
/// pulling its images is): deleting one of its workers rebuilds it under
/// `RecreateGroupOnPodRestart` — the restart loop v0.9's policy exists to stop — and leaves it
/// alone under `RecreateGroupAfterStart` or v0.8's annotation. Once every pod has started, the
/// same deletion rebuilds the group under the new policy too.
#[tokio::test]
async fn recreate_group_after_start_waits_until_every_pod_has_started() -> anyhow::Result<()> {
    with_ns("lws-after-start", |ns| async move {
        let gated = |name: &str, policy: &str, annotated: bool| {
            let mut obj = lws(name, 1, 3, "vllm:1");
            let template = &mut obj["spec"]["leaderWorkerTemplate"];
            template["restartPolicy"] = json!(policy);
            template["leaderTemplate"] =
                json!({"spec": {"containers": [{"name": "model", "image": "vllm:1"}]}});
            template["workerTemplate"]["spec"]["schedulingGates"] = json!([{"name": HOLD_GATE}]);
            if annotated {
                obj["metadata"]["annotations"] = json!({AFTER_START_ANNOTATION: "true"});
            }
            obj
        };
        let cases = [
            ("after", "RecreateGroupAfterStart", false),
            ("annotated", "RecreateGroupOnPodRestart", true),
            ("eager", "RecreateGroupOnPodRestart", false),
        ];
        let pods = ns.api::<Pod>();
        for (name, policy, annotated) in cases {
            apply(&ns, &gated(name, policy, annotated)).await?;
        }
        for (name, _, _) in cases {
            wait_for_all(
                &pods,
                &format!("{NAME}={name}"),
                Duration::from_secs(90),
                |pods| {
                    pods.len() == 3
                        && pods.iter().all(|p| {
                            let leader = p.metadata.name.as_deref() == Some(&format!("{name}-0"));
                            phase(p) == Some(if leader { "Running" } else { "Pending" })
                        })
                },
            )
            .await
            .with_context(|| format!("{name}: the leader runs, the workers are Pending"))?;
        }
        let mut before = std::collections::BTreeMap::new();
        for (name, _, _) in cases {
            before.extend(uids(&ns, name).await?);
        }
        // A worker deleted and replaced before the controller recorded the group's roster
        // leaves no trace in any cache (docs/lws.md): wait for the eager group's roster, as a
        // real incident would find it, so the test does not race the recording under load.
        wait_for(
            &ns.api::<StatefulSet>(),
            "eager-0",
            Duration::from_secs(60),
            |sts: Option<&StatefulSet>| {
                sts.is_some_and(|s| {
                    s.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("lws-rollout.x-k8s.io/worker-uids"))
                })
            },
        )
        .await
        .context("the eager group's roster is recorded")?;
        for (name, _, _) in cases {
            pods.delete(&format!("{name}-0-1"), &DeleteParams::default())
                .await?;
        }

        // RecreateGroupOnPodRestart alone: the group that has not started is rebuilt.
        wait_for(
            &pods,
            "eager-0",
            Duration::from_secs(60),
            replaced(before["eager-0"].clone()),
        )
        .await
        .context("RecreateGroupOnPodRestart rebuilds the group")?;

        // The others: the StatefulSet replaced the worker, the group is left alone. Proved
        // without waiting on a quiet moment: once their workers may start and the LWS is
        // Available, the leader that was there before the deletion must still be there.
        let ungate = json!([{"op": "remove", "path": "/spec/schedulingGates"}]);
        for name in ["after", "annotated"] {
            wait_for(
                &pods,
                &format!("{name}-0-1"),
                Duration::from_secs(60),
                |p: Option<&Pod>| p.is_some_and(|p| phase(p) == Some("Pending")),
            )
            .await?;
            for worker in [format!("{name}-0-1"), format!("{name}-0-2")] {
                pods.patch(
                    &worker,
                    &PatchParams::default(),
                    &Patch::<()>::Json(serde_json::from_value(ungate.clone())?),
                )
                .await
                .with_context(|| format!("ungating {worker}"))?;
            }
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                name,
                Duration::from_secs(90),
                available_with(1, 1),
            )
            .await?;
            assert_eq!(
                uids(&ns, name).await?[&format!("{name}-0")],
                before[&format!("{name}-0")],
                "{name}: a group that had not started is not rebuilt"
            );
        }

        // Started now: the roster is recorded, and losing a worker rebuilds the group.
        wait_for(
            &ns.api::<StatefulSet>(),
            "after-0",
            Duration::from_secs(60),
            |s: Option<&StatefulSet>| {
                s.and_then(|s| s.metadata.annotations.as_ref())
                    .is_some_and(|a| a.contains_key(ROSTER))
            },
        )
        .await?;
        pods.delete("after-0-2", &DeleteParams::default()).await?;
        wait_for(
            &pods,
            "after-0",
            Duration::from_secs(60),
            replaced(before["after-0"].clone()),
        )
        .await
        .context("a started group is rebuilt")?;
        let events = events_when(&ns, Duration::from_secs(30), |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("RecreateGroup")
                    && e.note.as_deref().is_some_and(|n| n.contains("after-0"))
            })
        })
        .await?;
        let notes: Vec<_> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("RecreateGroup"))
            .filter_map(|e| e.note.clone())
            .filter(|n| !n.contains("eager"))
            .collect();
        assert_eq!(
            notes,
            ["Worker pod after-0-2 failed, deleted leader pod after-0 to recreate group 0"],
            "one recreation, of the started group"
        );
        Ok(())
    })
    .await
}

/// v0.9: every condition states `observedGeneration`, and a spec change that rolls nothing (a
/// scale) still moves it — upstream's e2e helpers accept a condition only at the current
/// generation.
#[tokio::test]
async fn conditions_carry_the_generation_they_were_computed_for() -> anyhow::Result<()> {
    with_ns("lws-gen", |ns| async move {
        let first = create_available(&ns, &lws("gen", 1, 2, "vllm:1")).await?;
        let generation = first.metadata.generation;
        let conditions = first
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        assert!(!conditions.is_empty());
        assert!(
            conditions
                .iter()
                .all(|c| c.observed_generation == generation),
            "{conditions:?}"
        );
        let api = ns.api::<LeaderWorkerSet>();
        api.patch_scale(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await?;
        let scaled = wait_for(
            &api,
            "gen",
            Duration::from_secs(90),
            |l: Option<&LeaderWorkerSet>| {
                available_with(2, 2)(l)
                    && l.is_some_and(|l| {
                        l.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter()
                                    .all(|c| c.observed_generation == l.metadata.generation)
                            })
                    })
            },
        )
        .await?
        .context("gen")?;
        assert!(scaled.metadata.generation > generation);
        Ok(())
    })
    .await
}

/// v0.9 (#754): with two containers requesting TPUs, both get the TPU variables; each pod is
/// listed once per container (upstream's e2e "Adds env vars to multiple containers when using
/// TPU": replicas 2, size 2).
#[tokio::test]
async fn every_tpu_container_gets_the_tpu_variables() -> anyhow::Result<()> {
    with_ns("lws-tpu", |ns| async move {
        let tpu = json!({"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}});
        let spec = json!({"containers": [
            {"name": "a", "image": "vllm:1", "resources": tpu},
            {"name": "b", "image": "vllm:1", "resources": tpu}]});
        let mut obj = lws("tpu", 2, 2, "vllm:1");
        obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = json!({"spec": spec});
        obj["spec"]["leaderWorkerTemplate"]["workerTemplate"] = json!({"spec": spec});
        create_available(&ns, &obj).await?;
        let pods = crate::lws_support::settled_pods(&ns, "tpu", 4).await?;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let group = name.split('-').nth(1).context("group")?.to_string();
            let subdomain = pod
                .spec
                .as_ref()
                .and_then(|s| s.subdomain.clone())
                .unwrap_or_default();
            let leader = format!("tpu-{group}");
            let hosts = format!(
                "{leader}.{subdomain},{leader}.{subdomain},{leader}-1.{subdomain},{leader}-1.{subdomain}"
            );
            // tpu-<group> is the leader (pod index 0), tpu-<group>-1 the worker.
            let index = usize::from(name.split('-').count() == 3);
            for (i, container) in pod.spec.as_ref().context("spec")?.containers.iter().enumerate()
            {
                let var = |n: &str| {
                    container
                        .env
                        .iter()
                        .flatten()
                        .find(|e| e.name == n)
                        .and_then(|e| e.value.clone())
                };
                assert_eq!(var("TPU_WORKER_HOSTNAMES"), Some(hosts.clone()), "{name}/{i}");
                assert_eq!(
                    var("TPU_WORKER_ID"),
                    Some((index * 2 + i).to_string()),
                    "{name}/{i}"
                );
                assert_eq!(var("TPU_NAME"), Some(leader.clone()), "{name}/{i}");
                assert_eq!(
                    var("TPU_PROCESS_PORT"),
                    Some((8476 + i).to_string()),
                    "{name}/{i}"
                );
            }
        }
        Ok(())
    })
    .await
}
