//! Real releases driven from the command line: Kruise's own kubectl-kruise approves, pauses and
//! resumes a release of an LWS; kubectl-lws watches releases to their end (exit 0 on success,
//! 2 on a cancel) and drives approve, pause, resume, a fast jump back and a rollback; of a
//! prefill/decode pair, `summary` shows both sides of each role and `undo` puts the set's role
//! templates back to the held pair's.

use std::time::Duration;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use kube::api::PostParams;
use lws_rollout::api::{LeaderWorkerSet, Rollout};
use serde_json::json;

use crate::{
    harness::with_ns,
    lws_support::{create_available, lws},
    rollout_support::{
        condition, create_rollout, create_route_to, finished, on_big_stack,
        pair::{ROLLOUT, ROUTE, SERVICE, SET, apply_set, example, wait_one_revision, with_image},
        paused_at, phase, step, wait_released, wait_rollout, wait_rollout_named,
    },
    rollout_tools::{
        KRUISE_BIN_ENV, StatusWatch, images, kubectl_lws, kubectl_plugin, rollout, run, run_ok,
        tool,
    },
};

fn paused_spec(r: &Rollout) -> bool {
    r.spec.strategy.paused
}

#[tokio::test]
async fn kubectl_kruise_approves_pauses_and_resumes_a_release_and_kubectl_lws_status_sees_it_through()
-> anyhow::Result<()> {
    let Some(kruise) = tool(
        KRUISE_BIN_ENV,
        "kubectl-kruise",
        "test/tools/build-kruise.sh",
    ) else {
        return Ok(());
    };
    with_ns("cli-kruise", |ns| async move {
        let n = ns.name.clone();
        create_available(&ns, &lws("vllm", 2, 2, "model:v1")).await?;
        create_rollout(
            &ns,
            &rollout(
                "vllm",
                "vllm",
                json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            ),
        )
        .await?;

        crate::lws_support::apply(&ns, &lws("vllm", 2, 2, "model:v2")).await?;
        // Started after the template change: the hold is already on the LWS.
        let status = StatusWatch::start(&n, "vllm", "4m")?;
        wait_rollout(&ns, "paused at step 1", paused_at(1)).await?;

        run_ok(&kruise, &n, &["rollout", "pause", "rollout/vllm"]).await?;
        wait_rollout(&ns, "spec paused", paused_spec).await?;
        run_ok(&kruise, &n, &["rollout", "resume", "rollout/vllm"]).await?;
        let r = wait_rollout(&ns, "spec resumed", |r| !paused_spec(r)).await?;
        assert_eq!(
            step(&r),
            (1, "StepPaused".into()),
            "pause/resume do not move the step"
        );

        let out = run_ok(&kruise, &n, &["rollout", "approve", "rollout/vllm"]).await?;
        assert!(
            out.contains("approved"),
            "kubectl-kruise approve said: {out}"
        );
        wait_released(&ns).await?;

        let (code, lines) = status.finish(Duration::from_secs(60)).await?;
        assert_eq!(
            code, 0,
            "kubectl-lws rollout status exit code; lines: {lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l
                    .starts_with("Progressing | step 1/2 StepPaused | canary 1/1 groups ready")),
            "{lines:#?}"
        );
        assert!(lines.iter().any(|l| l.contains("(paused)")), "{lines:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("Healthy | step 2/2 Completed")),
            "{lines:#?}"
        );
        assert_eq!(
            lines.last().map(String::as_str),
            Some(format!("rollout {n}/vllm successfully rolled out").as_str())
        );
        assert!(images(&ns, "vllm").await?.iter().all(|i| i == "model:v2"));

        // kubectl-kruise reads our status with Kruise's Go types and refuses itself when
        // nothing waits for approval.
        let out = run(&kruise, &n, &["rollout", "approve", "rollout/vllm"]).await?;
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("StepPaused"),
            "{out:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn kubectl_lws_drives_a_release_jumps_back_and_rolls_it_back() -> anyhow::Result<()> {
    with_ns("cli-lws", |ns| async move {
        let n = ns.name.clone();
        let lws_bin = kubectl_lws();
        create_available(&ns, &lws("vllm", 3, 2, "model:v1")).await?;
        create_rollout(
            &ns,
            &rollout(
                "vllm",
                "vllm",
                json!([{"replicas": 1, "pause": {}}, {"replicas": 2, "pause": {}}, {"replicas": "100%"}]),
            ),
        )
        .await?;
        crate::lws_support::apply(&ns, &lws("vllm", 3, 2, "model:v2")).await?;
        let status = StatusWatch::start(&n, "vllm", "4m")?;
        wait_rollout(&ns, "paused at step 1", paused_at(1)).await?;

        run_ok(lws_bin, &n, &["rollout", "pause", "vllm"]).await?;
        wait_rollout(&ns, "spec paused", paused_spec).await?;
        run_ok(lws_bin, &n, &["rollout", "resume", "rollout/vllm"]).await?;
        wait_rollout(&ns, "spec resumed", |r| !paused_spec(r)).await?;

        run_ok(lws_bin, &n, &["rollout", "approve", "vllm"]).await?;
        let r = wait_rollout(&ns, "paused at step 2", paused_at(2)).await?;
        assert_eq!(r.status.as_ref().and_then(|s| s.canary_status.as_ref()).map(|c| c.canary_ready_replicas), Some(2));

        // Through kubectl's plugin lookup, as users run it.
        let summary = kubectl_plugin(&n, &["rollout", "describe", "vllm"]).await?;
        assert!(summary.contains("step 2/3 StepPaused"), "{summary}");
        assert!(summary.contains("->   2     2"), "the current step is marked:\n{summary}");
        assert!(summary.contains("stable: 3 groups wanted, 3 exist, 3 ready"), "{summary}");
        assert!(summary.contains("canary: 2 groups wanted, 2 exist, 2 ready"), "{summary}");
        assert!(summary.contains("held on revision"), "{summary}");

        // --fast: step 1 is the earlier step without traffic and with the most replicas.
        let out = run_ok(lws_bin, &n, &["rollout", "undo", "vllm", "--fast"]).await?;
        assert!(out.contains("rolled back to step 1"), "{out}");
        wait_rollout(&ns, "back at step 1, paused", paused_at(1)).await?;

        // Plain undo: the template goes back to the stable revision and the release is cancelled.
        let out = run_ok(lws_bin, &n, &["rollout", "undo", "vllm"]).await?;
        assert!(out.contains("template reverted"), "{out}");
        let r = wait_released(&ns).await?;
        assert_eq!(condition(&r, "Succeeded").map(|c| c.0).as_deref(), Some("False"), "a cancelled release");
        let lws_now = ns.api::<LeaderWorkerSet>().get("vllm").await?;
        let image = lws_now.spec.leader_worker_template.worker_template.spec.as_ref()
            .and_then(|s| s.containers.first()).and_then(|c| c.image.clone());
        assert_eq!(image.as_deref(), Some("model:v1"));
        assert!(images(&ns, "vllm").await?.iter().all(|i| i == "model:v1"));

        let (code, lines) = status.finish(Duration::from_secs(60)).await?;
        assert_eq!(code, 2, "status exits 2 on a cancel; lines: {lines:#?}");
        assert!(lines.iter().any(|l| l.starts_with("Progressing | step 2/3 StepPaused | canary 2/2")), "{lines:#?}");

        // Nothing waits for approval and nothing is held now: both refuse, exit 1.
        let out = run(lws_bin, &n, &["rollout", "approve", "vllm"]).await?;
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot approve"), "{out:?}");
        let out = run(lws_bin, &n, &["rollout", "undo", "vllm"]).await?;
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to undo"), "{out:?}");
        // The finished release: status returns at once.
        let out = run(lws_bin, &n, &["rollout", "status", "vllm", "--timeout", "30s"]).await?;
        assert_eq!(out.status.code(), Some(2), "the last release was cancelled: {out:?}");
        assert_eq!(phase(&r), "Healthy");
        Ok(())
    })
    .await
}

/// An LWS whose pods carry `app: vllm`, the selector of the Service the route sends to.
fn labelled_lws(image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
            "workerTemplate": {"metadata": {"labels": {"app": "vllm"}},
                "spec": {"containers": [{"name": "model", "image": image,
                    "ports": [{"name": "http", "containerPort": 8000}]}]}}}}
    })
}

