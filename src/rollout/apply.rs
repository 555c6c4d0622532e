//! Carries a [`RolloutPlan`] out — the only Rollout code that writes. In order: the finalizer
//! (so finalising can run before the Rollout is gone), the strategy hash, the BatchRelease,
//! traffic, the hold, events, the status (with a resourceVersion precondition: an approval
//! written by `kubectl-kruise rollout approve` a moment ago is never overwritten), and last the
//! finalizer's removal.

use kube::ResourceExt;
use serde_json::json;

use super::{
    deref::{self, TrafficRead},
    observe::RolloutObserved,
    plan::{BatchReleaseAction, FinalizerAction, HoldAction, PlannedEvent, RolloutPlan},
};
use crate::k8s::written::Written;
use crate::{
    api::{BatchRelease, LeaderWorkerSet, Rollout},
    k8s::{
        apply::{ApiError, Applier, Propagation, status_patch},
        events::{EventSpec, Events},
    },
    lws::{hold::RELEASE_FIELD_MANAGER, labels},
    rollout::{names::FINALIZER, plan::routing},
    traffic,
};

/// The key `Written` records an object under.
pub fn key<K: kube::Resource<DynamicType = ()>>(namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", K::kind(&()))
}

/// Field manager of the Rollout controller's writes.
pub const FIELD_MANAGER: &str = "lws-rollout-rollout";

/// What the apply did that the next reconcile cares about.
#[derive(Debug, Default)]
pub struct Applied {
    /// Traffic objects were written (the grace period starts now).
    pub traffic_changed: bool,
}

/// An event of a plan as the events kit publishes it.
pub fn event_spec(e: &PlannedEvent) -> EventSpec {
    if e.warning {
        EventSpec::warning(e.reason, e.message.clone())
    } else {
        EventSpec::normal(e.reason, e.message.clone())
    }
}

fn finalizers_patch(rollout: &Rollout, add: bool) -> serde_json::Value {
    let mut finalizers: Vec<String> = rollout
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    if add {
        finalizers.push(FINALIZER.into());
    }
    // The resourceVersion makes this fail rather than drop a finalizer someone else just added.
    json!({"metadata": {"finalizers": finalizers, "resourceVersion": rollout.resource_version()}})
}

/// Carries `plan` out for the Rollout in `obs`.
pub async fn apply(
    applier: &Applier,
    events: &Events,
    written: &Written,
    obs: &RolloutObserved,
    read: &TrafficRead,
    plan: &RolloutPlan,
) -> Result<Applied, ApiError> {
    let rollout = &obs.rollout;
    let ns = rollout.namespace().unwrap_or_default();
    let name = rollout.name_any();
    let mut applied = Applied::default();
    let mut metadata_written = false;
    if plan.finalizer == FinalizerAction::Add
        && !rollout.finalizers().iter().any(|f| f == FINALIZER)
    {
        applier
            .merge_patch::<Rollout>(&ns, &name, &finalizers_patch(rollout, true))
            .await?;
        metadata_written = true;
    }
    if let Some(hash) = &plan.hash_annotation {
        applier
            .merge_patch::<Rollout>(
                &ns,
                &name,
                &json!({"metadata": {"annotations": {crate::rollout::names::HASH_ANNOTATION: hash}}}),
            )
            .await?;
        metadata_written = true;
    }
    if metadata_written {
        // The status write below carries the resourceVersion we read, which these writes just
        // made stale: it would fail with a conflict. The Rollout's watch event for these writes
        // starts the next reconcile, which plans the rest from the updated object.
        return Ok(applied);
    }
    match &plan.batch_release {
        BatchReleaseAction::Keep => {}
        BatchReleaseAction::Apply(br) => {
            let cached = obs
                .batch_release
                .as_ref()
                .map_or("", |b| b.resource_version.as_str());
            let applied = applier.apply(br.as_ref()).await?;
            written.record(
                &key::<BatchRelease>(&ns, &name),
                cached,
                applied.resource_version().as_deref(),
            );
        }
        BatchReleaseAction::Delete => {
            applier
                .delete::<BatchRelease>(&ns, &name, None, Propagation::Background)
                .await?;
        }
    }
    if let (Some(intent), Some(objects), Some(routing_ref)) =
        (&plan.traffic, &read.objects, routing::routing(obs))
    {
        let traffic_plan = traffic::plan::plan(routing_ref, intent, objects, &deref::owner(obs));
        if !traffic_plan.writes.is_empty() {
            traffic::apply::apply(applier.client(), &ns, &traffic_plan.writes).await?;
            applied.traffic_changed = true;
        }
    }
    if plan.hold == HoldAction::Release
        && let Some(workload) = &obs.workload
        && workload.hold.is_some()
    {
        // Only a write with this field manager lifts the hold (the LWS webhook restores it
        // for anyone else).
        Applier::new(applier.client().clone(), RELEASE_FIELD_MANAGER)
            .merge_patch::<LeaderWorkerSet>(
                &ns,
                &workload.name,
                &json!({"metadata": {"annotations": {labels::HELD_REVISION: null}}}),
            )
            .await?;
    }
    // Events and the status write go out together: the Events (one per state passed, several
    // when a reconcile runs a whole step) are no reason to hold back the write a watcher waits
    // for.
    let publish = async {
        for event in &plan.events {
            events.publish(rollout, &event_spec(event)).await;
        }
    };
    let write = async {
        if rollout.status.as_ref() != Some(&plan.status) {
            let mut body = status_patch(rollout.status.as_ref(), &plan.status);
            body["metadata"] = json!({"resourceVersion": rollout.resource_version()});
            let patched = applier
                .merge_patch_status::<Rollout>(&ns, &name, &body)
                .await?;
            written.record(
                &key::<Rollout>(&ns, &name),
                &rollout.resource_version().unwrap_or_default(),
                patched.resource_version().as_deref(),
            );
        }
        Ok::<(), ApiError>(())
    };
    let ((), status) = futures::join!(publish, write);
    status?;
    if plan.finalizer == FinalizerAction::Remove
        && rollout.finalizers().iter().any(|f| f == FINALIZER)
    {
        applier
            .merge_patch::<Rollout>(&ns, &name, &finalizers_patch(rollout, false))
            .await?;
    }
    Ok(applied)
}
