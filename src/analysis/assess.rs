//! Argo Rollouts' rules for an analysis, as pure functions: when each metric's next
//! measurement is due, how a measurement changes its metric's counts and phase, and the run's
//! phase from its metrics'. The controller only takes the measurements these ask for.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Time, util::intstr::IntOrString};
use k8s_openapi::jiff::Timestamp;

use crate::api::analysis::{
    AnalysisRunSpec, AnalysisRunStatus, MEASUREMENTS_KEPT, Measurement, Metric, MetricResult, phase,
};

/// Argo's default number of consecutive errors tolerated.
pub const DEFAULT_CONSECUTIVE_ERROR_LIMIT: i32 = 4;
/// How soon a measurement in Error is retried when its metric has no interval.
pub const ERROR_RETRY: Duration = Duration::from_secs(10);

/// A metric's settings, read and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Measurements with a verdict to take; `None`: until the analysis is terminated.
    pub count: Option<i32>,
    /// Between measurements.
    pub interval: Option<Duration>,
    /// Before the first.
    pub initial_delay: Duration,
    /// Failed measurements tolerated (negative: any number).
    pub failure_limit: i32,
    /// Inconclusive measurements tolerated (negative: any number).
    pub inconclusive_limit: i32,
    /// Errors in a row tolerated.
    pub consecutive_error_limit: i32,
}

/// Reads a metric's settings; `Err` names the field and what is wrong with it.
pub fn limits(m: &Metric) -> Result<Limits, String> {
    let int = |field: &str, v: &Option<IntOrString>, default: Option<i32>| match v {
        None => Ok(default),
        Some(IntOrString::Int(i)) => Ok(Some(*i)),
        Some(IntOrString::String(s)) => s.trim().parse::<i32>().map(Some).map_err(|_| {
            format!(
                "metric {:?}: {field} must be a whole number, not {s:?}",
                m.name
            )
        }),
    };
    let duration = |field: &str, v: &Option<String>| {
        v.as_deref()
            .map(|text| {
                parse_duration(text).ok_or_else(|| {
                    format!(
                        "metric {:?}: {field} {text:?} is not a duration such as 30s or 5m",
                        m.name
                    )
                })
            })
            .transpose()
    };
    let interval = duration("interval", &m.interval)?;
    let count = int("count", &m.count, None)?.or(if interval.is_none() { Some(1) } else { None });
    Ok(Limits {
        count,
        interval,
        initial_delay: duration("initialDelay", &m.initial_delay)?.unwrap_or_default(),
        failure_limit: int("failureLimit", &m.failure_limit, Some(0))?.unwrap_or(0),
        inconclusive_limit: int("inconclusiveLimit", &m.inconclusive_limit, Some(0))?.unwrap_or(0),
        consecutive_error_limit: int(
            "consecutiveErrorLimit",
            &m.consecutive_error_limit,
            Some(DEFAULT_CONSECUTIVE_ERROR_LIMIT),
        )?
        .unwrap_or(DEFAULT_CONSECUTIVE_ERROR_LIMIT),
    })
}

/// Go-style durations as Argo writes them: `30s`, `5m`, `1h30m`, `500ms`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let (number, tail) = rest.split_at(digits);
        let value: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(seconds).ok()?;
        rest = tail;
    }
    Some(total)
}

/// What the controller should do with a run now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Due {
    /// Indexes (into `spec.metrics`) of the metrics to measure now.
    pub measure: Vec<usize>,
    /// Come back after this long (the next measurement due).
    pub requeue_after: Option<Duration>,
}

