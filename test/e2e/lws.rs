//! The LWS controller (run by test/run-tests.sh against the shared cluster) turns an LWS into
//! groups: leader StatefulSet, one worker StatefulSet per group, headless Service, revision,
//! status — and rolls and scales them.

use std::time::Duration;

use anyhow::Context;

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{Pod, Service},
};
use kube::api::{ListParams, Patch, PatchParams};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{events_when, wait_for, wait_for_all, with_ns},
    lws_support::{
        NAME, REVISION, apply, available_with, create_available, lws, lws_revisions, pods_of,
        settled_pods, uids, wait_for_lws_revisions,
    },
};

#[tokio::test]
async fn lws_becomes_groups_of_ready_pods_with_upstream_objects() -> anyhow::Result<()> {
    with_ns("lws-create", |ns| async move {
        let lws = create_available(&ns, &lws("vllm", 2, 3, "vllm:1")).await?;
        let status = lws.status.clone().unwrap_or_default();
        assert_eq!(status.replicas, Some(2));
        assert_eq!(
            status.hpa_pod_selector.as_deref(),
            Some(
                "leaderworkerset.sigs.k8s.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0"
            )
        );

        let leader = ns.api::<StatefulSet>().get("vllm").await?;
        let key = leader
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION))
            .cloned()
            .expect("revision label");
        let spec = leader.spec.clone().expect("spec");
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        for i in 0..2 {
            let worker = ns.api::<StatefulSet>().get(&format!("vllm-{i}")).await?;
            let wspec = worker.spec.expect("spec");
            assert_eq!(wspec.replicas, Some(2), "size 3 = leader + 2 workers");
            assert_eq!(wspec.ordinals.and_then(|o| o.start), Some(1));
            let owner = &worker.metadata.owner_references.expect("owner")[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str()),
                ("Pod", format!("vllm-{i}").as_str())
            );
        }

        let mut names: Vec<_> = pods_of(&ns, "vllm")
            .await?
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"
            ]
        );
        for pod in pods_of(&ns, "vllm").await? {
            assert_eq!(
                pod.metadata.labels.as_ref().and_then(|l| l.get(REVISION)),
                Some(&key),
                "every pod runs the current revision"
            );
        }

        let svc = ns.api::<Service>().get("vllm").await?;
        let svc_spec = svc.spec.expect("spec");
        assert_eq!(svc_spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(svc_spec.publish_not_ready_addresses, Some(true));
        assert_eq!(
            ns.api::<Service>()
                .list(&ListParams::default())
                .await?
                .items
                .len(),
            1,
            "no extra Services"
        );

        let revisions = lws_revisions(&ns).await?;
        assert_eq!(revisions, [format!("vllm-{key}-1")]);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn image_change_rolls_every_group_to_the_new_revision() -> anyhow::Result<()> {
    with_ns("lws-roll", |ns| async move {
        create_available(&ns, &lws("roll", 3, 2, "vllm:1")).await?;
        let old_key = ns
            .api::<StatefulSet>()
            .get("roll")
            .await?
            .metadata
            .labels
            .unwrap_or_default()[REVISION]
            .clone();

        apply(&ns, &lws("roll", 3, 2, "vllm:2")).await?;
        let sts_api = ns.api::<StatefulSet>();
        wait_for(
            &sts_api,
            "roll",
            Duration::from_secs(30),
            |s: Option<&StatefulSet>| {
                s.and_then(|s| s.metadata.labels.as_ref())
                    .and_then(|l| l.get(REVISION))
                    .is_some_and(|k| *k != old_key)
            },
        )
        .await?;
        wait_for(
            &ns.api(),
            "roll",
            Duration::from_secs(120),
            available_with(3, 3),
        )
        .await?;

        let pods = settled_pods(&ns, "roll", 6).await?;
        for pod in &pods {
            let image = pod
                .spec
                .as_ref()
                .map(|s| s.containers[0].image.clone().unwrap_or_default());
            assert_eq!(
                image.as_deref(),
                Some("vllm:2"),
                "{} runs the new image",
                pod.metadata.name.clone().unwrap_or_default()
            );
        }
        // The default strategy moves the partition down one group at a time: 3 → 2 → 1 → 0
        // (v0.9's texts name the group each step releases).
        let is_step = |e: &k8s_openapi::api::events::v1::Event| {
            e.note
                .as_deref()
                .is_some_and(|n| n.starts_with("Updating replica"))
        };
        let events = events_when(&ns, Duration::from_secs(30), |events| {
            events.iter().filter(|e| is_step(e)).count() >= 3
        })
        .await?;
        let mut steps: Vec<_> = events
            .iter()
            .filter_map(|e| e.note.clone())
            .filter(|n| n.starts_with("Updating replica"))
            .collect();
        steps.sort();
        assert_eq!(
            steps,
            [
                "Updating replica 0",
                "Updating replica 1",
                "Updating replica 2"
            ]
        );
        // Old revisions are truncated once the update is done.
        let new_key = ns
            .api::<StatefulSet>()
            .get("roll")
            .await?
            .metadata
            .labels
            .unwrap_or_default()[REVISION]
            .clone();
        wait_for_lws_revisions(&ns, "roll", &[format!("roll-{new_key}-2")]).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scale_subresource_scales_groups_down_to_zero_and_back() -> anyhow::Result<()> {
    with_ns("lws-scale", |ns| async move {
        create_available(&ns, &lws("sc", 2, 2, "vllm:1")).await?;
        let api = ns.api::<LeaderWorkerSet>();

        let scale = |n: i32| json!({"spec": {"replicas": n}});
        api.patch_scale("sc", &PatchParams::default(), &Patch::Merge(scale(0)))
            .await?;
        wait_for(
            &api,
            "sc",
            Duration::from_secs(60),
            |l: Option<&LeaderWorkerSet>| {
                l.and_then(|l| l.status.as_ref())
                    .is_some_and(|s| s.replicas == Some(0) && s.ready_replicas == Some(0))
            },
        )
        .await?;
        // No pods at 0 replicas (terminating ones go away shortly after the status says 0).
        wait_for_all(
            &ns.api::<Pod>(),
            &format!("{NAME}=sc"),
            Duration::from_secs(60),
            |pods| pods.is_empty(),
        )
        .await?;

        api.patch_scale("sc", &PatchParams::default(), &Patch::Merge(scale(3)))
            .await?;
        wait_for(&api, "sc", Duration::from_secs(90), available_with(3, 3)).await?;
        assert_eq!(pods_of(&ns, "sc").await?.len(), 6);
        let scale_view = api.get_scale("sc").await?;
        assert_eq!(
            scale_view.status.and_then(|s| s.selector).as_deref(),
            Some("leaderworkerset.sigs.k8s.io/name=sc,leaderworkerset.sigs.k8s.io/worker-index=0")
        );
        Ok(())
    })
    .await
}

fn pod_replaced_and_ready(old_uid: String) -> impl Fn(Option<&Pod>) -> bool {
    move |p: Option<&Pod>| {
        p.is_some_and(|p| {
            p.metadata.uid.as_deref() != Some(old_uid.as_str())
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    }
}

#[tokio::test]
async fn deleting_a_worker_recreates_its_whole_group_and_only_that_group() -> anyhow::Result<()> {
    with_ns("lws-restart", |ns| async move {
        create_available(&ns, &lws("rs", 2, 3, "vllm:1")).await?;
        let before = uids(&ns, "rs").await?;

        // A finalizer keeps the deleted worker Terminating for a while, as a real kubelet does
        // (KWOK would finish termination in milliseconds, possibly between two reconciles).
        let pods = ns.api::<Pod>();
        let hold = |finalizers: serde_json::Value| {
            Patch::Merge(json!({"metadata": {"finalizers": finalizers}}))
        };
        pods.patch(
            "rs-0-1",
            &PatchParams::default(),
            &hold(json!(["lws-rollout.test/hold"])),
        )
        .await?;
        pods.delete("rs-0-1", &Default::default()).await?;
        let leader_uid = before["rs-0"].clone();
        wait_for(
            &pods,
            "rs-0",
            Duration::from_secs(60),
            move |p: Option<&Pod>| {
                p.is_none_or(|p| {
                    p.metadata.deletion_timestamp.is_some()
                        || p.metadata.uid.as_deref() != Some(leader_uid.as_str())
                })
            },
        )
        .await?;
        pods.patch("rs-0-1", &PatchParams::default(), &hold(json!(null)))
            .await?;
        // The leader of group 0 is replaced (foreground delete takes its workers with it)…
        for pod in ["rs-0", "rs-0-1", "rs-0-2"] {
            wait_for(
                &ns.api::<Pod>(),
                pod,
                Duration::from_secs(60),
                pod_replaced_and_ready(before[pod].clone()),
            )
            .await?;
        }
        wait_for(
            &ns.api(),
            "rs",
            Duration::from_secs(90),
            available_with(2, 2),
        )
        .await?;
        let after = uids(&ns, "rs").await?;
        assert_eq!(after.len(), 6, "the group came back whole: {after:?}");
        // …and group 1 is untouched.
        for pod in ["rs-1", "rs-1-1", "rs-1-2"] {
            assert_eq!(before[pod], after[pod], "{pod} kept running");
        }
        let events = events_when(&ns, Duration::from_secs(30), |events| {
            events
                .iter()
                .any(|e| e.reason.as_deref() == Some("RecreateGroup"))
        })
        .await?;
        let recreations: Vec<_> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("RecreateGroup"))
            .collect();
        assert_eq!(recreations.len(), 1, "one recreation per incident");
        assert_eq!(
            recreations[0].note.as_deref(),
            Some("Worker pod rs-0-1 failed, deleted leader pod rs-0 to recreate group 0")
        );
        assert_eq!(
            recreations[0].series.as_ref().map_or(1, |s| s.count),
            1,
            "one recreation per incident"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn restart_policy_none_replaces_only_the_deleted_pod() -> anyhow::Result<()> {
    with_ns("lws-none", |ns| async move {
        let mut obj = lws("nr", 1, 3, "vllm:1");
        obj["spec"]["leaderWorkerTemplate"]["restartPolicy"] = json!("None");
        create_available(&ns, &obj).await?;
        let before = uids(&ns, "nr").await?;
        ns.api::<Pod>()
            .delete("nr-0-2", &Default::default())
            .await?;
        wait_for(
            &ns.api::<Pod>(),
            "nr-0-2",
            Duration::from_secs(60),
            pod_replaced_and_ready(before["nr-0-2"].clone()),
        )
        .await?;
        let after = uids(&ns, "nr").await?;
        assert_eq!(before["nr-0"], after["nr-0"], "leader kept");
        assert_eq!(before["nr-0-1"], after["nr-0-1"], "other worker kept");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_users_service_with_the_lws_name_is_reported_and_does_not_block_the_groups()
-> anyhow::Result<()> {
    with_ns("lws-clash", |ns| async move {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "clash"},
            "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}
        }))?;
        ns.api::<Service>()
            .create(&Default::default(), &svc)
            .await?;
        create_available(&ns, &lws("clash", 2, 2, "vllm:1")).await?;

        let user_svc = ns.api::<Service>().get("clash").await?;
        assert_ne!(
            user_svc.spec.and_then(|s| s.cluster_ip).as_deref(),
            Some("None"),
            "the user's Service is left alone"
        );
        events_when(&ns, Duration::from_secs(30), |events| {
            events.iter().any(|e| {
                e.reason.as_deref() == Some("FailedCreate")
                    && e.type_.as_deref() == Some("Warning")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.starts_with("Failed to create headless service"))
            })
        })
        .await
        .context("a Warning event tells the user why DNS for the group is missing")?;
        let conditions = ns
            .api::<LeaderWorkerSet>()
            .get("clash")
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default();
        assert!(
            conditions.iter().any(|c| c.type_ == "ReplicaFailure"
                && c.reason == "ObjectConflict"
                && c.message.contains("Service clash already exists")),
            "and the LWS says so in a condition: {conditions:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn unique_per_replica_gives_each_group_its_own_headless_service() -> anyhow::Result<()> {
    with_ns("lws-upr", |ns| async move {
        let mut obj = lws("upr", 2, 2, "vllm:1");
        obj["spec"]["networkConfig"] = json!({"subdomainPolicy": "UniquePerReplica"});
        create_available(&ns, &obj).await?;
        let mut services: Vec<_> = ns
            .api::<Service>()
            .list(&ListParams::default())
            .await?
            .items;
        services.sort_by_key(|s| s.metadata.name.clone());
        let names: Vec<_> = services
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        assert_eq!(
            names,
            ["upr-0", "upr-1"],
            "one Service per group and no shared one"
        );
        for (i, svc) in services.iter().enumerate() {
            let spec = svc.spec.clone().expect("spec");
            assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
            let selector = spec.selector.expect("selector");
            assert_eq!(
                selector.get("leaderworkerset.sigs.k8s.io/group-index"),
                Some(&i.to_string())
            );
            // Owned by the LWS, so it outlives a replacement of its leader (docs/lws.md).
            let owner = &svc.metadata.owner_references.clone().expect("owner")[0];
            assert_eq!(
                (owner.kind.as_str(), owner.name.as_str()),
                ("LeaderWorkerSet", "upr")
            );
            let worker = ns.api::<StatefulSet>().get(&format!("upr-{i}")).await?;
            assert_eq!(
                worker.spec.and_then(|s| s.service_name).as_deref(),
                Some(format!("upr-{i}").as_str())
            );
        }
        let leader = ns.api::<StatefulSet>().get("upr").await?;
        let annotations = leader
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.annotations)
            .unwrap_or_default();
        assert_eq!(
            annotations
                .get("leaderworkerset.sigs.k8s.io/subdomainPolicy")
                .map(String::as_str),
            Some("UniquePerReplica")
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn exclusive_topology_keeps_each_groups_workers_in_its_leaders_zone() -> anyhow::Result<()> {
    with_ns("lws-excl", |ns| async move {
        let mut obj = lws("ex", 2, 3, "vllm:1");
        obj["metadata"]["annotations"] = json!({"leaderworkerset.sigs.k8s.io/exclusive-topology": "topology.kubernetes.io/zone"});
        create_available(&ns, &obj).await?;
        let nodes = ns.api_all::<k8s_openapi::api::core::v1::Node>().list(&ListParams::default()).await?;
        let zone_of = |node: &str| {
            nodes.items.iter().find(|n| n.metadata.name.as_deref() == Some(node)).and_then(|n| {
                n.metadata.labels.as_ref().and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
            })
        };
        let pods = pods_of(&ns, "ex").await?;
        for group in 0..2 {
            let zones: std::collections::BTreeSet<_> = pods
                .iter()
                .filter(|p| {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    name == format!("ex-{group}") || name.starts_with(&format!("ex-{group}-"))
                })
                .map(|p| zone_of(p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()))
                .collect();
            assert_eq!(zones.len(), 1, "group {group} spans zones {zones:?}");
            let worker = ns.api::<StatefulSet>().get(&format!("ex-{group}")).await?;
            let selector = worker.spec.and_then(|s| s.template.spec).and_then(|s| s.node_selector).unwrap_or_default();
            assert_eq!(selector.get("topology.kubernetes.io/zone"), zones.iter().next().cloned().flatten().as_ref());
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_container_restart_in_a_worker_recreates_its_group() -> anyhow::Result<()> {
    with_ns("lws-crash", |ns| async move {
        create_available(&ns, &lws("cr", 2, 2, "vllm:1")).await?;
        let before = uids(&ns, "cr").await?;
        // The project's KWOK stage restarts this pod's containers in place (restartCount 1).
        let label = json!({"metadata": {"labels": {"lws-rollout.test/restart-container": "true"}}});
        ns.api::<Pod>()
            .patch("cr-1-1", &PatchParams::default(), &Patch::Merge(&label))
            .await?;
        for pod in ["cr-1", "cr-1-1"] {
            wait_for(
                &ns.api::<Pod>(),
                pod,
                Duration::from_secs(60),
                pod_replaced_and_ready(before[pod].clone()),
            )
            .await?;
        }
        let after = uids(&ns, "cr").await?;
        assert_eq!(before["cr-0"], after["cr-0"]);
        assert_eq!(before["cr-0-1"], after["cr-0-1"]);
        events_when(&ns, Duration::from_secs(30), |events| {
            events.iter().any(|e| {
                e.note.as_deref()
                    == Some("Worker pod cr-1-1 failed, deleted leader pod cr-1 to recreate group 1")
            })
        })
        .await?;
        Ok(())
    })
    .await
}

fn env_of(pod: &Pod) -> Vec<(String, String)> {
    pod.spec.as_ref().map_or_else(Vec::new, |s| {
        s.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    })
}

#[tokio::test]
async fn pod_webhook_labels_pods_and_injects_lws_variables_first() -> anyhow::Result<()> {
    with_ns("lws-webhook", |ns| async move {
        let mut obj = lws("wh", 2, 3, "vllm:1");
        obj["metadata"]["annotations"] = json!({"leaderworkerset.sigs.k8s.io/exclusive-topology": "topology.kubernetes.io/zone"});
        obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["env"] =
            json!([{"name": "USER_VAR", "value": "1"}, {"name": "LWS_GROUP_SIZE", "value": "overridden"}]);
        create_available(&ns, &obj).await?;
        let ns_name = ns.name.clone();
        for pod in pods_of(&ns, "wh").await? {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let (group, worker) = match name.split('-').collect::<Vec<_>>()[..] {
                [_, g] => (g.to_string(), "0".to_string()),
                [_, g, w] => (g.to_string(), w.to_string()),
                _ => anyhow::bail!("unexpected pod {name}"),
            };
            assert_eq!(labels.get("leaderworkerset.sigs.k8s.io/group-index"), Some(&group), "{name}");
            assert_eq!(labels.get("leaderworkerset.sigs.k8s.io/worker-index"), Some(&worker), "{name}");
            assert!(labels.contains_key("leaderworkerset.sigs.k8s.io/group-key"), "{name}");
            assert_eq!(
                env_of(&pod),
                [
                    ("LWS_LEADER_ADDRESS".to_string(), format!("wh-{group}.wh.{ns_name}")),
                    ("LWS_GROUP_SIZE".into(), "3".into()),
                    ("LWS_WORKER_INDEX".into(), worker.clone()),
                    ("USER_VAR".into(), "1".into()),
                ],
                "{name}: LWS variables first, the user's same-named variable replaced"
            );
        }
        // Exclusive placement: the two leaders repel each other, so the groups get different zones.
        let zone_of_leader = |pod: &Pod| pod.metadata.labels.as_ref().and_then(|l| l.get("topology.kubernetes.io/zone").cloned());
        let leaders: Vec<_> = pods_of(&ns, "wh").await?.into_iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.matches('-').count() == 1)).collect();
        let spec_affinity = leaders[0].spec.as_ref().and_then(|s| s.affinity.clone()).expect("affinity on leaders");
        assert!(spec_affinity.pod_anti_affinity.is_some());
        let zones: std::collections::BTreeSet<_> = leaders.iter().map(zone_of_leader).collect();
        assert_eq!(zones.len(), 2, "one zone per group: {zones:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn leader_ready_startup_creates_workers_only_once_the_leader_is_ready() -> anyhow::Result<()>
{
    with_ns("lws-leaderready", |ns| async move {
        use k8s_openapi::api::core::v1::Node;
        // The leader can only run on a node carrying this namespace's label, which no node has yet.
        let key = format!("lws-rollout.test/{}", ns.name);
        let mut obj = lws("lr", 1, 3, "vllm:1");
        obj["spec"]["startupPolicy"] = json!("LeaderReady");
        obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = json!({"spec": {
            "nodeSelector": {key.clone(): "yes"},
            "containers": [{"name": "model", "image": "vllm:1"}]
        }});
        apply(&ns, &obj).await?;
        wait_for(
            &ns.api::<Pod>(),
            "lr-0",
            Duration::from_secs(60),
            |p: Option<&Pod>| {
                p.and_then(|p| p.status.as_ref())
                    .and_then(|s| s.phase.as_deref())
                    == Some("Pending")
            },
        )
        .await?;
        wait_for(
            &ns.api(),
            "lr",
            Duration::from_secs(60),
            |l: Option<&LeaderWorkerSet>| {
                l.and_then(|l| l.status.as_ref())
                    .is_some_and(|s| s.replicas == Some(1) && s.ready_replicas == Some(0))
            },
        )
        .await?;
        assert!(
            ns.api::<StatefulSet>().get_opt("lr-0").await?.is_none(),
            "no workers while the leader is not ready"
        );

        // Give one node the label: the leader schedules, becomes Ready, and only then workers come.
        let nodes = ns.api_all::<Node>();
        let label = |v: serde_json::Value| json!({"metadata": {"labels": {key.clone(): v}}});
        nodes
            .patch(
                "kwok-node-3",
                &PatchParams::default(),
                &Patch::Merge(label(json!("yes"))),
            )
            .await?;
        let result = wait_for(
            &ns.api(),
            "lr",
            Duration::from_secs(90),
            available_with(1, 1),
        )
        .await;
        nodes
            .patch(
                "kwok-node-3",
                &PatchParams::default(),
                &Patch::Merge(label(serde_json::Value::Null)),
            )
            .await?;
        result?;
        assert_eq!(pods_of(&ns, "lr").await?.len(), 3);
        Ok(())
    })
    .await
}
