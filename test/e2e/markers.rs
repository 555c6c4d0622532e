//! Server-side apply merges lists inside LWS pod templates by key, as it does for built-in
//! pod templates, and the marker table behind that matches the running API server.

use kube::api::{Patch, PatchParams};
use lws_rollout::api::{LeaderWorkerSet, markers, schema};
use serde_json::json;

use crate::harness::{client, with_ns};

#[tokio::test]
async fn list_marker_table_matches_the_live_api_server() -> anyhow::Result<()> {
    let client = client().await?;
    let req = http::Request::get("/openapi/v3/api/v1").body(Vec::new())?;
    let doc: serde_json::Value = client.request(req).await?;
    let live = markers::extract(
        &doc,
        &[schema::POD_TEMPLATE_SPEC, schema::PERSISTENT_VOLUME_CLAIM],
    );
    assert!(
        live == *schema::LIST_MARKERS,
        "src/api/k8s_list_markers.json is stale for this Kubernetes version: regenerate it with \
         `kubectl get --raw /openapi/v3/api/v1 > /tmp/v1.json && cargo run --bin crdgen -- list-markers /tmp/v1.json > src/api/k8s_list_markers.json`"
    );
    Ok(())
}

#[tokio::test]
async fn two_field_managers_merge_containers_env_and_ports_by_key() -> anyhow::Result<()> {
    with_ns("ssa", |ns| async move {
        let api = ns.api::<LeaderWorkerSet>();
        // The user's GitOps tool owns the main container.
        let user = json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "ssa"},
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
                "containers": [{"name": "server", "image": "vllm:1",
                                 "env": [{"name": "A", "value": "1"}],
                                 "ports": [{"containerPort": 8080}]}],
                "volumes": [{"name": "shm", "emptyDir": {}}]
            }}}}
        });
        api.patch("ssa", &PatchParams::apply("gitops"), &Patch::Apply(&user)).await?;
        // A second manager (say, a sidecar injector) adds a container, an env var, a port, a volume.
        let injector = json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "ssa"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {
                "containers": [
                    {"name": "server", "env": [{"name": "B", "value": "2"}], "ports": [{"containerPort": 9090}]},
                    {"name": "metrics", "image": "exporter:1"}
                ],
                "volumes": [{"name": "cache", "emptyDir": {}}]
            }}}}
        });
        api.patch("ssa", &PatchParams::apply("injector"), &Patch::Apply(&injector)).await?;

        let lws = api.get("ssa").await?;
        let spec = serde_json::to_value(&lws.spec.leader_worker_template.worker_template.spec)?;
        let names: Vec<_> = spec["containers"].as_array().unwrap().iter().map(|c| c["name"].clone()).collect();
        assert_eq!(names, [json!("server"), json!("metrics")], "containers merge by name");
        let server = &spec["containers"][0];
        assert_eq!(server["image"], "vllm:1", "the user's image survives the injector's apply");
        let env: Vec<_> = server["env"].as_array().unwrap().iter().map(|e| e["name"].clone()).collect();
        assert_eq!(env, [json!("A"), json!("B")], "env merges by name");
        let ports: Vec<_> = server["ports"].as_array().unwrap().iter().map(|p| p["containerPort"].clone()).collect();
        assert_eq!(ports, [json!(8080), json!(9090)], "ports merge by containerPort+protocol");
        assert_eq!(spec["volumes"].as_array().unwrap().len(), 2, "volumes merge by name");
        Ok(())
    })
    .await
}
