//! What the BatchRelease plan looks at: plain data the observe step fills from reflector
//! stores. No API calls here.

use crate::api::batchrelease::BatchRelease;
use crate::api::kueue::{QUEUE_LABEL, Workload};
use crate::api::leaderworkerset::LeaderWorkerSet;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup;

/// Everything one BatchRelease reconcile decides from.
#[derive(Clone, Debug, Default)]
pub struct BatchReleaseObserved {
    /// The BatchRelease as stored.
    pub br: BatchRelease,
    /// The workload `spec.workloadRef` names, if it is a LeaderWorkerSet that exists.
    pub stable: Option<StableLws>,
    /// Every LWS this BatchRelease controls (normally zero or one; more only after an
    /// interrupted change, and the plan deletes all but the one it wants).
    pub canaries: Vec<CanaryLws>,
}

/// The stable LWS and what the observe step derived from it.
#[derive(Clone, Debug, Default)]
pub struct StableLws {
    /// The object (its spec is the new template during a release).
    pub lws: LeaderWorkerSet,
    /// Revision key of its current `spec` (the template being released).
    pub update_revision: String,
    /// The hold annotation `rollouts.kruise.io/stable-revision` (the revision its groups keep).
    pub hold: Option<String>,
    /// The release partition annotation (partition style), as written.
    pub release_partition: Option<i32>,
    /// Its groups on `update_revision`, by index (partition style moves them in place).
    pub on_update: Vec<GroupOnRevision>,
    /// Groups of the user's LWS the kube-scheduler could not place whole (gang scheduling),
    /// by index: a partition-style batch names them.
    pub gang_waits: std::collections::BTreeMap<i32, GangWait>,
    /// The groups' `leader_pod`s come from a fresh read of the API server
    /// ([`confirm_leaders`]), not from the pod cache, which may not show our latest patch of a
    /// leader yet.
    pub leaders_confirmed: bool,
}

/// One group of the stable LWS as far as the revision being released goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupOnRevision {
    /// Group index.
    pub index: i32,
    /// Its leader runs the revision.
    pub leader: bool,
    /// Its pods that run the revision and are ready (not terminating).
    pub ready_pods: i32,
    /// Its leader pod, whatever revision it runs (not terminating): name, labels, annotations.
    pub leader_pod: Option<LeaderPod>,
}

/// A group's leader pod, as far as `patchPodTemplateMetadata` goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderPod {
    /// Pod name.
    pub name: String,
    /// Its labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its annotations.
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl StableLws {
    /// `spec.replicas` (groups).
    pub fn replicas(&self) -> i32 {
        self.lws.spec.replicas.unwrap_or(1)
    }

    /// Every group runs the current template and is ready: what WaitResume waits for (Kruise
    /// waits for the workload to be updated and ready, whatever template it has by then). Not
    /// the released revision: a template changed again while the release finalises would keep
    /// the BatchRelease from Completed, and the Rollout, which waits for that, with it.
    pub fn fully_rolled(&self) -> bool {
        self.rolled_to(&self.update_revision)
    }

    /// Every group runs `revision` and is ready, by a status that describes the current spec.
    pub fn rolled_to(&self, revision: &str) -> bool {
        let status = self.lws.status.clone().unwrap_or_default();
        let replicas = self.replicas();
        status.observed_generation == self.lws.metadata.generation
            && self.update_revision == revision
            && status.updated_replicas.unwrap_or(0) >= replicas
            && status.ready_replicas.unwrap_or(0) >= replicas
    }
}

/// A canary LWS and the readiness of its groups.
#[derive(Clone, Debug, Default)]
pub struct CanaryLws {
    /// The object.
    pub lws: LeaderWorkerSet,
    /// Groups (by index) that exist but are not whole and ready, with pod counts.
    pub not_ready_groups: Vec<GroupReadiness>,
}

