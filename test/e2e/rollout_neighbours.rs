//! A cluster that ran Kruise Rollout, moving to lws-rollout, on a cluster of the test's own
//! (it replaces the Rollout CRD and installs webhook configurations, which the shared cluster's
//! tests must never see):
//!
//! 1. While Kruise Rollout is installed (its CRD serving v1alpha1, its webhook configurations),
//!    `helm install` of our chart fails and says why and what to do.
//! 2. What Kruise left — a Deployment's Rollout stored under Kruise's CRD, with its canary
//!    Service and an HTTPRoute that still splits to it — is never touched once our CRD and
//!    manager take over: not the Rollout (no finalizer, status or Event), not its traffic
//!    objects, byte for byte, while an LWS release runs beside it.
//! 3. A duplicate Rollout of the LWS, stored before our webhook could refuse it, is refused by
//!    the controller, and disabling then deleting it leaves the release of the Rollout that
//!    owns the LWS untouched: its hold, its canary and its route.

use std::time::Duration;

use anyhow::{Context, ensure};
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::{
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        core::v1::{Event, Service},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use lws_rollout::api::{LeaderWorkerSet, Rollout};
use serde_json::{Value, json};

use crate::harness::{TestNs, condition, eventually, wait_for};
use crate::isolated::{IsolatedCluster, ManagerProcess, repo};
use crate::lws_support::{apply, available_with};
use crate::rollout_support::*;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/lws-rollout");
const ROLLOUT_CRD: &str = "rollouts.rollouts.kruise.io";

/// Our Rollout CRD as checked in.
fn our_crd() -> anyhow::Result<CustomResourceDefinition> {
    let text = std::fs::read_to_string(repo().join("crds/rollouts.kruise.io_rollouts.yaml"))?;
    Ok(serde_yaml::from_str(&text)?)
}

/// Kruise Rollout's CRD as far as this test needs it: the same v1beta1 schema without our
/// LeaderWorkerSet-only rule, and v1alpha1 served beside it.
fn kruise_crd() -> anyhow::Result<CustomResourceDefinition> {
    let mut crd = serde_json::to_value(our_crd()?)?;
    let v1beta1 = &mut crd["spec"]["versions"][0];
    v1beta1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["workloadRef"]
        .as_object_mut()
        .context("workloadRef schema")?
        .remove("x-kubernetes-validations");
    let mut v1alpha1 = v1beta1.clone();
    v1alpha1["name"] = json!("v1alpha1");
    v1alpha1["storage"] = json!(false);
    v1alpha1["schema"] = json!({"openAPIV3Schema": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true}});
    crd["spec"]["versions"]
        .as_array_mut()
        .context("versions")?
        .push(v1alpha1);
    Ok(serde_json::from_value(crd)?)
}

async fn apply_crd(
    cluster: &IsolatedCluster,
    crd: &CustomResourceDefinition,
) -> anyhow::Result<()> {
    let api = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    let mut crd = crd.clone();
    crd.metadata.resource_version = None;
    api.patch(
        ROLLOUT_CRD,
        &PatchParams::apply("kubectl").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let want: Vec<String> = crd.spec.versions.iter().map(|v| v.name.clone()).collect();
    let kruises = want.iter().any(|v| v == "v1alpha1");
    wait_for(
        &api,
        ROLLOUT_CRD,
        Duration::from_secs(60),
        move |c: Option<&CustomResourceDefinition>| {
            c.is_some_and(|c| {
                let served: Vec<String> = c.spec.versions.iter().map(|v| v.name.clone()).collect();
                served == want
                    && condition(c, "Established").is_some_and(|(status, _, _)| status == "True")
            })
        },
    )
    .await?;
    served_as_applied(cluster, kruises).await
}

/// Waits until the API server validates Rollouts with the CRD just applied, not the one it
/// replaced. `Established` and the stored versions already held before the apply, and the
/// server swaps its handler for a changed CRD asynchronously: an object created in between met
/// the old schema (a Kruise Rollout for a Deployment refused by our CEL rule, seen under load).
/// The probe is that rule itself: a server-side dry run of a Deployment's Rollout, which
/// Kruise's CRD accepts and ours refuses.
async fn served_as_applied(cluster: &IsolatedCluster, kruises: bool) -> anyhow::Result<()> {
    let api = Api::<Rollout>::namespaced(cluster.client.clone(), "default");
    let probe: Rollout = serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": "schema-probe"},
        "spec": {
            "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "strategy": {"canary": {"steps": [{"replicas": "100%"}]}}
        }
    }))?;
    let probe = &probe;
    let api = &api;
    eventually(
        Duration::from_secs(60),
        "the API server to validate Rollouts with the CRD just applied (a Deployment's Rollout accepted)",
        || async move {
            let accepted = match api
                .create(
                    &PostParams {
                        dry_run: true,
                        ..Default::default()
                    },
                    probe,
                )
                .await
            {
                Ok(_) => true,
                Err(kube::Error::Api(e)) if e.code == 422 => false,
                Err(e) => return Err(e.into()),
            };
            Ok((accepted == kruises, accepted))
        },
    )
    .await?;
    Ok(())
}

