//! Observe: what the caches hold about one LWS, gathered into one plain struct. No API calls
//! (the few fresh reads are in [`super::deref`]), no decisions.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Instant,
};

use k8s_openapi::api::{
    apps::v1::{ControllerRevision, StatefulSet},
    core::v1::Service,
    scheduling::v1alpha2::PodGroup,
};
use kube::ResourceExt;

use super::{labels, upstream::revision};
use crate::api::volcano::VolcanoPodGroup;
use crate::k8s::{
    apply::controller_kind, expected::Expected, label_index::LabelIndex, pod::CachedPod,
};

/// The caches the LWS controller reads (shared with the release controllers), each indexed by
/// (namespace, LWS name label): a reconcile touches only its own LWS's objects.
#[derive(Clone)]
pub struct Stores {
    /// Pods labelled with an LWS name.
    pub pods: LabelIndex<CachedPod>,
    /// StatefulSets labelled with an LWS name.
    pub statefulsets: LabelIndex<StatefulSet>,
    /// Services labelled with an LWS name.
    pub services: LabelIndex<Service>,
    /// ControllerRevisions labelled with an LWS name.
    pub revisions: LabelIndex<ControllerRevision>,
    /// PodGroups labelled with an LWS name; `None` when the API server does not serve them
    /// (checked when the controllers start).
    pub pod_groups: Option<LabelIndex<PodGroup>>,
    /// Volcano gang scheduling, when the manager is configured for it.
    pub volcano: VolcanoStores,
}

/// What the manager's gang-scheduling provider setting leaves the LWS controller to read.
#[derive(Clone, Default)]
pub enum VolcanoStores {
    /// No provider configured: no Volcano PodGroups are made.
    #[default]
    Off,
    /// `--gang-scheduling-provider=volcano`, but the API server does not serve Volcano's
    /// PodGroups (checked when the controllers start).
    NotServed,
    /// Volcano PodGroups labelled with an LWS name.
    Served(LabelIndex<VolcanoPodGroup>),
}

/// What the caches hold about one LWS's Volcano PodGroups.
#[derive(Clone, Debug, Default)]
pub enum VolcanoObserved {
    /// Volcano gang scheduling is off.
    #[default]
    Off,
    /// Configured, but Volcano's PodGroup CRD is not served.
    NotServed,
    /// The LWS's Volcano PodGroups.
    Served(Vec<Arc<VolcanoPodGroup>>),
}

/// Everything the caches hold about one LWS.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The leader StatefulSet `<lws>`.
    pub leader_sts: Option<Arc<StatefulSet>>,
    /// Worker StatefulSets by name (`<lws>-<group>`, the leader pod's name).
    pub worker_sts: BTreeMap<String, Arc<StatefulSet>>,
    /// Leader pods (worker index 0).
    pub leaders: Vec<Arc<CachedPod>>,
    /// Every pod of the LWS, leaders included.
    pub pods: Vec<Arc<CachedPod>>,
    /// ControllerRevisions this LWS controls (not the StatefulSets' own, which copy our labels).
    pub revisions: Vec<Arc<ControllerRevision>>,
    /// Services labelled with the LWS name.
    pub services: Vec<Arc<Service>>,
    /// PodGroups labelled with the LWS name (gang scheduling); `None` when the cluster does
    /// not serve PodGroups.
    pub pod_groups: Option<Vec<Arc<PodGroup>>>,
    /// Volcano PodGroups labelled with the LWS name (Volcano gang scheduling).
    pub volcano: VolcanoObserved,
    /// Leaders whose worker StatefulSet we created a moment ago and the cache does not show
    /// yet ([`Expected`]): not to be created again.
    pub pending_workers: BTreeSet<String>,
    /// The shared Service (named like the LWS) was created a moment ago and the cache does not
    /// show it yet ([`Expected`], under [`shared_service_key`]): not to be created again.
    pub shared_service_pending: bool,
    /// Leaders we deleted a moment ago to recreate their group, whose cached version is still
    /// the one that delete replaced (`k8s::written`): not to be deleted again.
    pub restarting_leaders: BTreeSet<String>,
    /// The spec's revision, when the controller remembers it ([`revision::Memo`]); the plan
    /// computes it otherwise.
    pub spec_revision: Option<Arc<revision::SpecRevision>>,
    /// What earlier reconciles found that the plan may reuse while its versions hold.
    pub remembered: super::remembered::Remembered,
}

/// The [`Expected`] key of the shared Service `name` (worker StatefulSets use their bare
/// names, and the leader StatefulSet shares the LWS's).
pub fn shared_service_key(name: &str) -> String {
    format!("Service/{name}")
}

/// Reads the caches for LWS `namespace/name`, and which of its worker StatefulSets we created
/// that they do not show yet.
pub fn observe(stores: &Stores, expected: &Expected, namespace: &str, name: &str) -> Observed {
    let mut observed = Observed::default();
    for sts in stores.statefulsets.get(namespace, name) {
        if sts.metadata.name.as_deref() == Some(name) {
            observed.leader_sts = Some(sts);
        } else {
            observed.worker_sts.insert(sts.name_any(), sts);
        }
    }
    observed.pods = stores.pods.get(namespace, name);
    observed.leaders = observed
        .pods
        .iter()
        .filter(|p| is_leader(p))
        .cloned()
        .collect();
    // StatefulSets make ControllerRevisions of their own that copy our template labels: only
    // those an LWS controls are ours.
    observed.revisions = stores
        .revisions
        .get(namespace, name)
        .into_iter()
        .filter(|r| controller_kind(r.as_ref()) == Some("LeaderWorkerSet"))
        .collect();
    observed.services = stores.services.get(namespace, name);
    observed.pod_groups = stores.pod_groups.as_ref().map(|i| i.get(namespace, name));
    observed.volcano = match &stores.volcano {
        VolcanoStores::Off => VolcanoObserved::Off,
        VolcanoStores::NotServed => VolcanoObserved::NotServed,
        VolcanoStores::Served(index) => VolcanoObserved::Served(index.get(namespace, name)),
    };
    let now = Instant::now();
    observed.pending_workers = observed
        .leaders
        .iter()
        .map(|l| l.name_any())
        .filter(|leader| {
            let cached = observed.worker_sts.contains_key(leader);
            expected.pending(namespace, leader, cached, now)
        })
        .collect();
    let service_cached = observed.services.iter().any(|s| s.name_any() == name);
    observed.shared_service_pending =
        expected.pending(namespace, &shared_service_key(name), service_cached, now);
    observed
}

/// A leader pod (worker index 0).
pub fn is_leader(pod: &CachedPod) -> bool {
    pod.labels().get(labels::WORKER_INDEX) == Some("0")
}
