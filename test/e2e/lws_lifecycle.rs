//! What happens around an LWS's groups over its life: PVC templates and their retention
//! policy (enforced by kube-controller-manager's StatefulSet controller on the StatefulSets we
//! build), cascading deletion through owner references, and scaling by a
//! HorizontalPodAutoscaler through the scale subresource.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::api::{
    apps::v1::{ControllerRevision, StatefulSet},
    autoscaling::v2::HorizontalPodAutoscaler,
    core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Service},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{TestNs, events_when, eventually, wait_for, with_ns},
    lws_support::{NAME, available_with, create_available, lws, pod_ready, pods_of, uids},
};

// --- PVC templates ------------------------------------------------------------------------

/// `count` hostPath PersistentVolumes of 1Gi in a storage class only this test uses (no
/// provisioner: the PV controller binds claims to these). Returns their names.
async fn pre_create_volumes(ns: &TestNs, class: &str, count: usize) -> anyhow::Result<Vec<String>> {
    let api = ns.api_all::<PersistentVolume>();
    let mut names = Vec::new();
    for i in 0..count {
        let name = format!("{}-{i}", ns.name);
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": format!("/tmp/lws-e2e/{name}")}
            }
        }))?;
        api.create(&PostParams::default(), &pv).await?;
        names.push(name);
    }
    Ok(names)
}

