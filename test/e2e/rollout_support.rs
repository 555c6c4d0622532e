//! Helpers shared by the Rollout e2e tests: a stable LWS with a Service and an HTTPRoute, a
//! Rollout over it, waits on the Rollout's status, the approval `kubectl-kruise rollout approve`
//! sends, and read-backs of the canary LWS, the route's weights and the Services' endpoints.

use std::{collections::BTreeSet, time::Duration};

use anyhow::{Context, bail};
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{
    core::v1::{Event, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use lws_rollout::api::{BatchRelease, LeaderWorkerSet, Rollout};
use serde_json::{Value, json};

pub use crate::harness::condition;
use crate::harness::{TestNs, wait_for, wait_for_all};
use crate::lws_support::{
    NAME, WORKER_INDEX, apply, available_with, create_available, image, pod_ready, settled_pods,
};

/// Name of the stable LWS (and of the Rollout and its BatchRelease) in every Rollout test.
pub const STABLE: &str = "vllm";
/// The user's Service in front of the stable leaders.
pub const SERVICE: &str = "vllm-api";
/// The user's HTTPRoute.
pub const ROUTE: &str = "vllm-route";
/// The label that marks a canary LWS (value: the stable LWS).
pub const CANARY_LABEL: &str = "rollouts.kruise.io/canary-deployment";
/// Bound for anything the controllers do: a whole release takes seconds on an idle machine, and
/// this holds on a loaded 2-core one where the suite runs dozens of tests at once.
pub const WAIT: Duration = Duration::from_secs(120);

/// The stable LWS: `replicas` groups of 2 pods, a leader template labelled `role: leader`.
pub fn stable_lws(replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": STABLE},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2,
            "leaderTemplate": {"metadata": {"labels": {"app": "vllm", "role": "leader"}},
                "spec": {"containers": [{"name": "model", "image": image,
                    "ports": [{"name": "http", "containerPort": 8000}]}]}},
            "workerTemplate": {"metadata": {"labels": {"app": "vllm", "role": "worker"}},
                "spec": {"containers": [{"name": "model", "image": image}]}}}}
    })
}

/// `lws` with every pod unready for `delay` after it starts (a Go duration; the cluster's KWOK
/// honours the annotation, `test/cluster/up.sh`).
pub fn with_ready_delay(lws: &Value, delay: &str) -> Value {
    with_pod_annotation(lws, "lws-rollout.test/ready-delay", delay)
}

/// `lws` with every pod answering for `ms` after its deletion (a server's preStop drain within
/// its termination grace period; the test's pod agent honours the annotation,
/// `test/podagent/src/pods.rs`). Without it a deleted pod drains for the agent's default, 5 s.
pub fn with_drain_ms(lws: &Value, ms: u64) -> Value {
    with_pod_annotation(lws, "traffic.lws-rollout.test/drain-ms", &ms.to_string())
}

/// `lws` with annotation `key` set to `value` on both pod templates.
fn with_pod_annotation(lws: &Value, key: &str, value: &str) -> Value {
    let mut lws = lws.clone();
    for t in ["leaderTemplate", "workerTemplate"] {
        lws["spec"]["leaderWorkerTemplate"][t]["metadata"]["annotations"][key] = json!(value);
    }
    lws
}

/// The stable LWS with both templates on `image`.
pub fn with_image(lws: &Value, image: &str) -> Value {
    let mut lws = lws.clone();
    for t in ["leaderTemplate", "workerTemplate"] {
        lws["spec"]["leaderWorkerTemplate"][t]["spec"]["containers"][0]["image"] = json!(image);
    }
    lws
}

/// A canary Rollout of [`STABLE`] with these steps and traffic routing.
pub fn rollout(steps: Value, routing: Option<Value>) -> Value {
    let mut canary = json!({
        "enableExtraWorkloadForCanary": true,
        "patchPodTemplateMetadata": {"labels": {"release": "canary"}, "annotations": {"rollouts.kruise.io/origin": "canary"}},
        "steps": steps,
    });
    if let Some(routing) = routing {
        canary["trafficRoutings"] = json!([routing]);
    }
    json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": STABLE},
        "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": STABLE},
                 "strategy": {"canary": canary}}
    })
}

