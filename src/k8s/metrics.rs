//! The Prometheus metrics registry every part of the process writes into (the manager serves it
//! at `/metrics` on the health port, in the OpenMetrics text format).
//!
//! One registry per process, created before anything else and never replaced: the controllers
//! of a new leadership term, the webhooks and the election all write into the same families,
//! so a scrape during a leader change sees continuous counters and never fails. Every name
//! starts with `lws_rollout_`; counters end in `_total`, durations are histograms in seconds.

use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, text::encode},
    metrics::{
        MetricType,
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Registry, Unit},
};

/// See [`ControllerMetrics::queued`].
const QUEUE_STALE: Duration = Duration::from_secs(300);

/// How often a queue drops its stale keys: each watch event used to walk the whole queue (a
/// clock read per key), the work of one event growing with the number of objects waiting.
const QUEUE_PRUNE_EVERY: Duration = Duration::from_secs(1);

/// The content type of the OpenMetrics text format [`Metrics::encode`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels naming a controller (`lws`, `rollout`, `batchrelease`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller.
    pub controller: String,
}

/// Labels of a failed reconcile: the controller and the error category (`spec`, `blocked`,
/// `transient`), so a spec error users must fix is told apart from an API hiccup.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The controller.
    pub controller: String,
    /// The error category.
    pub category: String,
}

/// Labels of an admission request: the endpoint path and what came of it (`allowed`,
/// `patched`, `denied`, `error`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// The endpoint path, e.g. `/mutate-pod`.
    pub endpoint: String,
    /// The outcome.
    pub outcome: String,
}

/// Labels of the watch events a shared cache received: the kind and whether the controllers
/// were told (`delivered`) or the event changed nothing they read (`unchanged`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// The watched kind, e.g. `Pod`.
    pub kind: String,
    /// `delivered` or `unchanged`.
    pub outcome: String,
}

/// Labels of a leader-lane job (`lws::leader_lane`): `created` (the worker StatefulSet was
/// created or found there) or `left` (to the LWS's reconcile).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaneLabels {
    /// `created` or `left`.
    pub outcome: String,
}

/// Labels of a release step transition: the controller and the state entered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// The controller.
    pub controller: String,
    /// The step state entered (e.g. `StepUpgrade`, `StepPaused`, `Completed`).
    pub state: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Reconciles take from under a millisecond (nothing to do) to seconds (an API server under
/// load): 1 ms doubling to ~16 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Admission must answer within the webhook timeout (10 s); most answers take well under a
/// millisecond: 100 µs doubling to ~3 s.
fn webhook_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// A release step lasts from seconds to days (a manual approval): 1 s quadrupling to ~3 days.
fn step_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 4.0, 10))
}

