//! The leader lane: a new leader pod's worker StatefulSet is created as soon as the pod is
//! seen, beside its LWS's reconcile instead of behind it.
//!
//! Why: kube-runtime runs the reconciles of one LWS one at a time, and under a burst (dozens of
//! LWS created at once on a busy API server) one reconcile — the status write of a new LWS, or
//! the worker StatefulSet of the group before — takes a few hundred milliseconds. The next
//! leader's workers waited for it: the tail of the benchmark's "leader pod created → worker
//! StatefulSet". Here each new leader is a job of
//! its own, run beside its LWS's reconcile and beside the other leaders' jobs.
//!
//! A job decides nothing of its own: it plans the LWS's worker StatefulSets from the caches as
//! the reconcile does ([`plan::worker_statefulsets`]: the same checks, without the leader
//! StatefulSet, Services or status), and carries out only the one for its leader
//! ([`plan::groups::for_leader`]), with the same fresh read of the leader beside the create.
//! Everything else — a blocked LWS, a revision not cached yet, an exclusive-topology node not
//! known yet, a refusal, an error — is left to the LWS's reconcile: the pod event triggers it
//! as well, and a job that did not create the StatefulSet triggers it once more.
//!
//! The job's claim — an [`Expected`](crate::k8s::expected::Expected) entry, made when the pod
//! event is mapped, before either runs — keeps a reconcile meanwhile from planning the same
//! create; a job that did not create gives the claim back. A crash loses only claims, which
//! expire on their own (`expected::PATIENCE`), and a restart lists every leader again.

use std::{sync::Arc, time::Instant};

use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use super::{context::Context, deref, error::Error, plan, triggers};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{pod::CachedPod, watch},
};

/// Jobs run at once. A burst of new LWS brings a few leaders per LWS within a second; more
/// than this in flight would only queue at the API server.
pub const CONCURRENCY: usize = 32;

/// Claims the worker StatefulSet of `leader` for its job (see the module docs).
pub fn claim(ctx: &Context, leader: &CachedPod) {
    if let (Some(ns), Some(name)) = (&leader.metadata.namespace, &leader.metadata.name) {
        ctx.expected.created(ns, name, Instant::now());
    }
}

/// Gives the claim of `leader` back: the reconcile may create its workers.
pub fn release(ctx: &Context, leader: &CachedPod) {
    if let (Some(ns), Some(name)) = (&leader.metadata.namespace, &leader.metadata.name) {
        ctx.expected.forget(ns, name);
    }
}

/// The job of `leader`: its worker StatefulSet, created if its LWS's plan wants it. Returns
/// the LWS to reconcile when the job left the leader to it.
pub async fn run(
    ctx: &Context,
    lws_store: &Store<LeaderWorkerSet>,
    leader: Arc<CachedPod>,
) -> Option<ObjectRef<LeaderWorkerSet>> {
    let key = triggers::to_lws(leader.clone())?;
    let name = leader.name_any();
    let created = match lws_store.get(&key) {
        Some(lws) if lws.metadata.deletion_timestamp.is_none() => {
            create_workers(ctx, &lws, &name).await
        }
        _ => Ok(false),
    };
    if let Err(err) = &created {
        tracing::debug!(leader = %name, error = %err, "left to the LWS's reconcile");
    }
    if created.unwrap_or(false) {
        ctx.metrics().leader_lane_job("created");
        return None;
    }
    ctx.metrics().leader_lane_job("left");
    release(ctx, &leader);
    Some(key)
}

/// Observe → plan → the one create, as the reconcile's steps (`controller::steps`) run them.
/// `Ok(true)` when the StatefulSet of `leader` was created or found there.
async fn create_workers(ctx: &Context, lws: &LeaderWorkerSet, leader: &str) -> Result<bool, Error> {
    let caches_listed = watch::ready(ctx.caches_ready(), std::time::Duration::ZERO).await;
    if !caches_listed || ctx.preflight(lws).is_some() {
        return Ok(false);
    }
    let mut observed = ctx.observe(lws);
    // The job's own claim is not a create on its way.
    observed.pending_workers.remove(leader);
    let deref = deref::dereference(&ctx.applier, lws, &observed, false).await?;
    let planned = plan::worker_statefulsets(lws, &observed, &deref);
    let Some(plan) = plan::groups::for_leader(planned, leader) else {
        return Ok(false);
    };
    let applied = ctx.apply_verified(lws, &plan).await?;
    Ok(applied.failure.is_none() && applied.deferred.is_none())
}
