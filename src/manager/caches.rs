//! The caches the controllers share: one watch per kind, created once per leadership term.
//! Which objects are cached is a choice of this manager (only what carries an LWS name label,
//! so unrelated pods never enter memory); the mechanics are in `k8s::watch`.

use std::{future::Future, pin::Pin};

use k8s_openapi::api::{
    apps::v1::{ControllerRevision, StatefulSet},
    core::v1::{Pod, Service},
};
use kube::{Api, Client, runtime::watcher::Config};

use crate::{
    api::{BatchRelease, LeaderWorkerSet, Rollout},
    k8s::watch::SharedCache,
    lws::labels,
};

/// Every shared cache.
pub struct Caches {
    /// All LeaderWorkerSets.
    pub lws: SharedCache<LeaderWorkerSet>,
    /// Pods that belong to an LWS.
    pub pods: SharedCache<Pod>,
    /// StatefulSets that belong to an LWS.
    pub statefulsets: SharedCache<StatefulSet>,
    /// Services that belong to an LWS.
    pub services: SharedCache<Service>,
    /// ControllerRevisions that belong to an LWS.
    pub revisions: SharedCache<ControllerRevision>,
    /// All Rollouts.
    pub rollouts: SharedCache<Rollout>,
    /// All BatchReleases.
    pub batch_releases: SharedCache<BatchRelease>,
}

impl Caches {
    /// Caches for `client` (nothing is watched until the drivers run).
    pub fn new(client: &Client) -> Self {
        let owned = Config::default().labels(labels::NAME);
        Self {
            lws: SharedCache::new(Api::all(client.clone()), Config::default()),
            pods: SharedCache::new(Api::all(client.clone()), owned.clone()),
            statefulsets: SharedCache::new(Api::all(client.clone()), owned.clone()),
            services: SharedCache::new(Api::all(client.clone()), owned.clone()),
            revisions: SharedCache::new(Api::all(client.clone()), owned),
            rollouts: SharedCache::new(Api::all(client.clone()), Config::default()),
            batch_releases: SharedCache::new(Api::all(client.clone()), Config::default()),
        }
    }

    /// The futures that run the watches; call once every controller has subscribed.
    pub fn drivers(&mut self) -> Vec<Pin<Box<dyn Future<Output = ()> + Send>>> {
        vec![
            self.lws.driver(),
            self.pods.driver(),
            self.statefulsets.driver(),
            self.services.driver(),
            self.revisions.driver(),
            self.rollouts.driver(),
            self.batch_releases.driver(),
        ]
    }
}
