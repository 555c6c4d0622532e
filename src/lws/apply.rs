//! Apply: carries a [`Plan`] out — the only LWS code that writes to the API server. It decides
//! nothing: what each answer means (an event to publish, a refusal that becomes the
//! `ReplicaFailure` condition, whether the rest may go on) is written in the plan.

use k8s_openapi::{
    api::{
        apps::v1::{ControllerRevision, StatefulSet},
        core::v1::{Pod, Service},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::ResourceExt;
use serde_json::json;

use super::{
    error::{Error, Failure},
    labels,
    plan::{How, Plan, Write},
    status,
};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{
        apply::{ApiError, Applier, Created, Deleted, Failure as ApiFailure, Object, Propagation},
        events::Events,
    },
};

/// What carrying the plan out found.
#[derive(Debug, Default)]
pub struct Applied {
    /// A write the API server refused, for the `ReplicaFailure` condition.
    pub failure: Option<Failure>,
    /// That refusal stopped the rest of the plan.
    pub blocked: bool,
    /// A transient error after which the rest still went ahead; the reconcile reports it at
    /// the end so it is retried.
    pub deferred: Option<ApiError>,
}

/// How one write ended.
enum Written {
    /// Written (or already there), with its events published.
    Done,
    /// Refused as invalid: the plan says what that means.
    Refused(Failure, bool),
}

async fn write<K: Object>(
    applier: &Applier,
    events: &Events,
    lws: &LeaderWorkerSet,
    w: &Write<K>,
) -> Result<Written, ApiError> {
    let result = match w.how {
        How::CreateIfAbsent => applier.create_if_absent(&w.object).await,
        How::Apply => applier.apply(&w.object).await.map(|_| Created::Created),
    };
    match result {
        Ok(Created::Created) => {
            events.publish_all(lws, &w.on_success).await;
            Ok(Written::Done)
        }
        Ok(Created::AlreadyExists) => Ok(Written::Done),
        Err(err) => {
            events.publish_all(lws, &w.on_failure).await;
            match (err.failure(), &w.on_refusal) {
                (ApiFailure::Refused(message), Some(refusal)) => Ok(Written::Refused(
                    Failure::spec(refusal.reason, format!("{}: {message}", refusal.what)),
                    refusal.blocks,
                )),
                _ => Err(err),
            }
        }
    }
}

/// Carries out the writes of `plan` in order: revisions, Services (before the leader
/// StatefulSet, so a group's Service exists before its ordinal does), leader StatefulSet,
/// Service deletions, worker StatefulSets, rosters, group restarts, old revisions, then the
/// plan's own events.
pub async fn apply(
    applier: &Applier,
    events: &Events,
    lws: &LeaderWorkerSet,
    plan: &Plan,
) -> Result<Applied, Error> {
    let ns = lws.namespace().unwrap_or_default();
    let mut applied = Applied::default();
    if plan.blocked.is_some() {
        return Ok(applied);
    }
    let refused = |applied: &mut Applied, failure: Failure, blocks: bool| {
        applied.failure = Some(failure);
        applied.blocked = blocks;
        blocks
    };
    for rev in &plan.revisions {
        if let Written::Refused(f, blocks) = write(applier, events, lws, rev).await?
            && refused(&mut applied, f, blocks)
        {
            return Ok(applied);
        }
    }
    // A Service failure (typically a name the user already owns) is reported but does not
    // hold back the groups or the status.
    for svc in &plan.services {
        match write(applier, events, lws, svc).await {
            Ok(Written::Refused(f, blocks)) => {
                if refused(&mut applied, f, blocks) {
                    return Ok(applied);
                }
            }
            Ok(Written::Done) => {}
            Err(err) => applied.deferred = Some(err),
        }
    }
    if let Some(sts) = &plan.leader_sts
        && let Written::Refused(f, blocks) = write(applier, events, lws, sts).await?
        && refused(&mut applied, f, blocks)
    {
        return Ok(applied);
    }
    for svc in &plan.delete_services {
        applier
            .delete::<Service>(&ns, &svc.name, svc.uid.as_deref(), Propagation::Default)
            .await?;
    }
    for sts in &plan.worker_sts {
        if let Written::Refused(f, blocks) = write(applier, events, lws, sts).await?
            && refused(&mut applied, f, blocks)
        {
            return Ok(applied);
        }
    }
    for roster in &plan.rosters {
        // The uid in the body makes the patch fail on any other incarnation of that name.
        let patch = json!({"metadata": {
            "uid": roster.uid,
            "annotations": {labels::WORKER_ROSTER: roster.value},
        }});
        match applier
            .merge_patch::<StatefulSet>(&ns, &roster.worker_sts, &patch)
            .await
        {
            Ok(()) => {}
            Err(err) if err.failure() != ApiFailure::Transient => {}
            Err(err) => return Err(err.into()),
        }
    }
    for restart in &plan.restarts {
        let deleted = applier
            .delete::<Pod>(
                &ns,
                &restart.leader,
                Some(&restart.uid),
                Propagation::Foreground,
            )
            .await?;
        if deleted == Deleted::Deleted {
            events.publish(lws, &restart.event).await;
        }
    }
    for rev in &plan.truncate_revisions {
        applier
            .delete::<ControllerRevision>(&ns, &rev.name, rev.uid.as_deref(), Propagation::Default)
            .await?;
    }
    events.publish_all(lws, &plan.events).await;
    Ok(applied)
}

/// Writes the status: the one the plan computed, with the `ReplicaFailure` condition from the
/// plan or the apply (a blocked LWS gets only that condition). Publishes the condition events.
pub async fn write_status(
    applier: &Applier,
    events: &Events,
    lws: &LeaderWorkerSet,
    plan: &Plan,
    applied: &Applied,
    now: &Time,
) -> Result<(), ApiError> {
    let current = lws.status.clone().unwrap_or_default();
    let blocked = plan
        .blocked
        .as_ref()
        .or(applied.failure.as_ref().filter(|_| applied.blocked));
    let (mut next, condition_event) = match (blocked, &plan.status) {
        (None, Some(outcome)) => (outcome.status.clone(), outcome.event.clone()),
        _ => (current.clone(), None),
    };
    let failure = blocked
        .or(applied.failure.as_ref())
        .or(plan.failure.as_ref());
    let failure_event = status::with_failure(&mut next, failure, lws.metadata.generation, now);
    if next != current {
        if blocked.is_some() {
            // Only the conditions: what was observed is not looked at while blocked.
            applier
                .patch_status::<LeaderWorkerSet>(
                    &lws.namespace().unwrap_or_default(),
                    &lws.name_any(),
                    &json!({"conditions": next.conditions}),
                )
                .await?;
        } else {
            applier
                .patch_status::<LeaderWorkerSet>(
                    &lws.namespace().unwrap_or_default(),
                    &lws.name_any(),
                    &next,
                )
                .await?;
        }
    }
    if let Some(event) = failure_event {
        tracing::warn!(reason = %event.reason, problem = %event.note, "LeaderWorkerSet cannot be realised");
        events.publish(lws, &event).await;
    }
    if let Some((reason, note)) = condition_event {
        events
            .publish(lws, &crate::k8s::events::EventSpec::normal(&reason, note))
            .await;
    }
    Ok(())
}
