//! Carries a [`BatchReleasePlan`] out: the canary LWS (server-side apply), canaries to delete,
//! Kruise's finalizer when it is there, events, and the status.

use kube::ResourceExt;
use serde_json::json;

use super::{names::FINALIZER, plan::BatchReleasePlan};
use crate::{
    api::{BatchRelease, LeaderWorkerSet},
    k8s::{
        apply::{ApiError, Applier, Propagation, merge_patch_between},
        events::Events,
    },
    rollout::apply::event_spec,
};

/// Field manager of the BatchRelease controller's writes.
pub const FIELD_MANAGER: &str = "lws-rollout-batchrelease";

/// Carries `plan` out for `br`.
pub async fn apply(
    applier: &Applier,
    events: &Events,
    br: &BatchRelease,
    plan: &BatchReleasePlan,
) -> Result<(), ApiError> {
    let ns = br.namespace().unwrap_or_default();
    if let Some(canary) = &plan.apply_canary
        && !plan.canary_in_place
    {
        applier.apply(canary).await?;
    }
    for name in &plan.delete_canaries {
        applier
            .delete::<LeaderWorkerSet>(&ns, name, None, Propagation::Background)
            .await?;
    }
    for event in &plan.events {
        events.publish(br, &event_spec(event)).await;
    }
    if br.status.as_ref() != Some(&plan.status) {
        let old = serde_json::to_value(br.status.clone().unwrap_or_default()).unwrap_or_default();
        let new = serde_json::to_value(&plan.status).unwrap_or_default();
        applier
            .merge_patch_status::<BatchRelease>(
                &ns,
                &br.name_any(),
                &json!({"status": merge_patch_between(&old, &new)}),
            )
            .await?;
    }
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