/// Which metrics are due at `now`, and when the next one is. `started` is when the run
/// started (its `status.startedAt`, else its creation).
pub fn due(
    spec: &AnalysisRunSpec,
    status: &AnalysisRunStatus,
    started: Timestamp,
    now: Timestamp,
) -> Due {
    let mut out = Due::default();
    if status.phase.as_deref().is_some_and(phase::is_done) || spec.terminate == Some(true) {
        return out;
    }
    for (i, m) in spec.metrics.iter().enumerate() {
        let Ok(l) = limits(m) else {
            // Recorded as an Error by the controller at once.
            out.measure.push(i);
            continue;
        };
        let result = status.metric_results.iter().find(|r| r.name == m.name);
        if result.is_some_and(|r| phase::is_done(&r.phase)) {
            continue;
        }
        let last = result.and_then(|r| r.measurements.last());
        let at = match last {
            None => add(started, l.initial_delay),
            Some(last) => {
                let after = if last.phase == phase::ERROR {
                    l.interval.unwrap_or(ERROR_RETRY)
                } else {
                    l.interval.unwrap_or_default()
                };
                let from = last.finished_at.as_ref().map_or(started, |t| t.0);
                add(from, after)
            }
        };
        if at <= now {
            out.measure.push(i);
        } else {
            let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
            out.requeue_after = Some(out.requeue_after.map_or(wait, |w| w.min(wait)));
        }
    }
    out
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(d).unwrap_or(t)
}

/// Adds `measurement` to metric `m`'s result (created if absent) and sets its phase.
pub fn record(status: &mut AnalysisRunStatus, m: &Metric, measurement: Measurement) {
    let at = match status.metric_results.iter().position(|r| r.name == m.name) {
        Some(at) => at,
        None => {
            status.metric_results.push(MetricResult {
                name: m.name.clone(),
                phase: phase::RUNNING.into(),
                ..MetricResult::default()
            });
            status.metric_results.len() - 1
        }
    };
    let r = &mut status.metric_results[at];
    match measurement.phase.as_str() {
        phase::ERROR => {
            r.error += 1;
            r.consecutive_error += 1;
        }
        verdict => {
            r.count += 1;
            r.consecutive_error = 0;
            match verdict {
                phase::SUCCESSFUL => r.successful += 1,
                phase::FAILED => r.failed += 1,
                _ => r.inconclusive += 1,
            }
        }
    }
    let detail = measurement.message.clone();
    let value = measurement.value.clone();
    r.measurements.push(measurement);
    if r.measurements.len() > MEASUREMENTS_KEPT {
        let extra = r.measurements.len() - MEASUREMENTS_KEPT;
        r.measurements.drain(..extra);
    }
    let (p, why) = match limits(m) {
        Err(e) => (phase::ERROR, Some(e)),
        Ok(l) => metric_phase(r, &l, m, value.as_deref(), detail.as_deref()),
    };
    r.phase = p.into();
    r.message = why;
}

fn metric_phase(
    r: &MetricResult,
    l: &Limits,
    m: &Metric,
    value: Option<&str>,
    detail: Option<&str>,
) -> (&'static str, Option<String>) {
    let value = value.unwrap_or("no value");
    let conditions = conditions(m);
    if l.failure_limit >= 0 && r.failed > l.failure_limit {
        return (
            phase::FAILED,
            Some(format!(
                "metric {:?} failed: value {value} against {conditions} ({} failed, {} allowed)",
                m.name, r.failed, l.failure_limit
            )),
        );
    }
    if l.inconclusive_limit >= 0 && r.inconclusive > l.inconclusive_limit {
        return (
            phase::INCONCLUSIVE,
            Some(format!(
                "metric {:?} inconclusive: value {value} against {conditions} ({} inconclusive, {} allowed)",
                m.name, r.inconclusive, l.inconclusive_limit
            )),
        );
    }
    if r.consecutive_error > l.consecutive_error_limit {
        return (
            phase::ERROR,
            Some(format!(
                "metric {:?}: {} measurements in a row could not be taken: {}",
                m.name,
                r.consecutive_error,
                detail.unwrap_or("no reason recorded")
            )),
        );
    }
    if l.count.is_some_and(|c| r.count >= c) {
        return (phase::SUCCESSFUL, None);
    }
    (phase::RUNNING, None)
}

