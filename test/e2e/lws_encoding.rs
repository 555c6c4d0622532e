//! Specs whose text the API server stores as it is but that are easy to mangle on the way to a
//! StatefulSet: characters a YAML reader refuses (our apply bodies are read as YAML) and
//! quantities whose Go canonical form decides the revision key.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, PostParams},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::{Value, json};

use crate::{
    harness::{TestNs, wait_for, with_ns},
    lws_support::{REVISION, available_with},
    upstream_reference::upstream_keys,
};

/// Creates an LWS the way `kubectl create` does: a JSON POST, which reads every character.
async fn create(ns: &TestNs, obj: &Value) -> anyhow::Result<()> {
    let lws: LeaderWorkerSet = serde_json::from_value(obj.clone())?;
    ns.api::<LeaderWorkerSet>()
        .create(&PostParams::default(), &lws)
        .await
        .with_context(|| format!("creating {}", obj["metadata"]["name"]))?;
    Ok(())
}

/// DEL, C1 controls (U+0085 is a YAML line break), U+2028/U+2029, BOM and the non-characters
/// U+FFFE/U+FFFF.
const AWKWARD: &[(&str, &str)] = &[
    ("DEL", "a\u{7f}b"),
    ("C1", "a\u{80}b\u{9f}c"),
    ("NEL", "a\u{85}b"),
    ("LS", "a\u{2028}b"),
    ("PS", "a\u{2029}b"),
    ("BOM", "\u{feff}x"),
    ("NONCHAR", "a\u{fffe}b\u{ffff}c"),
];

fn awkward_template(image: &str) -> Value {
    let env: Vec<Value> = AWKWARD
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let annotations: serde_json::Map<String, Value> = AWKWARD
        .iter()
        .map(|(name, value)| (format!("example.com/{}", name.to_lowercase()), json!(value)))
        .collect();
    json!({
        "metadata": {"annotations": annotations, "labels": {"app": "awkward"}},
        "spec": {"containers": [{"name": "model", "image": image, "env": env}]}
    })
}

fn env_of(sts: &StatefulSet) -> Vec<(String, String)> {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| &p.containers[0])
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn characters_yaml_cannot_read_reach_the_statefulsets_unchanged() -> anyhow::Result<()> {
    with_ns("lws-chars", |ns| async move {
        let obj = json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "chars", "annotations": {"example.com/note": "x\u{2028}\u{85}\u{7f}"}},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": awkward_template("leader:1"),
                "workerTemplate": awkward_template("worker:1")}}
        });
        create(&ns, &obj).await?;
        wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "chars",
            Duration::from_secs(120),
            available_with(2, 2),
        )
        .await?;

        let want: Vec<(String, String)> = AWKWARD
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let sts = ns.api::<StatefulSet>();
        // The leader StatefulSet is server-side applied; the worker ones are created.
        for name in ["chars", "chars-0", "chars-1"] {
            let s = sts.get(name).await?;
            assert_eq!(env_of(&s), want, "env of StatefulSet {name}");
            let annotations = s
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.annotations.clone())
                .unwrap_or_default();
            for (key, value) in AWKWARD {
                let key = format!("example.com/{}", key.to_lowercase());
                assert_eq!(
                    annotations.get(&key).map(String::as_str),
                    Some(*value),
                    "{name}: {key}"
                );
            }
        }
        Ok(())
    })
    .await
}

/// One LWS per class of quantity, each a StatefulSet accepts: limits only (requests default to
/// them), no negative values, and extended resources (which must be whole numbers whose
/// thousandths fit in 64 bits) only below 2^53.
fn quantity_classes() -> Vec<(&'static str, Value)> {
    vec![
        (
            "leading-zeros",
            json!({"cpu": "01", "memory": "01Pi", "ephemeral-storage": "001Ki", "example.com/a": "00"}),
        ),
        (
            "plus-binary",
            json!({"memory": "+1Pi", "ephemeral-storage": "+2Ei", "example.com/a": "+123456789Mi",
                   "example.com/b": "+1Ki", "cpu": "+1G"}),
        ),
        ("plus-binary-large", json!({"memory": "+123456789012Ki"})),
        (
            "at-or-above-2-63",
            json!({"memory": "8Ei", "ephemeral-storage": "9Ei", "cpu": "7Ei"}),
        ),
        (
            "far-above-2-63",
            json!({"memory": "16Ei", "ephemeral-storage": "8192Pi"}),
        ),
        (
            "int64-boundary",
            json!({"memory": "9223372036854775807", "ephemeral-storage": "9223372036854775808",
                   "cpu": "1234567890123456789"}),
        ),
        (
            "beyond-64-bits",
            json!({"memory": "123456789012345678901234567890123456789012",
                   "ephemeral-storage": "1234567890123456789000"}),
        ),
        (
            "agreeing",
            json!({"cpu": "1E3", "memory": "1.5Gi", "example.com/a": "1024Ti"}),
        ),
        ("fraction", json!({"cpu": "0.1", "memory": "1.5Gi"})),
        ("exponents", json!({"cpu": "1e3", "memory": "1e+21"})),
        (
            "exponents-large",
            json!({"cpu": "12e17", "memory": "1000E"}),
        ),
        ("tiny", json!({"cpu": "0.0000000001", "memory": "1.1Ki"})),
        (
            "kept-verbatim",
            json!({"cpu": "1.", "memory": "1.G", "example.com/a": "1.234k"}),
        ),
    ]
}

#[tokio::test]
async fn every_quantity_class_gets_upstreams_revision_key() -> anyhow::Result<()> {
    with_ns("lws-quantity", |ns| async move {
        let objects: Vec<Value> = quantity_classes()
            .into_iter()
            .map(|(name, limits)| {
                json!({
                    "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                    "metadata": {"name": format!("q-{name}"), "namespace": ns.name},
                    "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 1,
                        "workerTemplate": {"spec": {"containers": [{"name": "model",
                            "image": "model:1", "resources": {"limits": limits}}]}}}}
                })
            })
            .collect();
        for obj in &objects {
            create(&ns, obj).await?;
        }
        // Upstream's key for what the API server stores (defaults included), read back as raw
        // JSON rather than through our types.
        let raw = Api::<DynamicObject>::namespaced_with(
            ns.client.clone(),
            &ns.name,
            &ApiResource::erase::<LeaderWorkerSet>(&()),
        );
        let mut stored = Vec::new();
        for obj in &objects {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            stored.push(serde_json::to_value(raw.get(name).await?)?);
        }
        let keys = upstream_keys(&stored)?;
        let sts = ns.api::<StatefulSet>();
        let mut mismatches = Vec::new();
        for (obj, key) in objects.iter().zip(&keys) {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let leader = wait_for(
                &sts,
                name,
                Duration::from_secs(60),
                |s: Option<&StatefulSet>| {
                    s.is_some_and(|s| {
                        s.metadata
                            .labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key(REVISION))
                    })
                },
            )
            .await
            .with_context(|| format!("leader StatefulSet of {name}"))?
            .context("leader StatefulSet")?;
            let ours = &leader.metadata.labels.as_ref().context("labels")?[REVISION];
            if ours != key {
                mismatches.push(format!("{name}: ours {ours}, upstream {key}"));
            }
        }
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
        Ok(())
    })
    .await
}
