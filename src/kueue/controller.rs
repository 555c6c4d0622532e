//! Runs [`super::plan`] for every change of a Kueue Workload that stands for an LWS group (the
//! shared cache's change stream) and publishes the Event on the LWS. Nothing is written but
//! Events, so there is nothing to retry: a missed Event is repeated by the Workload's next
//! change (the Events kit folds repeats into a series).
//!
//! A plain loop over the change stream, not a kube-runtime `Controller`: a Controller over a
//! store that never fills (a cluster without Kueue's CRD) held a graceful shutdown for seconds,
//! and nothing here needs a work queue — each change is handled at once, in order.

use futures::StreamExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::{
    api::{LeaderWorkerSet, kueue::Workload},
    k8s::{events::Events, watch::SharedCache},
};

/// Runs the reporter until `shutdown` completes.
pub fn run(
    client: kube::Client,
    workloads: &mut SharedCache<Workload>,
    lws: &SharedCache<LeaderWorkerSet>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let current = workloads.store();
    let changes = workloads.subscribe();
    let lws = lws.store();
    let events = Events::new(client, "lws-rollout");
    async move {
        let mut changes = std::pin::pin!(changes.take_until(shutdown));
        while let Some(changed) = changes.next().await {
            // The change stream also carries deletions: act on what the cache still holds.
            let Some(wl) = current.get(&ObjectRef::from_obj(changed.as_ref())) else {
                continue;
            };
            report(&events, &lws, &wl).await;
        }
    }
}

async fn report(events: &Events, lws: &Store<LeaderWorkerSet>, wl: &Workload) {
    let (Some((name, _)), Some(ns)) = (wl.lws_owner(), wl.metadata.namespace.as_deref()) else {
        return;
    };
    if let Some(lws) = lws.get(&ObjectRef::new(name).within(ns))
        && let Some(event) = super::plan::wait_event(wl, &lws)
    {
        events.publish(lws.as_ref(), &event).await;
    }
}
