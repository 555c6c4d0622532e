//! Events about any object. Controllers describe events as plain data ([`EventSpec`], part of
//! their plans) and publish them here; reasons are named constants in each controller.

use kube::{
    Client, Resource,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use tracing::warn;

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Something happened as planned.
    Normal,
    /// Something needs a person's attention.
    Warning,
}

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

/// Publishes events as one reporting controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// Events reported by `controller` (the pod name, when known, is the instance).
    pub fn new(client: Client, controller: &str) -> Self {
        Self {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: controller.into(),
                    instance: std::env::var("POD_NAME").ok(),
                },
            ),
        }
    }

    /// Publishes `event` about `obj`. A failure to publish is logged, never fatal: an event is
    /// a courtesy to users, and the state it describes is in the object's status anyway.
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, event: &EventSpec) {
        let ev = Event {
            type_: match event.severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: event.reason.clone(),
            note: Some(event.note.clone()),
            action: action_for(&event.note),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!(error = %err, reason = %event.reason, "cannot publish event");
        }
    }

    /// Publishes every event of a plan, in order.
    pub async fn publish_all<K: Resource<DynamicType = ()>>(&self, obj: &K, events: &[EventSpec]) {
        for event in events {
            self.publish(obj, event).await;
        }
    }
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

    #[test]
    fn action_is_the_note_cut_at_a_char_boundary() {
        assert_eq!(action_for("short"), "short");
        let long = "é".repeat(100); // 200 bytes
        let action = action_for(&long);
        assert!(action.len() <= 128 && long.starts_with(&action));
    }
}
