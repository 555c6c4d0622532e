//! Whether a Workload's state is worth an Event on its LWS, and which; and whether a
//! MultiKueue worker's group Workload needs its LWS as an owner. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use crate::{
    api::{
        kueue::{
            GROUP_INDEX_ANNOTATION, JOB_OWNER_GVK_ANNOTATION, JOB_OWNER_NAME_ANNOTATION,
            JOB_UID_LABEL, LWS_GVK, MULTIKUEUE_ORIGIN_LABEL, MULTIKUEUE_ORIGIN_UID_ANNOTATION,
            Workload,
        },
        leaderworkerset::LeaderWorkerSet,
    },
    k8s::events::EventSpec,
};

/// Event reason: a group of the LWS waits for Kueue to admit its Workload.
pub const WAITING_FOR_KUEUE: &str = "WaitingForKueue";

/// Whether `wl` stands for a group of `lws`: an owner reference to it, by uid. (Kueue sets a
/// plain owner reference on an LWS group's Workload, not a controller one.)
pub fn owned_by(wl: &Workload, lws: &LeaderWorkerSet) -> bool {
    wl.owner_references()
        .iter()
        .any(|o| o.kind == "LeaderWorkerSet" && Some(o.uid.as_str()) == lws.metadata.uid.as_deref())
}

/// Event reason: MultiKueue dispatched a group of the LWS to a worker cluster, where it runs.
pub const DISPATCHED: &str = "DispatchedByMultiKueue";

/// "group 1 waits for Kueue admission in queue gpu-team: LocalQueue gpu-team doesn't exist",
/// for a Workload of `lws` that is not admitted; for one admitted on a MultiKueue worker
/// cluster, where it runs; `None` for one admitted here, for a Workload of no group (no
/// index), or one being deleted (its group is going away).
pub fn wait_event(wl: &Workload, lws: &LeaderWorkerSet) -> Option<EventSpec> {
    if !owned_by(wl, lws) || wl.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let group = wl.group_index()?;
    let Some(why) = wl.admission_wait() else {
        // Admitted. On a MultiKueue manager cluster it was admitted on a worker cluster and
        // runs there: this cluster's pods of the group stay gated (Kueue never runs them
        // here), and the LWS's status here counts only them — say where the group runs.
        return wl.status.cluster_name.as_ref().map(|cluster| {
            EventSpec::normal(
                DISPATCHED,
                format!(
                    "group {group} runs on cluster {cluster} (dispatched by MultiKueue); its pods \
                     here stay gated, its status is the LeaderWorkerSet's on {cluster}"
                ),
            )
        });
    };
    let queue = wl
        .spec
        .queue_name
        .clone()
        .or_else(|| lws.labels().get(crate::api::kueue::QUEUE_LABEL).cloned())
        .unwrap_or_default();
    Some(EventSpec::warning(
        WAITING_FOR_KUEUE,
        format!("group {group} waits for Kueue admission in queue {queue}: {why}"),
    ))
}

/// Whether `wl` is the Workload MultiKueue copied to this (worker) cluster for a group of
/// `lws`, the LWS MultiKueue created here, and which `lws` does not own yet.
///
/// Such a copy has no owner references: Kueue's pod controller then adds the group's pods as
/// its only owners, so when a rolling update (or a restart policy) replaces every pod of the
/// group at once, the garbage collector deletes the Workload — and on a worker nobody makes it
/// again (Kueue's LWS controller makes no Workload for an LWS of MultiKueue's; MultiKueue
/// notices only after its worker-lost timeout, 15 min by default), so the new pods stay gated.
/// Owned by the LWS as well, it outlives its pods, as a Workload Kueue made for a local LWS
/// does. Matched as Kueue matches them: MultiKueue's label on both, the owner annotations
/// Kueue wrote on the Workload, and the manager's LWS uid on both (an LWS deleted and made
/// again on the manager is another incarnation).
pub fn needs_owner(wl: &Workload, lws: &LeaderWorkerSet) -> bool {
    let copied_here = |labels: &std::collections::BTreeMap<String, String>| {
        labels.contains_key(MULTIKUEUE_ORIGIN_LABEL)
    };
    let annotation = |key| wl.annotations().get(key).map(String::as_str);
    copied_here(wl.labels())
        && copied_here(lws.labels())
        && wl.metadata.deletion_timestamp.is_none()
        && lws.metadata.deletion_timestamp.is_none()
        && wl.namespace() == lws.namespace()
        && annotation(JOB_OWNER_GVK_ANNOTATION) == Some(LWS_GVK)
        && annotation(JOB_OWNER_NAME_ANNOTATION) == Some(lws.name_any().as_str())
        && lws
            .annotations()
            .get(MULTIKUEUE_ORIGIN_UID_ANNOTATION)
            .is_some_and(|uid| copy_of_incarnation(wl, &lws.name_any(), uid))
        && lws.metadata.uid.is_some()
        && !owned_by(wl, lws)
}

