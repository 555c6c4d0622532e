//! What Argo CD shows for our Rollouts, asked of Argo CD's own code (test/tools/argocd-health:
//! Argo CD v3.6.1's controller path with its built-in rollouts.kruise.io/Rollout health.lua)
//! on Rollouts captured from live releases: Progressing while canary groups roll, Suspended
//! while a step waits for approval, Healthy when done — and Healthy again after a cancel, not
//! Progressing forever (Kruise's stale-StepPaused bug). Every status the release went through
//! is evaluated too: none may make the script fail (Argo CD's "Unknown").

use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use futures::StreamExt;
use kube::{
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::Rollout;
use serde_json::json;

use crate::{
    harness::with_ns,
    lws_support::{apply, create_available, held_image, lws},
    rollout_tools::{
        ARGOCD_HEALTH_BIN_ENV, GateKeeper, condition, create_rollout, paused_at, rollout, step_of,
        tool, wait_released, wait_rollout,
    },
};

/// Argo CD's health of one object with its built-in checks: (status, message).
async fn argocd_health(bin: &str, obj: &Rollout) -> anyhow::Result<(String, String)> {
    crate::lws_argocd::health_with(bin, None, obj).await
}

#[tokio::test]
async fn argocd_health_follows_live_releases_and_a_cancel() -> anyhow::Result<()> {
    let Some(bin) = tool(
        ARGOCD_HEALTH_BIN_ENV,
        "Argo CD's health evaluation (argocd-health)",
        "test/tools/build-argocd-health.sh",
    ) else {
        return Ok(());
    };
    with_ns("argocd-health", |ns| async move {
        let base = lws("vllm", 2, 2, "model:v1");
        create_available(&ns, &base).await?;
        // Every version of the Rollout the API server shows during the test.
        let seen: Arc<Mutex<Vec<Rollout>>> = Arc::default();
        let sink = seen.clone();
        let api = ns.api::<Rollout>();
        let recorder = tokio::spawn(async move {
            let mut events = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(r)) = events.next().await {
                sink.lock().expect("seen").push(r);
            }
        });
        create_rollout(
            &ns,
            &rollout(
                "vllm",
                "vllm",
                json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            ),
        )
        .await?;
        let idle = ns.api::<Rollout>().get("vllm").await?;
        assert_eq!(
            argocd_health(&bin, &idle).await?.0,
            "Healthy",
            "a Rollout with nothing to release"
        );

        // A release whose canary pods are held back: the canary group cannot become ready.
        let gates = GateKeeper::start(&ns);
        apply(&ns, &held_image(&base, "model:v2")).await?;
        let rolling = wait_rollout(&ns, "vllm", "upgrading step 1", |r| {
            step_of(r) == (1, "StepUpgrade".to_string())
        })
        .await?;
        assert_eq!(
            argocd_health(&bin, &rolling).await?,
            ("Progressing".into(), "Rollout is still progressing".into())
        );
        gates.open();
        let paused = wait_rollout(&ns, "vllm", "paused at step 1", paused_at(1)).await?;
        assert_eq!(
            argocd_health(&bin, &paused).await?,
            (
                "Suspended".into(),
                "Rollout is Paused need manual intervention".into()
            )
        );
        ns.api::<Rollout>()
            .patch_status(
                "vllm",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"canaryStatus": {"currentStepState": "StepReady"}}}),
                ),
            )
            .await?;
        let done = wait_released(&ns, "vllm", "vllm").await?;
        assert_eq!(
            argocd_health(&bin, &done).await?,
            ("Healthy".into(), "Rollout is Completed".into())
        );

        // A second release, cancelled at its pause by putting the template back (a Git revert).
        let v2 = held_image(&base, "model:v2");
        apply(&ns, &held_image(&base, "model:v3")).await?;
        let paused = wait_rollout(&ns, "vllm", "paused at step 1 of v3", paused_at(1)).await?;
        assert_eq!(argocd_health(&bin, &paused).await?.0, "Suspended");
        apply(&ns, &v2).await?;
        let cancelled = wait_released(&ns, "vllm", "vllm").await?;
        assert_eq!(condition(&cancelled, "Succeeded").as_deref(), Some("False"));
        assert_eq!(
            argocd_health(&bin, &cancelled).await?,
            ("Healthy".into(), "Rollout is Completed".into()),
            "a cancelled release ends Healthy, not Progressing forever"
        );

        recorder.abort();
        let seen = seen.lock().expect("seen").clone();
        let mut health = Vec::new();
        // A Rollout the controller has not written a status for yet (just created) is Unknown
        // in Argo CD for any controller, Kruise's too; every status we wrote must be assessable.
        for r in seen.iter().filter(|r| r.status.is_some()) {
            let (status, message) = argocd_health(&bin, r).await?;
            let state = r.status.as_ref().map(|s| (s.phase.clone(), step_of(r)));
            if status == "Unknown" || status.is_empty() {
                bail!(
                    "Argo CD cannot assess a status we wrote: {message}; status: {:#?}",
                    r.status
                );
            }
            health.push((state, status));
        }
        // Sanity: the recording saw the release, not just its end.
        assert!(health.iter().any(|(_, s)| s == "Suspended"), "{health:#?}");
        assert!(
            health.iter().any(|(_, s)| s == "Progressing"),
            "{health:#?}"
        );
        drop(gates);
        Ok(())
    })
    .await
}

