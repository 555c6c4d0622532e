//! Test objects for the CLI's unit tests.

use serde_json::json;

use crate::api::{LeaderWorkerSet, Rollout};

/// A 3-step canary Rollout of LWS `vllm`: 1 group at 20% traffic with approval, 50% at 50%
/// for 60 s, then 100%. `status` is merged in as given.
pub fn rollout(status: serde_json::Value) -> Rollout {
    serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1",
        "kind": "Rollout",
        "metadata": {"name": "vllm", "namespace": "demo", "generation": 1},
        "spec": {
            "workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm"},
            "strategy": {"canary": {
                "enableExtraWorkloadForCanary": true,
                "steps": [
                    {"replicas": 1, "traffic": "20%", "pause": {}},
                    {"replicas": "50%", "traffic": "50%", "pause": {"duration": 60}},
                    {"replicas": "100%", "traffic": "100%"}
                ],
                "trafficRoutings": [{"service": "vllm", "gateway": {"httpRouteName": "vllm"}}]
            }}
        },
        "status": status
    }))
    .expect("a valid Rollout")
}

/// A status in a step and state, phase Progressing, observed generation 1.
pub fn progressing(step: i32, state: &str, ready: i32) -> serde_json::Value {
    json!({
        "observedGeneration": 1,
        "phase": "Progressing",
        "currentStepIndex": step,
        "currentStepState": state,
        "message": format!("Rollout is in step({step}/3)"),
        "canaryStatus": {
            "currentStepIndex": step, "currentStepState": state, "nextStepIndex": step + 1,
            "podTemplateHash": "", "finalisingStep": "", "canaryRevision": "abc",
            "canaryReplicas": ready, "canaryReadyReplicas": ready
        }
    })
}

/// LWS `vllm` with `replicas` groups, all ready, and the hold when `held` is set.
pub fn lws(replicas: i32, held: Option<&str>) -> LeaderWorkerSet {
    let mut annotations = serde_json::Map::new();
    if let Some(h) = held {
        annotations.insert("rollouts.kruise.io/stable-revision".into(), json!(h));
    }
    serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "demo", "resourceVersion": "42", "annotations": annotations},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "new"}]}}}},
        "status": {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas}
    }))
    .expect("a valid LWS")
}