async fn delete_volumes(ns: &TestNs, names: &[String]) {
    let api = ns.api_all::<PersistentVolume>();
    for name in names {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

fn with_claims(
    mut obj: serde_json::Value,
    class: &str,
    when_deleted: &str,
    when_scaled: &str,
) -> serde_json::Value {
    let ltpl = &mut obj["spec"]["leaderWorkerTemplate"];
    ltpl["volumeClaimTemplates"] = json!([{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }]);
    ltpl["persistentVolumeClaimRetentionPolicy"] =
        json!({"whenDeleted": when_deleted, "whenScaled": when_scaled});
    obj
}

async fn claims(ns: &TestNs) -> anyhow::Result<Vec<PersistentVolumeClaim>> {
    Ok(ns
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await?
        .items)
}

fn claim_names(list: &[PersistentVolumeClaim]) -> BTreeSet<String> {
    list.iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Creates `st` (2 groups of 2, one `data` claim each) with the given retention policy and
/// checks what both StatefulSets and the pods got.
async fn create_with_claims(
    ns: &TestNs,
    when_deleted: &str,
    when_scaled: &str,
) -> anyhow::Result<String> {
    let class = format!("{}-class", ns.name);
    let obj = with_claims(lws("st", 2, 2, "vllm:1"), &class, when_deleted, when_scaled);
    create_available(ns, &obj).await?;

    for sts_name in ["st", "st-0", "st-1"] {
        let spec = ns
            .api::<StatefulSet>()
            .get(sts_name)
            .await?
            .spec
            .unwrap_or_default();
        let templates = spec.volume_claim_templates.unwrap_or_default();
        assert_eq!(templates.len(), 1, "{sts_name} carries the claim template");
        assert_eq!(templates[0].metadata.name.as_deref(), Some("data"));
        let claim = templates[0].spec.clone().unwrap_or_default();
        assert_eq!(claim.storage_class_name.as_deref(), Some(class.as_str()));
        assert_eq!(
            claim
                .resources
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned())
                .map(|q| q.0),
            Some("1Gi".to_string())
        );
        let policy = spec
            .persistent_volume_claim_retention_policy
            .unwrap_or_default();
        assert_eq!(
            (
                policy.when_deleted.as_deref(),
                policy.when_scaled.as_deref()
            ),
            (Some(when_deleted), Some(when_scaled)),
            "{sts_name} carries the retention policy"
        );
    }
    for pod in pods_of(ns, "st").await? {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let claim = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .and_then(|v| v.iter().find(|v| v.name == "data"))
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.clone());
        assert_eq!(claim, Some(format!("data-{pod_name}")), "{pod_name}");
    }
    let all = claims(ns).await?;
    assert_eq!(
        claim_names(&all),
        names(&["data-st-0", "data-st-0-1", "data-st-1", "data-st-1-1"])
    );
    for claim in &all {
        assert_eq!(
            claim.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Bound"),
            "{:?} bound to a pre-created volume",
            claim.metadata.name
        );
    }
    Ok(class)
}

async fn scale(ns: &TestNs, name: &str, replicas: i32) -> anyhow::Result<()> {
    let api = ns.api::<LeaderWorkerSet>();
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    wait_for(
        &api,
        name,
        Duration::from_secs(60),
        available_with(replicas, replicas),
    )
    .await?;
    Ok(())
}

async fn pods_gone(ns: &TestNs, pods: &[&str]) -> anyhow::Result<()> {
    let api = ns.api::<Pod>();
    let wanted: Vec<String> = pods.iter().map(|p| p.to_string()).collect();
    eventually(Duration::from_secs(60), "pods to be gone", || {
        let api = api.clone();
        let wanted = wanted.clone();
        async move {
            let mut left = Vec::new();
            for p in &wanted {
                if api.get_opt(p).await?.is_some() {
                    left.push(p.clone());
                }
            }
            Ok((left.is_empty(), left))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn claims_with_delete_policy_go_with_scaled_away_groups_and_the_lws() -> anyhow::Result<()> {
    with_ns("lws-pvc-delete", |ns| async move {
        let class = format!("{}-class", ns.name);
        let volumes = pre_create_volumes(&ns, &class, 4).await?;
        let result = async {
            create_with_claims(&ns, "Delete", "Delete").await?;

            // Scale 2 → 1: the leader StatefulSet scales group 1's leader away (whenScaled)
            // and its worker StatefulSet is deleted with the leader pod (whenDeleted).
            scale(&ns, "st", 1).await?;
            eventually(
                Duration::from_secs(60),
                "group 1's claims deleted",
                || async {
                    let left = claim_names(&claims(&ns).await?);
                    Ok((left == names(&["data-st-0", "data-st-0-1"]), left))
                },
            )
            .await?;

            ns.api::<LeaderWorkerSet>()
                .delete("st", &DeleteParams::background())
                .await?;
            eventually(Duration::from_secs(60), "every claim deleted", || async {
                let left = claim_names(&claims(&ns).await?);
                Ok((left.is_empty(), left))
            })
            .await?;
            anyhow::Ok(())
        }
        .await;
        delete_volumes(&ns, &volumes).await;
        result
    })
    .await
}

#[tokio::test]
async fn claims_with_retain_policy_outlive_scaled_away_groups_and_the_lws() -> anyhow::Result<()> {
    with_ns("lws-pvc-retain", |ns| async move {
        let class = format!("{}-class", ns.name);
        let volumes = pre_create_volumes(&ns, &class, 4).await?;
        let result = async {
            create_with_claims(&ns, "Retain", "Retain").await?;
            let all = names(&["data-st-0", "data-st-0-1", "data-st-1", "data-st-1-1"]);
            let unowned = |list: &[PersistentVolumeClaim]| {
                list.iter().all(|c| {
                    c.metadata
                        .owner_references
                        .as_ref()
                        .is_none_or(|o| o.is_empty())
                })
            };

            scale(&ns, "st", 1).await?;
            pods_gone(&ns, &["st-1", "st-1-1"]).await?;
            eventually(
                Duration::from_secs(30),
                "group 1's worker StatefulSet gone",
                || {
                    let api = ns.api::<StatefulSet>();
                    async move {
                        let sts = api.get_opt("st-1").await?;
                        Ok((sts.is_none(), sts.map(|s| s.metadata.name)))
                    }
                },
            )
            .await?;
            let left = claims(&ns).await?;
            assert_eq!(claim_names(&left), all, "scale-down keeps every claim");
            // Nothing owns them, so the garbage collector never will delete them either.
            assert!(unowned(&left), "{left:#?}");

            ns.api::<LeaderWorkerSet>()
                .delete("st", &DeleteParams::background())
                .await?;
            pods_gone(&ns, &["st-0", "st-0-1"]).await?;
            eventually(Duration::from_secs(30), "the StatefulSets gone", || async {
                let left = ns
                    .api::<StatefulSet>()
                    .list(&ListParams::default())
                    .await?
                    .items
                    .len();
                Ok((left == 0, left))
            })
            .await?;
            let left = claims(&ns).await?;
            assert_eq!(
                claim_names(&left),
                all,
                "deleting the LWS keeps every claim"
            );
            assert!(unowned(&left), "{left:#?}");
            anyhow::Ok(())
        }
        .await;
        delete_volumes(&ns, &volumes).await;
        result
    })
    .await
}

// --- deletion -----------------------------------------------------------------------------

/// Names of the objects of each kind labelled with the LWS's name.
async fn owned_objects(ns: &TestNs, name: &str) -> anyhow::Result<Vec<String>> {
    let lp = ListParams::default().labels(&format!("{NAME}={name}"));
    let mut out = Vec::new();
    for p in ns.api::<Pod>().list(&lp).await?.items {
        out.push(format!("Pod {}", p.metadata.name.unwrap_or_default()));
    }
    for s in ns.api::<StatefulSet>().list(&lp).await?.items {
        out.push(format!(
            "StatefulSet {}",
            s.metadata.name.unwrap_or_default()
        ));
    }
    for s in ns.api::<Service>().list(&lp).await?.items {
        out.push(format!("Service {}", s.metadata.name.unwrap_or_default()));
    }
    for r in ns.api::<ControllerRevision>().list(&lp).await?.items {
        out.push(format!(
            "ControllerRevision {}",
            r.metadata.name.unwrap_or_default()
        ));
    }
    out.sort();
    Ok(out)
}

#[tokio::test]
async fn foreground_deletion_removes_every_object_of_the_lws_and_nothing_else() -> anyhow::Result<()>
{
    with_ns("lws-delete", |ns| async move {
        let shared = lws("del", 2, 3, "vllm:1");
        let mut per_replica = lws("upr", 1, 2, "vllm:1");
        per_replica["spec"]["networkConfig"] = json!({"subdomainPolicy": "UniquePerReplica"});
        let bystander = lws("keep", 1, 2, "vllm:1");
        for obj in [&shared, &per_replica, &bystander] {
            create_available(&ns, obj).await?;
        }
        let keep_pods = uids(&ns, "keep").await?;
        let api = ns.api::<LeaderWorkerSet>();

        for name in ["del", "upr"] {
            let lws = api.get(name).await?;
            assert!(
                lws.metadata
                    .finalizers
                    .as_ref()
                    .is_none_or(|f| f.is_empty()),
                "no finalizer on the user's LWS: {:?}",
                lws.metadata.finalizers
            );
            let objects = owned_objects(&ns, name).await?;
            for kind in ["Pod", "StatefulSet", "Service", "ControllerRevision"] {
                assert!(
                    objects.iter().any(|o| o.starts_with(kind)),
                    "{name} has a {kind} before deletion: {objects:?}"
                );
            }
        }

        for name in ["del", "upr"] {
            api.delete(name, &DeleteParams::foreground()).await?;
        }
        for name in ["del", "upr"] {
            // Foreground: the LWS goes last, once the objects blocking it are gone…
            wait_for(
                &api,
                name,
                Duration::from_secs(90),
                |l: Option<&LeaderWorkerSet>| l.is_none(),
            )
            .await?;
            // …and nothing it made is left behind.
            eventually(
                Duration::from_secs(60),
                &format!("every object of {name} deleted"),
                || async {
                    let left = owned_objects(&ns, name).await?;
                    Ok((left.is_empty(), left))
                },
            )
            .await?;
        }

        wait_for(&api, "keep", Duration::from_secs(10), available_with(1, 1)).await?;
        assert_eq!(
            uids(&ns, "keep").await?,
            keep_pods,
            "the other LWS is untouched"
        );
        assert!(
            ns.api::<Service>().get_opt("keep").await?.is_some(),
            "its Service stays"
        );
        Ok(())
    })
    .await
}

// --- HPA ----------------------------------------------------------------------------------

#[tokio::test]
async fn an_hpa_scales_the_lws_up_to_its_minimum_through_the_scale_subresource()
-> anyhow::Result<()> {
    with_ns("lws-hpa", |ns| async move {
        create_available(&ns, &lws("auto", 1, 2, "vllm:1")).await?;
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
            "metadata": {"name": "auto"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                   "kind": "LeaderWorkerSet", "name": "auto"},
                "minReplicas": 3, "maxReplicas": 5,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]
            }
        }))?;
        let hpa_api: Api<HorizontalPodAutoscaler> = ns.api();
        hpa_api.create(&PostParams::default(), &hpa).await?;

        // No metrics server here: kube-controller-manager's HPA controller still raises a
        // target below minReplicas, writing spec.replicas through /scale.
        let lws_api = ns.api::<LeaderWorkerSet>();
        wait_for(
            &lws_api,
            "auto",
            Duration::from_secs(120),
            |l: Option<&LeaderWorkerSet>| l.is_some_and(|l| l.spec.replicas == Some(3)),
        )
        .await?;
        wait_for(
            &lws_api,
            "auto",
            Duration::from_secs(90),
            available_with(3, 3),
        )
        .await?;
        assert_eq!(pods_of(&ns, "auto").await?.len(), 6, "three groups of two");

        let hpa = wait_for(
            &hpa_api,
            "auto",
            Duration::from_secs(60),
            |h: Option<&HorizontalPodAutoscaler>| {
                h.and_then(|h| h.status.as_ref()).is_some_and(|s| {
                    s.desired_replicas == 3
                        && s.conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "AbleToScale" && c.status == "True")
                })
            },
        )
        .await?
        .expect("hpa");
        let able = hpa
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "AbleToScale")
            .expect("AbleToScale");
        assert!(
            able.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Succeeded")),
            "the HPA read and wrote the LWS's scale: {able:?}"
        );
        Ok(())
    })
    .await
}