/// Readiness of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupReadiness {
    /// Group index (`leaderworkerset.sigs.k8s.io/group-index`).
    pub index: i32,
    /// Ready pods of the group.
    pub ready_pods: i32,
    /// Pods the group should have (`size`).
    pub pods: i32,
    /// The LWS is Kueue's (it has a queue name) and this group's Workload is not admitted:
    /// why, from the Workload.
    pub kueue: Option<KueueWait>,
    /// The group is gang-scheduled (docs/lws.md, "Gang scheduling") and the kube-scheduler
    /// could not place it whole: which PodGroup, and the scheduler's reason.
    pub gang: Option<GangWait>,
}

/// A gang group the kube-scheduler could not place whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangWait {
    /// The group's PodGroup.
    pub pod_group: String,
    /// The message of its `PodGroupScheduled=False` condition.
    pub why: String,
}

/// A group that waits for Kueue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KueueWait {
    /// The LocalQueue (the Workload's, else the LWS's label).
    pub queue: String,
    /// Kueue's reason (`Workload::admission_wait`), or that Kueue has made no Workload for
    /// the group yet.
    pub why: String,
}

/// The reflector stores the BatchRelease controller reads (shared with the other controllers).
#[derive(Clone)]
pub struct Stores {
    /// BatchReleases.
    pub batch_releases: kube::runtime::reflector::Store<BatchRelease>,
    /// LeaderWorkerSets (stable and canary).
    pub lws: kube::runtime::reflector::Store<LeaderWorkerSet>,
    /// ControllerRevisions of LWSes (the revision the stable LWS's template is on).
    pub revisions: kube::runtime::reflector::Store<k8s_openapi::api::apps::v1::ControllerRevision>,
    /// Pods of LWSes by LWS name (group readiness of the canary).
    pub pods: crate::k8s::label_index::LabelIndex<crate::k8s::pod::CachedPod>,
    /// Kueue Workloads by the uid of the object they stand for (`kueue.x-k8s.io/job-uid`).
    pub workloads: crate::k8s::label_index::LabelIndex<Workload>,
    /// PodGroups of gang-scheduled LWSes by LWS name; `None` when the API server does not
    /// serve them.
    pub pod_groups: Option<crate::k8s::label_index::LabelIndex<PodGroup>>,
    /// DisaggregatedSets (a pair release reads its set and the set's LWSs).
    pub sets: kube::runtime::reflector::Store<crate::api::disaggregatedset::DisaggregatedSet>,
}

/// Fills the observed state of `br` from the stores.
pub fn observe(stores: &Stores, br: &BatchRelease) -> BatchReleaseObserved {
    use crate::lws::labels;
    use kube::{ResourceExt, runtime::reflector::ObjectRef};
    let ns = br.namespace().unwrap_or_default();
    let w = &br.spec.workload_ref;
    let stable = (w.kind == crate::api::rollout::LWS_KIND)
        .then(|| stores.lws.get(&ObjectRef::new(&w.name).within(&ns)))
        .flatten()
        .map(|lws| StableLws {
            update_revision: crate::release::revision::template_key(
                &lws,
                &crate::release::revision::recorded(&stores.revisions, &lws),
            ),
            hold: lws
                .annotations()
                .get(labels::HELD_REVISION)
                .filter(|v| !v.is_empty())
                .cloned(),
            release_partition: crate::lws::plan::revisions::release_partition(&lws),
            on_update: Vec::new(),
            gang_waits: gang_waits(stores, &lws),
            leaders_confirmed: false,
            lws: lws.as_ref().clone(),
        })
        .map(|mut stable| {
            stable.on_update = on_revision(stores, &stable.lws, &stable.update_revision);
            stable
        });
    let canaries = stores
        .lws
        .state()
        .into_iter()
        .filter(|l| {
            l.namespace().as_deref() == Some(ns.as_str())
                && l.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && Some(&o.uid) == br.metadata.uid.as_ref())
        })
        .map(|lws| CanaryLws {
            not_ready_groups: not_ready_groups(stores, &lws),
            lws: lws.as_ref().clone(),
        })
        .collect();
    BatchReleaseObserved {
        br: br.clone(),
        stable,
        canaries,
    }
}

