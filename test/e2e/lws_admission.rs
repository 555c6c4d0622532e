//! Bad LWS input: what the LWS webhooks (served by the suite's manager) default and refuse, and
//! how the controller reports an LWS it cannot build (`ReplicaFailure` condition + Warning
//! event) instead of half-building it or taking over someone else's objects.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::{apps::v1::StatefulSet, events::v1::Event};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use lws_rollout::api::{
    LeaderWorkerSet,
    leaderworkerset::{RestartPolicy, RolloutStrategyType},
};
use serde_json::json;

use crate::{
    harness::{TestNs, events_when, wait_for, with_ns},
    lws_support::{apply, create_available, lws},
};

fn failure(reason: &'static str) -> impl Fn(Option<&LeaderWorkerSet>) -> bool {
    move |l: Option<&LeaderWorkerSet>| {
        l.and_then(|l| l.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "ReplicaFailure" && c.status == "True" && c.reason == reason
                })
            })
    }
}

/// Waits until `name` has no `ReplicaFailure` condition and `ready` groups.
async fn recovered(ns: &TestNs, name: &str, ready: i32, within: Duration) -> anyhow::Result<()> {
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        name,
        within,
        move |l: Option<&LeaderWorkerSet>| {
            l.and_then(|l| l.status.as_ref()).is_some_and(|s| {
                s.ready_replicas == Some(ready)
                    && !s
                        .conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "ReplicaFailure")
            })
        },
    )
    .await?;
    Ok(())
}

/// The `ReplicaFailure` condition's message.
fn failure_message(l: LeaderWorkerSet) -> String {
    l.status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure")
        .map(|c| c.message)
        .unwrap_or_default()
}

/// The note of the Warning event with `reason`, once it is there (30 s at most).
async fn warning_with(ns: &TestNs, reason: &str) -> anyhow::Result<Option<String>> {
    let is_it =
        |e: &Event| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning");
    let Ok(events) = events_when(ns, Duration::from_secs(30), |events| {
        events.iter().any(|e| is_it(e))
    })
    .await
    else {
        return Ok(None);
    };
    Ok(events
        .iter()
        .find(|e| is_it(e))
        .and_then(|e| e.note.clone()))
}

async fn create_err(ns: &TestNs, obj: serde_json::Value) -> String {
    let lws: LeaderWorkerSet = serde_json::from_value(obj).expect("an LWS");
    match ns
        .api::<LeaderWorkerSet>()
        .create(&PostParams::default(), &lws)
        .await
    {
        Ok(_) => panic!("the API server accepted an LWS it should refuse"),
        Err(err) => err.to_string(),
    }
}

#[tokio::test]
async fn deprecated_restart_policy_default_is_stored_as_none() -> anyhow::Result<()> {
    with_ns("lws-default", |ns| async move {
        let mut obj = lws("dflt", 1, 2, "vllm:1");
        obj["spec"]["leaderWorkerTemplate"]["restartPolicy"] = json!("Default");
        apply(&ns, &obj).await?;
        let stored = ns.api::<LeaderWorkerSet>().get("dflt").await?;
        assert_eq!(
            stored.spec.leader_worker_template.restart_policy,
            Some(RestartPolicy::None)
        );
        Ok(())
    })
    .await
}

