//! Events about any object. Controllers describe events as plain data ([`EventSpec`], part of
//! their plans) and publish them here; reasons are named constants in each controller.
//!
//! What kube lacks (kube 4.2.0, https://docs.rs/kube-runtime/4.2.0, `events::Recorder`): a
//! publish that does not wait for the API server, and series kept without whole Events; delete
//! this when `Recorder` queues and keeps only what a repeat needs.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    time::Duration,
};

use k8s_openapi::{
    api::{
        core::v1::ObjectReference,
        events::v1::{Event, EventSeries},
    },
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Client, Resource,
    api::{Patch, PatchParams, PostParams},
};
use serde::de::IgnoredAny;
use tokio::{sync::mpsc, time::Instant};
use tracing::warn;

/// How long a published event can still grow a series: kube-runtime's recorder's value, and
/// about the time client-go's event broadcaster folds repeats in.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Something happened as planned.
    Normal,
    /// Something needs a person's attention.
    Warning,
}

/// How often the same failure to publish an Event is logged (`log_gate`).
const EVENT_LOG_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// One event, as a plan describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Normal or Warning.
    pub severity: Severity,
    /// CamelCase reason, a named constant of the controller.
    pub reason: String,
    /// The message a user reads.
    pub note: String,
}

impl EventSpec {
    /// A Normal event.
    pub fn normal(reason: &str, note: impl Into<String>) -> Self {
        Self {
            severity: Severity::Normal,
            reason: reason.into(),
            note: note.into(),
        }
    }

    /// A Warning event.
    pub fn warning(reason: &str, note: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            reason: reason.into(),
            note: note.into(),
        }
    }
}

/// Publishes events as one reporting controller, folding repeats into event series.
///
/// Our own recorder rather than kube-runtime's: that one keeps every event it published in
/// full (object, key with the reference and the note twice) for six minutes, a large share of
/// the manager's heap under a burst. Here a published event leaves only
/// what a repeat needs: a hash of its key, its name and namespace, and its count.
///
/// Publishing only queues: one task per recorder sends the queue in order, so a reconcile
/// never waits for an event's round trip (a group's worker StatefulSet used to wait for the
/// event of the group before it) and events use one stream, not one connection per
/// reconcile in flight. A full queue drops the event with a warning; a crash loses what was
/// queued — events are a courtesy, the state they describe is in the objects' status.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(ObjectReference, EventSpec)>,
}

/// The sending side: the client and what a repeat of a published event needs.
struct Sender {
    client: Client,
    controller: String,
    instance: String,
    series: HashMap<u64, Series>,
}

/// Events waiting to be sent, per recorder, before new ones are dropped.
const QUEUE: usize = 4096;

/// What a repeat of a published event needs.
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

impl Events {
    /// Events reported by `controller` (the pod name, when known, is the instance). Starts the
    /// sending task, which ends when the last clone of this recorder is dropped; so it must be
    /// called inside a Tokio runtime.
    pub fn new(client: Client, controller: &str) -> Self {
        let (queue, mut queued) = mpsc::channel::<(ObjectReference, EventSpec)>(QUEUE);
        let mut sender = Sender {
            client,
            controller: controller.into(),
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| controller.into()),
            series: HashMap::new(),
        };
        tokio::spawn(async move {
            while let Some((regarding, event)) = queued.recv().await {
                if let Err(err) = sender.publish_about(&regarding, &event).await {
                    // Every Event fails the same way while the API server is away: a line
                    // per error text per few seconds, with the count folded into it.
                    let text = err.to_string();
                    if let Some(folded) = super::log_gate::GATE.admit(
                        &format!("event: {}", super::log_gate::cause(&text)),
                        EVENT_LOG_WINDOW,
                        std::time::Instant::now(),
                    ) {
                        warn!(error = %text, reason = %event.reason, same_error_since_last_line = folded, "cannot publish event");
                    }
                }
            }
        });
        Self { queue }
    }

    /// Publishes `event` about `obj`: queues it for the sending task. A failure to publish is
    /// logged, never fatal: an event is a courtesy to users, and the state it describes is in
    /// the object's status anyway.
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, event: &EventSpec) {
        let regarding = obj.object_ref(&());
        if let Err(err) = self.queue.try_send((regarding, event.clone())) {
            warn!(reason = %event.reason, "cannot publish event: {err}");
        }
    }

    /// Publishes every event of a plan, in order.
    pub async fn publish_all<K: Resource<DynamicType = ()>>(&self, obj: &K, events: &[EventSpec]) {
        for event in events {
            self.publish(obj, event).await;
        }
    }
}

