//! The AnalysisRun controller: one reconcile per run of ours (labelled with our instance id),
//! read as its steps — observe the run → the metrics due now (`assess::due`) → measure them →
//! write the status (with a resourceVersion precondition) → Events.
//!
//! A measurement reaches the run's status before the next is taken, and the write fails if the
//! run changed since it was read, so a restart — or a second writer — never records one twice;
//! a measurement taken but not written (a crash in between) is simply taken again. Woken by
//! the run's own changes and by its next due time, nothing else.

use crate::k8s::field_managers;
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{
    ResourceExt,
    runtime::{Controller, controller::Action},
};
use serde_json::json;

use super::{
    assess, condition,
    prometheus::{self, QueryResult},
};
use crate::{
    api::{
        Rollout,
        analysis::{AnalysisRun, AnalysisRunStatus, INSTANCE_ID, INSTANCE_ID_LABEL, Metric, phase},
    },
    k8s::{
        apply::{ApiError, Applier, Failure},
        events::{EventSpec, Events},
        metrics::ControllerMetrics,
        runner::Runner,
        watch::{SharedCache, store_ready},
    },
};

/// Event reasons.
pub mod event {
    /// A measurement failed its conditions (Warning, on the Rollout).
    pub const MEASUREMENT_FAILED: &str = "AnalysisMeasurementFailed";
    /// A measurement could not be taken (Warning, on the Rollout).
    pub const MEASUREMENT_ERROR: &str = "AnalysisMeasurementError";
    /// The run reached its verdict (on the Rollout).
    pub const COMPLETED: &str = "AnalysisRunCompleted";
}

struct Context {
    applier: Applier,
    events: Events,
    runner: Runner<AnalysisRun>,
    store: kube::runtime::reflector::Store<AnalysisRun>,
}

/// Runs the controller until `shutdown` completes.
pub fn run(
    client: kube::Client,
    runs: &mut SharedCache<AnalysisRun>,
    metrics: ControllerMetrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let ctx = Arc::new(Context {
        applier: Applier::new(client.clone(), field_managers::ANALYSIS),
        events: Events::new(client, "lws-rollout"),
        runner: Runner::new("analysisrun", metrics),
        store: runs.store(),
    });
    Controller::for_shared_stream(runs.subscribe(), runs.store())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}

/// Whether this controller measures `run` (ours, not another Argo Rollouts instance's).
pub fn ours(run: &AnalysisRun) -> bool {
    run.labels().get(INSTANCE_ID_LABEL).map(String::as_str) == Some(INSTANCE_ID)
}

async fn reconcile(run: Arc<AnalysisRun>, ctx: Arc<Context>) -> Result<Action, ApiError> {
    if !ours(&run) {
        return Ok(Action::await_change());
    }
    ctx.runner
        .reconcile(&run, [store_ready(&ctx.store)], steps(&run, &ctx))
        .await
}

async fn steps(run: &AnalysisRun, ctx: &Context) -> Result<Action, ApiError> {
    let now = Timestamp::now();
    let started = run
        .status
        .as_ref()
        .and_then(|s| s.started_at.as_ref())
        .or(run.metadata.creation_timestamp.as_ref())
        .map_or(now, |t| t.0);
    let stored = run.status.clone().unwrap_or_default();
    let mut status = stored.clone();
    if status.started_at.is_none() {
        status.started_at = Some(Time(started));
    }
    let due = assess::due(&run.spec, &status, started, now);
    let mut events = Vec::new();
    if run.spec.terminate == Some(true) && !status.phase.as_deref().is_some_and(phase::is_done) {
        status.phase = Some(phase::SUCCESSFUL.into());
        status.message = Some("terminated: the release no longer needs this analysis".into());
    }
    if !due.measure.is_empty() {
        let measured = futures::future::join_all(
            due.measure
                .iter()
                .map(|i| measure(&run.spec.metrics[*i], now)),
        )
        .await;
        for (i, m) in due.measure.iter().zip(measured) {
            let metric = &run.spec.metrics[*i];
            if let Some(e) = measurement_event(metric, &m) {
                events.push(e);
            }
            assess::record(&mut status, metric, m);
        }
    }
    if !status.phase.as_deref().is_some_and(phase::is_done) || status.phase.is_none() {
        let (p, message) = assess::run_phase(&run.spec, &status);
        if phase::is_done(&p) {
            events.push(if p == phase::SUCCESSFUL {
                EventSpec::normal(event::COMPLETED, format!("analysis {} {p}", run.name_any()))
            } else {
                EventSpec::warning(
                    event::COMPLETED,
                    format!(
                        "analysis {} {p}: {}",
                        run.name_any(),
                        message.as_deref().unwrap_or("")
                    ),
                )
            });
        }
        status.phase = Some(p);
        status.message = message;
    }
    if status != stored {
        let namespace = run.namespace().unwrap_or_default();
        let patch = json!({
            "metadata": {"resourceVersion": run.resource_version()},
            "status": status,
        });
        match ctx
            .applier
            .merge_patch::<AnalysisRun>(&namespace, &run.name_any(), &patch)
            .await
        {
            Ok(()) => {}
            // Changed meanwhile: its watch event brings the newer version, which is measured
            // from; what was measured here is dropped, never recorded twice.
            Err(e) if e.failure() == Failure::Conflict => {
                return Ok(Action::requeue(Duration::from_millis(500)));
            }
            Err(e) if e.failure() == Failure::NotFound => return Ok(Action::await_change()),
            Err(e) => return Err(e),
        }
        if let Some(owner) = rollout_of(run) {
            ctx.events.publish_all(&owner, &events).await;
        }
    }
    let next = assess::due(&run.spec, &status, started, Timestamp::now());
    Ok(if !next.measure.is_empty() {
        Action::requeue(Duration::from_millis(10))
    } else {
        next.requeue_after
            .map_or_else(Action::await_change, Action::requeue)
    })
}

