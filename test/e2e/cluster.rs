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
