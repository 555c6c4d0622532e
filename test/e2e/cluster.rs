//! The local control plane is the real thing: the StatefulSet controller creates pods, the
//! scheduler places them on KWOK nodes, and KWOK marks them Running and Ready.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::harness::{wait_for, with_ns};

#[tokio::test]
async fn statefulset_of_three_gets_three_ready_pods_on_kwok_nodes() -> anyhow::Result<()> {
    with_ns("sts", |ns| async move {
        let sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
                }
            }
        }))?;
        let api = ns.api::<StatefulSet>();
        api.create(&PostParams::default(), &sts).await?;
        wait_for(
            &api,
            "web",
            Duration::from_secs(90),
            |s: Option<&StatefulSet>| {
                s.and_then(|s| s.status.as_ref())
                    .and_then(|st| st.ready_replicas)
                    == Some(3)
            },
        )
        .await?;

        let pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels("app=web"))
            .await?;
        let mut names: Vec<_> = pods
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["web-0", "web-1", "web-2"],
            "the StatefulSet controller names pods by ordinal"
        );
        for pod in &pods.items {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            assert!(
                node.starts_with("kwok-node-"),
                "pod scheduled on a KWOK node, got {node:?}"
            );
            let status = pod.status.as_ref().expect("pod status");
            assert_eq!(status.phase.as_deref(), Some("Running"));
            assert!(status.pod_ip.is_some(), "KWOK assigns a pod IP");
        }
        Ok(())
    })
    .await
}

fn ready_conditions(pod: Option<&Pod>) -> (String, String) {
    let status_of = |type_: &str| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_))
            .map(|c| c.status.clone())
            .unwrap_or_default()
    };
    (status_of("Ready"), status_of("ContainersReady"))
}

/// After an outage the node lifecycle controller marks every pod `Ready=False` (its Ready
/// condition only); a kubelet sets it back once its node reports again, and so does our KWOK
/// stage `pod-ready-again` (test/cluster/stages/). A pod unready as a whole is left alone.
#[tokio::test]
async fn a_pod_marked_unready_by_an_outage_is_made_ready_again() -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    with_ns("ready-again", |ns| async move {
        let api = ns.api::<Pod>();
        for name in ["marked", "unready"] {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            }))?;
            api.create(&PostParams::default(), &pod).await?;
            wait_for(&api, name, Duration::from_secs(60), |p: Option<&Pod>| {
                ready_conditions(p) == ("True".into(), "True".into())
            })
            .await?;
        }
        let unready = |types: &[&str]| {
            let conditions: Vec<_> = types
                .iter()
                .map(|t| json!({"type": t, "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
                .collect();
            Patch::Strategic(json!({"status": {"conditions": conditions}}))
        };
        api.patch_status(
            "unready",
            &PatchParams::default(),
            &unready(&["Ready", "ContainersReady"]),
        )
        .await?;
        // What the node lifecycle controller writes: Ready only.
        api.patch_status("marked", &PatchParams::default(), &unready(&["Ready"]))
            .await?;
        wait_for(&api, "marked", Duration::from_secs(30), |p: Option<&Pod>| {
            ready_conditions(p).0 == "True"
        })
        .await?;
        // KWOK saw "unready"'s change before "marked"'s, which it has acted on: "unready" is
        // still as written.
        assert_eq!(
            ready_conditions(api.get_opt("unready").await?.as_ref()),
            ("False".into(), "False".into())
        );
        Ok(())
    })
    .await
}