/// Blue-green steps: the new side grows by one group with no traffic, then to every group
/// with all of it; both pause for approval.
pub fn blue_green_two_steps() -> Value {
    json!([
        {"replicas": 1, "traffic": "0%", "pause": {}},
        {"replicas": "100%", "traffic": "100%", "pause": {}}
    ])
}

/// A blue-green Rollout of [`STABLE`] with these steps and traffic routing.
pub fn blue_green_rollout(steps: Value, routing: Option<Value>) -> Value {
    let mut r = rollout(steps.clone(), routing.clone());
    let mut bg = json!({"steps": steps});
    if let Some(routing) = routing {
        bg["trafficRoutings"] = json!([routing]);
    }
    r["spec"]["strategy"] = json!({"blueGreen": bg});
    r
}

/// The grace period of the tests' traffic routings: the time a release waits after a traffic
/// change before it removes what the old routes served. Traefik applies a change well within a
/// second when the machine is idle, but can take two while the suite's concurrent tests keep
/// both cores busy (and the grace counts from the release's decision, before its route write
/// returns); a test asserts the release's order (traffic first, then removal), not the proxy's
/// speed.
pub const GRACE_SECONDS: u32 = 3;

/// The routing through [`SERVICE`] and [`ROUTE`], with the tests' grace period.
pub fn gateway_routing() -> Value {
    json!({"service": SERVICE, "gracePeriodSeconds": GRACE_SECONDS, "gateway": {"httpRouteName": ROUTE}})
}

/// The user's Service selector: the leaders of every LWS of the app (canary leaders copy the
/// labels, so the release must narrow it).
pub fn users_selector() -> std::collections::BTreeMap<String, String> {
    [("app", "vllm"), ("role", "leader")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The user's Service: [`users_selector`], port 80 to the leaders' 8000.
pub async fn create_service(ns: &TestNs) -> anyhow::Result<()> {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": SERVICE},
        "spec": {"selector": users_selector(), "ports": [{"name": "http", "port": 80, "targetPort": 8000}]}
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    Ok(())
}

/// The Host the test's route serves: `<namespace>.lws.test`.
pub fn host(ns: &TestNs) -> String {
    format!("{}.lws.test", ns.name)
}

/// The user's HTTPRoute: everything for [`host`] to [`SERVICE`], on the cluster's Gateway when
/// the traffic layer runs (else on a Gateway that does not exist: the route is only data then).
pub async fn create_route(ns: &TestNs) -> anyhow::Result<()> {
    create_route_named(ns, ROUTE).await
}

/// [`create_route`] under another name (an example's route).
pub async fn create_route_named(ns: &TestNs, name: &str) -> anyhow::Result<()> {
    create_route_to(ns, name, SERVICE).await
}

/// The HTTPRoute `name`: everything for [`host`] to port 80 of `service`.
pub async fn create_route_to(ns: &TestNs, name: &str, service: &str) -> anyhow::Result<()> {
    let parent = match crate::traffic_driver::traffic() {
        Ok(t) => json!({"name": t.gateway_name, "namespace": t.gateway_namespace}),
        Err(_) => json!({"name": "gw"}),
    };
    let route: HttpRoute = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"parentRefs": [parent], "hostnames": [host(ns)],
                 "rules": [{"backendRefs": [{"name": service, "port": 80}]}]}
    }))?;
    ns.api::<HttpRoute>()
        .create(&PostParams::default(), &route)
        .await?;
    Ok(())
}

/// Creates a Rollout (JSON or typed) and waits until the controller has it Healthy, so the LWS
/// webhook knows the Rollout controls the LWS before the test changes the template. An error
/// when the API server refuses it.
pub async fn create_rollout(ns: &TestNs, rollout: &impl serde::Serialize) -> anyhow::Result<()> {
    let name = submit_rollout(ns, rollout).await?;
    wait_rollout_named(ns, &name, "Healthy", |r| phase(r) == "Healthy").await?;
    Ok(())
}

/// Creates a Rollout without waiting for it (one that is to be refused a workload, or whose
/// controller does not run yet); returns its name.
pub async fn submit_rollout(
    ns: &TestNs,
    rollout: &impl serde::Serialize,
) -> anyhow::Result<String> {
    let r: Rollout = serde_json::from_value(serde_json::to_value(rollout)?)?;
    ns.api::<Rollout>()
        .create(&PostParams::default(), &r)
        .await?;
    Ok(r.metadata.name.unwrap_or_default())
}

