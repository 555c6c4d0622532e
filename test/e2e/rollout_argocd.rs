//! What Argo CD shows for our Rollouts, asked of Argo CD's own code (test/tools/argocd-health:
//! Argo CD v3.6.1's controller path) — with its built-in rollouts.kruise.io/Rollout health.lua,
//! and with the customization docs/argocd.md ships for canary and blue-green Rollouts.
//!
//! Live releases: Progressing while canary groups roll, Suspended while a step waits for
//! approval, Healthy when done — and Healthy again after a cancel, not Progressing forever
//! (Kruise's stale-StepPaused bug). Every status the release went through is evaluated too:
//! none may make either script fail (Argo CD's "Unknown"), and the customization reads each one
//! as the built-in script does wherever the built-in one is right.
//!
//! A table of Rollouts written by hand in Kruise Rollout v0.6's exact shape (canary and
//! blue-green, every phase and step state, odd shapes) pins what the customization says.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
};

use anyhow::{Context, bail};
use futures::StreamExt;
use kube::{
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::Rollout;
use serde_json::{Value, json};

use crate::{
    harness::with_ns,
    lws_argocd::{Recorder, argocd_cm_from_docs, argocd_tool, health_of_json},
    lws_support::{apply, create_available, held_image, lws},
    rollout_support::{condition, create_rollout, paused_at, step, wait_released, wait_rollout},
    rollout_tools::{GateKeeper, rollout},
};

/// Argo CD's health of one object with its built-in checks: (status, message).
async fn argocd_health(bin: &str, obj: &Rollout) -> anyhow::Result<(String, String)> {
    crate::lws_argocd::health_with(bin, None, obj).await
}

/// The `argocd-cm` block of docs/argocd.md, written once per test process.
fn docs_cm() -> anyhow::Result<&'static PathBuf> {
    static CM: OnceLock<PathBuf> = OnceLock::new();
    if let Some(cm) = CM.get() {
        return Ok(cm);
    }
    let path = argocd_cm_from_docs()?;
    Ok(CM.get_or_init(|| path))
}

/// Argo CD's health of a Rollout under the customization docs/argocd.md ships (its
/// `argocd-cm` block, read by Argo CD's settings manager and run by its controller's health
/// path): (status, message). A script error reads as status `Unknown`.
pub(crate) async fn rollout_health_with_customization(
    bin: &str,
    obj: &Rollout,
) -> anyhow::Result<(String, String)> {
    crate::lws_argocd::health(bin, docs_cm()?, obj).await
}

/// Why Argo CD's built-in script reads this Rollout wrongly (so the customization may differ
/// from it), or `None` where the built-in reading is right and the two must agree.
fn builtin_wrong(r: &Rollout) -> Option<&'static str> {
    let s = r.status.as_ref()?;
    if s.observed_generation != r.metadata.generation {
        return None;
    }
    let c = s.canary_status.as_ref()?;
    let state = c.common.current_step_state.as_str();
    let reason = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing")
        .map(|c| c.reason.as_str());
    match s.phase.as_str() {
        "Healthy" if state != "Completed" => Some("no release runs: Healthy, not Progressing"),
        "Disabled" if state != "StepPaused" => {
            Some("disabled: Healthy, or Degraded if a release was interrupted")
        }
        "Progressing" if state == "StepPaused" && reason == Some("Cancelling") => {
            Some("a cancel needs no approval: Progressing, not Suspended")
        }
        "Progressing" if state == "StepPaused" && !c.common.finalising_step.is_unset() => {
            Some("finalising needs no approval: Progressing, not Suspended")
        }
        "Progressing" if reason == Some("Paused") => {
            Some("spec.strategy.paused waits for a resume: Suspended")
        }
        _ => None,
    }
}