/// What a client built on upstream's Go types sends when it leaves the strategy unset (the field
/// has no `omitempty` there): accepted and stored as upstream's webhook stores it.
#[tokio::test]
async fn an_empty_rollout_strategy_type_is_stored_as_rolling_update() -> anyhow::Result<()> {
    with_ns("lws-emptytype", |ns| async move {
        let mut obj = lws("emptytype", 1, 2, "vllm:1");
        obj["spec"]["rolloutStrategy"] = json!({"type": ""});
        apply(&ns, &obj).await?;
        let stored = ns.api::<LeaderWorkerSet>().get("emptytype").await?;
        let strategy = stored.spec.rollout_strategy.context("a rollout strategy")?;
        assert_eq!(strategy.type_, RolloutStrategyType::RollingUpdate);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn the_validating_webhook_names_what_is_wrong() -> anyhow::Result<()> {
    with_ns("lws-validate", |ns| async move {
        let mut obj = lws("subtopo", 1, 4, "vllm:1");
        obj["metadata"]["annotations"] =
            json!({"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "topology.kubernetes.io/zone"});
        let err = create_err(&ns, obj).await;
        assert!(
            err.contains("metadata.annotations[leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology]")
                && err.contains("cannot have subgroup-exclusive-topology without subGroupSize set"),
            "{err}"
        );

        // 10 groups of 2: the worker StatefulSet of group 9 is "<name>-9" and its pods carry
        // "<name>-9-<hash>", so 51 characters cannot work and 50 can.
        let long = "l".repeat(51);
        let err = create_err(&ns, lws(&long, 10, 2, "vllm:1")).await;
        assert!(
            err.contains("metadata.name") && err.contains("at most 50 characters"),
            "{err}"
        );
        apply(&ns, &lws(&"l".repeat(50), 10, 2, "vllm:1")).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scaling_past_the_name_limit_is_reported_and_builds_no_half_groups() -> anyhow::Result<()> {
    with_ns("lws-toolong", |ns| async move {
        // 50 characters: fine up to 10 groups (index 9), not for 11.
        let name = "t".repeat(50);
        create_available(&ns, &lws(&name, 2, 2, "vllm:1")).await?;
        // The scale subresource bypasses the webhook (as for an HPA).
        ns.api::<LeaderWorkerSet>()
            .patch_scale(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 11}})),
            )
            .await?;
        let lws_now = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            &name,
            Duration::from_secs(30),
            failure("NameTooLong"),
        )
        .await?
        .expect("the LWS");
        let message = failure_message(lws_now);
        assert!(message.contains("at most 49 characters"), "{message}");
        let note = warning_with(&ns, "NameTooLong").await?;
        assert!(note.is_some(), "a Warning event says why");
        let leader = ns.api::<StatefulSet>().get(&name).await?;
        assert_eq!(
            leader.spec.and_then(|s| s.replicas),
            Some(2),
            "nothing is built beyond what can be built whole"
        );

        ns.api::<LeaderWorkerSet>()
            .patch_scale(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 3}})),
            )
            .await?;
        recovered(&ns, &name, 3, Duration::from_secs(60)).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_foreign_statefulset_with_the_lws_name_is_not_taken_over() -> anyhow::Result<()> {
    with_ns("lws-foreign", |ns| async move {
        let sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "taken"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "theirs"}},
                "template": {
                    "metadata": {"labels": {"app": "theirs"}},
                    "spec": {"containers": [{"name": "c", "image": "theirs:1"}]}
                }
            }
        }))?;
        let theirs = ns
            .api::<StatefulSet>()
            .create(&PostParams::default(), &sts)
            .await?;
        apply(&ns, &lws("taken", 2, 2, "vllm:1")).await?;
        wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "taken",
            Duration::from_secs(30),
            failure("ObjectConflict"),
        )
        .await?;
        assert!(warning_with(&ns, "ObjectConflict").await?.is_some());
        let after = ns.api::<StatefulSet>().get("taken").await?;
        assert_eq!(
            after.metadata.generation, theirs.metadata.generation,
            "their StatefulSet is untouched"
        );
        assert!(after.metadata.owner_references.is_none(), "and not adopted");

        // Once it is gone, the LWS is built (the controller looks again on its own).
        ns.api::<StatefulSet>()
            .delete("taken", &DeleteParams::background())
            .await?;
        recovered(&ns, "taken", 2, Duration::from_secs(90)).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_template_the_api_server_refuses_is_reported_then_recovers() -> anyhow::Result<()> {
    with_ns("lws-refused", |ns| async move {
        // Valid for the CRD schema, invalid for a StatefulSet: requests above limits.
        let mut obj = lws("refused", 1, 2, "vllm:1");
        obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["resources"] = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}});
        apply(&ns, &obj).await?;
        let l = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "refused",
            Duration::from_secs(30),
            failure("FailedCreate"),
        )
        .await?
        .expect("the LWS");
        let message = failure_message(l);
        assert!(
            message.contains("must be less than or equal to cpu limit"),
            "the API server's reason is passed on: {message}"
        );

        obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["resources"] = json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1"}});
        apply(&ns, &obj).await?;
        recovered(&ns, "refused", 1, Duration::from_secs(60)).await?;
        Ok(())
    })
    .await
}

/// A quantity the API server stores but Go's parser refuses (upstream's CRD pattern admits
/// it too): the revision cannot be hashed as upstream hashes it, so nothing is built. The LWS
/// says why once — condition and Warning event — and waits for a change instead of failing
/// every reconcile; fixing the quantity builds it.
#[tokio::test]
async fn a_spec_that_cannot_be_hashed_is_reported_once_then_recovers() -> anyhow::Result<()> {
    with_ns("lws-unhashable", |ns| async move {
        // Kueue's LWS webhook (the suite's cluster runs Kueue: docs/kueue.md) decodes every LWS
        // into Go types and refuses this quantity at admission; this test is about a spec the
        // API server accepts, so its namespace opts out of Kueue's LWS webhooks.
        crate::kueue_support::opt_out_of_kueue_webhooks(&ns).await?;
        let mut obj = lws("unhashable", 1, 2, "vllm:1");
        obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["resources"] = json!({"limits": {"memory": "1e1.5"}});
        apply(&ns, &obj).await?;
        let l = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "unhashable",
            Duration::from_secs(30),
            failure("InvalidSpec"),
        )
        .await?
        .expect("the LWS");
        let message = failure_message(l);
        assert!(
            message.contains("template revision"),
            "the condition says what cannot be computed: {message}"
        );
        assert!(warning_with(&ns, "InvalidSpec").await?.is_some(), "a Warning event");
        assert!(
            ns.api::<StatefulSet>().get_opt("unhashable").await?.is_none(),
            "nothing half-built"
        );

        obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            ["resources"] = json!({"limits": {"memory": "64Mi"}});
        apply(&ns, &obj).await?;
        recovered(&ns, "unhashable", 1, Duration::from_secs(60)).await?;
        Ok(())
    })
    .await
}