/// The stable LWS (available), its Service and HTTPRoute, and `rollout` reading Healthy.
pub async fn release_setup(ns: &TestNs, lws: &Value, rollout: &Value) -> anyhow::Result<()> {
    create_available(ns, lws).await?;
    create_service(ns).await?;
    create_route(ns).await?;
    create_rollout(ns, rollout).await
}

/// `status.phase`.
pub fn phase(r: &Rollout) -> String {
    r.status
        .as_ref()
        .map(|s| s.phase.to_string())
        .unwrap_or_default()
}

/// The step fields of whichever sub-status the Rollout has (`canaryStatus`, else
/// `blueGreenStatus`, as kubectl-kruise reads them).
pub fn common(r: &Rollout) -> Option<&lws_rollout::api::rollout::CommonStatus> {
    let s = r.status.as_ref()?;
    s.canary_status
        .as_ref()
        .map(|c| &c.common)
        .or(s.blue_green_status.as_ref().map(|b| &b.common))
}

/// `(currentStepIndex, currentStepState)` of the sub-status.
pub fn step(r: &Rollout) -> (i32, String) {
    common(r)
        .map(|c| (c.current_step_index, c.current_step_state.to_string()))
        .unwrap_or_default()
}

/// `finalisingStep` of the sub-status.
pub fn finalising(r: &Rollout) -> String {
    common(r)
        .map(|c| c.finalising_step.to_string())
        .unwrap_or_default()
}

/// Whether the status was computed from the current spec.
pub fn observed(r: &Rollout) -> bool {
    r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation
}

/// Healthy, Completed, Succeeded with `succeeded` (`"True"` / `"False"`).
pub fn finished(succeeded: &'static str) -> impl Fn(&Rollout) -> bool {
    move |r: &Rollout| {
        phase(r) == "Healthy"
            && step(r).1 == "Completed"
            && condition(r, "Succeeded").map(|c| c.0).as_deref() == Some(succeeded)
    }
}

/// Waits until the Rollout [`STABLE`] satisfies `cond`; `what` names the wait in the error.
pub async fn wait_rollout(
    ns: &TestNs,
    what: &str,
    cond: impl Fn(&Rollout) -> bool,
) -> anyhow::Result<Rollout> {
    wait_rollout_named(ns, STABLE, what, cond).await
}

/// Waits (watch-based, [`WAIT`]) until the Rollout `name` has a status computed from its
/// current spec that satisfies `cond`; `what` names the wait in the error.
pub async fn wait_rollout_named(
    ns: &TestNs,
    name: &str,
    what: &str,
    cond: impl Fn(&Rollout) -> bool,
) -> anyhow::Result<Rollout> {
    wait_for(
        &ns.api::<Rollout>(),
        name,
        WAIT,
        move |r: Option<&Rollout>| r.is_some_and(|r| observed(r) && cond(r)),
    )
    .await
    .with_context(|| format!("Rollout {name}: {what}"))?
    .with_context(|| format!("Rollout {name} gone"))
}

/// At step `index`, paused for approval.
pub fn paused_at(index: i32) -> impl Fn(&Rollout) -> bool {
    move |r: &Rollout| phase(r) == "Progressing" && step(r) == (index, "StepPaused".to_string())
}

/// Waits for step `index` in state StepPaused.
pub async fn wait_paused_at(ns: &TestNs, index: i32) -> anyhow::Result<Rollout> {
    wait_rollout(ns, &format!("paused at step {index}"), move |r| {
        step(r) == (index, "StepPaused".to_string())
    })
    .await
}

/// The release is over: the Rollout Healthy with its steps completed, and the stable LWS no
/// longer held.
pub async fn wait_released(ns: &TestNs) -> anyhow::Result<Rollout> {
    let r = wait_rollout(ns, "Healthy after the release", |r| {
        phase(r) == "Healthy" && step(r).1 == "Completed"
    })
    .await?;
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        |l: Option<&LeaderWorkerSet>| {
            l.is_some_and(|l| {
                !l.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(lws_rollout::rollout::names::STABLE_REVISION))
            })
        },
    )
    .await?;
    Ok(r)
}

/// The exact status patch `kubectl-kruise rollout approve` sends (merge patch on the status
/// subresource, no resourceVersion).
pub async fn approve(ns: &TestNs) -> anyhow::Result<()> {
    approve_named(ns, STABLE).await
}

