//! Whether a Workload's state is worth an Event on its LWS, and which. Pure.

use kube::ResourceExt;

use crate::{
    api::{kueue::Workload, leaderworkerset::LeaderWorkerSet},
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
