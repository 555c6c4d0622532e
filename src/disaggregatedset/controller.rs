//! The DisaggregatedSet controller: one reconcile per set — preflight → observe → plan →
//! apply. Woken by the set, by the LWSs it controls (their status says when the new revision is
//! ready for the next step) or that carry one of its names, and by its Services.

use crate::k8s::field_managers;
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::{
    Controller,
    controller::{Action, Config as ControllerConfig},
    reflector::ObjectRef,
};

use super::{apply, observe, plan};
use crate::{
    api::{
        DisaggregatedSet, LeaderWorkerSet, disaggregatedset_role_scaler::DisaggregatedSetRoleScaler,
    },
    k8s::{
        apply::{ApiError, Applier},
        events::Events,
        metrics::ControllerMetrics,
        runner::Runner,
        watch::{SharedCache, store_ready},
        written::{Written, key},
    },
};

/// Shared state of the reconciler.
pub struct Context {
    applier: Applier,
    events: Events,
    stores: observe::Stores,
    runner: Runner<DisaggregatedSet>,
    /// The LWS versions our recent writes replaced: a reconcile woken by another event a
    /// moment after a write would plan from the version it replaced and send it again (a
    /// create answered 409, a delete 404, a scale whose test fails).
    written: Written,
}

/// The caches the DisaggregatedSet controller reads and is woken by.
pub struct Caches<'a> {
    /// DisaggregatedSets.
    pub sets: &'a mut SharedCache<DisaggregatedSet>,
    /// LeaderWorkerSets.
    pub lws: &'a mut SharedCache<LeaderWorkerSet>,
    /// Services labelled with a set's name.
    pub services: &'a mut SharedCache<Service>,
    /// DisaggregatedSetRoleScalers, where the cluster serves them (`None`: their CRD is not
    /// installed; a set with an External role says so in its status).
    pub scalers: Option<&'a mut SharedCache<DisaggregatedSetRoleScaler>>,
}

/// Runs the controller until `shutdown` completes.
pub fn run(
    client: kube::Client,
    caches: Caches<'_>,
    metrics: ControllerMetrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let stores = observe::Stores {
        sets: caches.sets.store(),
        lws: caches.lws.store(),
        services: caches.services.store(),
        scalers: caches.scalers.as_deref().map(SharedCache::store),
    };
    let ctx = Arc::new(Context {
        applier: Applier::new(client.clone(), field_managers::DISAGGREGATEDSET),
        events: Events::new(client, "lws-rollout"),
        stores: stores.clone(),
        runner: Runner::new("disaggregatedset", metrics.clone()),
        written: Written::default(),
    });
    let (by_lws, by_service, by_scaler) = (
        stores.sets.clone(),
        stores.sets.clone(),
        stores.sets.clone(),
    );
    let queued_store = caches.sets.store();
    let changes = caches.sets.subscribe().inspect(move |set| {
        let key = ObjectRef::from_obj(set.as_ref());
        if queued_store.get(&key).is_some() {
            metrics.queued(&key);
        }
    });
    let mut controller = Controller::for_shared_stream(changes, caches.sets.store())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        .watches_shared_stream(caches.lws.subscribe(), move |lws: Arc<LeaderWorkerSet>| {
            observe::sets_of(&by_lws, lws.as_ref())
        })
        .watches_shared_stream(caches.services.subscribe(), move |svc: Arc<Service>| {
            observe::sets_of(&by_service, svc.as_ref())
        });
    if let Some(scalers) = caches.scalers {
        controller = controller.watches_shared_stream(
            scalers.subscribe(),
            move |scaler: Arc<DisaggregatedSetRoleScaler>| {
                observe::sets_of(&by_scaler, scaler.as_ref())
            },
        );
    }
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}

async fn reconcile(set: Arc<DisaggregatedSet>, ctx: Arc<Context>) -> Result<Action, ApiError> {
    if set.metadata.deletion_timestamp.is_some() {
        // Owner references take everything with it.
        return Ok(Action::await_change());
    }
    let s = &ctx.stores;
    let mut caches = vec![
        store_ready(&s.sets),
        store_ready(&s.lws),
        store_ready(&s.services),
    ];
    caches.extend(s.scalers.as_ref().map(store_ready));
    ctx.runner.reconcile(&set, caches, steps(&set, &ctx)).await
}

/// The steps of one reconcile: observe → plan → (unless the plan would repeat a write the
/// cache has not shown yet) apply.
async fn steps(set: &DisaggregatedSet, ctx: &Context) -> Result<Action, ApiError> {
    let observed = observe::observe(&ctx.stores, set);
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let plan = plan::plan(set, &observed, &now);
    let ns = set.namespace().unwrap_or_default();
    let cached = |name: &str| {
        observed
            .lws
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(name))
            .and_then(|l| l.resource_version())
            .unwrap_or_default()
    };
    // The watch event of that write wakes this set again by itself.
    if let Some(wait) = plan.lws_written().find_map(|name| {
        ctx.written
            .stale(&key::<LeaderWorkerSet>(&ns, name), &cached(name))
    }) {
        return Ok(Action::requeue(wait));
    }
    for name in apply::apply(&ctx.applier, &ctx.events, set, &plan).await? {
        ctx.written
            .record(&key::<LeaderWorkerSet>(&ns, &name), &cached(&name), None);
    }
    Ok(match plan.requeue {
        Some(wait) => Action::requeue(wait),
        None => Action::await_change(),
    })
}

fn error_policy(set: Arc<DisaggregatedSet>, err: &ApiError, ctx: Arc<Context>) -> Action {
    ctx.runner.error_policy(set.as_ref(), err)
}
