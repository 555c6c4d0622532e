//! Kueue's `Workload` (`kueue.x-k8s.io/v1beta2`), read only and only as far as the release
//! controllers read it: which LWS group it stands for, the queue it waits in, and its
//! conditions. Kueue's LeaderWorkerSet integration makes one Workload per group of an LWS that
//! carries [`QUEUE_LABEL`] and keeps the group's pods behind a scheduling gate until Kueue
//! admits it (docs/kueue.md).
//!
//! Only `crate::kueue` writes a Workload, and only an owner reference (docs/kueue.md, "On a
//! MultiKueue worker cluster"). The manager runs on clusters without Kueue: a missing
//! CRD only leaves the cache empty. Decoded from the watch's JSON into this shape, so the pod
//! templates a Workload carries (one per pod set) are skipped, not kept.

use std::borrow::Cow;

use k8s_openapi::{NamespaceResourceScope, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use serde::Deserialize;

/// Label naming the LocalQueue an object's Workloads wait in (on the LWS; Kueue copies it to
/// the group's pods).
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Label naming the WorkloadPriorityClass of an object's Workloads.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Annotation on an LWS group's Workload: the group index (Kueue ≥ v0.17).
pub const GROUP_INDEX_ANNOTATION: &str = "kueue.x-k8s.io/component-workload-index";
/// Label on a Workload Kueue made for a job-like object: that object's uid (for an LWS group's
/// Workload, the LWS's).
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";
/// The scheduling gate Kueue puts on a pod until its Workload is admitted.
pub const ADMISSION_GATE: &str = "kueue.x-k8s.io/admission";
/// Label MultiKueue puts on what it creates on a worker cluster (the LWS and its groups'
/// Workloads): the manager cluster's origin name.
pub const MULTIKUEUE_ORIGIN_LABEL: &str = "kueue.x-k8s.io/multikueue-origin";
/// Annotation on an LWS MultiKueue created on a worker cluster: the uid of the manager
/// cluster's LWS (which a group's Workload carries in [`JOB_UID_LABEL`]).
pub const MULTIKUEUE_ORIGIN_UID_ANNOTATION: &str = "kueue.x-k8s.io/multikueue-origin-uid";
/// Annotation on an LWS group's Workload: the LWS's name (kept by MultiKueue's copy, which
/// has no owner references).
pub const JOB_OWNER_NAME_ANNOTATION: &str = "kueue.x-k8s.io/job-owner-name";
/// Annotation on an LWS group's Workload: the owner's kind, as Go prints a GroupVersionKind.
pub const JOB_OWNER_GVK_ANNOTATION: &str = "kueue.x-k8s.io/job-owner-gvk";
/// [`JOB_OWNER_GVK_ANNOTATION`] of an LWS's group.
pub const LWS_GVK: &str = "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet";

/// Condition types of a Workload that say whether it may run.
pub mod condition {
    /// Quota is reserved in a ClusterQueue (False while it waits: the message says why).
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    /// Admitted: its pods are ungated.
    pub const ADMITTED: &str = "Admitted";
    /// Evicted (preempted, deactivated, …): the message says why.
    pub const EVICTED: &str = "Evicted";
}

/// A Workload as the caches keep it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Workload {
    /// Its metadata (owner: the LWS; [`GROUP_INDEX_ANNOTATION`]).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec fields read.
    #[serde(default)]
    pub spec: WorkloadSpec,
    /// The status fields read.
    #[serde(default)]
    pub status: WorkloadStatus,
}

/// `spec`, as far as it is read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// `spec.queueName`: the LocalQueue.
    #[serde(default)]
    pub queue_name: Option<String>,
    /// `spec.active`: false once deactivated (by a user or by Kueue).
    #[serde(default)]
    pub active: Option<bool>,
}

/// `status`, as far as it is read.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// `status.conditions`.
    #[serde(default)]
    pub conditions: Vec<WorkloadCondition>,
    /// `status.clusterName`: the worker cluster MultiKueue dispatched it to (on a MultiKueue
    /// manager cluster).
    #[serde(default)]
    pub cluster_name: Option<String>,
}

/// One condition (`metav1.Condition` without its times).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct WorkloadCondition {
    /// Type.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// "True", "False" or "Unknown".
    #[serde(default)]
    pub status: String,
    /// Reason.
    #[serde(default)]
    pub reason: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