#[tokio::test]
async fn kubectl_lws_summary_shows_the_split_of_the_live_route_and_fast_undo_follows_kruise()
-> anyhow::Result<()> {
    with_ns("cli-route", |ns| async move {
        let n = ns.name.clone();
        let lws_bin = kubectl_lws();
        create_available(&ns, &labelled_lws("model:v1")).await?;
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "api"},
            "spec": {"selector": {"app": "vllm"}, "ports": [{"name": "http", "port": 80, "targetPort": 8000}]}
        }))?;
        ns.api::<Service>().create(&PostParams::default(), &svc).await?;
        let route: HttpRoute = serde_json::from_value(json!({
            "metadata": {"name": "vllm"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "api", "port": 80}]}]}
        }))?;
        ns.api::<HttpRoute>().create(&PostParams::default(), &route).await?;
        let mut r = rollout(
            "vllm",
            "vllm",
            json!([{"replicas": 1, "traffic": "20%", "pause": {}}, {"replicas": 2, "traffic": "50%", "pause": {}}]),
        );
        r.spec.strategy.canary.as_mut().expect("canary").traffic_routings = Some(vec![serde_json::from_value(
            json!({"service": "api", "gateway": {"httpRouteName": "vllm"}, "gracePeriodSeconds": 0}),
        )?]);
        create_rollout(&ns, &r).await?;
        let summary = run_ok(lws_bin, &n, &["rollout", "summary", "vllm"]).await?;
        assert!(summary.contains("no canary backend: all to api"), "{summary}");

        crate::lws_support::apply(&ns, &labelled_lws("model:v2")).await?;
        wait_rollout(&ns, "paused at step 1", paused_at(1)).await?;
        let summary = run_ok(lws_bin, &n, &["rollout", "summary", "vllm"]).await?;
        assert!(summary.contains("traffic 20% |"), "{summary}");
        assert!(summary.contains("rule 0: canary 20% (api 80, api-canary 20)"), "{summary}");

        run_ok(lws_bin, &n, &["rollout", "approve", "vllm"]).await?;
        wait_rollout(&ns, "paused at step 2", paused_at(2)).await?;
        let summary = run_ok(lws_bin, &n, &["rollout", "summary", "vllm"]).await?;
        assert!(summary.contains("rule 0: canary 50% (api 50, api-canary 50)"), "{summary}");

        // Every earlier step sends traffic: kubectl-kruise's --fast has no step to pick, and
        // neither does kubectl-lws; a named step works.
        let out = run(lws_bin, &n, &["rollout", "undo", "vllm", "--fast"]).await?;
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--to-step"), "{out:?}");
        if let Some(kruise) = std::env::var(KRUISE_BIN_ENV).ok().filter(|k| !k.is_empty()) {
            let out = run(&kruise, &n, &["rollout", "undo", "rollout/vllm", "--fast"]).await?;
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("no previous step with no traffic"), "{out:?}");
        }
        run_ok(lws_bin, &n, &["rollout", "undo", "vllm", "--fast", "--to-step", "1"]).await?;
        wait_rollout(&ns, "back at step 1, paused", paused_at(1)).await?;
        let summary = run_ok(lws_bin, &n, &["rollout", "summary", "vllm"]).await?;
        assert!(summary.contains("rule 0: canary 20% (api 80, api-canary 20)"), "{summary}");

        run_ok(lws_bin, &n, &["rollout", "undo", "vllm"]).await?;
        wait_released(&ns).await?;
        let summary = run_ok(lws_bin, &n, &["rollout", "summary", "vllm"]).await?;
        assert!(summary.contains("no canary backend: all to api"), "restored:\n{summary}");
        Ok(())
    })
    .await
}

