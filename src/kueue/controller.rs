//! Runs [`super::plan`] for every change of a Kueue Workload that stands for an LWS group, and
//! of an LWS MultiKueue created here (the shared caches' change streams): publishes the Event
//! on the LWS, and gives a MultiKueue worker's group Workload its LWS as an owner.
//!
//! Events need no retry: a missed Event is repeated by the Workload's next change (the Events
//! kit folds repeats into a series). The owner reference is retried with the transient
//! backoff when its write fails, since the Workload may not change again before its group's
//! pods are replaced.
//!
//! A plain loop over the change streams, not a kube-runtime `Controller`: a Controller over a
//! store that never fills (a cluster without Kueue's CRD) held a graceful shutdown for seconds,
//! and nothing here needs a work queue — each change is handled at once, in order.

use std::collections::HashMap;

use futures::StreamExt;
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};
use tokio::sync::mpsc;

use super::{
    apply::{self, Added},
    plan,
};
use crate::{
    api::{
        LeaderWorkerSet,
        kueue::{
            JOB_OWNER_NAME_ANNOTATION, JOB_UID_LABEL, MULTIKUEUE_ORIGIN_LABEL,
            MULTIKUEUE_ORIGIN_UID_ANNOTATION, Workload,
        },
    },
    k8s::{error::Category, events::Events, label_index::LabelIndex, watch::SharedCache},
};

/// What woke the loop.
enum Changed {
    Workload(ObjectRef<Workload>),
    /// A MultiKueue copy (Kueue ≥ v0.19: without the `job-uid` label).
    Copy(ObjectRef<Workload>),
    Lws(ObjectRef<LeaderWorkerSet>),
}

