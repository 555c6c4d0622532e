//! A prefill/decode pair released canary-style by a Rollout (examples/rollout-disaggregatedset.yaml,
//! applied as shipped) against the real control plane, under requests through the proxy when
//! the traffic layer runs: step 1 runs one new group of each role beside the whole stable pair,
//! the new pair gets its share only once both of its roles are ready, approval finishes the
//! release with the set's own rolling update, and not one request fails; with two slices, every
//! slice takes the same step. Bad input: a 0-group
//! step is refused at admission; a set scaled to zero,
//! and a trafficRouting naming a Service that does not exist, are a Warning Event and the
//! Rollout's message, not a stall.

use std::sync::{Arc, Mutex};

use anyhow::{Context, ensure};
use futures::StreamExt;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::{DisaggregatedSet, Rollout};
use serde_json::{Value, json};

use crate::harness::{TestNs, wait_for, wait_for_all, with_ns};
use crate::rollout_support::pair::{
    GROUPS, REVISION_LABEL, ROLLOUT, ROUTE, SERVICE, SET, apply_set, canary_weight, example,
    pair_lws, pair_lws_by_slice, wait_one_revision, wait_one_revision_in, with_image,
};
use crate::rollout_support::{
    WAIT, approve_named, create_rollout, create_route_to, finished, host, on_big_stack, paused_at,
    submit_rollout, wait_rollout_named,
};
use crate::traffic_driver::{
    Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip, wait_until_served,
};

/// Requests per second through the proxy.
pub(crate) const RATE: u32 = 50;

/// The new revision's ready groups per role when the route first gave the canary weight.
pub(crate) type ReadyAtFirstWeight = Arc<Mutex<Option<Vec<(String, i32)>>>>;

/// Watches the route; the first time it gives the canary any weight, records the new
/// revision's ready groups per role at that moment (role, ready).
pub(crate) fn first_weight_seen(
    ns: &TestNs,
    stable: String,
) -> (tokio::task::JoinHandle<()>, ReadyAtFirstWeight) {
    let seen = Arc::new(Mutex::new(None));
    let out = seen.clone();
    let ns = ns.clone();
    let task = tokio::spawn(async move {
        let stream = watcher::watcher(
            ns.api::<HttpRoute>(),
            watcher::Config::default().fields(&format!("metadata.name={ROUTE}")),
        )
        .applied_objects()
        .default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(Ok(route)) = stream.next().await {
            if canary_weight(&route) == 0 {
                continue;
            }
            let ready = pair_lws(&ns)
                .await
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, revision, _, _)| *revision != stable)
                .map(|(role, _, _, ready)| (role, ready))
                .collect();
            *out.lock().unwrap() = Some(ready);
            return;
        }
    });
    (task, seen)
}

pub(crate) type PairTraffic = ReleaseTraffic<Box<dyn Fn(&Outcome) -> bool + Send + Sync>>;

/// Requests through the proxy to the stable pair's prefill leaders (`stable` is its revision),
/// once they are served; a request reaching another prefill LWS of the set counts as new.
/// `None` (one SKIPPED line naming `what`) when the traffic layer does not run.
pub(crate) async fn pair_traffic(
    ns: &TestNs,
    stable: &str,
    what: &str,
) -> anyhow::Result<Option<PairTraffic>> {
    let Some(t) = traffic_or_skip(what) else {
        return Ok(None);
    };
    let stable_prefill = format!("{SET}-0-{stable}-prefill");
    let plain = RequestSpec::new(&host(ns));
    wait_until_served(&t, &plain, |o| o.lws.clone(), &[&stable_prefill], WAIT).await?;
    let is_new: Box<dyn Fn(&Outcome) -> bool + Send + Sync> = Box::new(move |o: &Outcome| {
        o.lws
            .as_deref()
            .is_some_and(|l| l.starts_with(&format!("{SET}-0-")) && l != stable_prefill)
    });
    Ok(Some(ReleaseTraffic::start(&t, plain, None, RATE, is_new)))
}