/// A pair release from the command line: `summary` shows the set, its hold and both sides of
/// each role; plain `undo` writes the held pair's role templates, read back from its LWSs, into
/// the set, so the release is cancelled and only the stable pair is left, on its own image;
/// a second `undo` finds nothing to undo.
#[test]
fn kubectl_lws_summary_and_undo_of_a_pair_release() -> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("cli-pair", |ns| async move {
            let n = ns.name.clone();
            let lws_bin = kubectl_lws();
            let (base, service, pair_rollout) = example()?;
            apply_set(&ns, &with_image(&base, "vllm:1")).await?;
            let stable = wait_one_revision(&ns, None).await?;
            let svc: Service = serde_json::from_value(service)?;
            ns.api::<Service>()
                .create(&PostParams::default(), &svc)
                .await?;
            create_route_to(&ns, ROUTE, SERVICE).await?;
            create_rollout(&ns, &pair_rollout).await?;
            apply_set(&ns, &with_image(&base, "vllm:2")).await?;
            wait_rollout_named(&ns, ROLLOUT, "paused at step 1", paused_at(1)).await?;

            let summary = run_ok(lws_bin, &n, &["rollout", "summary", ROLLOUT]).await?;
            for want in [
                format!("Workload DisaggregatedSet {SET}"),
                format!("held on revision {stable}"),
                "prefill: stable 2/2 groups ready, new 1/1 groups ready".to_string(),
                "decode: stable 2/2 groups ready, new 1/1 groups ready".to_string(),
                "->   1".to_string(),
            ] {
                assert!(summary.contains(&want), "{want:?} in:\n{summary}");
            }

            let out = run_ok(lws_bin, &n, &["rollout", "undo", ROLLOUT]).await?;
            assert!(
                out.contains(&format!("role templates reverted to revision {stable}")),
                "{out}"
            );
            let r = wait_rollout_named(&ns, ROLLOUT, "cancelled", finished("False")).await?;
            assert_eq!(phase(&r), "Healthy");
            assert_eq!(
                wait_one_revision(&ns, None).await?,
                stable,
                "only the stable pair is left"
            );
            let set = ns
                .api::<lws_rollout::api::DisaggregatedSet>()
                .get(SET)
                .await?;
            let images: Vec<_> = set
                .spec
                .roles
                .iter()
                .filter_map(|r| r.spec.as_ref())
                .flat_map(|s| s.leader_worker_template.worker_template.spec.iter())
                .flat_map(|p| p.containers.iter().filter_map(|c| c.image.clone()))
                .collect();
            assert!(
                !images.is_empty() && images.iter().all(|i| i == "vllm:1"),
                "{images:?}"
            );

            let out = run(lws_bin, &n, &["rollout", "undo", ROLLOUT]).await?;
            assert_eq!(out.status.code(), Some(1));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("nothing to undo"),
                "{out:?}"
            );
            Ok(())
        })
    })
}