/// [`approve`] of the Rollout `name`: kubectl-kruise reads it first and patches the
/// sub-status it has (`canaryStatus`, else `blueGreenStatus`).
pub async fn approve_named(ns: &TestNs, name: &str) -> anyhow::Result<()> {
    let api = ns.api::<Rollout>();
    let r = api.get(name).await?;
    let field = match r.status.as_ref().map(|s| s.canary_status.is_some()) {
        Some(false) => "blueGreenStatus",
        _ => "canaryStatus",
    };
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {field: {"currentStepState": "StepReady"}}})),
    )
    .await?;
    Ok(())
}

/// Every canary LWS of [`STABLE`].
pub async fn canaries(ns: &TestNs) -> anyhow::Result<Vec<LeaderWorkerSet>> {
    Ok(ns
        .api::<LeaderWorkerSet>()
        .list(&ListParams::default().labels(&format!("{CANARY_LABEL}={STABLE}")))
        .await?
        .items)
}

/// The single canary LWS.
pub async fn the_canary(ns: &TestNs) -> anyhow::Result<LeaderWorkerSet> {
    let mut all = canaries(ns).await?;
    anyhow::ensure!(all.len() == 1, "one canary LWS, found {}", all.len());
    Ok(all.remove(0))
}

/// The BatchRelease of the Rollout, if any.
pub async fn batch_release(ns: &TestNs) -> anyhow::Result<Option<BatchRelease>> {
    Ok(ns.api::<BatchRelease>().get_opt(STABLE).await?)
}

/// `(backend name, weight)` of every backendRef of every rule of the route.
pub async fn route_backends(ns: &TestNs) -> anyhow::Result<Vec<Vec<(String, Option<i64>)>>> {
    let route = serde_json::to_value(ns.api::<HttpRoute>().get(ROUTE).await?)?;
    Ok(route["spec"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|rule| {
            rule["backendRefs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|b| {
                    (
                        b["name"].as_str().unwrap_or_default().to_string(),
                        b["weight"].as_i64(),
                    )
                })
                .collect()
        })
        .collect())
}

/// The route as the user wrote it: one rule, one backend (the CRD defaults its weight to 1).
pub fn users_route() -> Vec<Vec<(String, Option<i64>)>> {
    vec![vec![(SERVICE.to_string(), Some(1))]]
}

/// The route with `canary`% to the canary Service.
pub fn split_route(canary: i64) -> Vec<Vec<(String, Option<i64>)>> {
    vec![vec![
        (SERVICE.to_string(), Some(100 - canary)),
        (format!("{SERVICE}-canary"), Some(canary)),
    ]]
}

/// Waits until the route reads `want`.
pub async fn wait_route(ns: &TestNs, want: Vec<Vec<(String, Option<i64>)>>) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let api = ns.api::<HttpRoute>();
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher::watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={ROUTE}")),
    )
    .applied_objects()
    .default_backoff();
    let mut stream = std::pin::pin!(stream);
    loop {
        if route_backends(ns).await? == want {
            return Ok(());
        }
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(_)) => continue,
            Ok(None) => bail!("route watch ended"),
            Err(_) => bail!(
                "route never read {want:?}; last: {:?}",
                route_backends(ns).await?
            ),
        }
    }
}

/// Ready leaders' IPs of an LWS.
pub async fn ready_leader_ips(ns: &TestNs, lws: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{NAME}={lws},{WORKER_INDEX}=0")))
        .await?
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect())
}

/// Waits until the ready endpoint addresses of a Service equal `want`.
pub async fn wait_endpoints(
    ns: &TestNs,
    service: &str,
    want: &BTreeSet<String>,
) -> anyhow::Result<()> {
    wait_for_all(
        &ns.api::<EndpointSlice>(),
        &format!("kubernetes.io/service-name={service}"),
        WAIT,
        |slices| {
            let ready: BTreeSet<String> = slices
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| e.addresses.iter().cloned())
                .collect();
            &ready == want
        },
    )
    .await
    .with_context(|| format!("endpoints of {service} = {want:?}"))?;
    Ok(())
}

