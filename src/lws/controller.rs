//! The LWS controller: one reconcile per LeaderWorkerSet, read as its steps —
//! preflight → observe → dereference → plan → apply → status.
//!
//! It watches LeaderWorkerSets and — through caches shared with the release controllers and
//! filtered by the `leaderworkerset.sigs.k8s.io/name` label, so unrelated pods never enter
//! memory — pods, StatefulSets, Services and ControllerRevisions. Every event maps to its LWS,
//! and one reconcile per LWS handles what upstream splits over an LWS reconciler and a per-pod
//! reconciler. Nothing is kept between reconciles but a failure count for backoff and the last
//! status written until the cache shows it (so it is not written twice); a restart recomputes
//! everything from the cluster.

use crate::k8s::field_managers;
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Resource,
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        reflector::ObjectRef,
    },
};

use super::{
    apply,
    context::Context,
    deref,
    error::Error,
    leader_lane,
    observe::{Stores, VolcanoStores},
    plan, triggers,
    upstream::revision,
};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{
        apply::Applier,
        events::Events,
        expected::Expected,
        label_index::LabelIndex,
        memo::PerUid,
        metrics::ControllerMetrics,
        runner::Runner,
        throttle::{Trigger, throttle},
        watch::SharedCache,
    },
};

/// The caches the LWS controller reads and is woken by.
pub struct Caches<'a> {
    /// LeaderWorkerSets.
    pub lws: &'a mut SharedCache<LeaderWorkerSet>,
    /// LWS-labelled pods.
    pub pods: &'a mut SharedCache<crate::k8s::pod::CachedPod>,
    /// LWS-labelled StatefulSets.
    pub statefulsets: &'a mut SharedCache<k8s_openapi::api::apps::v1::StatefulSet>,
    /// LWS-labelled Services.
    pub services: &'a mut SharedCache<k8s_openapi::api::core::v1::Service>,
    /// LWS-labelled ControllerRevisions.
    pub revisions: &'a mut SharedCache<k8s_openapi::api::apps::v1::ControllerRevision>,
    /// LWS-labelled PodGroups, when the API server serves them (gang scheduling).
    pub pod_groups: Option<&'a mut SharedCache<k8s_openapi::api::scheduling::v1alpha2::PodGroup>>,
    /// Volcano gang scheduling (`--gang-scheduling-provider=volcano`).
    pub volcano: VolcanoCaches<'a>,
}

/// The Volcano PodGroups the controller reads, if it makes them.
pub enum VolcanoCaches<'a> {
    /// Volcano gang scheduling is off.
    Off,
    /// Configured, but the API server does not serve Volcano's PodGroups.
    NotServed,
    /// LWS-labelled Volcano PodGroups.
    Served(&'a mut SharedCache<crate::api::volcano::VolcanoPodGroup>),
}

/// The per-LWS trigger window ([`throttle`]): the first event of an LWS after a quiet window
/// reconciles at once, the rest of the window's events in one reconcile at its end. A group
/// coming up is a burst of pod and StatefulSet events; one reconcile per window does the work
/// of dozens, and the first event — a new leader pod, say — is acted on without waiting for the
/// burst to end. The length trades CPU against latency: a shorter window cost markedly more CPU
/// for little latency, a longer one saved no more CPU (the benchmark measures both).
pub const RECONCILE_WINDOW: Duration = Duration::from_millis(200);

/// LWS reconciles that run at once. Unbounded, dozens of LWS created together (a GitOps sync)
/// all wrote their revision, Service, leader StatefulSet and status at once, and the pods that
/// followed within the same second saturated a small control plane: the API server closed the
/// watches it could not feed (every client's, not only ours), and groups waited for the late
/// events. Bounded, the same LWS come up over a few seconds instead of one, and a new leader's
/// workers do not wait for the bound: the leader lane runs beside it. The benchmark's S1 measures
/// it.
pub const RECONCILE_CONCURRENCY: u16 = 8;

