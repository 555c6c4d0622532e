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
            revisions: SharedCache::new(Api::all(client.clone()), owned)
                .with_trim(trim_revision)
                .with_index(labels::NAME),
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
/// next to its leader) and the containers that ask for TPUs, with their resources only (a
/// leader asking for TPUs gets TPU variables in its workers: `objects::leader_requests_tpus`).
/// No controller reads anything else of a pod's spec — they read its metadata and status —
/// and the rest (images, commands, env, volumes, probes, the defaults the API server fills
/// in, and even an empty `Container`, ~1.5 KiB of struct) was most of each cached pod
/// (heaptrack: `PodSpec` clones in the reflector were the largest allocation site at S1's
/// peak).
pub fn trim_pod(pod: &mut Pod) {
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    fn tpu_only(containers: Vec<Container>) -> Vec<Container> {
        containers
            .into_iter()
            .filter(|c| {
                c.resources.as_ref().is_some_and(|r| {
                    [&r.limits, &r.requests]
                        .into_iter()
                        .flatten()
                        .any(|m| m.contains_key(TPU_RESOURCE))
                })
            })
            .map(|c| Container {
                name: c.name,
                resources: c.resources,
                ..Default::default()
            })
            .collect()
    }
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(PodSpec {
            node_name: spec.node_name,
            containers: tpu_only(spec.containers),
            init_containers: spec
                .init_containers
                .map(tpu_only)
                .filter(|cs| !cs.is_empty()),
            ..Default::default()
        });
    }
}

/// The resource whose request makes a leader's workers TPU workers.
const TPU_RESOURCE: &str = "google.com/tpu";

/// StatefulSets keep ControllerRevisions of their own that copy our template labels, so the
/// revision cache holds one per StatefulSet with the whole pod template in `data`. Only the
/// LWS's own revisions are read (their `data` is a held revision's template); of the others
/// only the metadata is kept.
pub fn trim_revision(rev: &mut ControllerRevision) {
    let lws_controlled = rev
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "LeaderWorkerSet");
    if !lws_controlled {
        rev.data = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{
        api::core::v1::{Container, PodSpec, ResourceRequirements},
        apimachinery::pkg::api::resource::Quantity,
    };

    #[test]
    fn a_trimmed_pod_keeps_its_node_and_its_tpu_containers_resources_only() {
        let container = |name: &str, resource: &str| Container {
            name: name.into(),
            image: Some("x".into()),
            resources: Some(ResourceRequirements {
                limits: Some([(resource.to_string(), Quantity("1".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut pod = Pod {
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![container("cpu", "cpu"), container("tpu", TPU_RESOURCE)],
                init_containers: Some(vec![container("init", "cpu")]),
                hostname: Some("h".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        trim_pod(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].name, "tpu");
        assert_eq!(spec.containers[0].image, None);
        assert!(spec.containers[0].resources.is_some());
        assert_eq!(spec.init_containers, None);
        assert_eq!(spec.hostname, None);
    }

    #[test]
    fn only_revisions_an_lws_controls_keep_their_data() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let revision = |kind: &str| ControllerRevision {
            metadata: kube::api::ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    kind: kind.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                serde_json::json!({"spec": {}}),
            )),
            revision: 1,
        };
        let mut ours = revision("LeaderWorkerSet");
        trim_revision(&mut ours);
        assert!(ours.data.is_some());
        let mut statefulsets = revision("StatefulSet");
        trim_revision(&mut statefulsets);
        assert_eq!(statefulsets.data, None);
        assert_eq!(statefulsets.revision, 1);
    }
}
