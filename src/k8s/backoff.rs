//! Backoff of failed reconciles, the same in every controller: a count of consecutive failures
//! per object (timing only — never an input to a decision, so losing it on a restart changes
//! nothing but how soon the next retry comes), the category's requeue, and one log line per
//! failure.

use std::{collections::HashMap, hash::Hash, sync::Mutex};

use kube::{
    Resource, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use tracing::warn;

use super::error::Category;

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
        warn!(
            controller = self.controller,
            namespace = obj.namespace(),
            name = obj.name_any(),
            error = %err,
            category = category.metric_label(),
            attempt,
            retry_in = ?wait,
            "reconcile failed"
        );
        wait.map_or_else(Action::await_change, Action::requeue)
    }
}