// --- restart policy -----------------------------------------------------------------------

fn replaced_and_ready(old_uid: String) -> impl Fn(Option<&Pod>) -> bool {
    move |p: Option<&Pod>| {
        p.is_some_and(|p| p.metadata.uid.as_deref() != Some(old_uid.as_str()) && pod_ready(p))
    }
}

/// Deletes worker `pod` of LWS `name` with `params` and checks that its group — and only its
/// group — is rebuilt, once.
async fn deleting_a_worker_recreates_its_group(
    prefix: &str,
    name: &'static str,
    params: DeleteParams,
) -> anyhow::Result<()> {
    with_ns(prefix, |ns| async move {
        create_available(&ns, &lws(name, 2, 3, "vllm:1")).await?;
        let before = uids(&ns, name).await?;
        let worker = format!("{name}-0-1");
        ns.api::<Pod>().delete(&worker, &params).await?;
        for pod in [format!("{name}-0"), format!("{name}-0-2")] {
            wait_for(
                &ns.api::<Pod>(),
                &pod,
                Duration::from_secs(60),
                replaced_and_ready(before[&pod].clone()),
            )
            .await?;
        }
        wait_for(
            &ns.api::<LeaderWorkerSet>(),
            name,
            Duration::from_secs(90),
            available_with(2, 2),
        )
        .await?;
        let after = uids(&ns, name).await?;
        for pod in [
            format!("{name}-1"),
            format!("{name}-1-1"),
            format!("{name}-1-2"),
        ] {
            assert_eq!(before[&pod], after[&pod], "{pod} kept running");
        }
        let events = events_when(&ns, Duration::from_secs(30), |events| {
            events
                .iter()
                .any(|e| e.reason.as_deref() == Some("RecreateGroup"))
        })
        .await?;
        let notes: Vec<_> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("RecreateGroup"))
            .map(|e| (e.note.clone(), e.series.as_ref().map_or(1, |s| s.count)))
            .collect();
        assert_eq!(
            notes,
            [(
                Some(format!(
                    "Worker pod {worker} failed, deleted leader pod {name}-0 to recreate group 0"
                )),
                1
            )],
            "one recreation per incident"
        );
        Ok(())
    })
    .await
}

// A worker that goes away fast is never seen terminating by any cache, and its StatefulSet
// replaces it at once: the group is recreated because the worker's uid is missing from the
// roster recorded on the worker StatefulSet (upstream v0.8 misses both cases).

/// A plain `kubectl delete pod`: KWOK finishes the graceful deletion in milliseconds, as a
/// kubelet does when the process exits at once on SIGTERM.
#[tokio::test]
async fn deleting_a_worker_that_goes_away_at_once_recreates_its_group() -> anyhow::Result<()> {
    deleting_a_worker_recreates_its_group("lws-plain-delete", "pd", DeleteParams::default()).await
}

/// Grace period 0 (a force delete, or a lost node).
#[tokio::test]
async fn force_deleting_a_worker_still_recreates_its_group() -> anyhow::Result<()> {
    deleting_a_worker_recreates_its_group(
        "lws-force-delete",
        "fd",
        DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
}
