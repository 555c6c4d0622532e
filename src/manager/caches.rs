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
            pods: SharedCache::new(Api::all(client.clone()), owned.clone())
                .with_trim(trim_pod)
                .with_index(labels::NAME),
            statefulsets: SharedCache::new(Api::all(client.clone()), owned.clone())
                .with_index(labels::NAME),
            services: SharedCache::new(Api::all(client.clone()), owned.clone())
                .with_index(labels::NAME),
            revisions: SharedCache::new(Api::all(client.clone()), owned).with_index(labels::NAME),
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

/// What a cached pod keeps of its spec: the node (exclusive topology places a group's workers
/// next to its leader) and each container's name and resources (a leader asking for TPUs gets
/// TPU variables in its workers). No controller reads anything else of a pod's spec — they
/// read its metadata and status — and the rest (images, commands, env, volumes, probes and
/// the defaults the API server fills in) was most of each cached pod (heaptrack: `PodSpec`
/// clones in the reflector were the largest allocation site at S1's peak).
pub fn trim_pod(pod: &mut Pod) {
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    fn keep(c: Container) -> Container {
        Container {
            name: c.name,
            resources: c.resources,
            ..Default::default()
        }
    }
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            containers: spec.containers.into_iter().map(keep).collect(),
            init_containers: spec
                .init_containers
                .map(|cs| cs.into_iter().map(keep).collect()),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

    #[test]
    fn a_trimmed_pod_keeps_its_node_and_container_resources_only() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("x".into()),
                    resources: Some(ResourceRequirements {
                        limits: Some(Default::default()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                hostname: Some("h".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        trim_pod(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].name, "c");
        assert_eq!(spec.containers[0].image, None);
        assert!(spec.containers[0].resources.is_some());
        assert_eq!(spec.hostname, None);
    }
}