/// The groups of `lws` (up to its replicas) with a pod on `revision`: whether the leader is,
/// and how many of them are ready; and each group's leader pod.
fn on_revision(stores: &Stores, lws: &LeaderWorkerSet, revision: &str) -> Vec<GroupOnRevision> {
    use crate::lws::labels;
    use kube::ResourceExt;
    let replicas = usize::try_from(lws.spec.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    let mut groups: Vec<GroupOnRevision> = (0..replicas)
        .map(|i| GroupOnRevision {
            index: i32::try_from(i).unwrap_or(i32::MAX),
            ..GroupOnRevision::default()
        })
        .collect();
    let pods = stores.pods.get(
        lws.metadata.namespace.as_deref().unwrap_or_default(),
        lws.metadata.name.as_deref().unwrap_or_default(),
    );
    for pod in pods {
        let labels = pod.labels();
        if crate::k8s::pod::terminating(&pod) {
            continue;
        }
        let Some(group) = labels
            .get(labels::GROUP_INDEX)
            .and_then(|v| v.parse::<usize>().ok())
            .and_then(|i| groups.get_mut(i))
        else {
            continue;
        };
        let leader = labels.get(labels::WORKER_INDEX) == Some("0");
        if leader {
            group.leader_pod = Some(LeaderPod {
                name: pod.name_any(),
                labels: labels.to_map(),
                annotations: pod.annotations().to_map(),
            });
        }
        if labels.get(labels::REVISION) != Some(revision) {
            continue;
        }
        group.leader |= leader;
        group.ready_pods += i32::from(crate::k8s::pod::ready(&pod));
    }
    groups
}

fn leader_pod(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> LeaderPod {
    LeaderPod {
        name: meta.name.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
    }
}

/// Replaces each group's `leader_pod` by the one in `fresh`, the metadata of the stable LWS's
/// leader pods as the API server holds them now (`lws::deref::leader_pods`): a group whose
/// leader is not there (or is terminating) has none.
pub fn confirm_leaders<'a>(
    stable: &mut StableLws,
    fresh: impl IntoIterator<Item = &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) {
    use crate::lws::labels;
    for group in &mut stable.on_update {
        group.leader_pod = None;
    }
    for meta in fresh {
        let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
        if meta.deletion_timestamp.is_some()
            || label(labels::WORKER_INDEX).map(String::as_str) != Some("0")
        {
            continue;
        }
        let index = label(labels::GROUP_INDEX).and_then(|v| v.parse::<i32>().ok());
        if let Some(group) = stable.on_update.iter_mut().find(|g| Some(g.index) == index) {
            group.leader_pod = Some(leader_pod(meta));
        }
    }
    stable.leaders_confirmed = true;
}

/// Groups of `lws` (up to its replicas) whose pods are not all there and ready.
fn not_ready_groups(stores: &Stores, lws: &LeaderWorkerSet) -> Vec<GroupReadiness> {
    use crate::lws::labels;
    use kube::ResourceExt;
    let size = lws.spec.leader_worker_template.size.unwrap_or(1);
    let replicas = lws.spec.replicas.unwrap_or(1);
    let mut ready = vec![0; usize::try_from(replicas.max(0)).unwrap_or(0)];
    let pods = stores.pods.get(
        lws.metadata.namespace.as_deref().unwrap_or_default(),
        lws.metadata.name.as_deref().unwrap_or_default(),
    );
    for pod in pods {
        if !crate::k8s::pod::ready(&pod) {
            continue;
        }
        let Some(index) = pod
            .labels()
            .get(labels::GROUP_INDEX)
            .and_then(|v| v.parse::<usize>().ok())
        else {
            continue;
        };
        if let Some(count) = ready.get_mut(index) {
            *count += 1;
        }
    }
    let mut gang = gang_waits(stores, lws);
    let workloads = lws.labels().get(QUEUE_LABEL).map(|queue| {
        let found = stores.workloads.get(
            lws.metadata.namespace.as_deref().unwrap_or_default(),
            lws.metadata.uid.as_deref().unwrap_or_default(),
        );
        (queue.clone(), found)
    });
    ready
        .into_iter()
        .enumerate()
        .filter(|(_, n)| *n < size)
        .map(|(index, n)| {
            let index = i32::try_from(index).unwrap_or(i32::MAX);
            GroupReadiness {
                index,
                ready_pods: n,
                pods: size,
                kueue: workloads
                    .as_ref()
                    .and_then(|(queue, found)| kueue_wait(queue, found, index)),
                gang: gang.remove(&index),
            }
        })
        .collect()
}

/// The groups of `lws` whose PodGroup the kube-scheduler could not place whole, by index.
fn gang_waits(stores: &Stores, lws: &LeaderWorkerSet) -> std::collections::BTreeMap<i32, GangWait> {
    let Some(index) = stores.pod_groups.as_ref() else {
        return Default::default();
    };
    let found = index.get(
        lws.metadata.namespace.as_deref().unwrap_or_default(),
        lws.metadata.name.as_deref().unwrap_or_default(),
    );
    gang_waits_of(&found)
}

/// [`gang_waits`] of these PodGroups (one LWS's). A group with more than one (a rolled
/// group's old one still going) is named by the first the scheduler could not place.
pub fn gang_waits_of(
    found: &[std::sync::Arc<PodGroup>],
) -> std::collections::BTreeMap<i32, GangWait> {
    use kube::ResourceExt;
    let mut waits = std::collections::BTreeMap::new();
    for pg in found {
        let (Some((index, _)), Some(why)) = (
            crate::lws::gang::identity(pg),
            crate::lws::gang::unschedulable(pg),
        ) else {
            continue;
        };
        waits.entry(index).or_insert_with(|| GangWait {
            pod_group: pg.name_any(),
            why: why.to_string(),
        });
    }
    waits
}

/// Why group `index` of an LWS in `queue` waits for Kueue, from its Workload among `found`
/// (the LWS's); `None` when the Workload is admitted (the group waits for something else).
pub fn kueue_wait(
    queue: &str,
    found: &[std::sync::Arc<Workload>],
    index: i32,
) -> Option<KueueWait> {
    match found.iter().find(|w| w.group_index() == Some(index)) {
        Some(wl) => wl.admission_wait().map(|why| KueueWait {
            queue: wl
                .spec
                .queue_name
                .clone()
                .unwrap_or_else(|| queue.to_string()),
            why,
        }),
        None => Some(KueueWait {
            queue: queue.to_string(),
            why: "Kueue has made no Workload for it yet".to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_group(
        name: &str,
        index: i32,
        scheduled: Option<(&str, &str)>,
    ) -> std::sync::Arc<PodGroup> {
        let conditions = scheduled.map(|(status, message)| {
            json!([{"type": "PodGroupScheduled", "status": status, "reason": "Unschedulable",
                "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        });
        std::sync::Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "ns", "labels": {
                    "leaderworkerset.sigs.k8s.io/name": "vllm",
                    "leaderworkerset.sigs.k8s.io/group-index": index.to_string(),
                    "leaderworkerset.sigs.k8s.io/template-revision-hash": "abc"}},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
                "status": {"conditions": conditions},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn only_groups_the_scheduler_could_not_place_whole_wait_for_the_gang() {
        let waits = gang_waits_of(&[
            pod_group("vllm-0-abc", 0, Some(("True", ""))),
            pod_group("vllm-1-abc", 1, Some(("False", "0/3 nodes are available"))),
            pod_group("vllm-2-abc", 2, None),
        ]);
        assert_eq!(
            waits.into_iter().collect::<Vec<_>>(),
            vec![(
                1,
                GangWait {
                    pod_group: "vllm-1-abc".into(),
                    why: "0/3 nodes are available".into()
                }
            )]
        );
    }
}