/// Disabled mid-release, then enabled again: Argo CD's own health check reads the re-enabled
/// Rollout as Healthy — nothing of the interrupted step (StepPaused) is left in canaryStatus.
#[tokio::test]
async fn argocd_health_reads_healthy_after_disable_and_re_enable() -> anyhow::Result<()> {
    let Some(bin) = tool(
        ARGOCD_HEALTH_BIN_ENV,
        "Argo CD's health evaluation (argocd-health)",
        "test/tools/build-argocd-health.sh",
    ) else {
        return Ok(());
    };
    with_ns("argocd-reenable", |ns| async move {
        let base = lws("vllm", 2, 2, "model:v1");
        create_available(&ns, &base).await?;
        create_rollout(
            &ns,
            &rollout(
                "vllm",
                "vllm",
                json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
            ),
        )
        .await?;
        apply(&ns, &lws("vllm", 2, 2, "model:v2")).await?;
        let paused = wait_rollout(&ns, "vllm", "paused at step 1", paused_at(1)).await?;
        assert_eq!(argocd_health(&bin, &paused).await?.0, "Suspended");
        let set_disabled = |disabled: bool| {
            let api = ns.api::<Rollout>();
            async move {
                api.patch(
                    "vllm",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"disabled": disabled}})),
                )
                .await
            }
        };
        set_disabled(true).await?;
        let disabled = wait_rollout(&ns, "vllm", "Disabled", |r| {
            r.status.as_ref().map(|s| s.phase.as_str()) == Some("Disabled")
        })
        .await?;
        // Kruise's own reading of a release disabled at a pause (its script's rule).
        assert_eq!(
            argocd_health(&bin, &disabled).await?,
            (
                "Degraded".into(),
                "Rollout is Disabled or Terminating".into()
            )
        );
        set_disabled(false).await?;
        let enabled = wait_rollout(&ns, "vllm", "Healthy again", |r| {
            r.status.as_ref().map(|s| s.phase.as_str()) == Some("Healthy")
                && r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation
        })
        .await?;
        let canary = enabled
            .status
            .as_ref()
            .and_then(|s| s.canary_status.clone())
            .context("canaryStatus")?;
        assert_eq!(canary.common.current_step_state, "Completed", "{canary:?}");
        assert_eq!(
            argocd_health(&bin, &enabled).await?,
            ("Healthy".into(), "Rollout is Completed".into())
        );
        Ok(())
    })
    .await
}