/// Every metric of the process; cheap to clone (the families are shared).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    queue_depth: Family<ControllerLabels, Gauge>,
    /// Each controller's queue, by controller name: a new leadership term's controllers go
    /// on counting in their predecessors' queue.
    queues: Arc<Mutex<HashMap<String, Arc<Mutex<Queue>>>>>,
    webhook_requests: Family<WebhookLabels, Counter>,
    webhook_duration: HistogramFamily<WebhookLabels>,
    leader: Gauge,
    leader_transitions: Counter,
    cert_expiry: Gauge,
    step_transitions: Family<StepLabels, Counter>,
    step_duration: HistogramFamily<StepLabels>,
    watch_events: Family<WatchLabels, Counter>,
    leader_lane: Family<LaneLabels, Counter>,
    releases: ReleaseCollector,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family registered (and no samples yet).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("lws_rollout");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "reconciles",
            "Reconciles run, per controller",
            reconciles.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, per controller and error category",
            reconcile_errors.clone(),
        );
        let reconcile_duration: HistogramFamily<ControllerLabels> =
            Family::new_with_constructor(duration_histogram);
        registry.register_with_unit(
            "reconcile_duration",
            "How long reconciles take, per controller",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let queue_depth = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "queue_depth",
            "Objects a watch event has queued for reconciling that no reconcile has started on yet",
            queue_depth.clone(),
        );
        let webhook_requests = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "webhook_requests",
            "Admission requests, per endpoint and outcome (allowed, patched, denied, error)",
            webhook_requests.clone(),
        );
        let webhook_duration: HistogramFamily<WebhookLabels> =
            Family::new_with_constructor(webhook_histogram);
        registry.register_with_unit(
            "webhook_request_duration",
            "How long admission requests take to answer, per endpoint and outcome",
            Unit::Seconds,
            webhook_duration.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica runs the controllers (holds the leader Lease), else 0",
            leader.clone(),
        );
        let leader_transitions = Counter::default();
        registry.register(
            "leader_transitions",
            "Times this replica became the leader",
            leader_transitions.clone(),
        );
        let cert_expiry = Gauge::default();
        registry.register_with_unit(
            "webhook_certificate_expiry_timestamp",
            "When the webhook serving certificate in use expires (Unix time)",
            Unit::Seconds,
            cert_expiry.clone(),
        );
        let step_transitions = Family::<StepLabels, Counter>::default();
        registry.register(
            "release_step_transitions",
            "Release step state transitions, per controller and state entered",
            step_transitions.clone(),
        );
        let step_duration: HistogramFamily<StepLabels> =
            Family::new_with_constructor(step_histogram);
        registry.register_with_unit(
            "release_step_duration",
            "How long a release step stayed in a state, per controller and state left",
            Unit::Seconds,
            step_duration.clone(),
        );
        let watch_events = Family::<WatchLabels, Counter>::default();
        registry.register(
            "watch_events",
            "Watch events the shared caches received, per kind and outcome (delivered to the \
             controllers, or unchanged: nothing a controller reads changed)",
            watch_events.clone(),
        );
        let leader_lane = Family::<LaneLabels, Counter>::default();
        registry.register(
            "leader_lane_jobs",
            "New leader pods handled beside their LWS's reconcile, per outcome (created: its \
             worker StatefulSet was created or found there; left: to the LWS's reconcile)",
            leader_lane.clone(),
        );
        let releases = ReleaseCollector::default();
        registry.register_collector(Box::new(releases.clone()));
        Self {
            registry: Arc::new(registry),
            reconciles,
            reconcile_errors,
            reconcile_duration,
            queue_depth,
            queues: Arc::default(),
            webhook_requests,
            webhook_duration,
            leader,
            leader_transitions,
            cert_expiry,
            step_transitions,
            step_duration,
            watch_events,
            leader_lane,
            releases,
        }
    }

    /// Where the per-Rollout series come from while this replica runs the controllers (the
    /// Rollout controller's caches); `None` when it stops, so a standby shows none and no
    /// Rollout is reported twice.
    pub fn set_release_view(&self, view: Option<Arc<dyn ReleaseView>>) {
        *self.releases.view.lock().expect("not poisoned") = view;
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// The handle a controller records its work with. Its series are looked up here once, not
    /// at every event or reconcile.
    pub fn controller(&self, name: &str) -> ControllerMetrics {
        let labels = ControllerLabels {
            controller: name.into(),
        };
        let queue = self
            .queues
            .lock()
            .expect("not poisoned")
            .entry(name.into())
            .or_insert_with(|| {
                Arc::new(Mutex::new(Queue {
                    waiting: HashMap::new(),
                    pruned: Instant::now(),
                }))
            })
            .clone();
        ControllerMetrics {
            metrics: self.clone(),
            queue,
            depth: self.queue_depth.get_or_create(&labels).clone(),
            reconciles: self.reconciles.get_or_create(&labels).clone(),
            duration: self.reconcile_duration.get_or_create(&labels).clone(),
            labels,
        }
    }

    /// Records whether this replica leads now; counts each time it becomes the leader.
    pub fn set_leader(&self, leading: bool) {
        let was = self.leader.set(i64::from(leading));
        if leading && was == 0 {
            self.leader_transitions.inc();
        }
    }

    /// Records the expiry of the webhook serving certificate in use (Unix seconds).
    pub fn set_certificate_expiry(&self, not_after_unix: i64) {
        self.cert_expiry.set(not_after_unix);
    }

    /// The counter of `kind`'s watch events with `outcome` (see [`WatchLabels`]); a cache
    /// takes it once and counts on it without a lookup per event.
    pub fn watch_events(&self, kind: &str, outcome: &str) -> Counter {
        self.watch_events
            .get_or_create(&WatchLabels {
                kind: kind.into(),
                outcome: outcome.into(),
            })
            .clone()
    }

    /// Records one leader-lane job's outcome (see [`LaneLabels`]).
    pub fn leader_lane_job(&self, outcome: &str) {
        self.leader_lane
            .get_or_create(&LaneLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Records one admission request.
    pub fn webhook_request(&self, endpoint: &str, outcome: &str, seconds: f64) {
        let labels = WebhookLabels {
            endpoint: endpoint.into(),
            outcome: outcome.into(),
        };
        self.webhook_requests.get_or_create(&labels).inc();
        self.webhook_duration
            .get_or_create(&labels)
            .observe(seconds);
    }
}

/// One controller's view of the metrics.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    metrics: Metrics,
    labels: ControllerLabels,
    queue: Arc<Mutex<Queue>>,
    depth: Gauge,
    reconciles: Counter,
    duration: Histogram,
}

/// The objects a controller's watch events have queued and no reconcile has started on yet,
/// by a hash of their key (the gauge counts them; nothing reads the keys back).
#[derive(Debug)]
struct Queue {
    waiting: HashMap<u64, Instant>,
    /// When stale keys were last dropped.
    pruned: Instant,
}

impl Queue {
    fn id(key: &impl Hash) -> u64 {
        // SipHash with fixed keys: the same key hashes the same at queueing and at its start.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        hasher.finish()
    }
}

/// A reconcile in progress; [`ControllerMetrics::finished`] records it.
#[derive(Debug)]
pub struct ReconcileTimer {
    started: Instant,
}

impl ControllerMetrics {
    /// Records one leader-lane job's outcome (see [`LaneLabels`]).
    pub fn leader_lane_job(&self, outcome: &str) {
        self.metrics.leader_lane_job(outcome);
    }

    /// A watch event queued `key` (the object's reference, as the reconcile's [`Self::started`]
    /// will name it) for reconciling. A key queued again before its reconcile starts counts
    /// once, as the controller's queue holds it once. Callers queue only objects still in
    /// their cache: the controller never reconciles a deleted object, so its key would never
    /// leave.
    pub fn queued(&self, key: &impl Hash) {
        let now = Instant::now();
        self.update_queue(now, |waiting| {
            waiting.entry(Queue::id(key)).or_insert(now);
        });
    }

    /// A reconcile of `key` starts: it leaves the queue.
    pub fn started(&self, key: &impl Hash) -> ReconcileTimer {
        let now = Instant::now();
        self.update_queue(now, |waiting| {
            waiting.remove(&Queue::id(key));
        });
        ReconcileTimer { started: now }
    }

    fn update_queue(&self, now: Instant, change: impl FnOnce(&mut HashMap<u64, Instant>)) {
        let mut queue = self.queue.lock().expect("not poisoned");
        change(&mut queue.waiting);
        // An object deleted between its event and its reconcile is never reconciled: after
        // QUEUE_STALE (far beyond any debounce or backoff) it no longer counts as waiting.
        if now.saturating_duration_since(queue.pruned) >= QUEUE_PRUNE_EVERY {
            queue
                .waiting
                .retain(|_, since| now.saturating_duration_since(*since) < QUEUE_STALE);
            queue.pruned = now;
        }
        self.depth.set(queue.waiting.len() as i64);
    }

    /// A reconcile ended (successfully or not: failures are counted by [`Self::failed`]).
    pub fn finished(&self, timer: ReconcileTimer) {
        self.reconciles.inc();
        self.duration.observe(timer.started.elapsed().as_secs_f64());
    }

    /// A reconcile failed with an error of `category`.
    pub fn failed(&self, category: &str) {
        self.metrics
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                controller: self.labels.controller.clone(),
                category: category.into(),
            })
            .inc();
    }

    /// A release step entered `state` after `seconds` in the previous state `left` (when
    /// known).
    pub fn step_transition(&self, left: Option<(&str, f64)>, state: &str) {
        self.metrics
            .step_transitions
            .get_or_create(&StepLabels {
                controller: self.labels.controller.clone(),
                state: state.into(),
            })
            .inc();
        if let Some((left, seconds)) = left {
            self.metrics
                .step_duration
                .get_or_create(&StepLabels {
                    controller: self.labels.controller.clone(),
                    state: left.into(),
                })
                .observe(seconds);
        }
    }
}

