//! The LWS controller's shared state, and the steps both its reconcile (`controller`) and the
//! leader lane (`leader_lane`) run on it: reading the caches, applying a plan with the fresh
//! leader reads beside it, and the preflight check.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{ResourceExt, runtime::controller::Action};

use super::{
    apply, deref, error::Error, observe, plan, remembered::Remembered, upstream::revision,
};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{
        apply::Applier,
        events::Events,
        expected::Expected,
        memo::PerUid,
        metrics::ControllerMetrics,
        runner::Runner,
        watch::{self, CacheReady},
    },
};

/// Shared state of the reconciler.
pub struct Context {
    pub(super) applier: Applier,
    pub(super) events: Events,
    pub(super) stores: observe::Stores,
    /// Timing, span, cache wait and error policy, shared with the other controllers.
    pub(super) runner: Runner<LeaderWorkerSet>,
    /// Status writes the LWS cache has not shown yet, so they are not repeated.
    pub(super) written: apply::WrittenStatuses,
    /// Worker StatefulSets created (or claimed by the leader lane) and not cached yet, so they
    /// are not created twice.
    pub(super) expected: Expected,
    /// Each LWS's template revision, computed once per generation.
    pub(super) revisions: revision::Memo,
    /// Each LWS's comparisons that the next reconcile may reuse (`lws::remembered`).
    pub(super) remembered: PerUid<Remembered>,
    /// Leaders deleted to recreate their group, until the cache shows the delete.
    pub(super) restarting: crate::k8s::written::Written,
}

impl Context {
    /// The LWS controller's metrics.
    pub(super) fn metrics(&self) -> &ControllerMetrics {
        self.runner.metrics()
    }

    /// The caches a plan reads, each ready once it has listed.
    pub(super) fn caches_ready(&self) -> [CacheReady<'_>; 6] {
        let s = &self.stores;
        [
            watch::index_ready(&s.pods),
            watch::index_ready(&s.statefulsets),
            watch::index_ready(&s.services),
            watch::index_ready(&s.revisions),
            match &s.pod_groups {
                Some(index) => watch::index_ready(index),
                None => Box::pin(std::future::ready(true)),
            },
            match &s.volcano {
                observe::VolcanoStores::Served(index) => watch::index_ready(index),
                _ => Box::pin(std::future::ready(true)),
            },
        ]
    }

    /// What the caches hold about `lws`, with what earlier reconciles worked out for it.
    pub(super) fn observe(&self, lws: &LeaderWorkerSet) -> observe::Observed {
        let mut observed = observe::observe(
            &self.stores,
            &self.expected,
            &lws.namespace().unwrap_or_default(),
            &lws.name_any(),
        );
        let ns = lws.namespace().unwrap_or_default();
        observed.restarting_leaders = observed
            .leaders
            .iter()
            .filter(|l| {
                let key = crate::k8s::written::key::<Pod>(&ns, &l.name_any());
                let cached = l.resource_version().unwrap_or_default();
                self.restarting.stale(&key, &cached).is_some()
            })
            .map(|l| l.name_any())
            .collect();
        // A spec that cannot be hashed is left to the plan, which says why.
        observed.spec_revision = self.revisions.of(lws).ok();
        let uid = lws.metadata.uid.as_deref().unwrap_or_default();
        observed.remembered = self.remembered.get(uid).unwrap_or_default();
        observed
    }

    /// Apply, with the leaders of new worker StatefulSets read fresh beside their creates
    /// (`plan::groups`): a StatefulSet whose leader was replaced meanwhile is taken back. What was
    /// created is expected until the cache shows it.
    pub(super) async fn apply_verified(
        &self,
        lws: &LeaderWorkerSet,
        plan: &plan::Plan,
    ) -> Result<apply::Applied, Error> {
        let (ns, name) = (lws.namespace().unwrap_or_default(), lws.name_any());
        let verify = plan::groups::leaders_to_verify(plan);
        let (applied, live) = futures::join!(
            apply::apply(&self.applier, &self.events, lws, plan),
            deref::live_leaders(&self.applier, &ns, &name, &verify),
        );
        let applied = applied?;
        for (leader, version) in &applied.restarted {
            self.restarting
                .record(&crate::k8s::written::key::<Pod>(&ns, leader), version, None);
        }
        let created = std::time::Instant::now();
        for sts in applied.created_workers.keys() {
            self.expected.created(&ns, sts, created);
        }
        if applied.created_services.contains(&name) {
            self.expected
                .created(&ns, &observe::shared_service_key(&name), created);
        }
        let stale = plan::groups::stale_workers(plan, &applied.created_workers, &live?);
        for sts in &stale {
            self.expected.forget(&ns, &sts.name);
        }
        apply::remove_stale_workers(&self.applier, lws, &stale).await?;
        Ok(applied)
    }

    /// Before anything is decided: not while the leader StatefulSet is being deleted (its
    /// successor would be built from half of it).
    pub(super) fn preflight(&self, lws: &LeaderWorkerSet) -> Option<Action> {
        let name = lws.name_any();
        let leader_sts_deleting = self
            .stores
            .statefulsets
            .get(&lws.namespace().unwrap_or_default(), &name)
            .iter()
            .any(|s| {
                s.metadata.name.as_deref() == Some(&name) && s.metadata.deletion_timestamp.is_some()
            });
        leader_sts_deleting.then(|| Action::requeue(Duration::from_secs(5)))
    }
}