/// Fails unless the set's hold and its release-groups are gone.
async fn hold_lifted(ns: &TestNs) -> anyhow::Result<()> {
    let set = ns.api::<DisaggregatedSet>().get(SET).await?;
    let annotations = set.annotations();
    ensure!(
        !annotations.contains_key("rollouts.kruise.io/stable-revision")
            && !annotations.contains_key("lws-rollout.x-k8s.io/release-groups"),
        "hold and release-groups lifted: {annotations:?}"
    );
    Ok(())
}

#[test]
fn rollout_disaggregatedset_example_releases_the_pair_in_lockstep_losing_no_request()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-pd", |ns| async move {
            let (set, service, rollout) = example()?;
            let set = with_image(&set, "vllm:1");
            apply_set(&ns, &set).await?;
            let stable = wait_one_revision(&ns, None).await?;
            let svc: Service = serde_json::from_value(service)?;
            ns.api::<Service>()
                .create(&PostParams::default(), &svc)
                .await?;
            let users_selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
            create_route_to(&ns, ROUTE, SERVICE).await?;
            create_rollout(&ns, &rollout).await?;

            let traffic = pair_traffic(&ns, &stable, "rollout_disaggregatedset (requests)").await?;

            // The template change: step 1, one new group of each role, the stable pair whole.
            let (guard, first_weight) = first_weight_seen(&ns, stable.clone());
            apply_set(&ns, &with_image(&set, "vllm:2")).await?;
            let r = wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
            let lws = pair_lws(&ns).await?;
            let new: Vec<_> = lws.iter().filter(|l| l.1 != stable).collect();
            ensure!(
                lws.iter()
                    .filter(|l| l.1 == stable)
                    .all(|l| l.2 == GROUPS && l.3 == GROUPS)
                    && new.len() == 2
                    && new.iter().all(|l| l.2 == 1 && l.3 == 1),
                "step 1: the stable pair keeps {GROUPS} groups per role and the new pair has \
                 one ready group per role: {lws:?}"
            );
            let canary = r
                .status
                .as_ref()
                .and_then(|s| s.canary_status.clone())
                .context("canaryStatus")?;
            ensure!(
                canary.canary_ready_replicas == 1,
                "one complete new pair ready: {canary:?}"
            );
            let set_now = ns.api::<DisaggregatedSet>().get(SET).await?;
            ensure!(
                set_now
                    .annotations()
                    .get("lws-rollout.x-k8s.io/release-groups")
                    == Some(&r#"{"decode":1,"prefill":1}"#.to_string()),
                "one write of both roles' groups: {:?}",
                set_now.annotations()
            );
            // The canary Service exists and selects the new revision's leaders only.
            let canary_svc = ns
                .api::<Service>()
                .get(&format!("{SERVICE}-canary"))
                .await?;
            let selector = canary_svc.spec.and_then(|s| s.selector).unwrap_or_default();
            ensure!(
                selector.get(REVISION_LABEL) != Some(&stable)
                    && selector.contains_key(REVISION_LABEL),
                "the canary Service selects the new revision: {selector:?}"
            );
            wait_for(
                &ns.api::<HttpRoute>(),
                ROUTE,
                WAIT,
                |r: Option<&HttpRoute>| r.is_some_and(|r| canary_weight(r) == 20),
            )
            .await?;
            // The weight came only once both roles of the new pair had a ready group (decode
            // is ready seconds after prefill).
            guard.await?;
            let at_first_weight = first_weight.lock().unwrap().clone().unwrap_or_default();
            ensure!(
                at_first_weight.len() == 2 && at_first_weight.iter().all(|(_, ready)| *ready >= 1),
                "the route gave the new pair weight before both roles were ready: \
                 {at_first_weight:?}"
            );
            if let Some(t) = &traffic {
                t.assert_step(20, 200).await?;
            }

            // Approve: the new pair grows to every group, gets everything, the hold goes and
            // the set's own rolling update drains the old pair.
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            let new_revision = wait_one_revision(&ns, Some(&stable)).await?;
            hold_lifted(&ns).await?;
            let svc_now = ns.api::<Service>().get(SERVICE).await?;
            ensure!(
                svc_now.spec.and_then(|s| s.selector) == users_selector,
                "the user's selector is given back"
            );
            ensure!(
                ns.api::<Service>()
                    .get_opt(&format!("{SERVICE}-canary"))
                    .await?
                    .is_none(),
                "the canary Service is gone"
            );
            if let Some(t) = traffic {
                let w = t.window(200).await?;
                let new_prefill = format!("{SET}-0-{new_revision}-prefill");
                w.assert_all(
                    "after the release every request reaches the new pair",
                    |o| o.lws.as_deref() == Some(new_prefill.as_str()),
                )?;
                let all = t.stop().await;
                all.assert_no_failures("the whole release")?;
                eprintln!("pair release under load: {}", all.summary());
            }
            Ok(())
        })
    })
}