/// The value of the sample `name{labels}` in an encoded `text`, if present (tests).
#[cfg(test)]
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = Metrics::new();
        let c = m.controller("lws");
        c.queued(&"ns/a");
        let t = c.started(&"ns/a");
        c.finished(t);
        c.failed("transient");
        m.webhook_request("/mutate-pod", "patched", 0.001);
        m.set_leader(true);
        m.set_certificate_expiry(1_900_000_000);
        c.step_transition(Some(("StepUpgrade", 3.0)), "StepPaused");
        let text = m.encode();
        for series in [
            r#"lws_rollout_reconciles_total{controller="lws"}"#,
            r#"lws_rollout_reconcile_errors_total{controller="lws",category="transient"}"#,
            r#"lws_rollout_reconcile_duration_seconds_count{controller="lws"}"#,
            r#"lws_rollout_webhook_requests_total{endpoint="/mutate-pod",outcome="patched"}"#,
            r#"lws_rollout_webhook_request_duration_seconds_count{endpoint="/mutate-pod",outcome="patched"}"#,
            "lws_rollout_leader",
            "lws_rollout_leader_transitions_total",
            r#"lws_rollout_release_step_transitions_total{controller="lws",state="StepPaused"}"#,
            r#"lws_rollout_release_step_duration_seconds_count{controller="lws",state="StepUpgrade"}"#,
        ] {
            assert_eq!(sample(&text, series), Some(1.0), "{series} in\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                "lws_rollout_webhook_certificate_expiry_timestamp_seconds"
            ),
            Some(1.9e9)
        );
        assert_eq!(
            sample(&text, r#"lws_rollout_queue_depth{controller="lws"}"#),
            Some(0.0)
        );
        assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    }

    #[test]
    fn queue_depth_counts_distinct_waiting_objects() {
        let m = Metrics::new();
        let c = m.controller("lws");
        let depth =
            |m: &Metrics| sample(&m.encode(), r#"lws_rollout_queue_depth{controller="lws"}"#);
        c.queued(&"ns/a");
        c.queued(&"ns/a");
        c.queued(&"ns/b");
        assert_eq!(depth(&m), Some(2.0));
        let _t = c.started(&"ns/a");
        assert_eq!(depth(&m), Some(1.0));
        // Another controller's queue is its own.
        m.controller("rollout").queued(&"ns/a");
        assert_eq!(depth(&m), Some(1.0));
    }

    #[test]
    fn becoming_leader_again_counts_a_transition_but_renewing_does_not() {
        let m = Metrics::new();
        m.set_leader(true);
        m.set_leader(true);
        m.set_leader(false);
        m.set_leader(true);
        let text = m.encode();
        assert_eq!(
            sample(&text, "lws_rollout_leader_transitions_total"),
            Some(2.0)
        );
        assert_eq!(sample(&text, "lws_rollout_leader"), Some(1.0));
    }
}

