//! What upstream LWS v0.10.0 changed, on the shared cluster: the LWS's own labels and
//! annotations on the StatefulSets it makes (#896, without replacing a pod), `replicas` bounded
//! to 0..=1,000,000 (#913, also through `/scale`), the subgroup policy on worker pods (#945) and
//! subgroups of one pod each, TPU variables included (#918).

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Pod};
use kube::api::{Patch, PatchParams, PostParams};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{wait_for, wait_for_all, with_ns},
    lws_support::{
        NAME, apply, available_with, create_available, lws, lws_revisions, settled_pods, uids,
    },
};

const SUBGROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/subgroup-index";
const SUBGROUP_POLICY_TYPE: &str = "leaderworkerset.sigs.k8s.io/subgroup-policy-type";

fn label<'a>(sts: &'a StatefulSet, key: &str) -> Option<&'a str> {
    sts.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(sts: &'a StatefulSet, key: &str) -> Option<&'a str> {
    sts.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// v0.10 (#896): an LWS's labels and annotations are on its leader StatefulSet and on every
/// worker StatefulSet (not on its pods); a label changed later reaches the leader StatefulSet
/// and the worker StatefulSets made after it, and replaces no pod and makes no revision.
#[tokio::test]
async fn the_lws_metadata_reaches_its_statefulsets_and_replaces_no_pod() -> anyhow::Result<()> {
    with_ns("lws-v10-meta", |ns| async move {
        let mut obj = lws("meta", 2, 2, "vllm:1");
        obj["metadata"]["labels"] = json!({"team": "a"});
        obj["metadata"]["annotations"] = json!({"example.com/owner": "inference"});
        create_available(&ns, &obj).await?;
        let sts = ns.api::<StatefulSet>();
        for name in ["meta", "meta-0", "meta-1"] {
            let s = sts.get(name).await?;
            assert_eq!(label(&s, "team"), Some("a"), "{name}");
            assert_eq!(
                annotation(&s, "example.com/owner"),
                Some("inference"),
                "{name}"
            );
            assert_eq!(label(&s, NAME), Some("meta"), "{name}: ours stay");
        }
        assert_eq!(
            annotation(
                &sts.get("meta").await?,
                "leaderworkerset.sigs.k8s.io/replicas"
            ),
            Some("2")
        );
        let pods = settled_pods(&ns, "meta", 4).await?;
        assert!(
            pods.iter().all(|p| p
                .metadata
                .labels
                .as_ref()
                .is_none_or(|l| !l.contains_key("team"))),
            "the LWS's labels stay off the pods"
        );
        let before = uids(&ns, "meta").await?;
        let revisions = lws_revisions(&ns).await?;

        obj["metadata"]["labels"] = json!({"team": "b", "tier": "gold"});
        apply(&ns, &obj).await?;
        wait_for(
            &sts,
            "meta",
            Duration::from_secs(30),
            |s: Option<&StatefulSet>| {
                s.is_some_and(|s| label(s, "team") == Some("b") && label(s, "tier") == Some("gold"))
            },
        )
        .await?;
        // A group made after the change gets the new labels on its worker StatefulSet.
        obj["spec"]["replicas"] = json!(3);
        apply(&ns, &obj).await?;
        wait_for(
            &ns.api(),
            "meta",
            Duration::from_secs(90),
            available_with(3, 3),
        )
        .await?;
        let third = sts.get("meta-2").await?;
        assert_eq!(label(&third, "team"), Some("b"));
        assert_eq!(label(&third, "tier"), Some("gold"));

        let after = uids(&ns, "meta").await?;
        for (pod, uid) in &before {
            assert_eq!(after.get(pod), Some(uid), "{pod} was replaced");
        }
        assert_eq!(lws_revisions(&ns).await?, revisions, "no new revision");
        Ok(())
    })
    .await
}

/// v0.10 (#913): `replicas` is at most 1,000,000 — on create and through the scale
/// subresource (which an HPA uses), where the LWS keeps its replicas.
#[tokio::test]
async fn replicas_above_a_million_are_refused_also_through_scale() -> anyhow::Result<()> {
    with_ns("lws-v10-bounds", |ns| async move {
        let api = ns.api::<LeaderWorkerSet>();
        let mut at_bound: LeaderWorkerSet =
            serde_json::from_value(lws("bound", 1_000_000, 1, "vllm:1"))?;
        at_bound.metadata.namespace = Some(ns.name.clone());
        // A dry run: admitted with every check the API server makes, nothing stored.
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        api.create(&dry, &at_bound)
            .await
            .context("1,000,000 replicas is within the bound")?;
        at_bound.spec.replicas = Some(1_000_001);
        match api.create(&dry, &at_bound).await {
            Err(kube::Error::Api(s)) => assert!(
                s.message
                    .contains("replicas must be equal or less than 1000000"),
                "{}",
                s.message
            ),
            other => anyhow::bail!("1,000,001 replicas: expected a refusal, got {other:?}"),
        }

        create_available(&ns, &lws("scaled", 1, 1, "vllm:1")).await?;
        match api
            .patch_scale(
                "scaled",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 1_000_001}})),
            )
            .await
        {
            Err(kube::Error::Api(s)) => assert!(s.message.contains("1000000"), "{}", s.message),
            other => anyhow::bail!("/scale to 1,000,001: expected a refusal, got {other:?}"),
        }
        assert_eq!(api.get("scaled").await?.spec.replicas, Some(1));
        Ok(())
    })
    .await
}