/// The controller's tuning, set by the manager's flags (`--lws-reconcile-window-ms`,
/// `--lws-concurrency`; docs/install.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// The per-LWS trigger window ([`RECONCILE_WINDOW`]).
    pub reconcile_window: Duration,
    /// LWS reconciles at once ([`RECONCILE_CONCURRENCY`]); 0: unbounded.
    pub concurrency: u16,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            reconcile_window: RECONCILE_WINDOW,
            concurrency: RECONCILE_CONCURRENCY,
        }
    }
}

/// Runs the controller until `shutdown` completes. Subscribes to `caches`; their drivers must
/// run beside it.
pub fn run(
    client: kube::Client,
    caches: Caches<'_>,
    metrics: ControllerMetrics,
    tuning: Tuning,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let ctx = Arc::new(Context {
        applier: Applier::new(client.clone(), field_managers::LWS),
        events: Events::new(client, "lws-rollout"),
        stores: Stores {
            pods: index_of(caches.pods),
            statefulsets: index_of(caches.statefulsets),
            services: index_of(caches.services),
            revisions: index_of(caches.revisions),
            pod_groups: caches.pod_groups.as_deref().map(index_of),
            volcano: match &caches.volcano {
                VolcanoCaches::Off => VolcanoStores::Off,
                VolcanoCaches::NotServed => VolcanoStores::NotServed,
                VolcanoCaches::Served(cache) => VolcanoStores::Served(index_of(cache)),
            },
        },
        runner: Runner::new("lws", metrics.clone()),
        written: apply::WrittenStatuses::default(),
        expected: Expected::default(),
        revisions: revision::Memo::default(),
        remembered: PerUid::default(),
        restarting: Default::default(),
    });
    // Every trigger passes through `queued`, so the queue-depth gauge sees what waits.
    let lws_store = caches.lws.store();
    let queued = move |trigger: Option<Trigger<ObjectRef<LeaderWorkerSet>>>| {
        if let Some(t) = trigger.as_ref().filter(|t| lws_store.get(&t.key).is_some()) {
            metrics.queued(&t.key);
        }
        futures::future::ready(trigger)
    };
    let mut leaders = triggers::Leaders::new(ctx.stores.statefulsets.clone());
    let echoes = ctx.clone();
    // New leader pods go to the leader lane; what it leaves comes back as urgent triggers.
    let (lane_tx, lane_rx) = futures::channel::mpsc::unbounded::<Arc<crate::k8s::pod::CachedPod>>();
    let (recheck_tx, recheck_rx) = futures::channel::mpsc::unbounded();
    let claims = ctx.clone();
    let triggers = futures::stream::select_all([
        caches
            .lws
            .subscribe()
            .map(move |lws| {
                (!echoes.written.is_echo(&lws))
                    .then(|| Trigger::normal(ObjectRef::from_obj(lws.as_ref())))
            })
            .boxed(),
        caches
            .pods
            .subscribe()
            .map(move |pod| {
                let trigger = leaders.trigger(pod.clone(), std::time::Instant::now())?;
                if !trigger.urgent {
                    return Some(trigger);
                }
                // The lane creates its workers; the reconcile still counts the new pod, in
                // its window.
                leader_lane::claim(&claims, &pod);
                match lane_tx.unbounded_send(pod) {
                    Ok(()) => Some(Trigger::normal(trigger.key)),
                    Err(closed) => {
                        leader_lane::release(&claims, &closed.into_inner());
                        Some(trigger)
                    }
                }
            })
            .boxed(),
        recheck_rx
            .map(|key| Some(Trigger { key, urgent: true }))
            .boxed(),
        caches
            .statefulsets
            .subscribe()
            .map(triggers::normal)
            .boxed(),
        caches.services.subscribe().map(triggers::normal).boxed(),
        caches.revisions.subscribe().map(triggers::normal).boxed(),
        // A PodGroup gone (its replacement may be made) or the scheduler's verdict on it.
        match caches.pod_groups {
            Some(pod_groups) => pod_groups.subscribe().map(triggers::normal).boxed(),
            None => futures::stream::empty().boxed(),
        },
        // A Volcano PodGroup gone with its leader: the new leader's is made.
        match caches.volcano {
            VolcanoCaches::Served(pod_groups) => {
                pod_groups.subscribe().map(triggers::normal).boxed()
            }
            VolcanoCaches::Off | VolcanoCaches::NotServed => futures::stream::empty().boxed(),
        },
    ])
    .filter_map(queued);
    // The window replaces kube-runtime's debounce, which restarts on every event and so slid
    // a reconcile to the end of each burst. With debounce 0 its scheduler still runs one
    // reconcile of an LWS at a time and folds what arrives meanwhile into one more.
    let lane = {
        let (ctx, lws_store) = (ctx.clone(), caches.lws.store());
        // Ends once the controller below has stopped and dropped the lane's sender.
        lane_rx.for_each_concurrent(leader_lane::CONCURRENCY, move |leader| {
            let (ctx, lws_store, recheck) = (ctx.clone(), lws_store.clone(), recheck_tx.clone());
            async move {
                if let Some(key) = leader_lane::run(&ctx, &lws_store, leader).await {
                    let _ = recheck.unbounded_send(key);
                }
            }
        })
    };
    let controller = Controller::for_shared_stream(futures::stream::empty(), caches.lws.store())
        .with_config(
            ControllerConfig::default()
                .debounce(Duration::ZERO)
                .concurrency(tuning.concurrency),
        )
        .reconcile_on(throttle(Box::pin(triggers), tuning.reconcile_window))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        // Failures are logged once, by the error policy.
        .for_each(|_| async {});
    async move {
        futures::future::join(controller, lane).await;
    }
}

