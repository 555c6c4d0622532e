//! Which LWS a watch event wakes, and whether it may skip the LWS's trigger window
//! ([`crate::k8s::throttle`]).
//!
//! Every owned object names its LWS in the `name` label. One kind of event is urgent: a leader
//! pod that needs a worker StatefulSet and has none yet. Its workers cannot start before the
//! reconcile that creates them, so a user waits on exactly this hop (the benchmark's "leader
//! pod created → worker StatefulSet"); everything else of a group coming up can wait for the
//! window. The plan still decides what is created; this only decides how soon it runs.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::{ResourceExt, runtime::reflector::ObjectRef};

use super::{labels, observe::is_leader};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{
        apply::controller_uid,
        label_index::{LabelIndex, Labelled},
        pod::{CachedPod, terminating},
        throttle::Trigger,
    },
};

/// How long a leader's urgent trigger is not repeated. A leader pod changes two or three times
/// before its worker StatefulSet reaches the cache (scheduled, running, ready), and each change
/// would otherwise cut the window again and, with the StatefulSet cache a moment behind our own
/// create, repeat the create (a 409 each). Past this the leader
/// may be urgent once more, in case its reconcile failed.
const URGENT_ONCE: Duration = Duration::from_secs(2);

/// Leader pods given an urgent trigger lately, by uid: memory used only to skip repeats; a
/// restart forgets it and at most repeats one urgent trigger per leader.
pub struct Leaders {
    statefulsets: LabelIndex<StatefulSet>,
    urgent_at: HashMap<String, Instant>,
}

impl Leaders {
    /// Leader triggers checked against the worker StatefulSets in `statefulsets`.
    pub fn new(statefulsets: LabelIndex<StatefulSet>) -> Self {
        Self {
            statefulsets,
            urgent_at: HashMap::new(),
        }
    }

    /// The trigger of a pod event seen at `now`.
    pub fn trigger(
        &mut self,
        pod: Arc<CachedPod>,
        now: Instant,
    ) -> Option<Trigger<ObjectRef<LeaderWorkerSet>>> {
        let urgent = leader_waiting(&pod)
            && !self.has_workers(&pod)
            && self.first_lately(pod.metadata.uid.as_deref().unwrap_or_default(), now);
        to_lws(pod).map(|key| Trigger { key, urgent })
    }

    /// Whether this incarnation of the leader has its worker StatefulSet: same name, owned by
    /// this pod's uid and not being deleted (after a group restart the old incarnation's
    /// StatefulSet lingers in the cache while the garbage collector removes it).
    fn has_workers(&self, pod: &CachedPod) -> bool {
        let (Some(lws), Some(ns), Some(name), Some(uid)) = (
            pod.labels().get(labels::NAME),
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
            pod.metadata.uid.as_deref(),
        ) else {
            return false;
        };
        self.statefulsets.get(ns, lws).iter().any(|sts| {
            sts.metadata.name.as_deref() == Some(name)
                && sts.metadata.deletion_timestamp.is_none()
                && controller_uid(sts.as_ref()) == Some(uid)
        })
    }

    /// Whether leader `uid` had no urgent trigger within [`URGENT_ONCE`] before `now`; records
    /// this one.
    fn first_lately(&mut self, uid: &str, now: Instant) -> bool {
        let lately = |at: &Instant| now.saturating_duration_since(*at) < URGENT_ONCE;
        if self.urgent_at.get(uid).is_some_and(lately) {
            return false;
        }
        // Forget what has expired; the map holds only the leaders of the last two seconds.
        self.urgent_at.retain(|_, at| lately(at));
        self.urgent_at.insert(uid.to_string(), now);
        true
    }
}

/// A live leader pod of a group with workers (size > 1).
fn leader_waiting(pod: &CachedPod) -> bool {
    is_leader(pod) && !terminating(pod) && pod.annotations().get(labels::SIZE) != Some("1")
}

/// A trigger of the object's LWS that waits for the LWS's window.
pub fn normal<K: Labelled>(obj: Arc<K>) -> Option<Trigger<ObjectRef<LeaderWorkerSet>>> {
    to_lws(obj).map(Trigger::normal)
}