/// One Rollout's release as the per-Rollout series show it: plain data, read from the
/// Rollout (and its newest AnalysisRun) at each scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReleaseRow {
    /// The Rollout's namespace.
    pub namespace: String,
    /// The Rollout's name.
    pub name: String,
    /// `status.phase` (`Initial`, `Healthy`, `Progressing`, `Disabled`, …).
    pub phase: String,
    /// The current step, 1-based (0: none yet).
    pub step: i64,
    /// How many steps the strategy has.
    pub steps: i64,
    /// The step state (`StepUpgrade`, `StepPaused`, `Completed`, …); empty: none yet.
    pub step_state: String,
    /// Seconds since the step state last changed (its `lastUpdateTime`).
    pub state_seconds: Option<f64>,
    /// `spec.strategy.paused`.
    pub paused: bool,
    /// Phase of the Rollout's newest AnalysisRun (`Running`, `Successful`, `Failed`, …).
    pub analysis: Option<String>,
    /// Every condition: (type, status, reason).
    pub conditions: Vec<(String, String, String)>,
}

/// The source of [`ReleaseRow`]s.
pub trait ReleaseView: Send + Sync + 'static {
    /// One row per Rollout, as it is now.
    fn rows(&self) -> Vec<ReleaseRow>;
}

/// Labels naming a Rollout.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RolloutLabels {
    namespace: String,
    name: String,
}

/// A Rollout and its phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    namespace: String,
    name: String,
    phase: String,
}

/// A Rollout and its step state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    namespace: String,
    name: String,
    state: String,
}

/// A Rollout and its last analysis verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    namespace: String,
    name: String,
    verdict: String,
}

/// A Rollout's condition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RolloutConditionLabels {
    namespace: String,
    name: String,
    #[prometheus(flatten)]
    condition: ConditionLabels,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    r#type: String,
    status: String,
    reason: String,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Writes the per-Rollout series at each scrape from the current [`ReleaseView`]: nothing is
/// kept between scrapes, so a deleted Rollout's series are gone at the next one.
#[derive(Clone, Default)]
struct ReleaseCollector {
    view: Arc<Mutex<Option<Arc<dyn ReleaseView>>>>,
}

impl std::fmt::Debug for ReleaseCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseCollector").finish_non_exhaustive()
    }
}

impl ReleaseCollector {
    fn rows(&self) -> Vec<ReleaseRow> {
        let view = self.view.lock().expect("not poisoned").clone();
        let mut rows = view.map(|v| v.rows()).unwrap_or_default();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows
    }
}

/// One family of gauges, written under `name`.
fn write_gauges<L>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl IntoIterator<Item = (L, f64)>,
) -> Result<(), std::fmt::Error>
where
    L: Clone + std::fmt::Debug + Hash + Eq + EncodeLabelSet + Send + Sync + 'static,
{
    let family = Family::<L, FloatGauge>::default();
    for (labels, value) in samples {
        family.get_or_create(&labels).set(value);
    }
    let metric = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    family.encode(metric)
}

