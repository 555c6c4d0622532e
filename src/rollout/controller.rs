//! The Rollout controller: one reconcile per Rollout, read as its steps —
//! preflight → observe → deref (traffic read-back) → plan → apply (incl. status).
//!
//! Woken by its Rollout, the BatchRelease it owns, the canary LWS that BatchRelease controls
//! (batch readiness is read off it), the DisaggregatedSet its `workloadRef` may name and
//! that set's LWSs, and the LWS its `workloadRef` names (a template change,
//! the stable groups' progress). Requeue timers come only from the plan: pause durations,
//! traffic grace periods and the stall deadline of a canary batch.

use crate::k8s::field_managers;
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    ResourceExt,
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        reflector::{ObjectRef, Store},
    },
};

use super::{apply, deref, observe, plan};
use crate::{
    api::{
        BatchRelease, LeaderWorkerSet, Rollout,
        analysis::{AnalysisRun, AnalysisTemplate, ClusterAnalysisTemplate},
    },
    k8s::{
        apply::Applier,
        events::Events,
        metrics::ControllerMetrics,
        runner::Runner,
        watch::{SharedCache, store_ready},
        written,
    },
};

pub use super::apply::Error;

/// Shared state of the reconciler.
pub struct Context {
    applier: Applier,
    events: Events,
    stores: observe::Stores,
    runner: Runner<Rollout>,
    written: written::Written,
}

/// The caches the Rollout controller reads and is woken by.
pub struct Caches<'a> {
    /// Rollouts.
    pub rollouts: &'a mut SharedCache<Rollout>,
    /// BatchReleases.
    pub batch_releases: &'a mut SharedCache<BatchRelease>,
    /// LeaderWorkerSets.
    pub lws: &'a mut SharedCache<LeaderWorkerSet>,
    /// LWS ControllerRevisions (read, not subscribed).
    pub revisions: &'a SharedCache<k8s_openapi::api::apps::v1::ControllerRevision>,
    /// Argo's analysis kinds, where the API server serves them.
    pub analysis: Option<AnalysisCaches<'a>>,
    /// DisaggregatedSets (a Rollout may release one: its hold and template move the release).
    pub sets: &'a mut SharedCache<crate::api::disaggregatedset::DisaggregatedSet>,
}

/// The caches of Argo's analysis kinds.
pub struct AnalysisCaches<'a> {
    /// AnalysisTemplates.
    pub templates: &'a mut SharedCache<AnalysisTemplate>,
    /// ClusterAnalysisTemplates.
    pub cluster_templates: &'a mut SharedCache<ClusterAnalysisTemplate>,
    /// AnalysisRuns.
    pub runs: &'a mut SharedCache<AnalysisRun>,
}

/// Runs the controller until `shutdown` completes.
pub fn run(
    client: kube::Client,
    caches: Caches<'_>,
    metrics: ControllerMetrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let stores = observe::Stores {
        rollouts: caches.rollouts.store(),
        batch_releases: caches.batch_releases.store(),
        lws: caches.lws.store(),
        revisions: caches.revisions.store(),
        analysis: caches.analysis.as_ref().map(|a| observe::AnalysisStores {
            templates: a.templates.store(),
            cluster_templates: a.cluster_templates.store(),
            runs: a.runs.store(),
        }),
        sets: caches.sets.store(),
    };
    let ctx = Arc::new(Context {
        applier: Applier::new(client.clone(), field_managers::ROLLOUT),
        events: Events::new(client, "lws-rollout"),
        stores: stores.clone(),
        runner: Runner::new("rollout", metrics.clone()),
        written: written::Written::default(),
    });
    let rollouts = stores.rollouts.clone();
    // Queue depth: the Rollout's own changes (the most frequent trigger) pass through here.
    let queued_store = caches.rollouts.store();
    let changes = caches.rollouts.subscribe().inspect(move |r| {
        let key = ObjectRef::from_obj(r.as_ref());
        // A deletion is never reconciled: only what is still cached waits.
        if queued_store.get(&key).is_some() {
            metrics.queued(&key);
        }
    });
    let mut controller = Controller::for_shared_stream(changes, caches.rollouts.store())
        // A release step is a burst of LWS and BatchRelease status updates; 20 ms folds those
        // that arrive together into one reconcile. Longer only delays the step: the canary's
        // status change that makes a batch ready is itself the last of its burst, and a
        // reconcile that changes nothing writes nothing.
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(20)))
        .watches_shared_stream(
            caches.batch_releases.subscribe(),
            |br: Arc<BatchRelease>| Some(ObjectRef::new(&br.name_any()).within(&br.namespace()?)),
        )
        .watches_shared_stream(caches.lws.subscribe(), {
            let rollouts = rollouts.clone();
            move |lws: Arc<LeaderWorkerSet>| rollouts_of(&rollouts, &lws)
        })
        .watches_shared_stream(caches.sets.subscribe(), {
            let rollouts = rollouts.clone();
            move |set: Arc<crate::api::disaggregatedset::DisaggregatedSet>| {
                rollouts
                    .state()
                    .iter()
                    .filter(|r| {
                        r.namespace() == set.namespace()
                            && r.spec.workload_ref.is_disaggregated_set()
                            && Some(&r.spec.workload_ref.name) == set.metadata.name.as_ref()
                    })
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            }
        });
    if let Some(a) = caches.analysis {
        // A run's verdict moves its step; a template created or fixed lets a waiting
        // analysis start.
        controller = controller
            .watches_shared_stream(a.runs.subscribe(), |run: Arc<AnalysisRun>| {
                let ns = run.namespace()?;
                run.owner_references()
                    .iter()
                    .find(|o| o.kind == "Rollout" && o.controller == Some(true))
                    .map(|o| ObjectRef::new(&o.name).within(&ns))
            })
            .watches_shared_stream(a.templates.subscribe(), {
                let rollouts = rollouts.clone();
                move |t: Arc<AnalysisTemplate>| analysing(&rollouts, t.namespace().as_deref())
            })
            .watches_shared_stream(a.cluster_templates.subscribe(), {
                let rollouts = rollouts.clone();
                move |_: Arc<ClusterAnalysisTemplate>| analysing(&rollouts, None)
            });
    }
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}

