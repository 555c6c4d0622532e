//! The CRDs accept every example manifest and reject each invalid object with a message a
//! user understands (CEL rules and schema checks, enforced by the real API server).

use anyhow::{Context, anyhow};
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    discovery::ApiResource,
};
use serde_json::{Value, json};

use crate::harness::{TestNs, with_ns, yaml_documents};

/// One admission case: what it is, how it changes the base object, the expected rejection.
type Case = (&'static str, fn(&mut Value), Option<&'static str>);

fn api_for(ns: &TestNs, obj: &Value) -> anyhow::Result<Api<DynamicObject>> {
    let api_version = obj["apiVersion"].as_str().context("apiVersion")?;
    let kind = obj["kind"].as_str().context("kind")?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let lower = kind.to_lowercase();
    // Ingress → ingresses, Rollout → rollouts.
    let plural = if lower.ends_with("ss") {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    Ok(Api::namespaced_with(
        ns.client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    ))
}

async fn create(ns: &TestNs, obj: &Value) -> Result<DynamicObject, kube::Error> {
    let api = api_for(ns, obj).map_err(|e| kube::Error::Service(e.into()))?;
    let obj: DynamicObject =
        serde_json::from_value(obj.clone()).map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &obj).await
}

/// Runs every case; collects all mismatches so one run shows every broken rule.
async fn check_cases(ns: &TestNs, base: &Value, cases: &[Case]) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    for (i, (what, mutate, expected)) in cases.iter().enumerate() {
        let mut obj = base.clone();
        obj["metadata"]["name"] = json!(format!("case-{i}"));
        if obj["kind"] == "Rollout" {
            // One Rollout per workload (the Rollout webhook): each case releases its own.
            obj["spec"]["workloadRef"]["name"] = json!(format!("case-{i}"));
        }
        mutate(&mut obj);
        match (create(ns, &obj).await, expected) {
            (Ok(_), None) => {}
            (Ok(_), Some(msg)) => {
                failures.push(format!("{what}: accepted, expected rejection with {msg:?}"))
            }
            (Err(kube::Error::Api(status)), Some(msg)) if status.message.contains(msg) => {}
            (Err(err), Some(msg)) => failures.push(format!("{what}: expected {msg:?}, got: {err}")),
            (Err(err), None) => failures.push(format!("{what}: expected acceptance, got: {err}")),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "{} case(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        ))
    }
}

fn lws_base() -> Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "base"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}
            }
        }
    })
}

