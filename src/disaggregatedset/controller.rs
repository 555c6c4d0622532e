//! The DisaggregatedSet controller: one reconcile per set — preflight → observe → plan →
//! apply. Woken by the set, by the LWSs it controls (their status says when the new revision is
//! ready for the next step) or that carry one of its names, and by its Services.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::{
    ResourceExt,
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        reflector::ObjectRef,
    },
};
use tracing::{Instrument, info_span};

use super::{apply, observe, plan};
use crate::{
    api::{DisaggregatedSet, LeaderWorkerSet},
    k8s::{
        apply::{ApiError, Applier},
        backoff::Backoff,
        error::Categorized,
        events::Events,
        watch::{self, SharedCache, store_ready},
    },
};

/// Shared state of the reconciler.
pub struct Context {
    applier: Applier,
    events: Events,
    stores: observe::Stores,
    backoff: Backoff<DisaggregatedSet>,
    metrics: crate::manager::metrics::ControllerMetrics,
}

/// The caches the DisaggregatedSet controller reads and is woken by.
pub struct Caches<'a> {
    /// DisaggregatedSets.
    pub sets: &'a mut SharedCache<DisaggregatedSet>,
    /// LeaderWorkerSets.
    pub lws: &'a mut SharedCache<LeaderWorkerSet>,
    /// Services labelled with a set's name.
    pub services: &'a mut SharedCache<Service>,
}

/// Runs the controller until `shutdown` completes.
pub fn run(
    client: kube::Client,
    caches: Caches<'_>,
    metrics: crate::manager::metrics::ControllerMetrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let stores = observe::Stores {
        sets: caches.sets.store(),
        lws: caches.lws.store(),
        services: caches.services.store(),
    };
    let ctx = Arc::new(Context {
        applier: Applier::new(client.clone(), apply::FIELD_MANAGER),
        events: Events::new(client, "lws-rollout"),
        stores: stores.clone(),
        backoff: Backoff::new("disaggregatedset"),
        metrics: metrics.clone(),
    });
    let (by_lws, by_service) = (stores.sets.clone(), stores.sets.clone());
    let queued_store = caches.sets.store();
    let changes = caches.sets.subscribe().inspect(move |set| {
        let key = ObjectRef::from_obj(set.as_ref());
        if queued_store.get(&key).is_some() {
            metrics.queued(key.to_string());
        }
    });
    Controller::for_shared_stream(changes, caches.sets.store())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        .watches_shared_stream(caches.lws.subscribe(), move |lws: Arc<LeaderWorkerSet>| {
            observe::sets_of(&by_lws, lws.as_ref())
        })
        .watches_shared_stream(caches.services.subscribe(), move |svc: Arc<Service>| {
            observe::sets_of(&by_service, svc.as_ref())
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}

async fn reconcile(set: Arc<DisaggregatedSet>, ctx: Arc<Context>) -> Result<Action, ApiError> {
    let timer = ctx
        .metrics
        .started(&ObjectRef::from_obj(set.as_ref()).to_string());
    let result = reconcile_once(set, ctx.clone()).await;
    ctx.metrics.finished(timer);
    result
}

async fn reconcile_once(set: Arc<DisaggregatedSet>, ctx: Arc<Context>) -> Result<Action, ApiError> {
    let span = info_span!(
        "disaggregatedset",
        namespace = set.namespace(),
        name = set.name_any()
    );
    async move {
        if set.metadata.deletion_timestamp.is_some() {
            // Owner references take everything with it.
            return Ok(Action::await_change());
        }
        let s = &ctx.stores;
        let ready = watch::ready(
            [
                store_ready(&s.sets),
                store_ready(&s.lws),
                store_ready(&s.services),
            ],
            Duration::from_secs(2),
        )
        .await;
        if !ready {
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let observed = observe::observe(&ctx.stores, &set);
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        );
        let plan = plan::plan(&set, &observed, &now);
        apply::apply(&ctx.applier, &ctx.events, &set, &plan).await?;
        ctx.backoff.succeeded(&set);
        Ok(match plan.requeue {
            Some(wait) => Action::requeue(wait),
            None => Action::await_change(),
        })
    }
    .instrument(span)
    .await
}

fn error_policy(set: Arc<DisaggregatedSet>, err: &ApiError, ctx: Arc<Context>) -> Action {
    let category = err.category();
    ctx.metrics.failed(category.metric_label());
    ctx.backoff.failed(&set, err, category)
}