/// Rollouts that ask for analysis, in `namespace` (every namespace for `None`).
fn analysing(rollouts: &Store<Rollout>, namespace: Option<&str>) -> Vec<ObjectRef<Rollout>> {
    rollouts
        .state()
        .iter()
        .filter(|r| {
            r.annotations()
                .contains_key(crate::rollout::names::STEP_ANALYSIS)
                && namespace.is_none_or(|ns| r.namespace().as_deref() == Some(ns))
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Rollouts whose workloadRef names `lws`, or whose BatchRelease (named after the Rollout)
/// controls it: a canary's status change wakes its Rollout directly, which decides "batch
/// ready" from it without waiting for the BatchRelease's status. An LWS that is a role of a
/// DisaggregatedSet wakes the Rollouts of the set (whether the set has rolled is read off it).
fn rollouts_of(rollouts: &Store<Rollout>, lws: &LeaderWorkerSet) -> Vec<ObjectRef<Rollout>> {
    let set = lws
        .labels()
        .get(crate::api::disaggregatedset::SET_NAME_LABEL);
    let release = lws
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "BatchRelease")
        .map(|o| o.name.as_str());
    rollouts
        .state()
        .iter()
        .filter(|r| {
            r.namespace() == lws.namespace()
                && (Some(&r.spec.workload_ref.name) == lws.metadata.name.as_ref()
                    || release == r.metadata.name.as_deref()
                    || (r.spec.workload_ref.is_disaggregated_set()
                        && Some(&r.spec.workload_ref.name) == set))
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

async fn reconcile(rollout: Arc<Rollout>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !plan::accept::ours(&rollout) {
        // Another controller's Rollout (a Deployment's, stored under Kruise's CRD): not a
        // single write from us, not even a finalizer.
        return Ok(Action::await_change());
    }
    let s = &ctx.stores;
    let caches = [
        store_ready(&s.rollouts),
        store_ready(&s.batch_releases),
        store_ready(&s.lws),
        store_ready(&s.revisions),
        store_ready(&s.sets),
    ];
    ctx.runner
        .reconcile(&rollout, caches, steps(&rollout, &ctx))
        .await
}

/// The steps of one reconcile: observe → deref → plan → apply.
async fn steps(rollout: &Rollout, ctx: &Context) -> Result<Action, Error> {
    let mut observed = observe::observe(&ctx.stores, rollout);
    if let Some(wait) = cache_behind(ctx, &observed) {
        // The watch event of our own last write is on its way and starts the next
        // reconcile; planning from the version it replaced would only repeat that write.
        return Ok(Action::requeue(wait));
    }
    deref::traffic(&ctx.applier, &mut observed).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let plan = plan::plan(&observed, now);
    let writers = apply::Writers {
        applier: &ctx.applier,
        events: &ctx.events,
        written: &ctx.written,
        metrics: ctx.runner.metrics(),
    };
    apply::apply(&writers, &observed, &plan, now).await?;
    Ok(plan
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue))
}

/// Whether the cache still holds a version of the Rollout or its BatchRelease that our last
/// write to it replaced (`k8s::written`), and for how long to wait at most.
fn cache_behind(ctx: &Context, obs: &observe::RolloutObserved) -> Option<Duration> {
    let r = &obs.rollout;
    let (ns, name) = (r.namespace().unwrap_or_default(), r.name_any());
    let br = obs
        .batch_release
        .as_ref()
        .map_or("", |b| b.resource_version.as_str());
    ctx.written
        .stale(
            &written::key::<Rollout>(&ns, &name),
            &r.resource_version().unwrap_or_default(),
        )
        .or_else(|| {
            ctx.written
                .stale(&written::key::<BatchRelease>(&ns, &name), br)
        })
}

fn error_policy(rollout: Arc<Rollout>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.runner.error_policy(rollout.as_ref(), err)
}