/// Takes one measurement of `metric`.
async fn measure(metric: &Metric, started: Timestamp) -> crate::api::analysis::Measurement {
    let done = |phase: &str, value: Option<String>, message: Option<String>| {
        assess::measurement(phase, value, message, started, Timestamp::now())
    };
    if let Err(e) = assess::limits(metric) {
        return done(phase::ERROR, None, Some(e));
    }
    let Some(p) = metric.provider.prometheus.as_ref() else {
        let named = metric
            .provider
            .other
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        return done(
            phase::ERROR,
            None,
            Some(format!(
                "provider {} is not supported here: only prometheus is measured",
                if named.is_empty() {
                    "(none)".into()
                } else {
                    named
                }
            )),
        );
    };
    let result: QueryResult = match prometheus::query(&p.address, &p.query, p.timeout).await {
        Ok(r) => r,
        Err(e) => return done(phase::ERROR, None, Some(e)),
    };
    let value = Some(result.display());
    match condition::evaluate(
        &result,
        metric.success_condition.as_deref(),
        metric.failure_condition.as_deref(),
    ) {
        Ok(condition::Verdict::Successful) => done(phase::SUCCESSFUL, value, None),
        Ok(condition::Verdict::Failed) => done(phase::FAILED, value, None),
        Ok(condition::Verdict::Inconclusive) => done(phase::INCONCLUSIVE, value, None),
        Err(e) => done(phase::ERROR, value, Some(e)),
    }
}

fn measurement_event(metric: &Metric, m: &crate::api::analysis::Measurement) -> Option<EventSpec> {
    let value = m.value.as_deref().unwrap_or("no value");
    match m.phase.as_str() {
        phase::FAILED => Some(EventSpec::warning(
            event::MEASUREMENT_FAILED,
            format!(
                "metric {:?}: value {value} fails {}",
                metric.name,
                metric
                    .success_condition
                    .as_deref()
                    .map(|s| format!("successCondition {s:?}"))
                    .or_else(|| metric
                        .failure_condition
                        .as_deref()
                        .map(|f| format!("(failureCondition {f:?} holds)")))
                    .unwrap_or_default()
            ),
        )),
        phase::ERROR => Some(EventSpec::warning(
            event::MEASUREMENT_ERROR,
            format!(
                "metric {:?}: {}",
                metric.name,
                m.message.as_deref().unwrap_or("error")
            ),
        )),
        _ => None,
    }
}

/// The Rollout that owns `run`, as an object Events can be about.
fn rollout_of(run: &AnalysisRun) -> Option<Rollout> {
    let owner = run
        .owner_references()
        .iter()
        .find(|o| o.kind == "Rollout" && o.controller == Some(true))?;
    let mut r = Rollout::new(&owner.name, Default::default());
    r.metadata.namespace = run.namespace();
    r.metadata.uid = Some(owner.uid.clone());
    Some(r)
}

fn error_policy(run: Arc<AnalysisRun>, err: &ApiError, ctx: Arc<Context>) -> Action {
    ctx.runner.error_policy(run.as_ref(), err)
}

/// The status a run shows before its first measurement.
pub fn pending() -> AnalysisRunStatus {
    AnalysisRunStatus {
        phase: Some(phase::PENDING.into()),
        ..AnalysisRunStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::analysis::{Measurement, PrometheusMetric, Provider};

    #[tokio::test]
    async fn an_unsupported_provider_or_bad_setting_is_a_measurement_in_error_saying_so() {
        let mut m = Metric {
            name: "web".into(),
            provider: Provider {
                other: [("web".to_string(), json!({"url": "http://x"}))].into(),
                ..Provider::default()
            },
            ..Metric::default()
        };
        let got = measure(&m, Timestamp::now()).await;
        assert_eq!(got.phase, phase::ERROR);
        assert!(
            got.message.as_deref().is_some_and(|s| s.contains("web")),
            "{got:?}"
        );
        m.provider = Provider {
            prometheus: Some(PrometheusMetric {
                address: "https://p:9090".into(),
                query: "up".into(),
                timeout: None,
            }),
            ..Provider::default()
        };
        let got = measure(&m, Timestamp::now()).await;
        assert!(
            got.message
                .as_deref()
                .is_some_and(|s| s.contains("http://")),
            "{got:?}"
        );
    }

    #[test]
    fn a_failed_measurement_event_names_the_metric_value_and_condition() {
        let metric = Metric {
            name: "error-ratio".into(),
            success_condition: Some("result[0] < 0.05".into()),
            ..Metric::default()
        };
        let m = Measurement {
            phase: phase::FAILED.into(),
            value: Some("[0.5]".into()),
            ..Measurement::default()
        };
        let e = measurement_event(&metric, &m).expect("event");
        assert!(
            e.note.contains("error-ratio")
                && e.note.contains("[0.5]")
                && e.note.contains("result[0] < 0.05"),
            "{}",
            e.note
        );
    }
}
