//! Runs [`super::plan`]: one reconcile per Kueue Workload that stands for an LWS group, woken
//! by the Workload's changes (the shared cache); publishes the Event on the LWS. Nothing is
//! written but Events, so there is nothing to retry: a missed Event is repeated by the next
//! change of the Workload (the Events kit folds repeats into a series).

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use kube::runtime::{
    Controller,
    controller::{Action, Config as ControllerConfig},
    reflector::{ObjectRef, Store},
};

use crate::{
    api::{LeaderWorkerSet, kueue::Workload},
    k8s::{events::Events, watch::SharedCache},
};

struct Context {
    events: Events,
    lws: Store<LeaderWorkerSet>,
}

/// Runs the reporter until `shutdown` completes.
pub fn run(
    client: kube::Client,
    workloads: &mut SharedCache<Workload>,
    lws: &SharedCache<LeaderWorkerSet>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let ctx = Arc::new(Context {
        events: Events::new(client, "lws-rollout"),
        lws: lws.store(),
    });
    Controller::for_shared_stream(workloads.subscribe(), workloads.store())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(200)))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}

async fn reconcile(
    wl: Arc<Workload>,
    ctx: Arc<Context>,
) -> Result<Action, std::convert::Infallible> {
    let (Some((name, _)), Some(ns)) = (wl.lws_owner(), wl.metadata.namespace.as_deref()) else {
        return Ok(Action::await_change());
    };
    if let Some(lws) = ctx.lws.get(&ObjectRef::new(name).within(ns))
        && let Some(event) = super::plan::wait_event(&wl, &lws)
    {
        ctx.events.publish(lws.as_ref(), &event).await;
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Workload>, _: &std::convert::Infallible, _: Arc<Context>) -> Action {
    Action::await_change()
}
