//! Carries a [`RolloutPlan`] out — the only Rollout code that writes. In order: the finalizer
//! (so finalising can run before the Rollout is gone), the strategy hash, the BatchRelease,
//! traffic, the hold, events, the status (with a resourceVersion precondition: an approval
//! written by `kubectl-kruise rollout approve` a moment ago is never overwritten), and last the
//! finalizer's removal.

use crate::k8s::field_managers;
use kube::ResourceExt;
use serde_json::json;

use super::{
    observe::{RolloutObserved, WorkloadKind},
    plan::{BatchReleaseAction, FinalizerAction, HoldAction, RolloutPlan},
};
use crate::k8s::written::{Written, key};
use crate::{
    api::{BatchRelease, LeaderWorkerSet, Rollout, analysis::AnalysisRun, rollout::RolloutStatus},
    k8s::{
        apply::{ApiError, Applier, Propagation, status_patch},
        error::{Categorized, Category},
        events::Events,
        metrics::ControllerMetrics,
    },
    lws::labels,
    rollout::names::FINALIZER,
    traffic,
};

/// Why a Rollout reconcile could not finish, with its category (`k8s::error`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write of the Rollout, its BatchRelease or the hold failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A traffic write failed. Always looked at again soon: a patch of a user's object computed
    /// from a read that went stale meanwhile is refused (422) by its resourceVersion test, and
    /// the next reconcile re-reads and re-plans it.
    #[error("traffic: {0}")]
    Traffic(ApiError),
}

impl Categorized for Error {
    fn category(&self) -> Category {
        match self {
            Error::Api(err) => err.category(),
            Error::Traffic(_) => Category::Transient,
        }
    }

    fn object_gone(&self) -> bool {
        matches!(self, Error::Api(err) if err.object_gone())
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

/// What the apply writes with: the client, the Event publisher, the record of our writes the
/// cache has not shown yet, and the metrics a status write feeds.
pub struct Writers<'a> {
    /// The client, with the Rollout controller's field manager.
    pub applier: &'a Applier,
    /// The Event publisher.
    pub events: &'a Events,
    /// Our writes the cache has not shown yet.
    pub written: &'a Written,
    /// Step transitions are recorded when a status write carries one.
    pub metrics: &'a ControllerMetrics,
}

/// Carries `plan` (decided at `now`) out for the Rollout in `obs`.
pub async fn apply(
    w: &Writers<'_>,
    obs: &RolloutObserved,
    plan: &RolloutPlan,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<(), Error> {
    let Writers {
        applier,
        events,
        written,
        metrics,
    } = *w;
    let rollout = &obs.rollout;
    let ns = rollout.namespace().unwrap_or_default();
    let name = rollout.name_any();
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
        return Ok(());
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
                applied.resource_version.as_deref(),
            );
        }
        BatchReleaseAction::Delete => {
            applier
                .delete::<BatchRelease>(&ns, &name, None, Propagation::Background)
                .await?;
        }
    }
    for run in &plan.analysis.create {
        applier.create_if_absent(run).await?;
    }
    for stale in &plan.analysis.delete {
        applier
            .delete::<AnalysisRun>(&ns, stale, None, Propagation::Background)
            .await?;
    }
    for done in &plan.analysis.terminate {
        applier
            .merge_patch::<AnalysisRun>(&ns, done, &json!({"spec": {"terminate": true}}))
            .await?;
    }
    if !plan.traffic_writes.is_empty() {
        traffic::apply::apply(applier.client(), &ns, &plan.traffic_writes)
            .await
            .map_err(Error::Traffic)?;
    }
    if let Some(workload) = obs
        .workload
        .as_ref()
        .filter(|w| w.kind == WorkloadKind::DisaggregatedSet)
    {
        // The hold and the release-groups go in one write, under the one field manager the
        // set's admission lets lift the hold: the set's own rolling update then takes the
        // pair from where the release left it (or, reverted, drains the new pair).
        // `ReturnMoved` (a missed deadline in partition style, or a restart on a third
        // template) takes the release-groups alone: the set, still held, gives the held pair
        // its groups back and drains the new pair.
        use crate::api::disaggregatedset as ds;
        let annotations = match plan.hold {
            HoldAction::Release if workload.hold.is_some() || workload.release_groups => {
                Some(json!({
                    ds::HELD_REVISION_ANNOTATION: null,
                    ds::RELEASE_GROUPS_ANNOTATION: null,
                    ds::RELEASE_STYLE_ANNOTATION: null,
                }))
            }
            HoldAction::ReturnMoved if workload.release_groups => Some(json!({
                ds::RELEASE_GROUPS_ANNOTATION: null,
                ds::RELEASE_STYLE_ANNOTATION: null,
            })),
            _ => None,
        };
        if let Some(annotations) = annotations {
            Applier::new(applier.client().clone(), field_managers::RELEASE)
                .merge_patch::<ds::DisaggregatedSet>(
                    &ns,
                    &workload.name,
                    &json!({"metadata": {"annotations": annotations}}),
                )
                .await?;
        }
    } else if let Some(workload) = &obs.workload {
        // Only a write with this field manager lifts the hold or the release partition (the
        // LWS webhook restores them for anyone else).
        let annotations = match plan.hold {
            HoldAction::Release
                if workload.hold.is_some() || workload.release_partition.is_some() =>
            {
                Some(json!({labels::HELD_REVISION: null, labels::RELEASE_PARTITION: null}))
            }
            HoldAction::ReturnMoved if workload.release_partition.is_some() => {
                Some(json!({labels::RELEASE_PARTITION: null}))
            }
            _ => None,
        };
        if let Some(annotations) = annotations {
            Applier::new(applier.client().clone(), field_managers::RELEASE)
                .merge_patch::<LeaderWorkerSet>(
                    &ns,
                    &workload.name,
                    &json!({"metadata": {"annotations": annotations}}),
                )
                .await?;
        }
    }
    // Events and the status write go out together: the Events (one per state passed, several
    // when a reconcile runs a whole step) are no reason to hold back the write a watcher waits
    // for.
    let publish = async {
        for event in &plan.events {
            events.publish(rollout, event).await;
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
                patched.resource_version.as_deref(),
            );
            record_step(metrics, rollout.status.as_ref(), &plan.status, now);
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
    Ok(())
}

