//! Backoff of failed reconciles, the same in every controller: a count of consecutive failures
//! per object (timing only — never an input to a decision, so losing it on a restart changes
//! nothing but how soon the next retry comes), the category's requeue, and the log line of a
//! failure (a transient one folded with the same error of other objects: `log_gate`).

use std::{collections::HashMap, hash::Hash, sync::Mutex};

use kube::{
    Resource, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use tracing::warn;

use super::error::Category;
use super::log_gate::{GATE, cause};
use std::time::Instant;

/// Consecutive failures per object of one controller.
pub struct Backoff<K: Resource>
where
    K::DynamicType: Eq + Hash + Clone,
{
    controller: &'static str,
    failures: Mutex<HashMap<ObjectRef<K>, u32>>,
}

impl<K> Backoff<K>
where
    K: Resource<DynamicType = ()>,
{
    /// Backoff for `controller` (named in the log line).
    pub fn new(controller: &'static str) -> Self {
        Self {
            controller,
            failures: Mutex::default(),
        }
    }

    /// A reconcile of `obj` succeeded: the next failure starts from the shortest wait.
    pub fn succeeded(&self, obj: &K) {
        self.failures
            .lock()
            .expect("not poisoned")
            .remove(&ObjectRef::from_obj(obj));
    }

    /// A reconcile of `obj` failed with `err` of `category`: logs it once and says when to
    /// try again.
    pub fn failed(&self, obj: &K, err: &dyn std::fmt::Display, category: Category) -> Action {
        let attempt = {
            let mut failures = self.failures.lock().expect("not poisoned");
            let n = failures.entry(ObjectRef::from_obj(obj)).or_insert(0);
            *n += 1;
            *n
        };
        let wait = category.requeue_after(attempt);
        // A transient failure is usually a dependency failing for every object at once (the
        // API server unreachable): one line per backoff step for it, with the count of the
        // failures folded into it. A spec or blocked failure is the object's own: its line.
        let folded = match (category, wait) {
            (Category::Transient, Some(step)) => {
                let text = err.to_string();
                let Some(folded) = GATE.admit(cause(&text), step, Instant::now()) else {
                    return Action::requeue(step);
                };
                folded
            }
            _ => 0,
        };
        warn!(
            controller = self.controller,
            namespace = obj.namespace(),
            name = obj.name_any(),
            error = %err,
            category = category.metric_label(),
            attempt,
            retry_in = ?wait,
            same_error_since_last_line = folded,
            "reconcile failed"
        );
        wait.map_or_else(Action::await_change, Action::requeue)
    }
}