/// Reasons of the Events on the Rollout, in order.
pub async fn event_reasons(ns: &TestNs) -> anyhow::Result<Vec<(String, String)>> {
    let mut events = ns
        .api::<Event>()
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=Rollout,involvedObject.name={STABLE}"
        )))
        .await?
        .items;
    events.sort_by_key(|e| e.metadata.creation_timestamp.clone());
    Ok(events
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

/// Waits until an Event on the Rollout has `reason` and a message containing `text`.
pub async fn wait_event(ns: &TestNs, reason: &str, text: &str) -> anyhow::Result<String> {
    let found = wait_for_all(&ns.api::<Event>(), "", WAIT, |events| {
        events.iter().any(|e| {
            e.involved_object.name.as_deref() == Some(STABLE)
                && e.reason.as_deref() == Some(reason)
                && e.message.as_deref().is_some_and(|m| m.contains(text))
        })
    })
    .await
    .with_context(|| format!("an Event {reason} containing {text:?}"))?;
    Ok(found
        .iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .and_then(|e| e.message.clone())
        .unwrap_or_default())
}

/// Sets the Rollout's `spec.disabled`, as a user would with a merge patch.
pub async fn set_disabled(ns: &TestNs, disabled: bool) -> anyhow::Result<()> {
    ns.api::<Rollout>()
        .patch(
            STABLE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disabled": disabled}})),
        )
        .await?;
    Ok(())
}

/// Applies the stable LWS (as the user).
pub async fn apply_lws(ns: &TestNs, lws: &Value) -> anyhow::Result<()> {
    apply(ns, lws).await
}

/// The stable LWS released: `groups` groups Available on the current template, every pod
/// (two a group) settled on `image`.
pub async fn released_to(ns: &TestNs, groups: i32, want: &str) -> anyhow::Result<()> {
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        available_with(groups, groups),
    )
    .await?;
    let pods = settled_pods(ns, STABLE, 2 * groups as usize).await?;
    anyhow::ensure!(
        pods.iter().all(|p| image(p) == want),
        "the released stable LWS runs {:?}, not {want}",
        pods.iter().map(image).collect::<Vec<_>>()
    );
    Ok(())
}

/// Nothing of a release is left: no BatchRelease, no canary LWS, no canary Service, the
/// user's route and Service selector as they were, no hold on the stable LWS.
pub async fn nothing_left(ns: &TestNs) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut left = Vec::new();
        if batch_release(ns).await?.is_some() {
            left.push("BatchRelease".to_string());
        }
        let c = canaries(ns).await?;
        if !c.is_empty() {
            left.push(format!("{} canary LWS", c.len()));
        }
        let svc = ns.api::<Service>();
        if svc.get_opt(&format!("{SERVICE}-canary")).await?.is_some() {
            left.push("canary Service".into());
        }
        let stable = svc.get(SERVICE).await?;
        let selector = stable.spec.and_then(|s| s.selector).unwrap_or_default();
        if selector != users_selector() {
            left.push(format!("stable selector {selector:?}"));
        }
        if stable
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .any(|k| k.starts_with("lws-rollout.x-k8s.io/"))
        {
            left.push("annotation on the stable Service".into());
        }
        if ns.api::<HttpRoute>().get_opt(ROUTE).await?.is_some()
            && route_backends(ns).await? != users_route()
        {
            left.push(format!("route {:?}", route_backends(ns).await?));
        }
        if let Some(lws) = ns.api::<LeaderWorkerSet>().get_opt(STABLE).await? {
            let annotations = lws.metadata.annotations.unwrap_or_default();
            if annotations.contains_key("rollouts.kruise.io/stable-revision") {
                left.push("hold on the stable LWS".into());
            }
            if annotations.contains_key("lws-rollout.x-k8s.io/release-partition") {
                left.push("release partition on the stable LWS".into());
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("left behind: {left:?}");
        }
        // Several objects with no single watch between them: re-check on a short tick, bounded
        // by the deadline above.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs a long test on a thread of its own with a 64 MiB stack and its own runtime: a whole
/// release in one async body polls deeper than a test thread's 2 MiB allow in debug builds.
pub fn on_big_stack<F, Fut>(test: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    // Named as the test (libtest names its thread so): the suite's timing record reads it.
    let name = std::thread::current().name().unwrap_or("?").to_string();
    let thread = std::thread::Builder::new()
        .name(name)
        .stack_size(64 << 20)
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(test())
        })?;
    match thread.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Waits until the canary LWSs of [`STABLE`] satisfy `cond`.
