//! Carries a DisaggregatedSet plan out: the only code of this controller that writes. Creates
//! are create-if-absent, deletes carry the uid decided on, and a scale is a JSON patch that
//! tests the replicas it was planned from, so a plan made from a cache a moment behind never
//! scales twice or reports a scale twice.

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use serde_json::json;

use super::plan::{Plan, reasons};
use crate::{
    api::{
        disaggregatedset::{DisaggregatedSet, INITIAL_REPLICAS_ANNOTATION, ROLE_LABEL},
        disaggregatedset_role_scaler::DisaggregatedSetRoleScaler,
        leaderworkerset::LeaderWorkerSet,
    },
    k8s::{
        apply::{ApiError, Applier, Created, Deleted, Failure, Propagation},
        events::{EventSpec, Events},
    },
};

/// Carries `plan` out for `set`. Returns the names of the LWSs it changed, for the reconcile
/// to recognise its own writes in the cache (`k8s::written`).
pub async fn apply(
    applier: &Applier,
    events: &Events,
    set: &DisaggregatedSet,
    plan: &Plan,
) -> Result<Vec<String>, ApiError> {
    let ns = set.namespace().unwrap_or_default();
    let mut changed = Vec::new();
    for scaler in &plan.create_scalers {
        if let Created::Created(_) = applier.create_if_absent(scaler).await? {
            let note = format!(
                "Created scaler {} for role {}",
                scaler.name_any(),
                scaler.labels().get(ROLE_LABEL).cloned().unwrap_or_default()
            );
            events
                .publish(set, &EventSpec::normal(reasons::SCALER_CREATED, note))
                .await;
        }
    }
    for d in &plan.delete_scalers {
        let outcome = applier
            .delete::<DisaggregatedSetRoleScaler>(
                &ns,
                &d.name,
                d.uid.as_deref(),
                Propagation::Background,
            )
            .await?;
        if outcome == Deleted::Deleted {
            let note = format!("Deleted scaler {} (its role is no longer External)", d.name);
            events
                .publish(set, &EventSpec::normal(reasons::SCALER_DELETED, note))
                .await;
        }
    }
    for (name, status) in &plan.scaler_status {
        match applier
            .patch_status::<DisaggregatedSetRoleScaler>(&ns, name, status)
            .await
        {
            Ok(_) => {}
            // Deleted since the plan: nothing to report on.
            Err(err) if matches!(err.failure(), Failure::NotFound) => {}
            Err(err) => return Err(err),
        }
    }
    // Groups given up first: a partition-style release swaps the held pair's groups for the
    // new pair's, and the new ones are asked for only after the old ones were let go.
    for s in plan.scale.iter().filter(|s| s.replicas < s.from) {
        if scale(applier, events, set, &ns, s).await? {
            changed.push(s.name.clone());
        }
    }
    let mut created = false;
    let mut refused: Option<String> = None;
    for c in &plan.create {
        match applier.create_if_absent(&c.lws).await {
            Ok(Created::Created(_)) => {
                created = true;
                changed.push(c.lws.name_any());
                events.publish(set, &c.event).await;
            }
            Ok(Created::AlreadyExists) => {}
            // The API server refuses the LWS as the role describes it (e.g. our LWS webhook's
            // rules): the set says so in its Degraded condition; a change of the set fixes it.
            Err(err) if err.refused().is_some() => {
                refused.get_or_insert(format!(
                    "the API server refused LeaderWorkerSet {}: {}",
                    c.lws.name_any(),
                    err.refused().unwrap_or_default()
                ));
            }
            Err(err) => return Err(err),
        }
    }
    if created {
        events.publish_all(set, &plan.on_created).await;
    }
    for a in &plan.annotate {
        applier
            .merge_patch::<LeaderWorkerSet>(
                &ns,
                &a.name,
                &json!({"metadata": {"annotations": {INITIAL_REPLICAS_ANNOTATION: a.replicas.to_string()}}}),
            )
            .await?;
        changed.push(a.name.clone());
    }
    for s in plan.scale.iter().filter(|s| s.replicas >= s.from) {
        if scale(applier, events, set, &ns, s).await? {
            changed.push(s.name.clone());
        }
    }
    let mut deleted = false;
    for d in &plan.delete {
        let outcome = applier
            .delete::<LeaderWorkerSet>(&ns, &d.name, d.uid.as_deref(), Propagation::Background)
            .await?;
        if outcome == Deleted::Deleted {
            deleted = true;
            changed.push(d.name.clone());
            let note = format!("Deleted drained LWS {}", d.name);
            events
                .publish(
                    set,
                    &EventSpec::normal(super::plan::reasons::LWS_DELETED, note),
                )
                .await;
        }
    }
    if deleted {
        events.publish_all(set, &plan.on_deleted).await;
    }
    for svc in &plan.services {
        applier.create_if_absent::<Service>(svc).await?;
    }
    for d in &plan.delete_services {
        applier
            .delete::<Service>(&ns, &d.name, d.uid.as_deref(), Propagation::Background)
            .await?;
    }
    let mut status = plan.status.clone();
    if let Some(message) = refused {
        let degraded = status
            .conditions
            .get_or_insert_with(Vec::new)
            .iter_mut()
            .find(|c| c.type_ == super::status::DEGRADED);
        if let Some(c) = degraded {
            if c.status != "True" {
                c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                );
            }
            c.status = "True".into();
            c.reason = "FailedCreate".into();
            c.message = message;
        }
    }
    let plan_status = &status;
    if set.status.as_ref() != Some(plan_status) {
        applier
            .patch_status::<DisaggregatedSet>(&ns, &set.name_any(), plan_status)
            .await?;
        let before = set
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == super::status::DEGRADED))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        let after = plan_status
            .conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == super::status::DEGRADED));
        if let Some(after) = after.filter(|c| c.status == "True")
            && before
                != Some((
                    after.status.clone(),
                    after.reason.clone(),
                    after.message.clone(),
                ))
        {
            events
                .publish(
                    set,
                    &EventSpec::warning(&after.reason, after.message.clone()),
                )
                .await;
        }
    }
    events.publish_all(set, &plan.events).await;
    Ok(changed)
}

/// One scale: a JSON patch testing the replicas it was planned from (and the uid). Whether it
/// took effect.
async fn scale(
    applier: &Applier,
    events: &Events,
    set: &DisaggregatedSet,
    ns: &str,
    s: &super::plan::Scale,
) -> Result<bool, ApiError> {
    let mut ops = vec![json!({"op": "test", "path": "/spec/replicas", "value": s.from})];
    if let Some(uid) = &s.uid {
        ops.push(json!({"op": "test", "path": "/metadata/uid", "value": uid}));
    }
    ops.push(json!({"op": "replace", "path": "/spec/replicas", "value": s.replicas}));
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).expect("a JSON patch");
    match applier
        .json_patch::<LeaderWorkerSet>(ns, &s.name, patch)
        .await
    {
        Ok(()) => {
            events.publish(set, &s.event).await;
            Ok(true)
        }
        // The LWS moved on (or is another incarnation) since the plan: the next reconcile
        // plans from what it is now.
        Err(err) if matches!(err.failure(), Failure::Refused(_) | Failure::NotFound) => Ok(false),
        Err(err) => Err(err),
    }
}