/// The LWS an owned object names in its `name` label (a pod's, packed, read through
/// [`Labelled`]). An empty name is no LWS's (v0.10, #957: such a StatefulSet is ignored).
pub fn to_lws<K: Labelled>(obj: Arc<K>) -> Option<ObjectRef<LeaderWorkerSet>> {
    let name = obj.label_value(labels::NAME).filter(|n| !n.is_empty())?;
    Some(ObjectRef::new(name).within(&obj.namespace()?))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    use super::*;

    fn meta(name: &str, labels_: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(
                labels_
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn leader(name: &str, size: &str) -> Arc<CachedPod> {
        let mut m = meta(name, &[(labels::NAME, "lws"), (labels::WORKER_INDEX, "0")]);
        m.annotations = Some([(labels::SIZE.to_string(), size.to_string())].into());
        Arc::new(CachedPod::from(crate::k8s::pod::PodRecord {
            metadata: m,
            ..Default::default()
        }))
    }

    /// Worker StatefulSets named like the leaders `names`, owned by the uids `meta` gives
    /// them (`uid-<name>`), or by an older incarnation where `owner` says so.
    fn leaders_with_workers(names: &[(&str, &str)]) -> Leaders {
        let index = LabelIndex::new(labels::NAME);
        for (name, owner) in names {
            let mut m = meta(name, &[(labels::NAME, "lws")]);
            m.owner_references = Some(vec![OwnerReference {
                uid: owner.to_string(),
                controller: Some(true),
                ..Default::default()
            }]);
            index.upsert(Arc::new(StatefulSet {
                metadata: m,
                ..Default::default()
            }));
        }
        Leaders::new(index)
    }

    fn urgent(leaders: &mut Leaders, pod: Arc<CachedPod>, now: Instant) -> Option<bool> {
        leaders.trigger(pod, now).map(|t| {
            assert_eq!(t.key, ObjectRef::new("lws").within("ns"));
            t.urgent
        })
    }

    #[test]
    fn only_a_live_leader_without_its_worker_statefulset_is_urgent() {
        let now = Instant::now();
        let mut leaders = leaders_with_workers(&[("lws-1", "uid-lws-1"), ("lws-5", "old")]);
        assert_eq!(urgent(&mut leaders, leader("lws-0", "4"), now), Some(true));
        // Its workers exist already.
        assert_eq!(urgent(&mut leaders, leader("lws-1", "4"), now), Some(false));
        // Only those of the leader's previous incarnation (a restarted group).
        assert_eq!(urgent(&mut leaders, leader("lws-5", "4"), now), Some(true));
        // A group of one has no workers to create.
        assert_eq!(urgent(&mut leaders, leader("lws-2", "1"), now), Some(false));
        // A worker pod.
        let worker = Arc::new(CachedPod::from(crate::k8s::pod::PodRecord {
            metadata: meta(
                "lws-3-1",
                &[(labels::NAME, "lws"), (labels::WORKER_INDEX, "1")],
            ),
            ..Default::default()
        }));
        assert_eq!(urgent(&mut leaders, worker, now), Some(false));
        // A leader being deleted.
        let mut deleting = (*leader("lws-4", "4")).clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(urgent(&mut leaders, Arc::new(deleting), now), Some(false));
        // Not ours: no trigger at all.
        let foreign = Arc::new(CachedPod::from(crate::k8s::pod::PodRecord {
            metadata: meta("other", &[]),
            ..Default::default()
        }));
        assert_eq!(leaders.trigger(foreign, now), None);
    }

    #[test]
    fn a_leader_is_urgent_once_until_the_memory_expires() {
        let start = Instant::now();
        let mut leaders = leaders_with_workers(&[]);
        assert_eq!(
            urgent(&mut leaders, leader("lws-0", "4"), start),
            Some(true)
        );
        // Scheduled, then running: the cache still lacks its StatefulSet, but the create is
        // under way.
        let later = start + Duration::from_millis(300);
        assert_eq!(
            urgent(&mut leaders, leader("lws-0", "4"), later),
            Some(false)
        );
        // Another leader is not held back by the first.
        assert_eq!(
            urgent(&mut leaders, leader("lws-1", "4"), later),
            Some(true)
        );
        // Still without workers after the memory expired: urgent again, once.
        let expired = start + URGENT_ONCE + Duration::from_millis(1);
        assert_eq!(
            urgent(&mut leaders, leader("lws-0", "4"), expired),
            Some(true)
        );
        assert_eq!(
            urgent(&mut leaders, leader("lws-0", "4"), expired),
            Some(false)
        );
        // Expired entries are dropped as new ones come.
        assert_eq!(leaders.urgent_at.len(), 2);
    }

    /// v0.10 (#957): only a StatefulSet naming an LWS wakes one; a StatefulSet with an empty
    /// `name` label (our caches hold only those with the label) is ignored.
    #[test]
    fn only_an_object_naming_an_lws_maps_to_it() {
        use k8s_openapi::api::apps::v1::StatefulSet;
        let sts = |labels_: &[(&str, &str)]| {
            Arc::new(StatefulSet {
                metadata: meta("s", labels_),
                ..Default::default()
            })
        };
        assert_eq!(
            to_lws(sts(&[(labels::NAME, "vllm")])),
            Some(ObjectRef::new("vllm").within("ns"))
        );
        assert_eq!(to_lws(sts(&[(labels::NAME, "")])), None);
        assert_eq!(to_lws(sts(&[("app", "vllm")])), None);
    }
}