pub async fn wait_for_all_canary(
    ns: &TestNs,
    cond: impl Fn(&[LeaderWorkerSet]) -> bool,
) -> anyhow::Result<()> {
    crate::harness::wait_for_all(
        &ns.api::<LeaderWorkerSet>(),
        &format!("{CANARY_LABEL}={STABLE}"),
        WAIT,
        |c| {
            let c: Vec<LeaderWorkerSet> = c.iter().map(|l| l.as_ref().clone()).collect();
            cond(&c)
        },
    )
    .await
    .context("canary LWS")?;
    Ok(())
}

/// The prefill/decode pair of examples/rollout-disaggregatedset.yaml as the pair release tests
/// drive it: the example's objects, the set's LWSs per role and revision, and the route's
/// canary weight.
pub mod pair {
    use anyhow::Context;
    use gateway_api::apis::standard::httproutes::HttpRoute;
    use kube::{
        ResourceExt,
        api::{ListParams, Patch, PatchParams},
    };
    use lws_rollout::api::{DisaggregatedSet, LeaderWorkerSet};
    use serde_json::{Value, json};

    use super::WAIT;
    use crate::harness::{TestNs, wait_for_all, yaml_documents};

    /// The LWSs of `revision` of the set as each is seen going (scaled to 0, being deleted,
    /// or gone), every time it is seen so; the caller keeps the first sight it cares about.
    pub fn lws_going(
        ns: &TestNs,
        revision: &str,
    ) -> impl futures::Stream<Item = LeaderWorkerSet> + Send + use<> {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let labels = format!("{SET_LABEL}={SET},{REVISION_LABEL}={revision}");
        watcher::watcher(
            ns.api::<LeaderWorkerSet>(),
            watcher::Config::default().labels(&labels),
        )
        .default_backoff()
        .filter_map(|event| async move {
            match event.ok()? {
                watcher::Event::Delete(l) => Some(l),
                watcher::Event::Apply(l) | watcher::Event::InitApply(l)
                    if l.metadata.deletion_timestamp.is_some() || l.spec.replicas == Some(0) =>
                {
                    Some(l)
                }
                _ => None,
            }
        })
    }

    /// The example's objects' names.
    pub const SET: &str = "pd";
    pub const SERVICE: &str = "pd-prefill";
    pub const ROUTE: &str = "pd";
    pub const ROLLOUT: &str = "pd";
    /// The set's labels on its LWSs and pods.
    pub const SET_LABEL: &str = "disaggregatedset.x-k8s.io/name";
    pub const ROLE_LABEL: &str = "disaggregatedset.x-k8s.io/role";
    pub const REVISION_LABEL: &str = "disaggregatedset.x-k8s.io/revision";
    /// Groups per role in the example.
    pub const GROUPS: i32 = 2;
    /// Decode pods become ready this long after they start: a new pair's prefill is ready well
    /// before its decode, the moment a release must not send it traffic.
    pub const DECODE_READY_DELAY: &str = "3s";

    /// The example's DisaggregatedSet, Service and Rollout, as shipped.
    pub fn example() -> anyhow::Result<(Value, Value, Value)> {
        example_at("examples/rollout-disaggregatedset.yaml")
    }

    /// A pair example's DisaggregatedSet, Service and Rollout, as shipped in `path` (every
    /// pair example names its objects as [`example`]'s).
    pub fn example_at(path: &str) -> anyhow::Result<(Value, Value, Value)> {
        let docs = yaml_documents(path)?;
        let kind = |k: &str| {
            docs.iter()
                .find(|d| d["kind"] == k)
                .cloned()
                .with_context(|| format!("the example has a {k}"))
        };
        Ok((
            kind("DisaggregatedSet")?,
            kind("Service")?,
            kind("Rollout")?,
        ))
    }

    /// `set` with every role on `image`, decode pods ready only after [`DECODE_READY_DELAY`].
    pub fn with_image(set: &Value, image: &str) -> Value {
        let mut set = set.clone();
        for role in set["spec"]["roles"].as_array_mut().into_iter().flatten() {
            let decode = role["name"] == "decode";
            let template = &mut role["spec"]["leaderWorkerTemplate"]["workerTemplate"];
            template["spec"]["containers"][0]["image"] = json!(image);
            if decode {
                template["metadata"]["annotations"]["lws-rollout.test/ready-delay"] =
                    json!(DECODE_READY_DELAY);
            }
        }
        set
    }