/// Whether `wl` is the copy of a group Workload of the manager cluster's LWS `name` with uid
/// `origin_uid`. Kueue v0.17 kept that uid in the copy's `job-uid` label; v0.19 drops the label
/// from the copy (`cloneForCreate`), but the Workload's name still ends in Kueue's hash of the
/// group (`<lws>-<index>`) and that uid (`GetWorkloadName`, the copy keeps the original's name).
fn copy_of_incarnation(wl: &Workload, name: &str, origin_uid: &str) -> bool {
    if let Some(uid) = wl.labels().get(JOB_UID_LABEL) {
        return uid == origin_uid;
    }
    let Some(index) = wl.annotations().get(GROUP_INDEX_ANNOTATION) else {
        return false;
    };
    wl.name_any()
        .strip_suffix(&group_workload_hash(&format!("{name}-{index}"), origin_uid))
        .is_some_and(|prefix| prefix.ends_with('-'))
}

/// The five hex digits Kueue ends a group Workload's name with: sha1 of the owner's kind,
/// group, name (`<lws>-<index>`) and uid, one a line (`jobframework.getHash`).
pub fn group_workload_hash(owner_name: &str, owner_uid: &str) -> String {
    use sha1::{Digest, Sha1};
    let digest = Sha1::digest(
        format!("LeaderWorkerSet\nleaderworkerset.x-k8s.io\n{owner_name}\n{owner_uid}").as_bytes(),
    );
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..5].to_string()
}