/// Where a Rollout's release stands: (step index, step state, since when).
fn step_position(
    status: &RolloutStatus,
) -> Option<(i32, &str, Option<k8s_openapi::jiff::Timestamp>)> {
    let common = status
        .canary_status
        .as_ref()
        .map(|c| &c.common)
        .or(status.blue_green_status.as_ref().map(|b| &b.common))?;
    (!common.current_step_state.is_unset()).then(|| {
        (
            common.current_step_index,
            common.current_step_state.as_str(),
            common.last_update_time.as_ref().map(|t| t.0),
        )
    })
}

/// Records a release step transition in `metrics` when a Rollout's status moved from `before`
/// to `after` (written at `now`): a new step index or state. The time spent in the state left
/// counts from its `lastUpdateTime`.
pub fn record_step(
    metrics: &ControllerMetrics,
    before: Option<&RolloutStatus>,
    after: &RolloutStatus,
    now: k8s_openapi::jiff::Timestamp,
) {
    {
        let Some((index, state, _)) = step_position(after) else {
            return;
        };
        let old = before.and_then(step_position);
        if old.is_some_and(|(i, s, _)| i == index && s == state) {
            return;
        }
        let left = old.and_then(|(_, s, since)| {
            let seconds = now.duration_since(since?).as_secs_f64();
            Some((s, seconds.max(0.0)))
        });
        metrics.step_transition(left, state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::metrics::sample;

    #[test]
    fn a_rollout_step_change_is_a_transition_with_the_time_spent_in_the_state_left() {
        use crate::api::rollout::{CanaryStatus, CommonStatus};
        use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
        let at = |secs: i64| Timestamp::from_second(secs).expect("valid");
        let status = |index: i32, state: &str, since: i64| RolloutStatus {
            canary_status: Some(CanaryStatus {
                common: CommonStatus {
                    current_step_index: index,
                    current_step_state: state.into(),
                    last_update_time: Some(Time(at(since))),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        let m = crate::k8s::metrics::Metrics::new();
        let c = m.controller("rollout");
        let upgrade = status(1, "StepUpgrade", 100);
        record_step(&c, None, &upgrade, at(100));
        // The same position rewritten (a message, a count) is no transition.
        record_step(&c, Some(&upgrade), &status(1, "StepUpgrade", 100), at(101));
        let paused = status(1, "StepPaused", 130);
        record_step(&c, Some(&upgrade), &paused, at(130));
        // No step yet, or none any more: nothing to record.
        record_step(&c, Some(&paused), &RolloutStatus::default(), at(140));
        let text = m.encode();
        let series = |state: &str| {
            format!(
                r#"lws_rollout_release_step_transitions_total{{controller="rollout",state="{state}"}}"#
            )
        };
        assert_eq!(sample(&text, &series("StepUpgrade")), Some(1.0));
        assert_eq!(sample(&text, &series("StepPaused")), Some(1.0));
        assert_eq!(
            sample(
                &text,
                r#"lws_rollout_release_step_duration_seconds_sum{controller="rollout",state="StepUpgrade"}"#
            ),
            Some(30.0)
        );
    }
}