    /// Applies the set as its owner would (server-side apply, the user's field manager).
    pub async fn apply_set(ns: &TestNs, set: &Value) -> anyhow::Result<()> {
        ns.api::<DisaggregatedSet>()
            .patch(
                SET,
                &PatchParams::apply("e2e-user").force(),
                &Patch::Apply(set),
            )
            .await?;
        Ok(())
    }

    /// The set's LWSs as (role, revision, spec replicas, ready groups), sorted.
    pub async fn pair_lws(ns: &TestNs) -> anyhow::Result<Vec<(String, String, i32, i32)>> {
        let mut out: Vec<_> = pair_lws_by_slice(ns)
            .await?
            .into_iter()
            .map(|(_, role, revision, replicas, ready)| (role, revision, replicas, ready))
            .collect();
        out.sort();
        Ok(out)
    }

    /// The set's LWSs as (slice, role, revision, spec replicas, ready groups), sorted.
    pub async fn pair_lws_by_slice(
        ns: &TestNs,
    ) -> anyhow::Result<Vec<(String, String, String, i32, i32)>> {
        let mut out: Vec<_> = ns
            .api::<LeaderWorkerSet>()
            .list(&ListParams::default().labels(&format!("{SET_LABEL}={SET}")))
            .await?
            .items
            .iter()
            .map(|l| {
                let label = |k: &str| l.labels().get(k).cloned().unwrap_or_default();
                (
                    label(lws_rollout::api::disaggregatedset::SLICE_LABEL),
                    label(ROLE_LABEL),
                    label(REVISION_LABEL),
                    l.spec.replicas.unwrap_or(1),
                    l.status
                        .as_ref()
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0),
                )
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Waits until the set runs one revision (not `not`), every role at [`GROUPS`] ready
    /// groups; returns it.
    pub async fn wait_one_revision(ns: &TestNs, not: Option<&str>) -> anyhow::Result<String> {
        wait_one_revision_in(ns, 1, not).await
    }

    /// [`wait_one_revision`] for a set of `slices` slices: every role of every slice.
    pub async fn wait_one_revision_in(
        ns: &TestNs,
        slices: usize,
        not: Option<&str>,
    ) -> anyhow::Result<String> {
        let lws = wait_for_all(
            &ns.api::<LeaderWorkerSet>(),
            &format!("{SET_LABEL}={SET}"),
            WAIT,
            |all| {
                let revisions: std::collections::BTreeSet<_> = all
                    .iter()
                    .filter_map(|l| l.labels().get(REVISION_LABEL))
                    .collect();
                all.len() == 2 * slices
                    && revisions.len() == 1
                    && revisions.iter().all(|r| Some(r.as_str()) != not)
                    && all.iter().all(|l| {
                        l.spec.replicas == Some(GROUPS)
                            && l.status.as_ref().is_some_and(|s| {
                                s.ready_replicas == Some(GROUPS)
                                    && s.observed_generation == l.metadata.generation
                            })
                    })
            },
        )
        .await
        .context("the set runs one revision, every role ready")?;
        Ok(lws[0].labels()[REVISION_LABEL].clone())
    }

    /// The canary weight of the route's first rule (0 without a canary backend).
    pub fn canary_weight(route: &HttpRoute) -> i64 {
        let route = serde_json::to_value(route).unwrap_or_default();
        route["spec"]["rules"][0]["backendRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["name"] == format!("{SERVICE}-canary"))
            .filter_map(|b| b["weight"].as_i64())
            .sum()
    }

    /// The route's canary weight now (0 when the route has none, or is gone).
    pub async fn canary_weight_now(ns: &TestNs) -> anyhow::Result<i64> {
        Ok(ns
            .api::<HttpRoute>()
            .get_opt(ROUTE)
            .await?
            .as_ref()
            .map_or(0, canary_weight))
    }

    /// Waits until the route gives the new pair `weight`.
    pub async fn wait_canary_weight(ns: &TestNs, weight: i64) -> anyhow::Result<()> {
        crate::harness::wait_for(
            &ns.api::<HttpRoute>(),
            ROUTE,
            WAIT,
            |r: Option<&HttpRoute>| r.map_or(0, canary_weight) == weight,
        )
        .await
        .with_context(|| format!("the route gives the new pair {weight}"))?;
        Ok(())
    }
}