/// Every recorded version of a Rollout under the customization: never a script error, and the
/// built-in script's status wherever that one is right. Returns (phase, step, status) per
/// version, for sanity checks on what the recording saw.
async fn customization_follows_builtin(
    bin: &str,
    seen: &[Rollout],
) -> anyhow::Result<Vec<(String, (i32, String), String)>> {
    let mut out = Vec::new();
    for r in seen {
        let (status, message) = rollout_health_with_customization(bin, r).await?;
        if status == "Unknown" || status.is_empty() {
            bail!(
                "the customization cannot assess a Rollout: {message}; status: {:#?}",
                r.status
            );
        }
        let phase = r
            .status
            .as_ref()
            .map(|s| s.phase.to_string())
            .unwrap_or_default();
        if r.status.is_some() {
            let (builtin, builtin_message) = argocd_health(bin, r).await?;
            if builtin != status
                && let Some(why) = builtin_wrong(r)
            {
                eprintln!(
                    "customization {status}, built-in script {builtin} ({why}): phase {phase}, \
                     step {:?}",
                    step(r)
                );
            } else if builtin != status {
                bail!(
                    "the customization says {status} ({message}), the built-in script {builtin} \
                     ({builtin_message}); status: {:#?}",
                    r.status
                );
            }
        } else if status != "Progressing" {
            bail!("a Rollout without status reads {status} ({message})");
        }
        out.push((phase, step(r), status));
    }
    Ok(out)
}