/// The LWS-name index of a cache; the manager makes every cache of LWS-owned objects with one,
/// so its absence is a wiring bug caught by the first e2e test.
pub(crate) fn index_of<K>(cache: &SharedCache<K>) -> LabelIndex<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    cache
        .index()
        .expect("the LWS controller's caches are indexed by the LWS name label")
}

async fn reconcile(lws: Arc<LeaderWorkerSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    if lws.metadata.deletion_timestamp.is_some() {
        // The garbage collector takes its objects.
        return Ok(Action::await_change());
    }
    ctx.runner
        .reconcile(&lws, ctx.caches_ready(), steps(&lws, &ctx))
        .await
}

/// The steps of one reconcile: preflight → observe → deref → plan → apply → status.
async fn steps(lws: &LeaderWorkerSet, ctx: &Context) -> Result<Action, Error> {
    if let Some(wait) = ctx.preflight(lws) {
        return Ok(wait);
    }
    let observed = ctx.observe(lws);
    let uid = lws.metadata.uid.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    // Names the cache does not show are read only when a write finds them taken.
    let mut deref = deref::dereference(&ctx.applier, lws, &observed, false).await?;
    let (plan, applied) = loop {
        let plan = plan::plan(lws, &observed, &deref, &now);
        let applied = ctx.apply_verified(lws, &plan).await?;
        if applied.recheck && !deref.verified {
            tracing::debug!(
                "a name the cache does not show is taken: reading it and planning again"
            );
            deref = deref::dereference(&ctx.applier, lws, &observed, true).await?;
            continue;
        }
        break (plan, applied);
    };
    if plan.blocked.is_none() {
        ctx.remembered.put(&uid, plan.remember.clone());
    }
    let status_wait = apply::write_status(
        &ctx.applier,
        &ctx.events,
        &ctx.written,
        lws,
        &plan,
        &applied,
        &now,
    )
    .await?;
    if let Some(err) = applied.deferred {
        return Err(err.into());
    }
    let failure = plan
        .blocked
        .as_ref()
        .or(applied.failure.as_ref())
        .or(plan.failure.as_ref());
    let recheck = failure.and_then(|f| f.category.requeue_after(1));
    Ok(
        match [plan.requeue, recheck, status_wait]
            .into_iter()
            .flatten()
            .min()
        {
            Some(wait) => Action::requeue(wait),
            None => Action::await_change(),
        },
    )
}

fn error_policy(lws: Arc<LeaderWorkerSet>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.runner.error_policy(lws.as_ref(), err)
}