impl Sender {
    async fn publish_about(
        &mut self,
        regarding: &ObjectReference,
        event: &EventSpec,
    ) -> Result<(), kube::Error> {
        let key = series_key(regarding, event);
        let now = Instant::now();
        self.series
            .retain(|_, s| now.duration_since(s.last) < SERIES_TTL);
        let repeat = self
            .series
            .get(&key)
            .map(|s| (s.namespace.clone(), s.name.clone(), s.count + 1));
        if let Some((namespace, name, count)) = repeat {
            let patch = serde_json::json!({
                "series": EventSeries {
                    count,
                    last_observed_time: MicroTime(Timestamp::now()),
                }
            });
            // Nothing of the answer is read: it is skipped, not decoded into an Event.
            let patched =
                super::apply::send::<Event, IgnoredAny>(&self.client, &namespace, "patch", |r| {
                    r.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                })
                .await;
            match patched {
                Ok(_) => {
                    self.remember(key, namespace, name, count, now);
                    return Ok(());
                }
                // The API server's event TTL removed it: a new event starts a new series.
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(err) => return Err(err),
            }
        }
        let created = self.new_event(regarding, event);
        let namespace = created.metadata.namespace.clone().unwrap_or_default();
        let name = created.metadata.name.clone().unwrap_or_default();
        let body = serde_json::to_vec(&created).map_err(kube::Error::SerdeError)?;
        super::apply::send::<Event, IgnoredAny>(&self.client, &namespace, "create", |r| {
            r.create(&PostParams::default(), body)
        })
        .await?;
        self.remember(key, namespace, name, 1, now);
        Ok(())
    }

    fn remember(&mut self, key: u64, namespace: String, name: String, count: i32, last: Instant) {
        self.series.insert(
            key,
            Series {
                namespace,
                name,
                count,
                last,
            },
        );
    }

    /// The event as kube-runtime's recorder writes it (events.k8s.io/v1; cluster-scoped objects
    /// get theirs in `default`).
    fn new_event(&self, regarding: &ObjectReference, event: &EventSpec) -> Event {
        let now = Timestamp::now();
        Event {
            action: Some(action_for(&event.note)),
            reason: Some(event.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: Some(event.note.clone()),
            metadata: ObjectMeta {
                namespace: Some(
                    regarding
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                ),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_ref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match event.severity {
                    Severity::Normal => "Normal",
                    Severity::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        }
    }
}

/// What makes two events one series: the object they regard, type, reason and action (the
/// reporter is the same for all of one recorder). Kept as a 64-bit hash; two different events
/// with the same hash (odds ~n²/2⁶⁴) would only count one in the other's series.
fn series_key(regarding: &ObjectReference, event: &EventSpec) -> u64 {
    let mut h = DefaultHasher::new();
    (
        &regarding.api_version,
        &regarding.kind,
        &regarding.namespace,
        &regarding.name,
        &regarding.uid,
    )
        .hash(&mut h);
    event.severity.hash(&mut h);
    event.reason.hash(&mut h);
    action_for(&event.note).hash(&mut h);
    h.finish()
}

/// The recorder folds events with the same (reason, action) into one series that keeps the
/// first note. Messages that differ (per group, per step) must each stay visible, so the
/// action is derived from the note: only identical messages are counted together.
fn action_for(note: &str) -> String {
    let mut cut = note.len().min(128);
    while !note.is_char_boundary(cut) {
        cut -= 1;
    }
    note[..cut].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("leaderworkerset.x-k8s.io/v1".into()),
            kind: Some("LeaderWorkerSet".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_series_is_one_object_reason_and_message() {
        let lws = reference("a", "u1");
        let created = EventSpec::normal("Created", "made group 0");
        assert_eq!(
            series_key(&lws, &created),
            series_key(&lws, &created.clone())
        );
        for other in [
            EventSpec::normal("Created", "made group 1"),
            EventSpec::normal("Deleted", "made group 0"),
            EventSpec::warning("Created", "made group 0"),
        ] {
            assert_ne!(series_key(&lws, &created), series_key(&lws, &other));
        }
        // A recreated object of the same name is a different object.
        assert_ne!(
            series_key(&lws, &created),
            series_key(&reference("a", "u2"), &created)
        );
        assert_ne!(
            series_key(&lws, &created),
            series_key(&reference("b", "u1"), &created)
        );
    }

    #[test]
    fn action_is_the_note_cut_at_a_char_boundary() {
        assert_eq!(action_for("short"), "short");
        let long = "é".repeat(100); // 200 bytes
        let action = action_for(&long);
        assert!(action.len() <= 128 && long.starts_with(&action));
    }
}
