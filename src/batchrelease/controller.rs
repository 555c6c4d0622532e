//! The BatchRelease controller: one reconcile per BatchRelease — preflight → observe → plan →
//! apply. Woken by its BatchRelease, the canary LWS it owns (whose status says how many of the
//! batch's groups are ready), and the stable LWS its workloadRef names.

use crate::k8s::field_managers;
use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup;
use kube::{
    ResourceExt,
    runtime::{
        Controller,
        controller::{Action, Config as ControllerConfig},
        reflector::{ObjectRef, Store},
    },
};

use super::{apply, observe, plan};
use crate::{
    api::{BatchRelease, LeaderWorkerSet, kueue::Workload},
    k8s::{
        apply::{ApiError, Applier},
        events::Events,
        runner::Runner,
        watch::{self, SharedCache, store_ready},
    },
};

/// Shared state of the reconciler.
pub struct Context {
    applier: Applier,
    events: Events,
    stores: observe::Stores,
    runner: Runner<BatchRelease>,
    written: crate::k8s::written::Written,
}

/// The caches the BatchRelease controller reads and is woken by.
pub struct Caches<'a> {
    /// BatchReleases.
    pub batch_releases: &'a mut SharedCache<BatchRelease>,
    /// LeaderWorkerSets.
    pub lws: &'a mut SharedCache<LeaderWorkerSet>,
    /// LWS pods: read for a canary's groups (its status follows them), and subscribed for the
    /// user's LWS while a release reads its groups off the pods (partition style, finalising).
    pub pods: &'a mut SharedCache<crate::k8s::pod::CachedPod>,
    /// LWS ControllerRevisions (read, not subscribed).
    pub revisions: &'a SharedCache<k8s_openapi::api::apps::v1::ControllerRevision>,
    /// Kueue Workloads (a canary group's says why it is not admitted; empty without Kueue).
    pub workloads: &'a mut SharedCache<Workload>,
    /// PodGroups of gang-scheduled LWSes, where the API server serves them: the scheduler's
    /// verdict on a group is why a batch waits.
    pub pod_groups: Option<&'a mut SharedCache<PodGroup>>,
    /// DisaggregatedSets: a pair release writes its batch on the set, and the set's hold and
    /// template say whether and what it releases.
    pub sets: &'a mut SharedCache<crate::api::disaggregatedset::DisaggregatedSet>,
}