impl Workload {
    /// The condition of `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&WorkloadCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition `type_` is True.
    pub fn is(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    /// Why this Workload's pods may not run yet, in Kueue's own words (the message of the
    /// condition that says so); `None` once it is admitted.
    pub fn admission_wait(&self) -> Option<String> {
        if self.is(condition::ADMITTED) {
            return None;
        }
        let message = |type_: &str, status: &str| {
            self.condition(type_)
                .filter(|c| c.status == status && !c.message.is_empty())
                .map(|c| c.message.clone())
        };
        let why = if self.spec.active == Some(false) {
            match message(condition::EVICTED, "True") {
                Some(m) => format!("deactivated: {m}"),
                None => "deactivated".to_string(),
            }
        } else if let Some(m) = message(condition::QUOTA_RESERVED, "False") {
            m
        } else if let Some(m) = message(condition::EVICTED, "True") {
            m
        } else if self.is(condition::QUOTA_RESERVED) {
            "quota reserved, waiting for its admission checks".to_string()
        } else {
            "not considered by Kueue yet".to_string()
        };
        Some(why)
    }

    /// The LeaderWorkerSet this Workload stands for a group of: (name, uid) of its owner
    /// reference of that kind (Kueue sets a plain owner reference, not a controller one).
    pub fn lws_owner(&self) -> Option<(&str, &str)> {
        self.metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|o| o.kind == "LeaderWorkerSet")
            .map(|o| (o.name.as_str(), o.uid.as_str()))
    }

    /// The LWS group index this Workload stands for ([`GROUP_INDEX_ANNOTATION`]).
    pub fn group_index(&self) -> Option<i32> {
        self.metadata
            .annotations
            .as_ref()?
            .get(GROUP_INDEX_ANNOTATION)?
            .parse()
            .ok()
    }
}

impl kube::Resource for Workload {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Workload".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "kueue.x-k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1beta2".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "workloads".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_fields_read_and_skips_the_pod_sets() {
        let wl: Workload = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "leaderworkerset-vllm-1-abcde", "namespace": "ns",
                         "annotations": {"kueue.x-k8s.io/component-workload-index": "1"}},
            "spec": {"queueName": "gpu-team", "active": true,
                     "podSets": [{"name": "leader", "count": 1, "template": {"spec": {"containers": []}}}]},
            "status": {"clusterName": "worker1",
                       "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                       "message": "couldn't assign flavors to pod set leader: insufficient quota",
                       "lastTransitionTime": "2026-11-24T00:00:00Z", "observedGeneration": 1}]}
        }))
        .unwrap();
        assert_eq!(wl.group_index(), Some(1));
        assert_eq!(wl.status.cluster_name.as_deref(), Some("worker1"));
        assert_eq!(wl.spec.queue_name.as_deref(), Some("gpu-team"));
        assert!(!wl.is(condition::QUOTA_RESERVED));
        assert_eq!(
            wl.condition(condition::QUOTA_RESERVED).unwrap().reason,
            "Pending"
        );
        assert!(!wl.is(condition::ADMITTED));
    }

    fn workload(active: Option<bool>, conditions: &[(&str, &str, &str)]) -> Workload {
        Workload {
            spec: WorkloadSpec {
                queue_name: Some("q".into()),
                active,
            },
            status: WorkloadStatus {
                cluster_name: None,
                conditions: conditions
                    .iter()
                    .map(|(t, s, m)| WorkloadCondition {
                        type_: (*t).into(),
                        status: (*s).into(),
                        reason: String::new(),
                        message: (*m).into(),
                    })
                    .collect(),
            },
            ..Workload::default()
        }
    }

    #[test]
    fn the_wait_is_said_in_the_words_of_the_condition_that_holds_it() {
        use condition::{ADMITTED, EVICTED, QUOTA_RESERVED};
        type Row<'a> = (
            Option<bool>,
            &'a [(&'a str, &'a str, &'a str)],
            Option<&'a str>,
        );
        let table: [Row; 7] = [
            (None, &[], Some("not considered by Kueue yet")),
            (
                Some(true),
                &[(QUOTA_RESERVED, "False", "LocalQueue gpu-team doesn't exist")],
                Some("LocalQueue gpu-team doesn't exist"),
            ),
            (
                None,
                &[
                    (QUOTA_RESERVED, "True", "Quota reserved in ClusterQueue cq"),
                    (ADMITTED, "True", ""),
                ],
                None,
            ),
            (
                None,
                &[(QUOTA_RESERVED, "True", "Quota reserved in ClusterQueue cq")],
                Some("quota reserved, waiting for its admission checks"),
            ),
            (
                Some(false),
                &[(EVICTED, "True", "The workload is deactivated")],
                Some("deactivated: The workload is deactivated"),
            ),
            (Some(false), &[], Some("deactivated")),
            (
                None,
                &[
                    (QUOTA_RESERVED, "False", ""),
                    (
                        EVICTED,
                        "True",
                        "Preempted to accommodate a higher priority Workload",
                    ),
                ],
                Some("Preempted to accommodate a higher priority Workload"),
            ),
        ];
        for (active, conditions, want) in table {
            assert_eq!(
                workload(active, conditions).admission_wait().as_deref(),
                want,
                "{active:?} {conditions:?}"
            );
        }
    }
}