#[tokio::test]
async fn argocd_health_follows_live_releases_and_a_cancel() -> anyhow::Result<()> {
    let Some(bin) = argocd_tool() else {
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
        assert_eq!(
            rollout_health_with_customization(&bin, &idle).await?,
            ("Healthy".into(), "Rollout is Completed".into())
        );

        // A release whose canary pods are held back: the canary group cannot become ready.
        let gates = GateKeeper::start(&ns);
        apply(&ns, &held_image(&base, "model:v2")).await?;
        let rolling = wait_rollout(&ns, "upgrading step 1", |r| {
            step(r) == (1, "StepUpgrade".to_string())
        })
        .await?;
        assert_eq!(
            argocd_health(&bin, &rolling).await?,
            ("Progressing".into(), "Rollout is still progressing".into())
        );
        let (status, message) = rollout_health_with_customization(&bin, &rolling).await?;
        assert_eq!(status, "Progressing", "{message}");
        assert!(
            message.starts_with("Rollout is at canary step 1/2 (StepUpgrade), ")
                && message.contains(" new group(s), 0 ready: "),
            "{message}"
        );
        gates.open();
        let paused = wait_rollout(&ns, "paused at step 1", paused_at(1)).await?;
        assert_eq!(
            argocd_health(&bin, &paused).await?,
            (
                "Suspended".into(),
                "Rollout is Paused need manual intervention".into()
            )
        );
        let (status, message) = rollout_health_with_customization(&bin, &paused).await?;
        assert_eq!(status, "Suspended", "{message}");
        assert!(
            message.starts_with(
                "Rollout is Paused need manual intervention: approve canary step 1/2: "
            ),
            "{message}"
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
        let done = wait_released(&ns).await?;
        assert_eq!(
            argocd_health(&bin, &done).await?,
            ("Healthy".into(), "Rollout is Completed".into())
        );
        assert_eq!(
            rollout_health_with_customization(&bin, &done).await?,
            ("Healthy".into(), "Rollout is Completed".into())
        );

        // A second release, cancelled at its pause by putting the template back (a Git revert).
        let v2 = held_image(&base, "model:v2");
        apply(&ns, &held_image(&base, "model:v3")).await?;
        let paused = wait_rollout(&ns, "paused at step 1 of v3", paused_at(1)).await?;
        assert_eq!(argocd_health(&bin, &paused).await?.0, "Suspended");
        assert_eq!(
            rollout_health_with_customization(&bin, &paused).await?.0,
            "Suspended"
        );
        apply(&ns, &v2).await?;
        let cancelled = wait_released(&ns).await?;
        assert_eq!(
            condition(&cancelled, "Succeeded").map(|c| c.0).as_deref(),
            Some("False")
        );
        assert_eq!(
            argocd_health(&bin, &cancelled).await?,
            ("Healthy".into(), "Rollout is Completed".into()),
            "a cancelled release ends Healthy, not Progressing forever"
        );
        assert_eq!(
            rollout_health_with_customization(&bin, &cancelled).await?,
            (
                "Healthy".into(),
                "Rollout is Completed (the last release was cancelled)".into()
            )
        );

        recorder.abort();
        let seen = seen.lock().expect("seen").clone();
        let mut health = Vec::new();
        // A Rollout the controller has not written a status for yet (just created) is Unknown
        // in Argo CD for any controller, Kruise's too; every status we wrote must be assessable.
        for r in seen.iter().filter(|r| r.status.is_some()) {
            let (status, message) = argocd_health(&bin, r).await?;
            let state = r.status.as_ref().map(|s| (s.phase.clone(), step(r)));
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
        // The customization, on every version (those without a status too).
        let custom = customization_follows_builtin(&bin, &seen).await?;
        for status in ["Progressing", "Suspended", "Healthy"] {
            assert!(custom.iter().any(|(_, _, s)| s == status), "{custom:#?}");
        }
        drop(gates);
        Ok(())
    })
    .await
}

/// Disabled mid-release, then enabled again: Argo CD's own health check reads the re-enabled
/// Rollout as Healthy — nothing of the interrupted step (StepPaused) is left in canaryStatus.
#[tokio::test]
async fn argocd_health_reads_healthy_after_disable_and_re_enable() -> anyhow::Result<()> {
    let Some(bin) = argocd_tool() else {
        return Ok(());
    };
    with_ns("argocd-reenable", |ns| async move {
        let base = lws("vllm", 2, 2, "model:v1");
        create_available(&ns, &base).await?;
        let recorder = Recorder::start(ns.api::<Rollout>());
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
        let paused = wait_rollout(&ns, "paused at step 1", paused_at(1)).await?;
        assert_eq!(argocd_health(&bin, &paused).await?.0, "Suspended");
        assert_eq!(
            rollout_health_with_customization(&bin, &paused).await?.0,
            "Suspended"
        );
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
        let disabled = wait_rollout(&ns, "Disabled", |r| {
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
        assert_eq!(
            rollout_health_with_customization(&bin, &disabled).await?,
            (
                "Degraded".into(),
                "Rollout is Disabled or Terminating: the release was interrupted at canary \
                 step 1/2 (StepPaused)"
                    .into()
            )
        );
        set_disabled(false).await?;
        let enabled = wait_rollout(&ns, "Healthy again", |r| {
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
        assert_eq!(
            rollout_health_with_customization(&bin, &enabled).await?,
            ("Healthy".into(), "Rollout is Completed".into())
        );
        let custom = customization_follows_builtin(&bin, &recorder.seen()).await?;
        assert!(
            custom
                .iter()
                .any(|(p, _, s)| p == "Disabled" && s == "Degraded"),
            "{custom:#?}"
        );
        Ok(())
    })
    .await
}

/// `patch` merged into `base` (JSON merge patch, RFC 7386: `null` removes a key).
fn merged(mut base: Value, patch: &Value) -> Value {
    fn merge(into: &mut Value, patch: &Value) {
        match (into, patch) {
            (Value::Object(into), Value::Object(patch)) => {
                for (k, v) in patch {
                    if v.is_null() {
                        into.remove(k);
                    } else {
                        merge(into.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            (into, patch) => *into = patch.clone(),
        }
    }
    merge(&mut base, patch);
    base
}

/// `SUB` anywhere in a key stands for the style's sub-status field.
fn for_style(patch: &Value, sub: &str) -> Value {
    match patch {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.replace("SUB", sub), for_style(v, sub)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A Kruise-style condition.
fn kruise_condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastUpdateTime": "2026-11-24T10:00:00Z", "lastTransitionTime": "2026-11-24T10:00:00Z",
    })
}

/// A Kruise strategy hash.
const HASH: &str = "77cxd69w47b7bwddwv2w7vxvb4xxdbwcx9x289vw69w788w4w6z4x8dd4vbz2zbw";

/// A Rollout of LWS `vllm` with three steps (approval, 60 s, full), as Kruise Rollout v0.6
/// writes it at a release's step `index` in `state`: the sub-status of the style only
/// (`canaryStatus` or `blueGreenStatus`, each with its own revision and replica fields), the
/// top-level mirrors, and a Progressing condition `InRolling`.
fn kruise_rollout(blue_green: bool, phase: &str, index: i64, state: &str) -> Value {
    let (strategy, sub) = if blue_green {
        ("blueGreen", "blueGreenStatus")
    } else {
        ("canary", "canaryStatus")
    };
    let steps = json!([
        {"replicas": 1, "traffic": "0%", "pause": {}},
        {"replicas": "50%", "traffic": "50%", "pause": {"duration": 60}},
        {"replicas": "100%", "traffic": "100%"},
    ]);
    let mut sub_status = json!({
        "observedWorkloadGeneration": 7,
        "observedRolloutID": "5c7b8d9f4",
        "rolloutHash": HASH,
        "stableRevision": "6bfdfb5bfb",
        "podTemplateHash": "5c7b8d9f4",
        "currentStepIndex": index,
        "nextStepIndex": if index < 3 { index + 1 } else { -1 },
        "finalisingStep": "",
        "currentStepState": state,
        "message": format!("BatchRelease is at state Ready, rollout-id 5c7b8d9f4, step {index}"),
        "lastUpdateTime": "2026-11-24T10:00:00Z",
    });
    let new_fields = if blue_green {
        json!({"updatedRevision": "5c7b8d9f4", "updatedReplicas": 1, "updatedReadyReplicas": 0})
    } else {
        json!({"canaryRevision": "5c7b8d9f4", "canaryReplicas": 1, "canaryReadyReplicas": 0})
    };
    sub_status = merged(sub_status, &new_fields);
    let mut status = json!({
        "observedGeneration": 3,
        "phase": phase,
        "message": format!("Rollout is in step({index}/3), and upgrade workload to new version"),
        "currentStepIndex": index,
        "currentStepState": state,
        "conditions": [kruise_condition("Progressing", "True", "InRolling", "Rollout is in Progressing")],
    });
    status[sub] = sub_status;
    json!({
        "apiVersion": "rollouts.kruise.io/v1beta1",
        "kind": "Rollout",
        "metadata": {
            "name": "vllm", "namespace": "demo", "generation": 3, "uid": "0b6c1f4e-1",
            "finalizers": ["rollouts.kruise.io/rollout"],
            "annotations": {"rollouts.kruise.io/hash": HASH},
        },
        "spec": {
            "workloadRef": {
                "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm",
            },
            "strategy": {strategy: {
                "steps": steps,
                "trafficRoutings": [{"service": "vllm", "gateway": {"httpRouteName": "vllm"}}],
            }},
        },
        "status": status,
    })
}

/// One row of the table below.
struct Case {
    what: &'static str,
    /// Phase, step index and step state of [`kruise_rollout`]'s object.
    object: (&'static str, i64, &'static str),
    /// Merged into that object; a key `SUB` stands for the style's sub-status field.
    patch: Value,
    /// What the customization says: status, and parts of the message.
    reads: (&'static str, &'static [&'static str]),
    /// What the built-in script says of the same object: canary, blue-green.
    builtin: (&'static str, &'static str),
}

/// What the customization in docs/argocd.md says, by Argo CD's own code, for every phase and
/// step state of a canary and a blue-green Rollout in Kruise's exact status shape, and for
/// shapes a script must survive. Beside it, what the built-in script says of the same object
/// (blue-green: Unknown, the reason for the customization). Needs no cluster.
#[tokio::test]
async fn argocd_health_customization_reads_canary_and_blue_green_rollouts() -> anyhow::Result<()> {
    let Some(bin) = argocd_tool() else {
        return Ok(());
    };
    let cm = docs_cm()?;
    let progressing = |reason: &str, message: &str| json!({"conditions": [kruise_condition("Progressing", "True", reason, message)]});
    let refused = |reason: &str, message: &str| {
        json!({"phase": "Initial", "message": message, "conditions": [
            kruise_condition("Accepted", "False", reason, message)]})
    };
    let cases = vec![
        Case {
            what: "no status yet (just created)",
            object: ("Progressing", 1, "StepUpgrade"),
            patch: json!({"status": null}),
            reads: (
                "Progressing",
                &["Waiting for the Rollout controller to write a status"],
            ),
            builtin: ("Unknown", "Unknown"),
        },
        Case {
            what: "status empty",
            object: ("Progressing", 1, "StepUpgrade"),
            patch: json!({"status": {"observedGeneration": null, "phase": null, "message": null,
                "currentStepIndex": null, "currentStepState": null, "conditions": null, "SUB": null}}),
            reads: ("Progressing", &["observe the latest spec"]),
            builtin: ("Progressing", "Progressing"),
        },
        Case {
            what: "a spec the controller has not observed yet",
            object: ("Progressing", 1, "StepPaused"),
            patch: json!({"metadata": {"generation": 4}}),
            reads: (
                "Progressing",
                &["Waiting for the Rollout controller to observe the latest spec"],
            ),
            builtin: ("Progressing", "Progressing"),
        },
        Case {
            what: "being deleted while a release runs",
            object: ("Terminating", 1, "StepUpgrade"),
            patch: json!({"metadata": {"deletionTimestamp": "2026-11-24T10:01:00Z"}, "status": {
                "conditions": [kruise_condition(
                    "Terminating", "True", "InTerminating", "Rollout is in terminating")]}}),
            reads: (
                "Progressing",
                &["Pending deletion", "rollouts.kruise.io/rollout"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "being deleted at a pause (Argo CD's own deletion rule wins over Degraded)",
            object: ("Terminating", 1, "StepPaused"),
            patch: json!({"metadata": {"deletionTimestamp": "2026-11-24T10:01:00Z"}}),
            reads: ("Progressing", &["Pending deletion"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "Terminating at a pause, no deletionTimestamp (the built-in rule)",
            object: ("Terminating", 1, "StepPaused"),
            patch: json!({}),
            reads: (
                "Degraded",
                &[
                    "Rollout is Disabled or Terminating",
                    "interrupted at",
                    "step 1/3 (StepPaused)",
                ],
            ),
            builtin: ("Degraded", "Unknown"),
        },
        Case {
            what: "Terminating after the release ended, no deletionTimestamp",
            object: ("Terminating", 3, "Completed"),
            patch: json!({"status": {"message": "Rollout is in terminating"}}),
            reads: (
                "Progressing",
                &["Rollout is terminating: Rollout is in terminating"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "workload not found (Kruise drops the sub-status and the mirrors)",
            object: ("Initial", 0, ""),
            patch: json!({"status": {"message": "Workload Not Found", "currentStepIndex": null,
                "currentStepState": null, "conditions": null, "SUB": null}}),
            reads: (
                "Progressing",
                &["Rollout phase Initial: Workload Not Found"],
            ),
            builtin: ("Unknown", "Unknown"),
        },
        Case {
            what: "refused: a style the controller does not run",
            object: ("Initial", 0, ""),
            patch: merged(
                json!({"status": {"SUB": null, "currentStepIndex": null, "currentStepState": null}}),
                &json!({"status": refused("UnsupportedStrategy", "strategy has no canary")}),
            ),
            reads: (
                "Progressing",
                &["Rollout not accepted (UnsupportedStrategy): strategy has no canary"],
            ),
            builtin: ("Unknown", "Unknown"),
        },
        Case {
            what: "refused: a second Rollout of the workload",
            object: ("Initial", 0, ""),
            patch: json!({"status": refused("WorkloadConflict",
                "LeaderWorkerSet vllm is already released by Rollout first; only one Rollout \
                 may reference a workload")}),
            reads: (
                "Progressing",
                &[
                    "Rollout not accepted (WorkloadConflict)",
                    "already released by Rollout first",
                ],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "idle: completed on first sight",
            object: ("Healthy", 3, "Completed"),
            patch: json!({"status": {"message": "workload deployment is completed", "conditions": null}}),
            reads: ("Healthy", &["Rollout is Completed"]),
            builtin: ("Healthy", "Unknown"),
        },
        Case {
            what: "Healthy without a sub-status",
            object: ("Healthy", 3, "Completed"),
            patch: json!({"status": {"SUB": null, "message": "rollout is healthy"}}),
            reads: ("Healthy", &["Rollout is Completed"]),
            builtin: ("Unknown", "Unknown"),
        },
        Case {
            what: "Healthy, no step state anywhere",
            object: ("Healthy", 3, "Completed"),
            patch: json!({"status": {"SUB": {"currentStepState": null, "currentStepIndex": null},
                "currentStepIndex": null, "currentStepState": null}}),
            reads: ("Healthy", &["Rollout is Completed"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "released",
            object: ("Healthy", 3, "Completed"),
            patch: json!({"status": {
                "SUB": {"finalisingStep": "END"}, "message": "rollout is healthy", "conditions": [
                kruise_condition(
                    "Progressing", "False", "Completed", "Rollout progressing has been completed"),
                kruise_condition("Succeeded", "True", "", "")]}}),
            reads: ("Healthy", &["Rollout is Completed"]),
            builtin: ("Healthy", "Unknown"),
        },
        Case {
            what: "cancelled, Kruise's stale StepPaused left (#339)",
            object: ("Healthy", 1, "StepPaused"),
            patch: json!({"status": {"message": "rollout is healthy", "conditions": [
                kruise_condition(
                    "Progressing", "False", "Completed", "Rollout progressing has been canceled"),
                kruise_condition("Succeeded", "False", "", "")]}}),
            reads: (
                "Healthy",
                &["Rollout is Completed (the last release was cancelled)"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "initializing",
            object: ("Progressing", 1, "BeforeStepUpgrade"),
            patch: json!({"status": merged(progressing("Initializing", "Rollout is in Progressing"),
                &json!({"message": "Rollout is in Progressing"}))}),
            reads: (
                "Progressing",
                &["Starting the", "release: Rollout is in Progressing"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "upgrading step 1",
            object: ("Progressing", 1, "StepUpgrade"),
            patch: json!({}),
            reads: (
                "Progressing",
                &[
                    "step 1/3 (StepUpgrade), 1 new group(s), 0 ready",
                    "Rollout is in step(1/3), and upgrade workload to new version",
                ],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "before upgrading step 2",
            object: ("Progressing", 2, "BeforeStepUpgrade"),
            patch: json!({}),
            reads: ("Progressing", &["step 2/3 (BeforeStepUpgrade)"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "shifting traffic",
            object: ("Progressing", 2, "StepTrafficRouting"),
            patch: json!({}),
            reads: ("Progressing", &["step 2/3 (StepTrafficRouting)"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "metrics analysis",
            object: ("Progressing", 2, "StepMetricsAnalysis"),
            patch: json!({}),
            reads: ("Progressing", &["step 2/3 (StepMetricsAnalysis)"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "step ready",
            object: ("Progressing", 2, "StepReady"),
            patch: json!({"status": {"SUB": {"canaryReadyReplicas": 1, "updatedReadyReplicas": 1}}}),
            reads: (
                "Progressing",
                &["step 2/3 (StepReady), 1 new group(s), 1 ready"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "waiting for approval",
            object: ("Progressing", 1, "StepPaused"),
            patch: json!({"status": {"message":
                "Rollout is in step(1/3), and you need manually confirm to enter the next step"}}),
            reads: (
                "Suspended",
                &[
                    "Rollout is Paused need manual intervention: approve",
                    "step 1/3",
                    "manually confirm",
                ],
            ),
            builtin: ("Suspended", "Unknown"),
        },
        Case {
            what: "waiting for a pause duration",
            object: ("Progressing", 2, "StepPaused"),
            patch: json!({"status": {"message":
                "Rollout is in step(2/3), and wait duration(60 seconds) to enter the next step"}}),
            reads: (
                "Suspended",
                &[
                    "Rollout is Paused for 60 s at",
                    "step 2/3",
                    "wait duration(60 seconds)",
                ],
            ),
            builtin: ("Suspended", "Unknown"),
        },
        Case {
            what: "spec.strategy.paused",
            object: ("Progressing", 2, "StepUpgrade"),
            patch: merged(
                json!({"spec": {"strategy": {"paused": true}}, "status": {
                    "message": "Rollout has been paused, you can resume it by kube-cli"}}),
                &json!({"status": progressing(
                    "Paused", "Rollout has been paused, you can resume it by kube-cli")}),
            ),
            reads: (
                "Suspended",
                &[
                    "Rollout is Paused need manual intervention: spec.strategy.paused",
                    "step 2/3",
                ],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "finalising after the last step",
            object: ("Progressing", 3, "Completed"),
            patch: json!({"status": {"SUB": {"finalisingStep": "FinalisingStepRouteTrafficToStable"},
                "message": "Rollout has been completed and some closing work is being done",
                "conditions": [kruise_condition("Progressing", "True", "Finalising",
                    "Rollout has been completed and some closing work is being done")]}}),
            reads: (
                "Progressing",
                &[
                    "Finalising the",
                    "(FinalisingStepRouteTrafficToStable)",
                    "closing work",
                ],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "cancelling at a pause (rolled back)",
            object: ("Progressing", 1, "StepPaused"),
            patch: json!({"status": {"message":
                "The workload has been rolled back and the rollout process will be canceled",
                "conditions": [kruise_condition("Progressing", "True", "Cancelling",
                    "The workload has been rolled back and the rollout process will be canceled")]}}),
            reads: ("Progressing", &["Cancelling the", "rolled back"]),
            builtin: ("Suspended", "Unknown"),
        },
        Case {
            what: "a third template: the old canary finalised first",
            object: ("Progressing", 1, "StepPaused"),
            patch: json!({"status": {"SUB": {"finalisingStep": "ResumeWorkload"}}}),
            reads: ("Progressing", &["Finalising the", "(ResumeWorkload)"]),
            builtin: ("Suspended", "Unknown"),
        },
        Case {
            what: "disabling",
            object: ("Disabling", 1, "StepPaused"),
            patch: json!({"status": {"message": "Disabling rollout, release resources"}}),
            reads: ("Progressing", &["Disabling", "release resources"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "disabled at a pause",
            object: ("Disabled", 1, "StepPaused"),
            patch: json!({"status": {"message": "Rollout is disabled"}}),
            reads: (
                "Degraded",
                &[
                    "Rollout is Disabled or Terminating: the release was interrupted at",
                    "step 1/3 (StepPaused)",
                ],
            ),
            builtin: ("Degraded", "Unknown"),
        },
        Case {
            what: "disabled mid-upgrade",
            object: ("Disabled", 2, "StepUpgrade"),
            patch: json!({"status": {"message": "Rollout is disabled"}}),
            reads: ("Degraded", &["interrupted at", "step 2/3 (StepUpgrade)"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "disabled while idle",
            object: ("Disabled", 3, "Completed"),
            patch: json!({"status": {"message": "Rollout is disabled"}}),
            reads: (
                "Healthy",
                &["Rollout is disabled: the workload updates by its own strategy"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "a batch late past the Rollout's deadline (lws-rollout's annotations)",
            object: ("Progressing", 1, "StepUpgrade"),
            patch: json!({"status": {"conditions": [kruise_condition("Progressing", "False",
                "ProgressDeadlineExceeded",
                "step 1/3: the batch was not ready within 600s: batch 1 waits for LeaderWorkerSet \
                 vllm-canary-x: 0/1 groups ready; not ready: group 0")]}}),
            reads: (
                "Degraded",
                &["ProgressDeadlineExceeded", "not ready: group 0"],
            ),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "rolled back by itself on the deadline",
            object: ("Progressing", 1, "StepUpgrade"),
            patch: json!({"status": {"conditions": [kruise_condition("Progressing", "False",
                "RolledBackOnDeadline", "step 1/3: the batch was not ready within 600s; rolling back")],
                "SUB": {"finalisingStep": "END"}}}),
            reads: ("Degraded", &["RolledBackOnDeadline", "rolling back"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "a phase this script does not know",
            object: ("Rolling", 1, "StepUpgrade"),
            patch: json!({}),
            reads: ("Progressing", &["Rollout phase Rolling"]),
            builtin: ("Progressing", "Unknown"),
        },
        Case {
            what: "odd shapes: conditions not a list, steps missing, a string step index",
            object: ("Progressing", 1, "StepPaused"),
            patch: json!({"spec": {"strategy": null}, "status": {"conditions": {"type": "Progressing"},
                "currentStepIndex": "one", "SUB": {"currentStepIndex": "one"}}}),
            reads: ("Suspended", &["approve canary step one/0"]),
            builtin: ("Suspended", "Unknown"),
        },
    ];
    let mut failures = Vec::new();
    for Case {
        what,
        object: (phase, index, state),
        patch,
        reads: (want, parts),
        builtin: (builtin_canary, builtin_bg),
    } in &cases
    {
        for blue_green in [false, true] {
            let sub = if blue_green {
                "blueGreenStatus"
            } else {
                "canaryStatus"
            };
            let style = if blue_green { "blue-green" } else { "canary" };
            let obj = merged(
                kruise_rollout(blue_green, phase, *index, state),
                &for_style(patch, sub),
            );
            let (status, message) = health_of_json(&bin, Some(cm), &obj).await?;
            let ok = status == *want && parts.iter().all(|p| message.contains(p));
            let (builtin, builtin_message) = health_of_json(&bin, None, &obj).await?;
            let want_builtin = if blue_green {
                builtin_bg
            } else {
                builtin_canary
            };
            if !ok || builtin != *want_builtin {
                failures.push(format!(
                    "{style} / {what}: customization {status} \"{message}\" (want {want} with \
                     {parts:?}); built-in {builtin} \"{builtin_message}\" (want {want_builtin})"
                ));
            }
            // The message names the style wherever it names a step.
            if message.contains(" step ")
                && !message.contains(&format!("{style} step"))
                && !what.starts_with("odd")
            {
                failures.push(format!(
                    "{style} / {what}: the style is not named: {message}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
