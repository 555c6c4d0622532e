//! A prefill/decode pair of two slices released in partition style with int steps
//! (examples/rollout-disaggregatedset-partition.yaml with `slices: 2` and its last step
//! `replicas: 2`) against the real control plane, under requests through the proxy when the
//! traffic layer runs. A step's int is groups of each role *in each slice* while the
//! Rollout's counts are pairs summed over the slices: the last step moves every stable group
//! of every slice, so the route must send the new pair everything before they go, and not one
//! request may fail.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::{ResourceExt, api::PostParams};
use serde_json::json;

use crate::harness::{TestNs, with_ns};
use crate::rollout_support::pair::{
    GROUPS, ROLLOUT, ROUTE, SERVICE, SET, apply_set, canary_weight_now, example_at,
    pair_lws_by_slice, wait_canary_weight, wait_one_revision_in, with_image,
};
use crate::rollout_support::{
    WAIT, approve_named, create_rollout, create_route_to, finished, host, on_big_stack, paused_at,
    wait_rollout_named,
};
use crate::traffic_driver::{Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip};

const SLICES: usize = 2;

/// When each LWS of a revision was first seen going (scaled to 0, being deleted, or gone), by
/// name, with the route's canary weight read right then.
type Gone = Arc<Mutex<BTreeMap<String, i64>>>;

fn watch_going(ns: &TestNs, revision: &str) -> (tokio::task::JoinHandle<()>, Gone) {
    let seen: Gone = Arc::default();
    let out = seen.clone();
    let ns = ns.clone();
    let going = crate::rollout_support::pair::lws_going(&ns, revision);
    let task = tokio::spawn(async move {
        let mut going = std::pin::pin!(going);
        while let Some(lws) = going.next().await {
            if out.lock().unwrap().contains_key(&lws.name_any()) {
                continue;
            }
            let weight = canary_weight_now(&ns).await.unwrap_or(-1);
            out.lock().unwrap().insert(lws.name_any(), weight);
        }
    });
    (task, seen)
}

#[test]
fn rollout_disaggregatedset_partition_int_steps_with_slices_lose_no_request() -> anyhow::Result<()>
{
    on_big_stack(|| {
        with_ns("rollout-pd-slices-partition", |ns| async move {
            let (set, service, mut rollout) =
                example_at("examples/rollout-disaggregatedset-partition.yaml")?;
            let mut set = with_image(&set, "vllm:1");
            set["spec"]["slices"] = json!(SLICES);
            // Step 1 moves one group of each role in each slice; step 2 the rest of them.
            rollout["spec"]["strategy"]["canary"]["steps"][1]["replicas"] = json!(GROUPS);
            apply_set(&ns, &set).await?;
            let stable = wait_one_revision_in(&ns, SLICES, None).await?;
            let svc: Service = serde_json::from_value(service)?;
            ns.api::<Service>()
                .create(&PostParams::default(), &svc)
                .await?;
            create_route_to(&ns, ROUTE, SERVICE).await?;
            create_rollout(&ns, &rollout).await?;
            let stable_prefill: Vec<String> = (0..SLICES)
                .map(|slice| format!("{SET}-{slice}-{stable}-prefill"))
                .collect();
            let traffic = match traffic_or_skip("rollout_disaggregatedset_slices (requests)") {
                None => None,
                Some(t) => {
                    let plain = RequestSpec::new(&host(&ns));
                    let want: Vec<&str> = stable_prefill.iter().map(String::as_str).collect();
                    crate::traffic_driver::wait_until_served(
                        &t,
                        &plain,
                        |o| o.lws.clone(),
                        &want,
                        WAIT,
                    )
                    .await?;
                    let old = stable_prefill.clone();
                    let is_new = move |o: &Outcome| {
                        o.lws
                            .as_ref()
                            .is_some_and(|l| l.starts_with(&format!("{SET}-")) && !old.contains(l))
                    };
                    Some(ReleaseTraffic::start(&t, plain, None, 50, is_new))
                }
            };

            let mut next = with_image(&set, "vllm:2");
            next["spec"]["slices"] = json!(SLICES);
            apply_set(&ns, &next).await?;
            let r = wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;
            let lws = pair_lws_by_slice(&ns).await?;
            ensure!(
                lws.len() == 4 * SLICES && lws.iter().all(|l| l.3 == 1 && l.4 == 1),
                "step 1: in each slice one group of each role moved, one left on the stable \
                 pair, all ready: {lws:?}"
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
            wait_canary_weight(&ns, 50).await?;
            if let Some(t) = &traffic {
                t.assert_step(50, 200).await?;
            }

            // Step 2 moves every stable group of every slice: everything goes to the new pair
            // before they go. Its int is not "100%", so it pauses too.
            let (going_watch, going) = watch_going(&ns, &stable);
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "paused at step 2", paused_at(2)).await?;
            approve_named(&ns, ROLLOUT).await?;
            wait_rollout_named(&ns, ROLLOUT, "finished", finished("True")).await?;
            wait_one_revision_in(&ns, SLICES, Some(&stable)).await?;
            going_watch.abort();
            let going = going.lock().unwrap().clone();
            ensure!(
                going.len() == 2 * SLICES && going.values().all(|w| *w == 100),
                "every stable LWS of every slice went only while the route gave the new pair \
                 everything: {going:?}"
            );
            if let Some(t) = traffic {
                let all = t.finish().await?;
                eprintln!(
                    "two-slice pair partition release under load: {}",
                    all.summary()
                );
            }
            Ok(())
        })
    })
}
