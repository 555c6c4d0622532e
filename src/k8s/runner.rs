//! What every controller does around its own reconcile steps, written once: the metrics timer
//! and queue gauge, a tracing span naming the object, the wait for the caches' first lists,
//! and the error policy — the error's category ([`super::error`]) decides the requeue, with
//! backoff per object and one log line per failure.
//!
//! A controller keeps a [`Runner`] in its context, calls [`Runner::reconcile`] from its
//! reconcile function with its steps as a future, and [`Runner::error_policy`] from its error
//! policy.

use std::{future::Future, hash::Hash, pin::Pin, time::Duration};

use kube::{
    Resource, ResourceExt,
    runtime::{controller::Action, reflector::ObjectRef},
};
use tracing::{Instrument, info_span};

use super::{
    backoff::Backoff,
    error::Categorized,
    metrics::ControllerMetrics,
    watch::{self, CacheReady},
};

/// How long a reconcile waits for the caches' first lists before it looks again in a second.
const CACHE_WAIT: Duration = Duration::from_secs(2);

/// The shared part of one controller's reconciles.
pub struct Runner<K: Resource>
where
    K::DynamicType: Eq + Hash + Clone,
{
    controller: &'static str,
    metrics: ControllerMetrics,
    backoff: Backoff<K>,
}

impl<K> Runner<K>
where
    K: Resource<DynamicType = ()>,
{
    /// The runner of `controller` (its name in spans, logs and metric labels).
    pub fn new(controller: &'static str, metrics: ControllerMetrics) -> Self {
        Self {
            controller,
            metrics,
            backoff: Backoff::new(controller),
        }
    }

    /// The controller's metrics (queue gauge, step transitions).
    pub fn metrics(&self) -> &ControllerMetrics {
        &self.metrics
    }

    /// Runs `steps` for `obj` once `caches` have listed (else requeues in a second): timed,
    /// inside a span naming the object; a success resets the object's backoff.
    ///
    /// `steps` goes to the heap before anything else happens. An async fn keeps its arguments
    /// in its own state and does not reuse their room once they are moved on, so taken by value
    /// the steps' state was held three times over (the argument, the inner block, the span's
    /// wrapper), and kube-runtime keeps one such future per reconcile in flight: a burst of
    /// groups coming up held megabytes of them. Boxed here, the caller's future keeps only a
    /// pointer to it.
    pub fn reconcile<'a, E: 'a, Fut>(
        &'a self,
        obj: &'a K,
        caches: impl IntoIterator<Item = CacheReady<'a>> + 'a,
        steps: Fut,
    ) -> impl Future<Output = Result<Action, E>> + 'a
    where
        Fut: Future<Output = Result<Action, E>> + 'a,
    {
        self.run(obj, caches, Box::pin(steps))
    }

    async fn run<'a, E, Fut>(
        &self,
        obj: &K,
        caches: impl IntoIterator<Item = CacheReady<'a>>,
        steps: Pin<Box<Fut>>,
    ) -> Result<Action, E>
    where
        Fut: Future<Output = Result<Action, E>>,
    {
        let timer = self.metrics.started(&ObjectRef::from_obj(obj));
        let span = info_span!(
            "reconcile",
            controller = self.controller,
            namespace = obj.namespace(),
            name = obj.name_any()
        );
        let result = async {
            // With kube's span around it, this names what woke the reconcile (RUST_LOG debug):
            // how an outage's recovery is traced.
            tracing::debug!("reconcile started");
            if !watch::ready(caches, CACHE_WAIT).await {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            steps.await
        }
        .instrument(span)
        .await;
        if result.is_ok() {
            self.backoff.succeeded(obj);
        }
        self.metrics.finished(timer);
        result
    }

    /// The error policy: the category of `err` picks the requeue (backed off per object) and
    /// the metric label; the failure is logged once.
    pub fn error_policy<E>(&self, obj: &K, err: &E) -> Action
    where
        E: Categorized + std::fmt::Display,
    {
        if err.object_gone() {
            tracing::debug!(
                controller = self.controller,
                namespace = obj.namespace(),
                name = obj.name_any(),
                "deleted while it was being reconciled"
            );
            self.backoff.succeeded(obj);
            return Action::await_change();
        }
        let category = err.category();
        self.metrics.failed(category.metric_label());
        self.backoff.failed(obj, err, category)
    }
}