impl Collector for ReleaseCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.rows();
        let id = |r: &ReleaseRow| RolloutLabels {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        };
        write_gauges(
            &mut encoder,
            "rollout_phase",
            "1 for a Rollout's current status.phase",
            None,
            rows.iter().map(|r| {
                let labels = PhaseLabels {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    phase: r.phase.clone(),
                };
                (labels, 1.0)
            }),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_step",
            "A Rollout's current release step, 1-based (0: none yet)",
            None,
            rows.iter().map(|r| (id(r), r.step as f64)),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_steps",
            "How many steps a Rollout's strategy has",
            None,
            rows.iter().map(|r| (id(r), r.steps as f64)),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_step_state",
            "1 for the current step state of a Rollout's release",
            None,
            rows.iter().filter(|r| !r.step_state.is_empty()).map(|r| {
                let labels = StateLabels {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    state: r.step_state.clone(),
                };
                (labels, 1.0)
            }),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_step_state_age",
            "Time since a Rollout's step state last changed",
            Some(&Unit::Seconds),
            rows.iter().filter_map(|r| Some((id(r), r.state_seconds?))),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_paused",
            "1 while a Rollout's spec.strategy.paused is set",
            None,
            rows.iter().map(|r| (id(r), f64::from(u8::from(r.paused)))),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_analysis",
            "1 for the phase of a Rollout's newest AnalysisRun: its last analysis verdict",
            None,
            rows.iter().filter_map(|r| {
                let labels = VerdictLabels {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    verdict: r.analysis.clone()?,
                };
                Some((labels, 1.0))
            }),
        )?;
        write_gauges(
            &mut encoder,
            "rollout_condition",
            "1 for each condition of a Rollout (type, status, reason)",
            None,
            rows.iter().flat_map(|r| {
                r.conditions.iter().map(|(t, s, why)| {
                    (
                        RolloutConditionLabels {
                            namespace: r.namespace.clone(),
                            name: r.name.clone(),
                            condition: ConditionLabels {
                                r#type: t.clone(),
                                status: s.clone(),
                                reason: why.clone(),
                            },
                        },
                        1.0,
                    )
                })
            }),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod release_tests {
    use super::*;

    struct Fixed(Vec<ReleaseRow>);

    impl ReleaseView for Fixed {
        fn rows(&self) -> Vec<ReleaseRow> {
            self.0.clone()
        }
    }

    #[test]
    fn each_rollout_is_a_set_of_series_named_by_namespace_and_name_while_a_view_is_set() {
        let m = Metrics::new();
        assert!(!m.encode().contains("lws_rollout_rollout_phase{"));
        m.set_release_view(Some(Arc::new(Fixed(vec![ReleaseRow {
            namespace: "demo".into(),
            name: "vllm".into(),
            phase: "Progressing".into(),
            step: 2,
            steps: 3,
            step_state: "StepPaused".into(),
            state_seconds: Some(42.0),
            paused: false,
            analysis: Some("Successful".into()),
            conditions: vec![("Progressing".into(), "True".into(), "InRolling".into())],
        }]))));
        let text = m.encode();
        for (series, value) in [
            (
                r#"lws_rollout_rollout_phase{namespace="demo",name="vllm",phase="Progressing"}"#,
                1.0,
            ),
            (
                r#"lws_rollout_rollout_step{namespace="demo",name="vllm"}"#,
                2.0,
            ),
            (
                r#"lws_rollout_rollout_steps{namespace="demo",name="vllm"}"#,
                3.0,
            ),
            (
                r#"lws_rollout_rollout_step_state{namespace="demo",name="vllm",state="StepPaused"}"#,
                1.0,
            ),
            (
                r#"lws_rollout_rollout_step_state_age_seconds{namespace="demo",name="vllm"}"#,
                42.0,
            ),
            (
                r#"lws_rollout_rollout_paused{namespace="demo",name="vllm"}"#,
                0.0,
            ),
            (
                r#"lws_rollout_rollout_analysis{namespace="demo",name="vllm",verdict="Successful"}"#,
                1.0,
            ),
            (
                r#"lws_rollout_rollout_condition{namespace="demo",name="vllm",type="Progressing",status="True",reason="InRolling"}"#,
                1.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        m.set_release_view(None);
        assert!(
            !m.encode().contains("lws_rollout_rollout_phase{"),
            "a standby reports no Rollout"
        );
    }
}