fn conditions(m: &Metric) -> String {
    match (&m.success_condition, &m.failure_condition) {
        (Some(s), Some(f)) => format!("successCondition {s:?} and failureCondition {f:?}"),
        (Some(s), None) => format!("successCondition {s:?}"),
        (None, Some(f)) => format!("failureCondition {f:?}"),
        (None, None) => "no condition".into(),
    }
}

/// The run's phase and message from its metrics': a failure first, then an error, then an
/// inconclusive metric; Successful when every metric is.
pub fn run_phase(spec: &AnalysisRunSpec, status: &AnalysisRunStatus) -> (String, Option<String>) {
    let of = |name: &str| status.metric_results.iter().find(|r| r.name == name);
    for wanted in [phase::FAILED, phase::ERROR, phase::INCONCLUSIVE] {
        if let Some(r) = spec
            .metrics
            .iter()
            .filter_map(|m| of(&m.name))
            .find(|r| r.phase == wanted)
        {
            return (wanted.into(), r.message.clone());
        }
    }
    let all = !spec.metrics.is_empty()
        && spec
            .metrics
            .iter()
            .all(|m| of(&m.name).is_some_and(|r| r.phase == phase::SUCCESSFUL));
    if all {
        return (phase::SUCCESSFUL.into(), None);
    }
    if spec.metrics.is_empty() {
        return (
            phase::SUCCESSFUL.into(),
            Some("no metrics to measure".into()),
        );
    }
    let started = status
        .metric_results
        .iter()
        .any(|r| !r.measurements.is_empty());
    (
        if started {
            phase::RUNNING
        } else {
            phase::PENDING
        }
        .into(),
        None,
    )
}