/// `helm install` of our chart into the isolated cluster.
fn helm_install(cluster: &IsolatedCluster) -> anyhow::Result<(bool, String)> {
    let bin = std::env::var(crate::helm_chart::HELM_ENV)
        .context("LWS_E2E_HELM is not set: run the e2e tests with test/run-tests.sh")?;
    let out = std::process::Command::new(bin)
        .args([
            "install",
            "lws-rollout",
            CHART,
            "--namespace",
            "default",
            "--skip-crds",
        ])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// The Deployment Rollout Kruise left mid-release, and its traffic objects.
async fn kruises_leftovers(ns: &TestNs) -> anyhow::Result<()> {
    let web: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &web)
        .await?;
    let rollout: Rollout = serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": "web", "finalizers": ["rollouts.kruise.io/rollout"]},
        "spec": {
            "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "strategy": {"canary": {
                "steps": [{"replicas": 1, "traffic": "10%", "pause": {}}, {"replicas": "100%"}],
                "trafficRoutings": [{"service": "web", "gateway": {"httpRouteName": "web"}}]
            }}
        }
    }))?;
    let created = ns
        .api::<Rollout>()
        .create(&PostParams::default(), &rollout)
        .await?;
    ns.api::<Rollout>()
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "observedGeneration": 1, "phase": "Progressing", "message": "Rollout is in step(1/2), and you need manually confirm to enter the next step",
                "currentStepIndex": 1, "currentStepState": "StepPaused",
                "canaryStatus": {"currentStepIndex": 1, "nextStepIndex": 2, "currentStepState": "StepPaused",
                    "finalisingStep": "", "podTemplateHash": "7d9f8", "canaryRevision": "6c5b4",
                    "canaryReplicas": 1, "canaryReadyReplicas": 1}
            }})),
        )
        .await?;
    let owner = json!([{"apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout", "name": "web",
        "uid": created.uid().context("uid")?, "controller": true, "blockOwnerDeletion": true}]);
    let canary: Service = serde_json::from_value(json!({
        "metadata": {"name": "web-canary", "ownerReferences": owner},
        "spec": {"selector": {"app": "web", "pod-template-hash": "7d9f8"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &canary)
        .await?;
    let route: HttpRoute = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [
            {"name": "web", "port": 80, "weight": 90}, {"name": "web-canary", "port": 80, "weight": 10}]}]}
    }))?;
    ns.api::<HttpRoute>()
        .create(&PostParams::default(), &route)
        .await?;
    Ok(())
}

/// resourceVersions of what Kruise left (equal versions: not a byte written).
async fn leftovers_versions(ns: &TestNs) -> anyhow::Result<Vec<(String, String)>> {
    let rv = |name: &str, v: Option<String>| (name.to_string(), v.unwrap_or_default());
    Ok(vec![
        rv(
            "Rollout web",
            ns.api::<Rollout>().get("web").await?.resource_version(),
        ),
        rv(
            "Service web",
            ns.api::<Service>().get("web").await?.resource_version(),
        ),
        rv(
            "Service web-canary",
            ns.api::<Service>()
                .get("web-canary")
                .await?
                .resource_version(),
        ),
        rv(
            "HTTPRoute web",
            ns.api::<HttpRoute>().get("web").await?.resource_version(),
        ),
    ])
}

fn steps() -> Value {
    json!([{"replicas": 1, "traffic": "5%", "pause": {}}, {"replicas": "100%", "traffic": "100%"}])
}

#[test]
fn after_kruise_rollout_nothing_it_left_is_touched() -> anyhow::Result<()> {
    on_big_stack(|| IsolatedCluster::run("kruise-leftovers", &[], |c| Box::pin(story(c))))
}