/// Runs the reporter until `shutdown` completes.
pub fn run(
    client: kube::Client,
    workloads: &mut SharedCache<Workload>,
    multikueue_copies: &mut SharedCache<Workload>,
    lws: &mut SharedCache<LeaderWorkerSet>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let current = workloads.store();
    let copies = multikueue_copies.store();
    let copy_changes = multikueue_copies
        .subscribe()
        .map(|w| Changed::Copy(ObjectRef::from_obj(w.as_ref())));
    let by_job_uid = workloads.index();
    let workload_changes = workloads
        .subscribe()
        .map(|w| Changed::Workload(ObjectRef::from_obj(w.as_ref())));
    let lws_store = lws.store();
    let lws_changes = lws
        .subscribe()
        .map(|l| Changed::Lws(ObjectRef::from_obj(l.as_ref())));
    let events = Events::new(client.clone(), "lws-rollout");
    let (retry_tx, mut retry_rx) = mpsc::unbounded_channel();
    let retries = futures::stream::poll_fn(move |cx| retry_rx.poll_recv(cx)).map(Changed::Workload);
    let mut owners = Owners {
        client,
        failures: HashMap::new(),
        retry: retry_tx,
    };
    async move {
        let changes = futures::stream::select(
            futures::stream::select(workload_changes, copy_changes),
            futures::stream::select(lws_changes, retries),
        );
        let mut changes = std::pin::pin!(changes.take_until(shutdown));
        while let Some(changed) = changes.next().await {
            // The change streams also carry deletions: act on what the caches still hold.
            match changed {
                Changed::Workload(ref r) | Changed::Copy(ref r) => {
                    // A copy with the `job-uid` label (Kueue < v0.19) is in both caches:
                    // handled once, from the first.
                    let from_copies = matches!(changed, Changed::Copy(_));
                    let Some(wl) = current.get(r).or_else(|| copies.get(r)) else {
                        continue;
                    };
                    if from_copies && wl.labels().contains_key(JOB_UID_LABEL) {
                        continue;
                    }
                    report(&events, &lws_store, &wl).await;
                    if let Some(lws) = copied_for(&lws_store, &wl) {
                        owners.ensure(&wl, &lws).await;
                    }
                }
                Changed::Lws(r) => {
                    let Some(lws) = lws_store.get(&r) else {
                        continue;
                    };
                    let mut found = by_job_uid
                        .as_ref()
                        .map(|index| copies_of(index, &lws))
                        .unwrap_or_default();
                    found.extend(unlabelled_copies_of(&copies, &lws));
                    for wl in found {
                        owners.ensure(&wl, &lws).await;
                    }
                }
            }
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

/// The LWS a MultiKueue copy of a group Workload names (it has no owner reference to find it
/// by until [`Owners::ensure`] adds one).
fn copied_for(
    lws: &Store<LeaderWorkerSet>,
    wl: &Workload,
) -> Option<std::sync::Arc<LeaderWorkerSet>> {
    if !wl.labels().contains_key(MULTIKUEUE_ORIGIN_LABEL) {
        return None;
    }
    let name = wl.annotations().get(JOB_OWNER_NAME_ANNOTATION)?;
    lws.get(&ObjectRef::new(name).within(wl.metadata.namespace.as_deref()?))
}

/// The Workloads of the groups of an LWS MultiKueue created here: they carry the manager's
/// LWS uid, which the LWS keeps in an annotation. None for any other LWS.
fn copies_of(index: &LabelIndex<Workload>, lws: &LeaderWorkerSet) -> Vec<std::sync::Arc<Workload>> {
    match (
        lws.labels().contains_key(MULTIKUEUE_ORIGIN_LABEL),
        lws.annotations().get(MULTIKUEUE_ORIGIN_UID_ANNOTATION),
        lws.metadata.namespace.as_deref(),
    ) {
        (true, Some(uid), Some(ns)) => index.get(ns, uid),
        _ => Vec::new(),
    }
}

/// MultiKueue's copies without the `job-uid` label (Kueue ≥ v0.19) that name `lws` as their
/// owner; [`plan::needs_owner`] tells this incarnation's by their names.
fn unlabelled_copies_of(
    copies: &Store<Workload>,
    lws: &LeaderWorkerSet,
) -> Vec<std::sync::Arc<Workload>> {
    if !lws.labels().contains_key(MULTIKUEUE_ORIGIN_LABEL) {
        return Vec::new();
    }
    copies
        .state()
        .into_iter()
        .filter(|wl| {
            !wl.labels().contains_key(JOB_UID_LABEL)
                && wl.metadata.namespace == lws.metadata.namespace
                && wl.annotations().get(JOB_OWNER_NAME_ANNOTATION) == Some(&lws.name_any())
        })
        .collect()
}

/// Writes the owner references [`plan::needs_owner`] asks for, retrying failed writes.
struct Owners {
    client: kube::Client,
    /// Consecutive failed writes per Workload (timing only).
    failures: HashMap<ObjectRef<Workload>, u32>,
    /// Where a retry is sent when its backoff has passed.
    retry: mpsc::UnboundedSender<ObjectRef<Workload>>,
}

impl Owners {
    async fn ensure(&mut self, wl: &Workload, lws: &LeaderWorkerSet) {
        if !plan::needs_owner(wl, lws) {
            return;
        }
        let key = ObjectRef::from_obj(wl);
        match apply::add_owner(&self.client, wl, plan::owner(lws)).await {
            Added::Done => {
                self.failures.remove(&key);
                tracing::info!(
                    namespace = wl.namespace(),
                    workload = wl.name_any(),
                    lws = lws.name_any(),
                    "a MultiKueue group Workload is now owned by its LWS too, so replacing the \
                     group's pods keeps it"
                );
            }
            Added::Stale => {
                self.failures.remove(&key);
            }
            Added::Failed(err) => {
                let attempt = self.failures.entry(key.clone()).or_insert(0);
                *attempt += 1;
                let wait = Category::Transient
                    .requeue_after(*attempt)
                    .unwrap_or(crate::k8s::error::BLOCKED_RECHECK);
                tracing::warn!(
                    namespace = wl.namespace(),
                    workload = wl.name_any(),
                    error = %err,
                    attempt = *attempt,
                    retry_in = ?wait,
                    "cannot add the LWS as an owner of its group's MultiKueue Workload"
                );
                let retry = self.retry.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = retry.send(key);
                });
            }
        }
    }
}