/// A set of two slices released by the example's Rollout: every slice takes the same step (one
/// new group of each role in each slice at step 1), the route gives the new pair weight only
/// once every role of every slice has a ready group, the canary's ready count is its complete
/// pairs (in each slice the fewest ready groups of any role, summed over the slices), and
/// approval ends with every slice on the new revision.
#[test]
fn rollout_disaggregatedset_slices_take_each_step_together() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-pd-slices", |ns| async move {
            const SLICES: usize = 2;
            let (set, service, rollout) = example()?;
            let mut set = with_image(&set, "vllm:1");
            set["spec"]["slices"] = json!(SLICES);
            apply_set(&ns, &set).await?;
            let stable = wait_one_revision_in(&ns, SLICES, None).await?;
            let svc: Service = serde_json::from_value(service)?;
            ns.api::<Service>()
                .create(&PostParams::default(), &svc)
                .await?;
            create_route_to(&ns, ROUTE, SERVICE).await?;
            create_rollout(&ns, &rollout).await?;

            let (guard, first_weight) = first_weight_seen(&ns, stable.clone());
            let mut next = with_image(&set, "vllm:2");
            next["spec"]["slices"] = json!(SLICES);
            apply_set(&ns, &next).await?;
            let r = wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
            let lws = pair_lws_by_slice(&ns).await?;
            let (held, new): (Vec<_>, Vec<_>) = lws.iter().partition(|l| l.2 == stable);
            ensure!(
                held.len() == 2 * SLICES
                    && held.iter().all(|l| l.3 == GROUPS && l.4 == GROUPS)
                    && new.len() == 2 * SLICES
                    && new.iter().all(|l| l.3 == 1 && l.4 == 1),
                "step 1: in each slice the stable pair keeps {GROUPS} groups per role and the \
                 new pair has one ready group per role: {lws:?}"
            );
            let slices_seen: std::collections::BTreeSet<_> = new.iter().map(|l| &l.0).collect();
            ensure!(
                slices_seen.len() == SLICES,
                "the new pair runs in every slice: {lws:?}"
            );
            let canary = r
                .status
                .as_ref()
                .and_then(|s| s.canary_status.clone())
                .context("canaryStatus")?;
            ensure!(
                canary.canary_ready_replicas == SLICES as i32,
                "one complete new pair ready in each slice, counted over the slices: {canary:?}"
            );
            wait_for(
                &ns.api::<HttpRoute>(),
                ROUTE,
                WAIT,
                |r: Option<&HttpRoute>| r.is_some_and(|r| canary_weight(r) == 20),
            )
            .await?;
            guard.await?;
            let at_first_weight = first_weight.lock().unwrap().clone().unwrap_or_default();
            ensure!(
                at_first_weight.len() == 2 * SLICES
                    && at_first_weight.iter().all(|(_, ready)| *ready >= 1),
                "the route gave the new pair weight before every role of every slice was \
                 ready: {at_first_weight:?}"
            );

            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            wait_one_revision_in(&ns, SLICES, Some(&stable)).await?;
            hold_lifted(&ns).await?;
            Ok(())
        })
    })
}