fn ruc(obj: &mut Value, field: &str, v: Value) {
    obj["spec"]["rolloutStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {}});
    obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"][field] = v;
}

#[tokio::test]
async fn every_example_manifest_is_accepted() -> anyhow::Result<()> {
    // A namespace per file: two examples may release the same workload with different
    // strategies (rollout-canary-gateway.yaml and rollout-bluegreen.yaml), and one workload
    // takes one Rollout.
    for file in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))? {
        let path = file?.path();
        let rel = format!(
            "examples/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        with_ns("examples", |ns| async move {
            for doc in yaml_documents(&rel)? {
                create(&ns, &doc)
                    .await
                    .with_context(|| format!("{rel}: {}", doc["metadata"]["name"]))?;
            }
            Ok(())
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn leaderworkerset_defaults_match_upstream() -> anyhow::Result<()> {
    with_ns("lws-defaults", |ns| async move {
        let mut obj = lws_base();
        obj["spec"] = json!({"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}]}]}}}});
        let created = create(&ns, &obj).await?;
        let spec = &created.data["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["startupPolicy"], "LeaderCreated");
        assert_eq!(spec["networkConfig"], json!({"subdomainPolicy": "Shared"}));
        assert_eq!(
            spec["rolloutStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"partition": 0, "maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(spec["leaderWorkerTemplate"]["size"], 1);
        assert_eq!(spec["leaderWorkerTemplate"]["restartPolicy"], "RecreateGroupOnPodRestart");
        assert_eq!(spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn leaderworkerset_invalid_objects_are_rejected_with_clear_messages() -> anyhow::Result<()> {
    with_ns("lws-invalid", |ns| async move {
        let cases: &[Case] = &[
            ("valid base", |_| {}, None),
            (
                "size 0",
                |o| o["spec"]["leaderWorkerTemplate"]["size"] = json!(0),
                Some("size must be equal or greater than 1"),
            ),
            (
                "replicas -1",
                |o| o["spec"]["replicas"] = json!(-1),
                Some("replicas must be equal or greater than 0"),
            ),
            (
                "replicas above a million (v0.10)",
                |o| o["spec"]["replicas"] = json!(1_000_001),
                Some("replicas must be equal or less than 1000000"),
            ),
            (
                "maxUnavailable 0 and maxSurge 0",
                |o| {
                    ruc(o, "maxUnavailable", json!(0));
                    o["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] =
                        json!(0);
                },
                Some("maxUnavailable must not be 0 when maxSurge is 0"),
            ),
            (
                "10% of 2 replicas rounds down to 0",
                |o| ruc(o, "maxUnavailable", json!("10%")),
                Some("maxUnavailable must not be 0 when maxSurge is 0"),
            ),
            (
                "both 0 with replicas 0 is fine",
                |o| {
                    o["spec"]["replicas"] = json!(0);
                    ruc(o, "maxUnavailable", json!(0));
                },
                None,
            ),
            (
                "maxSurge 1% of 2 rounds up to 1",
                |o| {
                    ruc(o, "maxUnavailable", json!(0));
                    o["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] =
                        json!("1%");
                },
                None,
            ),
            (
                "maxSurge 150%",
                |o| ruc(o, "maxSurge", json!("150%")),
                Some("maxSurge must be an integer >= 0 or a percentage"),
            ),
            (
                "maxUnavailable not a percentage",
                |o| ruc(o, "maxUnavailable", json!("abc")),
                Some("maxUnavailable must be an integer >= 0 or a percentage"),
            ),
            (
                "maxUnavailable -1",
                |o| ruc(o, "maxUnavailable", json!(-1)),
                Some("maxUnavailable must be an integer >= 0"),
            ),
            (
                "partition -1",
                |o| ruc(o, "partition", json!(-1)),
                Some("partition must be greater than or equal to 0"),
            ),
            (
                "partition above replicas is allowed",
                |o| ruc(o, "partition", json!(10)),
                None,
            ),
            (
                "subGroupSize divides neither size nor size-1",
                |o| {
                    o["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = json!({"subGroupSize": 5})
                },
                Some("size or size - 1 must be divisible by subGroupSize"),
            ),
            (
                "subGroupSize 0",
                |o| {
                    o["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = json!({"subGroupSize": 0})
                },
                Some("subGroupSize must be equal or greater than 1"),
            ),
            (
                "subGroupSize larger than size",
                |o| {
                    o["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = json!({"subGroupSize": 8})
                },
                Some("subGroupSize cannot be larger than size"),
            ),
            (
                "subGroupSize 3 divides size-1",
                |o| {
                    o["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = json!({"subGroupSize": 3})
                },
                None,
            ),
            (
                "LeaderExcluded needs size-1 divisible",
                |o| {
                    o["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] =
                        json!({"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"})
                },
                Some("size-1 must be divisible by subGroupSize when using LeaderExcluded"),
            ),
            (
                "name not a DNS-1035 label",
                |o| o["metadata"]["name"] = json!("1-starts-with-digit"),
                Some("must be a DNS-1035 label"),
            ),
            (
                "replicas x size overflows int32",
                |o| {
                    o["spec"]["replicas"] = json!(1_000_000);
                    o["spec"]["leaderWorkerTemplate"]["size"] = json!(3000);
                },
                Some("must not exceed 2147483647"),
            ),
            (
                "unknown restartPolicy",
                |o| o["spec"]["leaderWorkerTemplate"]["restartPolicy"] = json!("Always"),
                Some("Unsupported value: \"Always\""),
            ),
            (
                "unknown subdomainPolicy",
                |o| o["spec"]["networkConfig"] = json!({"subdomainPolicy": "Everywhere"}),
                Some("Unsupported value: \"Everywhere\""),
            ),
            (
                "missing workerTemplate",
                |o| {
                    o["spec"]["leaderWorkerTemplate"]
                        .as_object_mut()
                        .map(|m| m.remove("workerTemplate"));
                },
                Some("workerTemplate: Required value"),
            ),
        ];
        check_cases(&ns, &lws_base(), cases).await
    })
    .await
}

#[tokio::test]
async fn leaderworkerset_subgroup_policy_is_immutable_once_set() -> anyhow::Result<()> {
    with_ns("lws-immutable", |ns| async move {
        let pp = PatchParams::default();
        let mut without = lws_base();
        without["metadata"]["name"] = json!("without");
        let mut with = lws_base();
        with["metadata"]["name"] = json!("with");
        with["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = json!({"subGroupSize": 2});
        create(&ns, &without).await?;
        create(&ns, &with).await?;
        let api = api_for(&ns, &with)?;

        let cases = [
            (
                "without",
                json!({"spec": {"leaderWorkerTemplate": {"subGroupPolicy": {"subGroupSize": 2}}}}),
                "cannot enable subGroupSize after the lws is already created",
            ),
            (
                "with",
                json!({"spec": {"leaderWorkerTemplate": {"subGroupPolicy": null}}}),
                "cannot remove subGroupSize after enabled",
            ),
            (
                "with",
                json!({"spec": {"leaderWorkerTemplate": {"subGroupPolicy": {"subGroupSize": 4}}}}),
                "subGroupSize is immutable",
            ),
        ];
        for (name, patch, expected) in cases {
            match api.patch(name, &pp, &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(status)) if status.message.contains(expected) => {}
                other => anyhow::bail!(
                    "patching {name} with {patch}: expected {expected:?}, got {other:?}"
                ),
            }
        }
        // Everything else about the group stays mutable, as upstream: size, replicas, templates.
        api.patch(
            "with",
            &pp,
            &Patch::Merge(&json!({"spec": {"replicas": 5, "leaderWorkerTemplate": {"size": 6}}})),
        )
        .await?;
        Ok(())
    })
    .await
}

fn rollout_base() -> Value {
    json!({
        "apiVersion": "rollouts.kruise.io/v1beta1",
        "kind": "Rollout",
        "metadata": {"name": "base"},
        "spec": {
            "workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm"},
            "strategy": {"canary": {
                "enableExtraWorkloadForCanary": true,
                "steps": [{"replicas": 1, "traffic": "10%"}, {"replicas": "100%"}],
                "trafficRoutings": [{"service": "vllm", "gateway": {"httpRouteName": "vllm"}}]
            }}
        }
    })
}

#[tokio::test]
async fn rollout_invalid_objects_are_rejected_with_clear_messages() -> anyhow::Result<()> {
    with_ns("rollout-invalid", |ns| async move {
        let cases: &[Case] = &[
            ("valid base", |_| {}, None),
            (
                "canary and blueGreen",
                |o| o["spec"]["strategy"]["blueGreen"] = json!({"steps": [{"replicas": 1}]}),
                Some("exactly one of strategy.canary and strategy.blueGreen must be set"),
            ),
            (
                "neither",
                |o| o["spec"]["strategy"] = json!({"paused": true}),
                Some("exactly one of strategy.canary and strategy.blueGreen must be set"),
            ),
            (
                "51 steps",
                |o| {
                    o["spec"]["strategy"]["canary"]["steps"] =
                        json!(vec![json!({"replicas": 1}); 51])
                },
                Some("steps: Too many: 51: must have at most 50 items"),
            ),
            (
                "no steps",
                |o| o["spec"]["strategy"]["canary"]["steps"] = json!([]),
                Some("canary.steps must have at least one step"),
            ),
            (
                "traffic 101%",
                |o| o["spec"]["strategy"]["canary"]["steps"][0]["traffic"] = json!("101%"),
                Some("traffic must be a percentage from 0% to 100%"),
            ),
            (
                "traffic not a percentage",
                |o| o["spec"]["strategy"]["canary"]["steps"][0]["traffic"] = json!("ten"),
                Some("traffic must be a percentage from 0% to 100%"),
            ),
            (
                "canary traffic 0%",
                |o| o["spec"]["strategy"]["canary"]["steps"][0]["traffic"] = json!("0%"),
                Some("canary step traffic must be greater than 0%"),
            ),
            (
                // Blue-green may send 0% (Kruise); schema and webhook both let it through.
                "blue-green traffic 0%",
                |o| {
                    let mut c = o["spec"]["strategy"]["canary"].take();
                    c.as_object_mut()
                        .map(|m| m.remove("enableExtraWorkloadForCanary"));
                    o["spec"]["strategy"] = json!({"blueGreen": c});
                    o["spec"]["strategy"]["blueGreen"]["steps"][0]["traffic"] = json!("0%");
                },
                None,
            ),
            (
                // A canary field under blueGreen is known to the schema so that the webhook
                // refuses it by name rather than the API server pruning it silently.
                "a canary field under blueGreen",
                |o| {
                    let c = o["spec"]["strategy"]["canary"].take();
                    o["spec"]["strategy"] = json!({"blueGreen": c});
                },
                Some(
                    "spec.strategy.blueGreen.enableExtraWorkloadForCanary: a canary field: a \
                     blue-green release always runs the new template in a second LeaderWorkerSet",
                ),
            ),
            (
                "replicas 0",
                |o| o["spec"]["strategy"]["canary"]["steps"][0]["replicas"] = json!(0),
                Some("replicas must be an integer greater than 0 or a percentage from 1% to 100%"),
            ),
            (
                "replicas 150%",
                |o| o["spec"]["strategy"]["canary"]["steps"][0]["replicas"] = json!("150%"),
                Some("replicas must be an integer greater than 0 or a percentage from 1% to 100%"),
            ),
            (
                "negative pause",
                |o| o["spec"]["strategy"]["canary"]["steps"][0]["pause"] = json!({"duration": -5}),
                Some("pause.duration must not be negative"),
            ),
            (
                "two traffic routings",
                |o| {
                    let r = o["spec"]["strategy"]["canary"]["trafficRoutings"][0].clone();
                    o["spec"]["strategy"]["canary"]["trafficRoutings"] = json!([r.clone(), r]);
                },
                Some("trafficRoutings: Too many: 2: must have at most 1 item"),
            ),
            (
                "routing without a provider",
                |o| {
                    o["spec"]["strategy"]["canary"]["trafficRoutings"] =
                        json!([{"service": "vllm"}])
                },
                Some("needs one of ingress, gateway or customNetworkRefs"),
            ),
            (
                "negative grace period",
                |o| {
                    o["spec"]["strategy"]["canary"]["trafficRoutings"][0]["gracePeriodSeconds"] =
                        json!(-1)
                },
                Some("gracePeriodSeconds must not be negative"),
            ),
            (
                "decreasing int replicas",
                |o| {
                    o["spec"]["strategy"]["canary"]["steps"] =
                        json!([{"replicas": 2}, {"replicas": 1}])
                },
                Some("steps[].replicas must not decrease from one step to the next"),
            ),
            (
                "decreasing percent replicas",
                |o| {
                    o["spec"]["strategy"]["canary"]["steps"] =
                        json!([{"replicas": "50%"}, {"replicas": "5%"}, {"replicas": "100%"}])
                },
                Some("steps[].replicas must not decrease from one step to the next"),
            ),
            (
                "int then percent is not compared (as upstream)",
                |o| {
                    o["spec"]["strategy"]["canary"]["steps"] =
                        json!([{"replicas": 3}, {"replicas": "10%"}, {"replicas": "100%"}])
                },
                None,
            ),
            (
                "decreasing blue-green replicas",
                |o| {
                    o["spec"]["strategy"] =
                        json!({"blueGreen": {"steps": [{"replicas": "100%"}, {"replicas": "50%"}]}})
                },
                Some("steps[].replicas must not decrease from one step to the next"),
            ),
            (
                "a Deployment workload",
                |o| {
                    o["spec"]["workloadRef"] =
                        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
                },
                Some("workloadRef must be a leaderworkerset.x-k8s.io/v1 LeaderWorkerSet"),
            ),
            (
                "missing workloadRef name",
                |o| {
                    o["spec"]["workloadRef"]
                        .as_object_mut()
                        .map(|m| m.remove("name"));
                },
                Some("name: Required value"),
            ),
        ];
        check_cases(&ns, &rollout_base(), cases).await
    })
    .await
}

#[tokio::test]
async fn rollout_defaults_grace_period_and_ingress_class() -> anyhow::Result<()> {
    with_ns("rollout-defaults", |ns| async move {
        let mut obj = rollout_base();
        obj["spec"]["strategy"]["canary"]["trafficRoutings"] =
            json!([{"service": "vllm", "ingress": {"name": "vllm"}}]);
        let created = create(&ns, &obj).await?;
        let routing = &created.data["spec"]["strategy"]["canary"]["trafficRoutings"][0];
        assert_eq!(routing["gracePeriodSeconds"], 3);
        assert_eq!(routing["ingress"]["classType"], "nginx");
        assert_eq!(created.data["spec"]["disabled"], false);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn batchrelease_invalid_objects_are_rejected() -> anyhow::Result<()> {
    with_ns("br-invalid", |ns| async move {
        let base = yaml_documents("examples/batchrelease.yaml")?.remove(0);
        let cases: &[Case] = &[
            ("valid example", |_| {}, None),
            (
                "negative batchPartition",
                |o| o["spec"]["releasePlan"]["batchPartition"] = json!(-1),
                Some("batchPartition must not be negative"),
            ),
            (
                "unknown rollingStyle",
                |o| o["spec"]["releasePlan"]["rollingStyle"] = json!("Sideways"),
                Some("Unsupported value: \"Sideways\""),
            ),
        ];
        check_cases(&ns, &base, cases).await
    })
    .await
}