/// A measurement finished at `now`.
pub fn measurement(
    phase: &str,
    value: Option<String>,
    message: Option<String>,
    started: Timestamp,
    now: Timestamp,
) -> Measurement {
    Measurement {
        phase: phase.into(),
        value,
        message,
        started_at: Some(Time(started)),
        finished_at: Some(Time(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::analysis::Provider;

    fn metric(name: &str) -> Metric {
        Metric {
            name: name.into(),
            success_condition: Some("result[0] < 0.05".into()),
            provider: Provider::default(),
            ..Metric::default()
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("time")
    }

    fn m(phase: &str, at: i64) -> Measurement {
        measurement(phase, Some("[0.01]".into()), None, t(at), t(at))
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn a_metric_is_due_after_its_initial_delay_then_each_interval() {
        let mut mm = metric("errors");
        mm.interval = Some("10s".into());
        mm.initial_delay = Some("5s".into());
        mm.count = Some(IntOrString::Int(3));
        let spec = AnalysisRunSpec {
            metrics: vec![mm.clone()],
            ..Default::default()
        };
        let mut status = AnalysisRunStatus::default();
        assert_eq!(
            due(&spec, &status, t(0), t(2)),
            Due {
                measure: vec![],
                requeue_after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(due(&spec, &status, t(0), t(5)).measure, vec![0]);
        record(&mut status, &mm, m(phase::SUCCESSFUL, 5));
        assert_eq!(
            due(&spec, &status, t(0), t(6)).requeue_after,
            Some(Duration::from_secs(9))
        );
        assert_eq!(due(&spec, &status, t(0), t(15)).measure, vec![0]);
        record(&mut status, &mm, m(phase::SUCCESSFUL, 15));
        record(&mut status, &mm, m(phase::SUCCESSFUL, 25));
        assert_eq!(status.metric_results[0].phase, phase::SUCCESSFUL);
        assert_eq!(due(&spec, &status, t(0), t(100)), Due::default());
        assert_eq!(run_phase(&spec, &status).0, phase::SUCCESSFUL);
    }

    #[test]
    fn failures_beyond_the_limit_fail_the_run_and_name_the_value_and_condition() {
        let mut mm = metric("errors");
        mm.count = Some(IntOrString::Int(5));
        mm.interval = Some("1s".into());
        mm.failure_limit = Some(IntOrString::Int(1));
        let spec = AnalysisRunSpec {
            metrics: vec![mm.clone()],
            ..Default::default()
        };
        let mut status = AnalysisRunStatus::default();
        let failed = |at| measurement(phase::FAILED, Some("[0.5]".into()), None, t(at), t(at));
        record(&mut status, &mm, failed(0));
        assert_eq!(run_phase(&spec, &status).0, phase::RUNNING);
        record(&mut status, &mm, failed(1));
        let (p, why) = run_phase(&spec, &status);
        assert_eq!(p, phase::FAILED);
        let why = why.expect("message");
        assert!(
            why.contains("[0.5]") && why.contains("result[0] < 0.05") && why.contains("errors"),
            "{why}"
        );
    }

    #[test]
    fn errors_in_a_row_beyond_the_limit_are_an_error_and_a_verdict_resets_them() {
        let mut mm = metric("ttft");
        mm.interval = Some("1s".into());
        mm.count = Some(IntOrString::Int(10));
        mm.consecutive_error_limit = Some(IntOrString::Int(2));
        let spec = AnalysisRunSpec {
            metrics: vec![mm.clone()],
            ..Default::default()
        };
        let mut status = AnalysisRunStatus::default();
        let error = |at| {
            measurement(
                phase::ERROR,
                None,
                Some("Prometheus at http://x is unreachable".into()),
                t(at),
                t(at),
            )
        };
        record(&mut status, &mm, error(0));
        record(&mut status, &mm, error(1));
        record(&mut status, &mm, m(phase::SUCCESSFUL, 2));
        record(&mut status, &mm, error(3));
        record(&mut status, &mm, error(4));
        assert_eq!(run_phase(&spec, &status).0, phase::RUNNING);
        record(&mut status, &mm, error(5));
        let (p, why) = run_phase(&spec, &status);
        assert_eq!(p, phase::ERROR);
        assert!(why.expect("why").contains("unreachable"));
        // An error is retried after the interval (or ERROR_RETRY without one).
        assert_eq!(status.metric_results[0].error, 5);
        assert_eq!(status.metric_results[0].count, 1);
    }

    #[test]
    fn neither_condition_holding_is_inconclusive_and_measurements_are_capped() {
        let mut mm = metric("latency");
        mm.interval = Some("1s".into());
        mm.count = Some(IntOrString::Int(20));
        mm.inconclusive_limit = Some(IntOrString::Int(-1));
        let spec = AnalysisRunSpec {
            metrics: vec![mm.clone()],
            ..Default::default()
        };
        let mut status = AnalysisRunStatus::default();
        for i in 0..15 {
            record(&mut status, &mm, m(phase::INCONCLUSIVE, i));
        }
        assert_eq!(
            status.metric_results[0].measurements.len(),
            MEASUREMENTS_KEPT
        );
        assert_eq!(run_phase(&spec, &status).0, phase::RUNNING);
        mm.inconclusive_limit = None;
        let spec = AnalysisRunSpec {
            metrics: vec![mm.clone()],
            ..Default::default()
        };
        record(&mut status, &mm, m(phase::INCONCLUSIVE, 16));
        assert_eq!(run_phase(&spec, &status).0, phase::INCONCLUSIVE);
    }

    #[test]
    fn bad_settings_name_the_field() {
        let mut mm = metric("x");
        mm.count = Some(IntOrString::String("{{args.count}}".into()));
        assert!(limits(&mm).expect_err("bad").contains("count"));
        mm.count = None;
        mm.interval = Some("often".into());
        assert!(limits(&mm).expect_err("bad").contains("interval"));
        // No interval, no count: one measurement.
        assert_eq!(limits(&metric("y")).map(|l| l.count), Ok(Some(1)));
    }
}