/// Runs the controller until `shutdown` completes.
pub fn run(
    client: kube::Client,
    caches: Caches<'_>,
    metrics: crate::k8s::metrics::ControllerMetrics,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let stores = observe::Stores {
        batch_releases: caches.batch_releases.store(),
        lws: caches.lws.store(),
        revisions: caches.revisions.store(),
        pods: crate::lws::controller::index_of(caches.pods),
        workloads: crate::lws::controller::index_of(caches.workloads),
        pod_groups: caches
            .pod_groups
            .as_deref()
            .map(crate::lws::controller::index_of),
        sets: caches.sets.store(),
    };
    let ctx = Arc::new(Context {
        applier: Applier::new(client.clone(), field_managers::BATCHRELEASE),
        events: Events::new(client, "lws-rollout"),
        stores: stores.clone(),
        runner: Runner::new("batchrelease", metrics.clone()),
        written: crate::k8s::written::Written::default(),
    });
    let brs = stores.batch_releases.clone();
    let (brs_of_workloads, lws_of_workloads) = (brs.clone(), stores.lws.clone());
    let brs_of_pods = brs.clone();
    let brs_of_sets = brs.clone();
    let (brs_of_pod_groups, lws_of_pod_groups) = (brs.clone(), stores.lws.clone());
    let pod_group_changes = match caches.pod_groups {
        Some(pod_groups) => pod_groups.subscribe().boxed(),
        None => futures::stream::empty().boxed(),
    };
    // Queue depth: the BatchRelease's own changes pass through here.
    let queued_store = caches.batch_releases.store();
    let changes = caches.batch_releases.subscribe().inspect(move |br| {
        let key = ObjectRef::from_obj(br.as_ref());
        // A deletion is never reconciled: only what is still cached waits.
        if queued_store.get(&key).is_some() {
            metrics.queued(&key);
        }
    });
    Controller::for_shared_stream(changes, caches.batch_releases.store())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        .watches_shared_stream(caches.lws.subscribe(), move |lws: Arc<LeaderWorkerSet>| {
            releases_of(&brs, &lws)
        })
        // A pair release: the set's hold, template and release-groups.
        .watches_shared_stream(
            caches.sets.subscribe(),
            move |set: Arc<crate::api::disaggregatedset::DisaggregatedSet>| {
                naming(&brs_of_sets, set.namespace(), &set.name_any())
            },
        )
        // A Workload's conditions are the reason its (canary) group waits: a change re-reads it.
        .watches_shared_stream(caches.workloads.subscribe(), move |wl: Arc<Workload>| {
            workload_owner(&lws_of_workloads, &wl)
                .map(|lws| releases_of(&brs_of_workloads, &lws))
                .unwrap_or_default()
        })
        // The scheduler's verdict on a gang group is the reason it waits: a change re-reads it.
        .watches_shared_stream(pod_group_changes, move |pg: Arc<PodGroup>| {
            pod_group_owner(&lws_of_pod_groups, &pg)
                .map(|lws| releases_of(&brs_of_pod_groups, &lws))
                .unwrap_or_default()
        })
        // A group of the user's LWS ready on the new template is news the LWS's status tells
        // only at its own pace: the releases that count groups off the pods hear it at once.
        .watches_shared_stream(
            caches.pods.subscribe(),
            move |pod: Arc<crate::k8s::pod::CachedPod>| {
                releases_counting_pods_of(&brs_of_pods, &pod)
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
}

/// BatchReleases in `ns` whose workloadRef names `name`.
fn naming(
    brs: &Store<BatchRelease>,
    ns: Option<String>,
    name: &str,
) -> Vec<ObjectRef<BatchRelease>> {
    brs.state()
        .iter()
        .filter(|br| br.namespace() == ns && br.spec.workload_ref.name == name)
        .map(|br| ObjectRef::from_obj(br.as_ref()))
        .collect()
}

/// BatchReleases that own `lws` (a canary) or name it as their workload (the stable one), or
/// release the DisaggregatedSet it is a role of (a pair batch's readiness is read off it).
fn releases_of(brs: &Store<BatchRelease>, lws: &LeaderWorkerSet) -> Vec<ObjectRef<BatchRelease>> {
    let set = lws
        .labels()
        .get(crate::api::disaggregatedset::SET_NAME_LABEL);
    let owners: Vec<&str> = lws
        .owner_references()
        .iter()
        .filter(|o| o.kind == "BatchRelease")
        .map(|o| o.uid.as_str())
        .collect();
    brs.state()
        .iter()
        .filter(|br| br.namespace() == lws.namespace())
        .filter(|br| {
            br.metadata
                .uid
                .as_deref()
                .is_some_and(|uid| owners.contains(&uid))
                || Some(&br.spec.workload_ref.name) == lws.metadata.name.as_ref()
                || (br.spec.workload_ref.is_disaggregated_set()
                    && Some(&br.spec.workload_ref.name) == set)
        })
        .map(|br| ObjectRef::from_obj(br.as_ref()))
        .collect()
}

/// BatchReleases that count the groups of `pod`'s LWS off its pods: partition style (its
/// batches move the user's groups) and any style finalising (a canary gives a group back for
/// each of the user's groups ready on the new template). Canary pods wake nobody here: their
/// LWS's status does.
fn releases_counting_pods_of(
    brs: &Store<BatchRelease>,
    pod: &crate::k8s::pod::CachedPod,
) -> Vec<ObjectRef<BatchRelease>> {
    let Some(lws) = pod.labels().get(crate::lws::labels::NAME) else {
        return Vec::new();
    };
    brs.state()
        .iter()
        .filter(|br| br.namespace() == pod.namespace() && br.spec.workload_ref.name == *lws)
        .filter(|br| {
            let rp = &br.spec.release_plan;
            rp.batch_partition.is_none() || !rp.enable_extra_workload_for_canary
        })
        .map(|br| ObjectRef::from_obj(br.as_ref()))
        .collect()
}

/// The LWS a Kueue Workload stands for a group of (its owner: Kueue sets a plain owner
/// reference, not a controller one).
fn workload_owner(lws: &Store<LeaderWorkerSet>, wl: &Workload) -> Option<Arc<LeaderWorkerSet>> {
    let (name, uid) = wl.lws_owner()?;
    lws.get(&ObjectRef::new(name).within(wl.metadata.namespace.as_deref()?))
        .filter(|l| l.metadata.uid.as_deref() == Some(uid))
}

/// The LWS a PodGroup of ours belongs to (its name label).
fn pod_group_owner(lws: &Store<LeaderWorkerSet>, pg: &PodGroup) -> Option<Arc<LeaderWorkerSet>> {
    let name = pg.labels().get(crate::lws::labels::NAME)?;
    lws.get(&ObjectRef::new(name).within(pg.metadata.namespace.as_deref()?))
}

async fn reconcile(br: Arc<BatchRelease>, ctx: Arc<Context>) -> Result<Action, ApiError> {
    let s = &ctx.stores;
    let caches = [
        store_ready(&s.batch_releases),
        store_ready(&s.lws),
        store_ready(&s.revisions),
        watch::index_ready(&s.pods),
        store_ready(&s.sets),
    ];
    ctx.runner.reconcile(&br, caches, steps(&br, &ctx)).await
}

/// The steps of one reconcile: observe → plan → apply.
async fn steps(br: &BatchRelease, ctx: &Context) -> Result<Action, ApiError> {
    if super::pair::releases(br) {
        return pair_steps(br, ctx).await;
    }
    let mut observed = observe::observe(&ctx.stores, br);
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut plan = plan::plan(&observed, now);
    if let Some(wait) = cache_behind(ctx, &observed, &plan) {
        // The watch event of our own last write is on its way and starts the next
        // reconcile; acting on the version it replaced would only repeat that write.
        return Ok(Action::requeue(wait));
    }
    if plan.confirm_leaders
        && let Some(stable) = observed.stable.as_mut()
    {
        let ns = br.namespace().unwrap_or_default();
        // One consistent LIST of the leaders' metadata, for the one decision the pod cache
        // may not be trusted with (`BatchReleasePlan::confirm_leaders`).
        let fresh =
            crate::lws::deref::leader_pods(&ctx.applier, &ns, &stable.lws.name_any()).await?;
        observe::confirm_leaders(stable, fresh.iter().map(|p| &p.metadata));
        plan = plan::plan(&observed, now);
    }
    apply::apply(&ctx.applier, &ctx.events, &ctx.written, &observed, &plan).await?;
    Ok(Action::await_change())
}

/// A DisaggregatedSet's release: observe → plan → apply of `pair`.
async fn pair_steps(br: &BatchRelease, ctx: &Context) -> Result<Action, ApiError> {
    use crate::k8s::written::key;
    let ns = br.namespace().unwrap_or_default();
    if let Some(wait) = ctx.written.stale(
        &key::<BatchRelease>(&ns, &br.name_any()),
        &br.resource_version().unwrap_or_default(),
    ) {
        return Ok(Action::requeue(wait));
    }
    let set = super::pair::observe(&ctx.stores.sets, &ctx.stores.lws, br);
    let style = super::pair::style(br).unwrap_or_default();
    let plan =
        super::pair::plan::plan(br, style, set.as_ref(), k8s_openapi::jiff::Timestamp::now());
    super::pair::apply(&ctx.applier, &ctx.events, &ctx.written, br, &plan).await?;
    Ok(Action::await_change())
}

/// Whether the cache still holds a version of the BatchRelease, or of the canary the plan would
/// write, that our last write to it replaced (`k8s::written`), and for how long to wait.
fn cache_behind(
    ctx: &Context,
    obs: &observe::BatchReleaseObserved,
    plan: &plan::BatchReleasePlan,
) -> Option<Duration> {
    use crate::k8s::written::key;
    let ns = obs.br.namespace().unwrap_or_default();
    let own = ctx.written.stale(
        &key::<BatchRelease>(&ns, &obs.br.name_any()),
        &obs.br.resource_version().unwrap_or_default(),
    );
    own.or_else(|| {
        let canary = plan.apply_canary.as_ref()?.name_any();
        ctx.written.stale(
            &key::<LeaderWorkerSet>(&ns, &canary),
            &apply::cached_canary_version(obs, &canary),
        )
    })
}

fn error_policy(br: Arc<BatchRelease>, err: &ApiError, ctx: Arc<Context>) -> Action {
    ctx.runner.error_policy(br.as_ref(), err)
}
