//! Carries a [`BatchReleasePlan`] out: the canary LWS (server-side apply), canaries to delete,
//! Kruise's finalizer when it is there, events, and the status.

use kube::ResourceExt;
use serde_json::json;

use super::{names::FINALIZER, observe::BatchReleaseObserved, plan::BatchReleasePlan};
use crate::{
    api::{BatchRelease, LeaderWorkerSet},
    k8s::{
        apply::{ApiError, Applier, Propagation, status_patch},
        events::Events,
        written::{Written, key},
    },
};

/// The cached resourceVersion of the canary `name` ("" when the cache has none).
pub fn cached_canary_version(obs: &BatchReleaseObserved, name: &str) -> String {
    obs.canaries
        .iter()
        .find(|c| c.lws.name_any() == name)
        .and_then(|c| c.lws.resource_version())
        .unwrap_or_default()
}

/// "cannot write the canary LeaderWorkerSet x: <the API server's message>".
pub fn canary_write_failed(name: &str, err: &ApiError) -> String {
    let why = match &err.source {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    };
    format!("cannot write the canary LeaderWorkerSet {name}: {why}")
}

/// Carries `plan` out for `br`.
pub async fn apply(
    applier: &Applier,
    events: &Events,
    written: &Written,
    obs: &BatchReleaseObserved,
    plan: &BatchReleasePlan,
) -> Result<(), ApiError> {
    let br = &obs.br;
    let ns = br.namespace().unwrap_or_default();
    if let Some(canary) = &plan.apply_canary
        && !plan.canary_in_place
    {
        let name = canary.name_any();
        let applied = match applier.apply(canary).await {
            Ok(applied) => applied,
            Err(err) => {
                // Said where the Rollout reads why the batch waits (its message and Event),
                // e.g. an admission webhook that is down or refuses the canary (Kueue's, when
                // Kueue is stopped: docs/kueue.md); the error then retries with backoff.
                let mut status = plan.status.clone();
                status.message = Some(canary_write_failed(&name, &err));
                if br.status.as_ref() != Some(&status) {
                    let _ = applier
                        .merge_patch_status::<BatchRelease>(
                            &ns,
                            &br.name_any(),
                            &status_patch(br.status.as_ref(), &status),
                        )
                        .await;
                }
                return Err(err);
            }
        };
        written.record(
            &key::<LeaderWorkerSet>(&ns, &name),
            &cached_canary_version(obs, &name),
            applied.resource_version.as_deref(),
        );
    }
    for (pod, patch) in &plan.leader_patches {
        // A pod gone meanwhile is no failure: its group comes back without the patch and the
        // next reconcile patches the new leader.
        match applier
            .merge_patch::<k8s_openapi::api::core::v1::Pod>(&ns, pod, patch)
            .await
        {
            Ok(_) => {}
            Err(err) if matches!(&err.source, kube::Error::Api(s) if s.is_not_found()) => {}
            Err(err) => return Err(err),
        }
    }
    if let Some(partition) = plan.release_partition {
        // Partition style: the groups from this ordinal up move to the new template in place
        // (`lws::plan::revisions`); only the annotation, so the user's spec never drifts.
        applier
            .merge_patch::<LeaderWorkerSet>(
                &ns,
                &br.spec.workload_ref.name,
                &json!({"metadata": {"annotations": {
                    crate::lws::labels::RELEASE_PARTITION: partition.to_string()
                }}}),
            )
            .await?;
    }
    for name in &plan.delete_canaries {
        applier
            .delete::<LeaderWorkerSet>(&ns, name, None, Propagation::Background)
            .await?;
    }
    // Events and the status write go out together: an Event is no reason to hold back the
    // write the Rollout and watchers wait for.
    let publish = async {
        for event in &plan.events {
            events.publish(br, event).await;
        }
    };
    let write = async {
        if br.status.as_ref() != Some(&plan.status) {
            let name = br.name_any();
            let patched = applier
                .merge_patch_status::<BatchRelease>(
                    &ns,
                    &name,
                    &status_patch(br.status.as_ref(), &plan.status),
                )
                .await?;
            written.record(
                &key::<BatchRelease>(&ns, &name),
                &br.resource_version().unwrap_or_default(),
                patched.resource_version.as_deref(),
            );
        }
        Ok::<(), ApiError>(())
    };
    let ((), status) = futures::join!(publish, write);
    status?;
    if plan.remove_finalizer {
        let rest: Vec<String> = br
            .finalizers()
            .iter()
            .filter(|f| f.as_str() != FINALIZER)
            .cloned()
            .collect();
        applier
            .merge_patch::<BatchRelease>(
                &ns,
                &br.name_any(),
                &json!({"metadata": {"finalizers": rest, "resourceVersion": br.resource_version()}}),
            )
            .await?;
    }
    Ok(())
}