/// The owner reference [`needs_owner`] asks for: a plain one, as Kueue sets on the Workloads
/// of a local LWS (not a controller reference, and not blocking the LWS's deletion).
pub fn owner(lws: &LeaderWorkerSet) -> OwnerReference {
    OwnerReference {
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        name: lws.name_any(),
        uid: lws.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lws(uid: &str) -> LeaderWorkerSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ns", "uid": uid,
                         "labels": {"kueue.x-k8s.io/queue-name": "gpu-team"}},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}}}}
        }))
        .unwrap()
    }

    fn workload(owner_uid: &str, index: Option<&str>, conditions: serde_json::Value) -> Workload {
        let mut annotations = serde_json::Map::new();
        if let Some(i) = index {
            annotations.insert("kueue.x-k8s.io/component-workload-index".into(), i.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "leaderworkerset-vllm-1-abcde", "namespace": "ns",
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                             "kind": "LeaderWorkerSet", "name": "vllm", "uid": owner_uid, "blockOwnerDeletion": true}]},
            "spec": {"queueName": "gpu-team"},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    /// A worker cluster's pair as MultiKueue v0.17 leaves it: the LWS (uid `worker-uid`,
    /// the manager's uid in an annotation) and a group's Workload copied without owners.
    fn worker_pair() -> (Workload, LeaderWorkerSet) {
        let lws: LeaderWorkerSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "vllm", "namespace": "ns", "uid": "worker-uid",
                         "labels": {"kueue.x-k8s.io/queue-name": "gpu-team",
                                    "kueue.x-k8s.io/multikueue-origin": "manager"},
                         "annotations": {"kueue.x-k8s.io/multikueue-origin-uid": "manager-uid"}},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}}}}
        }))
        .unwrap();
        let wl = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "leaderworkerset-vllm-1-abcde", "namespace": "ns",
                         "labels": {"kueue.x-k8s.io/multikueue-origin": "manager",
                                    "kueue.x-k8s.io/job-uid": "manager-uid"},
                         "annotations": {"kueue.x-k8s.io/component-workload-index": "1",
                                         "kueue.x-k8s.io/job-owner-name": "vllm",
                                         "kueue.x-k8s.io/job-owner-gvk": "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "vllm-1", "uid": "p1"}]}
        }))
        .unwrap();
        (wl, lws)
    }

    #[test]
    fn a_multikueue_copy_of_a_group_workload_is_owned_by_its_lws_once() {
        let (wl, lws) = worker_pair();
        assert!(needs_owner(&wl, &lws));
        let o = owner(&lws);
        assert_eq!(
            (
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str(),
                o.controller
            ),
            ("LeaderWorkerSet", "vllm", "worker-uid", None)
        );
        let mut owned = wl.clone();
        owned.metadata.owner_references.as_mut().unwrap().push(o);
        assert!(!needs_owner(&owned, &lws), "already owned");
        assert!(owned_by(&owned, &lws));
    }

    /// Kueue v0.19 drops the `job-uid` label from MultiKueue's copy: the copy is still known
    /// by its name, whose hash is Kueue's of the group and the manager's LWS uid (the names and
    /// uid of a real run: `leaderworkerset-vllm-0-861b5` for uid `b74fb036-…`).
    #[test]
    fn a_v019_copy_without_the_job_uid_is_known_by_its_name() {
        let uid = "b74fb036-1f19-4fff-8d5c-09ac4538daf5";
        assert_eq!(group_workload_hash("vllm-0", uid), "861b5");
        assert_eq!(group_workload_hash("vllm-1", uid), "15ba4");
        let (mut wl, mut lws) = worker_pair();
        lws.annotations_mut()
            .insert(MULTIKUEUE_ORIGIN_UID_ANNOTATION.into(), uid.into());
        wl.labels_mut().remove(JOB_UID_LABEL);
        for (name, index, adopted) in [
            ("leaderworkerset-vllm-1-15ba4", "1", true),
            // Another incarnation's (or group's) name, or a name that only ends alike.
            ("leaderworkerset-vllm-1-861b5", "1", false),
            ("leaderworkerset-vllm-0-15ba4", "0", false),
            ("x15ba4", "1", false),
        ] {
            wl.metadata.name = Some(name.into());
            wl.annotations_mut()
                .insert(GROUP_INDEX_ANNOTATION.into(), index.into());
            assert_eq!(needs_owner(&wl, &lws), adopted, "{name}");
        }
    }

    #[test]
    fn only_multikueues_copy_of_this_incarnations_group_is_adopted() {
        type Change = fn(&mut Workload, &mut LeaderWorkerSet);
        let cases: [(&str, Change); 8] = [
            ("a local LWS (Kueue owns its Workloads itself)", |_, l| {
                l.labels_mut().remove("kueue.x-k8s.io/multikueue-origin");
            }),
            ("a Workload that is not MultiKueue's copy", |w, _| {
                w.labels_mut().remove("kueue.x-k8s.io/multikueue-origin");
            }),
            ("another LWS's group", |w, _| {
                w.annotations_mut()
                    .insert("kueue.x-k8s.io/job-owner-name".into(), "other".into());
            }),
            ("another kind's Workload", |w, _| {
                w.annotations_mut().insert(
                    "kueue.x-k8s.io/job-owner-gvk".into(),
                    "jobset.x-k8s.io/v1alpha2, Kind=JobSet".into(),
                );
            }),
            ("an earlier incarnation on the manager", |w, _| {
                w.labels_mut()
                    .insert("kueue.x-k8s.io/job-uid".into(), "old-uid".into());
            }),
            ("no origin uid on the LWS", |w, l| {
                l.annotations_mut().clear();
                w.labels_mut().remove("kueue.x-k8s.io/job-uid");
            }),
            ("another namespace", |w, _| {
                w.metadata.namespace = Some("other".into());
            }),
            ("a Workload being deleted", |w, _| {
                w.metadata.deletion_timestamp = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
                );
            }),
        ];
        for (what, change) in cases {
            let (mut wl, mut lws) = worker_pair();
            change(&mut wl, &mut lws);
            assert!(!needs_owner(&wl, &lws), "{what}");
        }
    }

    #[test]
    fn a_waiting_group_gets_a_warning_in_kueues_words_and_nothing_else_does() {
        let inadmissible = serde_json::json!([{"type": "QuotaReserved", "status": "False",
            "reason": "Inadmissible", "message": "LocalQueue gpu-team doesn't exist"}]);
        let admitted = serde_json::json!([{"type": "QuotaReserved", "status": "True", "message": "Quota reserved"},
                                          {"type": "Admitted", "status": "True", "message": ""}]);
        let e = wait_event(&workload("u1", Some("1"), inadmissible.clone()), &lws("u1")).unwrap();
        assert_eq!(e.reason, WAITING_FOR_KUEUE);
        assert_eq!(
            e.note,
            "group 1 waits for Kueue admission in queue gpu-team: LocalQueue gpu-team doesn't exist"
        );
        assert_eq!(
            wait_event(&workload("u1", Some("1"), admitted.clone()), &lws("u1")),
            None
        );
        let mut dispatched = workload("u1", Some("1"), admitted);
        dispatched.status.cluster_name = Some("worker1".into());
        let e = wait_event(&dispatched, &lws("u1")).unwrap();
        assert_eq!(
            (e.reason.as_str(), e.severity),
            (DISPATCHED, crate::k8s::events::Severity::Normal)
        );
        assert!(
            e.note
                .starts_with("group 1 runs on cluster worker1 (dispatched by MultiKueue)"),
            "{}",
            e.note
        );
        assert_eq!(
            wait_event(&workload("u2", Some("1"), inadmissible.clone()), &lws("u1")),
            None,
            "another incarnation's Workload"
        );
        assert_eq!(
            wait_event(&workload("u1", None, inadmissible), &lws("u1")),
            None,
            "not a group's"
        );
    }
}
