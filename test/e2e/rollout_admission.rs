//! What a Rollout does with input that stops or redirects a release, against the real control
//! plane: `spec.strategy.paused`, a user-written `nextStepIndex`, a canary that never becomes
//! ready, traffic objects that do not exist, a second Rollout for one LWS, an LWS no Rollout
//! references, and `kubectl get rollout`'s columns.

use anyhow::{Context, ensure};
use kube::api::{Patch, PatchParams};
use lws_rollout::api::{LeaderWorkerSet, Rollout};
use serde_json::json;

use crate::harness::{TestNs, wait_for, with_ns};
use crate::lws_support::{available_with, create_available, image, lws, settled_pods};
use crate::rollout_canary::three_steps;
use crate::rollout_rollback::paused_release;
use crate::rollout_support::*;

async fn patch_rollout(ns: &TestNs, patch: serde_json::Value) -> anyhow::Result<()> {
    ns.api::<Rollout>()
        .patch(STABLE, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

#[tokio::test]
async fn rollout_paused_holds_then_resumes() -> anyhow::Result<()> {
    with_ns("rollout-paused", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            // `kubectl-kruise rollout pause`, then approve: nothing moves while paused.
            patch_rollout(&ns, json!({"spec": {"strategy": {"paused": true}}})).await?;
            wait_rollout(&ns, "Paused condition", |r| {
                condition(r, "Progressing").is_some_and(|c| c.1 == "Paused")
            })
            .await?;
            approve(&ns).await?;
            // The approval is recorded but the step does not advance while paused: the canary
            // keeps its one group once the Rollout has seen the approval.
            let r = wait_rollout(&ns, "approval seen while paused", |r| {
                step(r).1 == "StepReady"
            })
            .await?;
            ensure!(step(&r).0 == 1, "{:?}", step(&r));
            ensure!(the_canary(&ns).await?.spec.replicas == Some(1));
            // `kubectl-kruise rollout resume`.
            patch_rollout(&ns, json!({"spec": {"strategy": {"paused": null}}})).await?;
            wait_paused_at(&ns, 2).await?;
            ensure!(the_canary(&ns).await?.spec.replicas == Some(2));
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_next_step_index_jumps() -> anyhow::Result<()> {
    with_ns("rollout-jump", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            // Jump from step 1 straight to step 3 (everything, 100%), then finalisation.
            ns.api::<Rollout>()
                .patch_status(
                    STABLE,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"canaryStatus": {"nextStepIndex": 3}}})),
                )
                .await?;
            let r = wait_rollout(&ns, "finished at step 3", finished("True")).await?;
            ensure!(step(&r).0 == 3);
            released_to(&ns, 4, "vllm:2").await?;
            nothing_left(&ns).await?;
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_canary_that_never_becomes_ready_stalls_visibly() -> anyhow::Result<()> {
    with_ns("rollout-stall", |ns| {
        Box::pin(async move {
            let v1 = stable_lws(2, "vllm:1");
            release_setup(&ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
            // A bad version: its workers ask for a node no KWOK node is, so they stay Pending.
            let mut bad = with_image(&v1, "vllm:bad");
            bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["nodeSelector"] =
                json!({"lws-rollout.test/none": "x"});
            apply_lws(&ns, &bad).await?;
            let r = wait_rollout(&ns, "a message naming the group", |r| {
                condition(r, "Progressing").is_some_and(|c| c.2.contains("not ready: group 0"))
            })
            .await?;
            ensure!(
                step(&r).0 == 1 && step(&r).1 != "StepPaused",
                "{:?}",
                step(&r)
            );
            let event = wait_event(&ns, "CanaryNotReady", "group 0").await?;
            ensure!(event.contains(&format!("{STABLE}-canary-")), "{event}");
            // No weight to a canary with nothing ready.
            ensure!(
                route_backends(&ns)
                    .await?
                    .concat()
                    .iter()
                    .all(|(n, w)| !n.ends_with("-canary") || *w == Some(0) || w.is_none())
            );
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_missing_traffic_objects_stop_the_release_visibly() -> anyhow::Result<()> {
    with_ns("rollout-missing", |ns| {
        Box::pin(async move {
            let v1 = stable_lws(2, "vllm:1");
            create_available(&ns, &v1).await?;
            create_service(&ns).await?;
            // The HTTPRoute the Rollout names does not exist.
            create_rollout(&ns, &rollout(three_steps(), Some(gateway_routing()))).await?;
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_rollout(&ns, "route not found", |r| {
                condition(r, "Progressing")
                    .is_some_and(|c| c.2.contains(&format!("HTTPRoute {ROUTE} not found")))
            })
            .await?;
            wait_event(&ns, "TrafficRoutingNotFound", ROUTE).await?;
            // Creating it lets the release go on.
            create_route(&ns).await?;
            wait_paused_at(&ns, 1).await?;
            wait_route(&ns, split_route(5)).await?;
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_missing_service_stops_the_release_visibly() -> anyhow::Result<()> {
    with_ns("rollout-nosvc", |ns| {
        Box::pin(async move {
            let v1 = stable_lws(2, "vllm:1");
            create_available(&ns, &v1).await?;
            create_route(&ns).await?;
            create_rollout(&ns, &rollout(three_steps(), Some(gateway_routing()))).await?;
            apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
            wait_rollout(&ns, "Service not found", |r| {
                condition(r, "Progressing")
                    .is_some_and(|c| c.2.contains(&format!("Service {SERVICE} not found")))
            })
            .await?;
            wait_event(&ns, "TrafficRoutingNotFound", SERVICE).await?;
            Ok(())
        })
    })
    .await
}

/// Kruise's one-Rollout-per-workload rule, at admission and with Kruise's message: a second
/// Rollout for an LWS under release is refused when it is created, and the release goes on
/// untouched (same canary, same route, same hold) to its end.
#[tokio::test]
async fn rollout_second_for_one_lws_is_refused() -> anyhow::Result<()> {
    with_ns("rollout-second", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            let canary = the_canary(&ns).await?.metadata.uid;
            let mut second = rollout(three_steps(), Some(gateway_routing()));
            second["metadata"]["name"] = json!("vllm-again");
            let refused = create_rollout(&ns, &second)
                .await
                .err()
                .context("a second Rollout of the same LWS is refused")?;
            let said = format!("{refused:#}");
            ensure!(
                said.contains(&format!(
                    "spec.workloadRef: This rollout conflict with Rollout({}/{STABLE}), one \
                     workload only have less than one Rollout",
                    ns.name
                )),
                "{said}"
            );
            ensure!(ns.api::<Rollout>().get_opt("vllm-again").await?.is_none());
            // The release in flight did not notice.
            ensure!(step(&ns.api::<Rollout>().get(STABLE).await?) == (1, "StepPaused".into()));
            ensure!(the_canary(&ns).await?.metadata.uid == canary);
            wait_route(&ns, split_route(5)).await?;
            approve(&ns).await?;
            wait_paused_at(&ns, 2).await?;
            Ok(())
        })
    })
    .await
}

/// What cannot run is refused when it is written, each with the field and what is allowed, so
/// nothing is accepted and then stalls mid-release (the whole table: `rollout::admission`).
#[tokio::test]
async fn rollout_admission_refuses_what_cannot_be_honoured() -> anyhow::Result<()> {
    with_ns("rollout-refuse", |ns| {
        Box::pin(async move {
            let nginx = json!({"service": SERVICE, "ingress": {"name": "web"}});
            let cases: Vec<(&str, serde_json::Value, &str)> = vec![
                (
                    "an alb Ingress",
                    json!({"trafficRoutings": [{"service": SERVICE, "ingress": {"name": "web", "classType": "aliyun-alb"}}]}),
                    "spec.strategy.canary.trafficRoutings[0].ingress.classType: \"aliyun-alb\" is not supported: only nginx",
                ),
                (
                    "custom network objects",
                    json!({"trafficRoutings": [{"service": SERVICE, "customNetworkRefs": [{"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "name": "vs"}]}]}),
                    "spec.strategy.canary.trafficRoutings[0].customNetworkRefs: custom network providers are not supported",
                ),
                (
                    "a TrafficRouting object",
                    json!({"trafficRoutingRef": "tr"}),
                    "spec.strategy.canary.trafficRoutingRef: TrafficRouting objects (v1alpha1) are not supported",
                ),
                (
                    "no canary Service",
                    json!({"disableGenerateCanaryService": true}),
                    "spec.strategy.canary.disableGenerateCanaryService: not supported",
                ),
                (
                    "a path match on nginx",
                    json!({"trafficRoutings": [nginx.clone()], "steps": [{"replicas": 1, "matches": [{"path": {"type": "PathPrefix", "value": "/v2"}}], "pause": {}}, {"replicas": "100%"}]}),
                    "spec.strategy.canary.steps[0].matches[0].path: the nginx canary Ingress cannot match on a path",
                ),
                (
                    "a header modifier on nginx",
                    json!({"trafficRoutings": [nginx.clone()], "steps": [{"replicas": 1, "traffic": "5%", "requestHeaderModifier": {"set": [{"name": "x-release", "value": "canary"}]}}, {"replicas": "100%"}]}),
                    "spec.strategy.canary.steps[0].requestHeaderModifier: not supported by the nginx canary Ingress",
                ),
                (
                    "traffic with nothing to route it through",
                    json!({"trafficRoutings": null}),
                    "spec.strategy.canary.steps[0]: traffic, matches and requestHeaderModifier need spec.strategy.canary.trafficRoutings",
                ),
                (
                    "a step without replicas",
                    json!({"steps": [{"traffic": "5%"}]}),
                    "spec.strategy.canary.steps[0].replicas: replicas cannot be empty",
                ),
            ];
            for (what, canary, text) in cases {
                let mut r = rollout(three_steps(), Some(gateway_routing()));
                crate::lws_support::merge(&mut r["spec"]["strategy"]["canary"], canary);
                let refused = create_rollout(&ns, &r)
                    .await
                    .err()
                    .with_context(|| format!("{what} is refused"))?;
                let said = format!("{refused:#}");
                ensure!(said.contains(text), "{what}: {said}");
            }
            // Blue-green with canary-only fields: refused by name, with what to do instead.
            let mut bg = rollout(three_steps(), Some(gateway_routing()));
            let canary = bg["spec"]["strategy"]["canary"].take();
            bg["spec"]["strategy"] = json!({"blueGreen": {"steps": canary["steps"],
                "trafficRoutings": canary["trafficRoutings"],
                "patchPodTemplateMetadata": canary["patchPodTemplateMetadata"]}});
            let said = format!("{:#}", create_rollout(&ns, &bg).await.err().context("a canary field under blueGreen is refused")?);
            ensure!(
                said.contains("spec.strategy.blueGreen.patchPodTemplateMetadata: a canary field"),
                "{said}"
            );
            ensure!(ns.api::<Rollout>().list(&Default::default()).await?.items.is_empty());
            Ok(())
        })
    })
    .await
}

/// Kruise's immutability while a release runs, with its messages: the workload, the traffic
/// routing, the style and the number of steps stay as the release started; pauses and step
/// sizes may still change.
#[tokio::test]
async fn rollout_in_flight_keeps_what_it_is_built_on() -> anyhow::Result<()> {
    with_ns("rollout-immutable", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            let cases = [
                (
                    json!({"spec": {"workloadRef": {"name": "other"}}}),
                    "spec.workloadRef: Rollout 'ObjectRef' field is immutable",
                ),
                (
                    json!({"spec": {"strategy": {"canary": {"trafficRoutings": [{"service": SERVICE, "gracePeriodSeconds": 5, "gateway": {"httpRouteName": ROUTE}}]}}}}),
                    "spec.strategy.canary.trafficRoutings: Rollout 'Strategy.Canary|BlueGreen.TrafficRoutings' field is immutable",
                ),
                (
                    json!({"spec": {"strategy": {"canary": {"steps": [{"replicas": 1, "traffic": "5%", "pause": {}}, {"replicas": "100%"}]}}}}),
                    "spec.strategy.canary.steps: Amount of Rollout steps are immutable",
                ),
            ];
            for (patch, text) in cases {
                let refused = patch_rollout(&ns, patch.clone())
                    .await
                    .err()
                    .with_context(|| format!("{patch} is refused mid-release"))?;
                let said = format!("{refused:#}");
                ensure!(said.contains(text), "{said}");
            }
            // A longer pause on step 2 is fine mid-release.
            let mut steps = three_steps();
            steps[1]["pause"] = json!({"duration": 600});
            patch_rollout(&ns, json!({"spec": {"strategy": {"canary": {"steps": steps}}}})).await?;
            ensure!(step(&ns.api::<Rollout>().get(STABLE).await?) == (1, "StepPaused".into()));
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_absent_leaves_an_lws_alone() -> anyhow::Result<()> {
    with_ns("rollout-none", |ns| {
        Box::pin(async move {
            // A Rollout for another LWS in the same namespace changes nothing for this one.
            let v1 = stable_lws(2, "vllm:1");
            release_setup(&ns, &v1, &rollout(three_steps(), Some(gateway_routing()))).await?;
            let other = lws("other", 2, 2, "img:1");
            create_available(&ns, &other).await?;
            apply_lws(&ns, &lws("other", 2, 2, "img:2")).await?;
            wait_for(
                &ns.api::<LeaderWorkerSet>(),
                "other",
                WAIT,
                available_with(2, 2),
            )
            .await?;
            let o = ns.api::<LeaderWorkerSet>().get("other").await?;
            ensure!(
                !o.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key("rollouts.kruise.io/stable-revision")
            );
            ensure!(
                settled_pods(&ns, "other", 4)
                    .await?
                    .iter()
                    .all(|p| image(p) == "img:2")
            );
            ensure!(canaries(&ns).await?.is_empty() && batch_release(&ns).await?.is_none());
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn rollout_printer_columns() -> anyhow::Result<()> {
    with_ns("rollout-columns", |ns| {
        Box::pin(async move {
            paused_release(&ns).await?;
            let kubectl = crate::isolated::bin_dir()?.join("kubectl");
            let out = std::process::Command::new(kubectl)
                .args([
                    "--kubeconfig",
                    &crate::harness::kubeconfig_path()?,
                    "-n",
                    &ns.name,
                    "get",
                    "rollout",
                    STABLE,
                ])
                .output()?;
            ensure!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout)?;
            let mut lines = text.lines();
            let header: Vec<&str> = lines.next().context("header")?.split_whitespace().collect();
            let row: Vec<&str> = lines.next().context("row")?.split_whitespace().collect();
            ensure!(
                header[..4] == ["NAME", "STATUS", "CANARY_STEP", "CANARY_STATE"],
                "{text}"
            );
            ensure!(
                row[..4] == [STABLE, "Progressing", "1", "StepPaused"],
                "{text}"
            );
            Ok(())
        })
    })
    .await
}