fn env(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// v0.10 (#918, #945): with subgroups of one pod, every pod is a subgroup of its own (v0.9 put
/// worker 1 with the leader) and a TPU worker of a leader without TPUs lists only itself, as
/// TPU worker 0; worker pods carry the subgroup policy type as the leader does.
#[tokio::test]
async fn subgroups_of_one_pod_each_and_the_policy_on_workers() -> anyhow::Result<()> {
    with_ns("lws-v10-subgroup", |ns| async move {
        let tpu = json!({"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}});
        let mut obj = lws("one", 1, 3, "vllm:1");
        let template = &mut obj["spec"]["leaderWorkerTemplate"];
        template["subGroupPolicy"] = json!({"subGroupSize": 1});
        template["leaderTemplate"] =
            json!({"spec": {"containers": [{"name": "model", "image": "vllm:1"}]}});
        template["workerTemplate"]["spec"]["containers"][0]["resources"] = tpu;
        let mut excluded = lws("excluded", 1, 3, "vllm:1");
        excluded["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] =
            json!({"subGroupSize": 2, "subGroupPolicyType": "LeaderExcluded"});
        create_available(&ns, &obj).await?;
        create_available(&ns, &excluded).await?;

        let pods = settled_pods(&ns, "one", 3).await?;
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            let worker: usize = name.strip_prefix("one-0-").map_or(Ok(0), str::parse)?;
            assert_eq!(
                labels.get(SUBGROUP_INDEX).map(String::as_str),
                Some(worker.to_string().as_str()),
                "{name}"
            );
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations.get(SUBGROUP_POLICY_TYPE).map(String::as_str),
                Some("LeaderWorker"),
                "{name}"
            );
            if worker == 0 {
                assert_eq!(env(pod, "TPU_WORKER_ID"), None, "the leader has no TPUs");
                continue;
            }
            let subdomain = pod
                .spec
                .as_ref()
                .and_then(|s| s.subdomain.clone())
                .unwrap_or_default();
            assert_eq!(env(pod, "TPU_WORKER_ID").as_deref(), Some("0"), "{name}");
            assert_eq!(
                env(pod, "TPU_WORKER_HOSTNAMES"),
                Some(format!("{name}.{subdomain}")),
                "{name}"
            );
            assert_eq!(env(pod, "TPU_NAME").as_deref(), Some("one-0"), "{name}");
        }

        let workers = wait_for_all(
            &ns.api::<Pod>(),
            &format!("{NAME}=excluded,leaderworkerset.sigs.k8s.io/worker-index!=0"),
            Duration::from_secs(30),
            |p| p.len() == 2,
        )
        .await?;
        for pod in &workers {
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations.get(SUBGROUP_POLICY_TYPE).map(String::as_str),
                Some("LeaderExcluded"),
                "{:?}",
                pod.metadata.name
            );
            assert_eq!(
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SUBGROUP_INDEX))
                    .map(String::as_str),
                Some("0")
            );
        }
        Ok(())
    })
    .await
}