async fn story(cluster: &IsolatedCluster) -> anyhow::Result<()> {
    let client = cluster.client.clone();

    // 1. Kruise Rollout installed: the chart refuses, naming what it found and what to do.
    apply_crd(cluster, &kruise_crd()?).await?;
    let none = json!({"metadata": {"name": ""}});
    let mut mutating: MutatingWebhookConfiguration = serde_json::from_value(none.clone())?;
    mutating.metadata.name = Some("kruise-rollout-mutating-webhook-configuration".into());
    let mut validating: ValidatingWebhookConfiguration = serde_json::from_value(none)?;
    validating.metadata.name = Some("kruise-rollout-validating-webhook-configuration".into());
    let mutating_api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let validating_api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    mutating_api
        .create(&PostParams::default(), &mutating)
        .await?;
    validating_api
        .create(&PostParams::default(), &validating)
        .await?;
    let (ok, said) = helm_install(cluster)?;
    ensure!(!ok, "installed next to Kruise Rollout: {said}");
    ensure!(
        said.contains(
            "found MutatingWebhookConfiguration kruise-rollout-mutating-webhook-configuration"
        ) && said.contains("lws-rollout cannot run next to Kruise Rollout")
            && said.contains("Uninstall Kruise Rollout first"),
        "{said}"
    );
    mutating_api
        .delete(&mutating.name_any(), &DeleteParams::default())
        .await?;
    validating_api
        .delete(&validating.name_any(), &DeleteParams::default())
        .await?;
    let (ok, said) = helm_install(cluster)?;
    ensure!(!ok, "installed over Kruise's CRD: {said}");
    ensure!(
        said.contains("found Kruise Rollout's CustomResourceDefinition rollouts.rollouts.kruise.io (it serves v1alpha1)"),
        "{said}"
    );

    // 2. What Kruise left in a namespace, and an LWS with two Rollouts stored before any
    //    webhook of ours could refuse the second.
    let ns = cluster.namespace("moving").await?;
    kruises_leftovers(&ns).await?;
    let v1 = stable_lws(2, "vllm:1");
    apply(&ns, &v1).await?;
    create_service(&ns).await?;
    create_route(&ns).await?;
    // No manager of ours runs yet: nothing makes them Healthy until step 3.
    submit_rollout(&ns, &rollout(steps(), Some(gateway_routing()))).await?;
    let mut again = rollout(steps(), Some(gateway_routing()));
    again["metadata"]["name"] = json!("vllm-again");
    submit_rollout(&ns, &again).await?;

    // 3. Kruise uninstalled: our CRD over its one; the chart installs; our manager runs.
    apply_crd(cluster, &our_crd()?).await?;
    let (ok, said) = helm_install(cluster)?;
    ensure!(ok, "helm install once Kruise Rollout is gone: {said}");
    let before = leftovers_versions(&ns).await?;
    let mut manager = ManagerProcess::start(cluster, "main", &[])?;
    wait_for(
        &ns.api::<LeaderWorkerSet>(),
        STABLE,
        WAIT,
        available_with(2, 2),
    )
    .await?;
    wait_rollout(&ns, "Healthy", |r| phase(r) == "Healthy").await?;
    let refused = wait_for(
        &ns.api::<Rollout>(),
        "vllm-again",
        WAIT,
        |r: Option<&Rollout>| {
            r.and_then(|r| condition(r, "Accepted"))
                .is_some_and(|c| c.0 == "False" && c.1 == "WorkloadConflict")
        },
    )
    .await?
    .context("vllm-again")?;
    ensure!(
        condition(&refused, "Accepted").is_some_and(|c| c.2.contains(STABLE)),
        "names the Rollout that owns the LWS: {:?}",
        refused.status
    );

    // The release, with the duplicate disabled and then deleted in the middle of it.
    apply_lws(&ns, &with_image(&v1, "vllm:2")).await?;
    wait_paused_at(&ns, 1).await?;
    wait_route(&ns, split_route(5)).await?;
    let canary = the_canary(&ns).await?.uid();
    let untouched = || async {
        let lws = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
        ensure!(
            lws.annotations()
                .contains_key(lws_rollout::rollout::names::STABLE_REVISION),
            "the hold was released"
        );
        ensure!(
            the_canary(&ns).await?.uid() == canary,
            "the canary was replaced"
        );
        ensure!(
            route_backends(&ns).await? == split_route(5),
            "the route moved"
        );
        let r = ns.api::<Rollout>().get(STABLE).await?;
        ensure!(step(&r) == (1, "StepPaused".into()), "{:?}", step(&r));
        Ok::<_, anyhow::Error>(())
    };
    ns.api::<Rollout>()
        .patch(
            "vllm-again",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disabled": true}})),
        )
        .await
        .context("a stored duplicate stays editable")?;
    wait_for(
        &ns.api::<Rollout>(),
        "vllm-again",
        WAIT,
        |r: Option<&Rollout>| {
            r.is_some_and(|r| {
                r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation
            })
        },
    )
    .await?;
    untouched().await?;
    ns.api::<Rollout>()
        .delete("vllm-again", &DeleteParams::default())
        .await?;
    wait_for(
        &ns.api::<Rollout>(),
        "vllm-again",
        WAIT,
        |r: Option<&Rollout>| r.is_none(),
    )
    .await
    .context("the duplicate's finalizer comes off")?;
    untouched().await?;
    approve(&ns).await?;
    wait_rollout(&ns, "finished", finished("True")).await?;
    nothing_left(&ns).await?;

    // 4. Kruise's leftovers: not a byte written, not an Event.
    ensure!(
        leftovers_versions(&ns).await? == before,
        "what Kruise left was written: {before:?} → {:?}",
        leftovers_versions(&ns).await?
    );
    let web = ns.api::<Rollout>().get("web").await?;
    ensure!(web.finalizers() == ["rollouts.kruise.io/rollout"]);
    ensure!(
        web.status.as_ref().map(|s| s.phase.as_str()) == Some("Progressing"),
        "{:?}",
        web.status
    );
    let events = ns
        .api::<Event>()
        .list(&ListParams::default().fields("involvedObject.kind=Rollout,involvedObject.name=web"))
        .await?;
    ensure!(
        events.items.is_empty(),
        "Events on Kruise's Rollout: {:?}",
        events.items
    );
    ensure!(
        manager.running(),
        "the manager exited: {}",
        manager.log_tail()
    );
    Ok(())
}