#[tokio::test]
async fn rollout_disaggregatedset_bad_input_is_refused_or_reported() -> anyhow::Result<()> {
    with_ns("rollout-pd-bad", |ns| async move {
        let (set, _, rollout) = example()?;
        // The set first: once the controllers have run it, the manager's webhooks (registered
        // before the controllers start) are in place for the refusals below.
        let set = with_image(&set, "vllm:1");
        apply_set(&ns, &set).await?;
        wait_one_revision(&ns, None).await?;
        // A step of 0 groups (which could give a role none) is refused at admission.
        let mut none = rollout.clone();
        none["metadata"]["name"] = json!("pd-none");
        none["spec"]["strategy"]["canary"]["steps"][0]["replicas"] = json!(0);
        let refused = submit_rollout(&ns, &none).await;
        let why = format!("{:?}", refused.err().context("a 0-group step is refused")?);
        ensure!(
            why.contains("steps[0].replicas") && why.contains("greater than 0"),
            "the refusal says why: {why}"
        );

        // A set scaled to zero (every role at 0 replicas: the CRD refuses one role at 0 beside
        // others that are not): no step can give a role a group. The batch does not start; the
        // BatchRelease's Warning and the Rollout's message name the role.
        let empty = {
            let mut e = with_image(&set, "vllm:1");
            e["metadata"]["name"] = json!("pd-empty");
            e["spec"]["roles"][0]["spec"]["replicas"] = json!(0);
            e["spec"]["roles"][1]["spec"]["replicas"] = json!(0);
            e
        };
        ns.api::<DisaggregatedSet>()
            .patch(
                "pd-empty",
                &PatchParams::apply("e2e-user").force(),
                &Patch::Apply(&empty),
            )
            .await?;
        let mut for_empty = rollout.clone();
        for_empty["metadata"]["name"] = json!("pd-empty");
        for_empty["spec"]["workloadRef"]["name"] = json!("pd-empty");
        for_empty["spec"]["strategy"]["canary"]["trafficRoutings"] = Value::Null;
        for_empty["spec"]["strategy"]["canary"]["steps"] =
            json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]);
        create_rollout(&ns, &for_empty).await?;
        ns.api::<DisaggregatedSet>()
            .patch(
                "pd-empty",
                &PatchParams::apply("e2e-user").force(),
                &Patch::Apply(&with_image(&empty, "vllm:2")),
            )
            .await?;
        wait_rollout_named(
            &ns,
            "pd-empty",
            "names the role without groups",
            |r: &Rollout| {
                r.status
                    .as_ref()
                    .and_then(|s| s.canary_status.as_ref())
                    .and_then(|c| c.common.message.as_deref())
                    .is_some_and(|m| m.contains("role prefill has no replicas"))
            },
        )
        .await?;
        wait_for_all(
            &ns.api::<k8s_openapi::api::core::v1::Event>(),
            "",
            WAIT,
            |events| {
                events.iter().any(|e| {
                    e.involved_object.kind.as_deref() == Some("BatchRelease")
                        && e.reason.as_deref() == Some("Unsupported")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("role prefill"))
                })
            },
        )
        .await
        .context("a Warning Event on the BatchRelease naming the role")?;

        // A trafficRouting naming a Service that does not exist: a Warning and the message.
        let mut missing = rollout.clone();
        missing["spec"]["strategy"]["canary"]["trafficRoutings"][0]["service"] =
            json!("no-such-service");
        create_rollout(&ns, &missing).await?;
        apply_set(&ns, &with_image(&set, "vllm:2")).await?;
        let r = wait_rollout_named(
            &ns,
            ROLLOUT,
            "says the Service is missing",
            |r: &Rollout| {
                r.status
                    .as_ref()
                    .and_then(|s| s.message.as_deref())
                    .is_some_and(|m| m.contains("no-such-service"))
            },
        )
        .await?;
        ensure!(r.status.is_some());
        wait_for_all(
            &ns.api::<k8s_openapi::api::core::v1::Event>(),
            "",
            WAIT,
            |events| {
                events.iter().any(|e| {
                    e.involved_object.name.as_deref() == Some(ROLLOUT)
                        && e.reason.as_deref() == Some("TrafficRoutingNotFound")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("no-such-service"))
                })
            },
        )
        .await
        .context("a TrafficRoutingNotFound Event")?;
        Ok(())
    })
    .await
}
