//! DisaggregatedSet as upstream v0.10.0 has it, on the shared cluster: `spec.slices` (N
//! copies named `<set>-<slice>-<revision>-<role>`, each rolled on its own), a v0.9-named set
//! adopted without a restart and rolled over to slice names when its slices rise,
//! `placementPolicy: ExclusiveTopology` on KWOK nodes of the test's own, one role scaled with
//! `kubectl scale` through its DisaggregatedSetRoleScaler (the HPA's path), and the v0.10
//! refusals at admission with their field paths.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, bail};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::{
    api::{
        DisaggregatedSet, LeaderWorkerSet, disaggregatedset::SLICE_LABEL,
        disaggregatedset_role_scaler::DisaggregatedSetRoleScaler,
    },
    disaggregatedset::{objects, revision},
};
use serde_json::{Value, json};

use crate::harness::{TestNs, condition, events_when, wait_for, wait_for_all, with_ns};

const SET: &str = "disaggregatedset.x-k8s.io/name";
const ROLE: &str = "disaggregatedset.x-k8s.io/role";
const WAIT: Duration = Duration::from_secs(180);

fn role(name: &str, replicas: i32, image: &str) -> Value {
    json!({"name": name, "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2,
        "workerTemplate": {"spec": {"containers": [{"name": "server", "image": image}]}}}}})
}

fn set(name: &str, slices: i32, roles: Value) -> Value {
    json!({"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
        "metadata": {"name": name}, "spec": {"slices": slices, "roles": roles}})
}

fn pd(name: &str, slices: i32, image: &str) -> Value {
    set(
        name,
        slices,
        json!([role("prefill", 1, image), role("decode", 1, image)]),
    )
}

async fn apply(ns: &TestNs, obj: &Value) -> anyhow::Result<DisaggregatedSet> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    Ok(ns
        .api::<DisaggregatedSet>()
        .patch(
            name,
            &PatchParams::apply("e2e-user").force(),
            &Patch::Apply(obj),
        )
        .await?)
}

/// Waits until the set is Available and not Progressing, then returns its LWSs by name with
/// their replicas.
async fn settled(ns: &TestNs, name: &str) -> anyhow::Result<BTreeMap<String, i32>> {
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        name,
        WAIT,
        |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| {
                condition(s, "Available").is_some_and(|c| c.0 == "True")
                    && condition(s, "Progressing").is_some_and(|c| c.0 == "False")
            })
        },
    )
    .await?;
    lws_names(ns, name).await
}

async fn lws_names(ns: &TestNs, name: &str) -> anyhow::Result<BTreeMap<String, i32>> {
    Ok(ns
        .api::<LeaderWorkerSet>()
        .list(&ListParams::default().labels(&format!("{SET}={name}")))
        .await?
        .items
        .iter()
        .map(|l| (l.name_any(), l.spec.replicas.unwrap_or(1)))
        .collect())
}

/// The revision the set's roles hash to, as stored (its CRD defaults applied): a dry run.
async fn revision_of(ns: &TestNs, obj: &Value) -> anyhow::Result<String> {
    // Under a name of its own: the set itself may exist (the revision does not depend on it).
    let mut probe = obj.clone();
    probe["metadata"]["name"] = json!("revision-probe");
    let typed: DisaggregatedSet = serde_json::from_value(probe)?;
    let stored = ns
        .api::<DisaggregatedSet>()
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &typed,
        )
        .await?;
    Ok(revision::revision(&stored.spec.roles)?)
}

fn expected(set: &str, slices: i32, revision: &str, roles: &[&str]) -> BTreeSet<String> {
    (0..slices)
        .flat_map(|s| {
            roles
                .iter()
                .map(move |r| objects::lws_name(set, s, r, revision))
        })
        .collect()
}

/// Pod uids of the set, by pod name.
async fn pod_uids(ns: &TestNs, set: &str) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{SET}={set}")))
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.metadata.uid.unwrap_or_default()))
        .collect())
}

#[tokio::test]
async fn slices_are_independent_copies_with_upstreams_names_each_rolled_on_its_own()
-> anyhow::Result<()> {
    with_ns("ds10-slices", |ns| {
        Box::pin(async move {
            let v1 = pd("pd", 2, "vllm:1");
            let r1 = revision_of(&ns, &v1).await?;
            apply(&ns, &v1).await?;
            let names = settled(&ns, "pd").await?;
            assert_eq!(
                names.keys().cloned().collect::<BTreeSet<_>>(),
                expected("pd", 2, &r1, &["prefill", "decode"])
            );
            for lws in ns
                .api::<LeaderWorkerSet>()
                .list(&ListParams::default().labels(&format!("{SET}=pd")))
                .await?
            {
                let slice = lws.labels()[SLICE_LABEL].clone();
                let role = lws.labels()[ROLE].clone();
                assert_eq!(lws.name_any(), format!("pd-{slice}-{r1}-{role}"));
                assert_eq!(lws.labels()["app"], format!("pd-{slice}-{role}"));
            }
            // A Service per role and slice, selecting that slice's pods only.
            let services = wait_for_all(&ns.api::<Service>(), &format!("{SET}=pd"), WAIT, |s| {
                s.len() == 4
            })
            .await?;
            for svc in &services {
                let selector = svc
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.clone())
                    .unwrap_or_default();
                let slice = selector.get(SLICE_LABEL).context("slice in the selector")?;
                assert_eq!(
                    svc.name_any(),
                    format!("pd-{slice}-{r1}-{}-prv", selector[ROLE])
                );
            }
            let pods = ns
                .api::<Pod>()
                .list(&ListParams::default().labels(&format!("{SET}=pd,{SLICE_LABEL}=1")))
                .await?;
            assert_eq!(pods.items.len(), 4, "slice 1: a group of 2 per role");

            // A template change: each slice rolls over on its own, and says so.
            let v2 = pd("pd", 2, "vllm:2");
            let r2 = revision_of(&ns, &v2).await?;
            assert_ne!(r1, r2);
            apply(&ns, &v2).await?;
            let events = events_when(&ns, WAIT, |events| {
                ["slice 0", "slice 1"].iter().all(|slice| {
                    events.iter().any(|e| {
                        e.reason.as_deref() == Some("RollingUpdateCompleted")
                            && e.note.as_deref().is_some_and(|n| n.contains(slice))
                    })
                })
            })
            .await?;
            for slice in ["slice 0", "slice 1"] {
                assert!(
                    events
                        .iter()
                        .any(|e| e.reason.as_deref() == Some("RollingUpdateStarted")
                            && e.note.as_deref().is_some_and(|n| n.contains(slice))),
                    "each slice starts its own update"
                );
            }
            let names = settled(&ns, "pd").await?;
            assert_eq!(
                names.keys().cloned().collect::<BTreeSet<_>>(),
                expected("pd", 2, &r2, &["prefill", "decode"])
            );

            // Fewer slices: slice 1 goes, slice 0 is untouched.
            let slice0 = pod_uids(&ns, "pd").await?;
            apply(&ns, &pd("pd", 1, "vllm:2")).await?;
            wait_for_all(
                &ns.api::<LeaderWorkerSet>(),
                &format!("{SET}=pd"),
                WAIT,
                |l| l.len() == 2 && l.iter().all(|l| l.labels()[SLICE_LABEL] == "0"),
            )
            .await
            .context("slice 1's LWSs go")?;
            wait_for_all(&ns.api::<Service>(), &format!("{SET}=pd"), WAIT, |s| {
                s.len() == 2 && s.iter().all(|s| s.labels()[SLICE_LABEL] == "0")
            })
            .await
            .context("slice 1's Services go")?;
            let now = pod_uids(&ns, "pd").await?;
            for (pod, uid) in &now {
                if pod.starts_with(&format!("pd-0-{r2}-")) {
                    assert_eq!(slice0.get(pod), Some(uid), "slice 0's pod {pod} kept");
                }
            }
            Ok(())
        })
    })
    .await
}

/// An LWS of another owner with `name`, at 0 replicas: keeps a name from the set.
fn blocker(name: &str) -> anyhow::Result<LeaderWorkerSet> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": 0, "leaderWorkerTemplate": {"workerTemplate": {"spec": {
            "containers": [{"name": "c", "image": "placeholder"}]}}}}
    }))?)
}

/// The child a v0.9 manager made for `role`: `<set>-<revision>-<role>`, no slice label
/// anywhere, `app: <set>-<role>`, controlled by the set.
fn legacy_child(set: &DisaggregatedSet, role: usize, revision: &str) -> LeaderWorkerSet {
    let role = &set.spec.roles[role];
    let mut lws = objects::lws(set, 0, role, revision, role.replicas());
    let name = set.name_any();
    lws.metadata.name = Some(objects::legacy_lws_name(&name, &role.name, revision));
    let strip = |labels: &mut Option<BTreeMap<String, String>>| {
        if let Some(l) = labels.as_mut() {
            l.remove(SLICE_LABEL);
            l.insert("app".into(), format!("{name}-{}", role.name));
        }
    };
    strip(&mut lws.metadata.labels);
    let template = &mut lws.spec.leader_worker_template;
    if let Some(meta) = template.worker_template.metadata.as_mut() {
        strip(&mut meta.labels);
    }
    if let Some(meta) = template
        .leader_template
        .as_mut()
        .and_then(|t| t.metadata.as_mut())
    {
        strip(&mut meta.labels);
    }
    lws
}

/// Versions of LWSs a watch showed, in order: (name, replicas, ready groups).
type SeenLws = Arc<Mutex<Vec<(String, i32, i32)>>>;

/// What a watch of the set's LWSs showed, in order: (name, replicas, ready).
fn record_lws(ns: &TestNs, set: &str) -> (SeenLws, tokio::task::JoinHandle<()>) {
    let seen: SeenLws = Arc::default();
    let into = seen.clone();
    let api = ns.api::<LeaderWorkerSet>();
    let config = watcher::Config::default().labels(&format!("{SET}={set}"));
    let task = tokio::spawn(async move {
        let mut s = watcher(api, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(l)) = s.next().await {
            let ready = l
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            into.lock()
                .expect("seen")
                .push((l.name_any(), l.spec.replicas.unwrap_or(1), ready));
        }
    });
    (seen, task)
}

#[tokio::test]
async fn a_v09_named_set_is_adopted_without_a_restart_and_rolled_over_when_slices_rise()
-> anyhow::Result<()> {
    with_ns("ds10-migrate", |ns| {
        Box::pin(async move {
            let lws_api = ns.api::<LeaderWorkerSet>();
            let v1 = pd("pd", 1, "vllm:1");
            let rev = revision_of(&ns, &v1).await?;
            // The set's slice-aware names are taken while its v0.9 children are put in place
            // (what a v0.9 manager left behind), so the manager under test cannot race them.
            for role in ["prefill", "decode"] {
                lws_api
                    .create(
                        &PostParams::default(),
                        &blocker(&objects::lws_name("pd", 0, role, &rev))?,
                    )
                    .await?;
            }
            let stored = apply(&ns, &v1).await?;
            let mut legacy = Vec::new();
            for i in 0..2 {
                let child = legacy_child(&stored, i, &rev);
                legacy.push(child.name_any());
                lws_api.create(&PostParams::default(), &child).await?;
            }
            for role in ["prefill", "decode"] {
                lws_api
                    .delete(
                        &objects::lws_name("pd", 0, role, &rev),
                        &DeleteParams::default(),
                    )
                    .await?;
            }
            // Adopted in place: no slice-aware LWS, the v0.9 pods keep running.
            let names = settled(&ns, "pd").await?;
            assert_eq!(
                names.keys().cloned().collect::<BTreeSet<_>>(),
                legacy.iter().cloned().collect::<BTreeSet<_>>()
            );
            let before = pod_uids(&ns, "pd").await?;
            assert_eq!(before.len(), 4, "{before:?}");
            // Its Services keep v0.9 names and select its pods (which have no slice label).
            let services = wait_for_all(&ns.api::<Service>(), &format!("{SET}=pd"), WAIT, |s| {
                s.len() == 2
            })
            .await?;
            for svc in &services {
                let selector = svc
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.clone())
                    .unwrap_or_default();
                assert_eq!(svc.name_any(), format!("pd-{rev}-{}-prv", selector[ROLE]));
                assert!(!selector.contains_key(SLICE_LABEL), "{selector:?}");
            }
            // A reconcile after the adoption (a scale of another object wakes it anyway):
            // nothing of the v0.9 children changes.
            apply(&ns, &v1).await?;
            let names = settled(&ns, "pd").await?;
            assert_eq!(names.len(), 2, "{names:?}");
            assert_eq!(pod_uids(&ns, "pd").await?, before, "no pod restarted");

            // Two slices: slice 0 is rolled over to its slice names like an old revision (the
            // v0.9 pair serves until the new one is ready), then slice 1 is created.
            let (seen, task) = record_lws(&ns, "pd");
            apply(&ns, &pd("pd", 2, "vllm:1")).await?;
            wait_for_all(&lws_api, &format!("{SET}=pd"), WAIT, |l| {
                l.iter().map(|l| l.name_any()).collect::<BTreeSet<_>>()
                    == expected("pd", 2, &rev, &["prefill", "decode"])
            })
            .await
            .context("slice-aware LWSs for both slices, the v0.9 ones gone")?;
            settled(&ns, "pd").await?;
            task.abort();
            // While a v0.9 child went below its replicas, its slice-0 successor of the same
            // role had a ready group.
            let seen = seen.lock().expect("seen").clone();
            let mut ready: BTreeMap<String, i32> = BTreeMap::new();
            for (name, replicas, r) in &seen {
                ready.insert(name.clone(), *r);
                if let Some(i) = legacy.iter().position(|l| l == name)
                    && *replicas < 1
                {
                    let role = ["prefill", "decode"][i];
                    let successor = objects::lws_name("pd", 0, role, &rev);
                    assert!(
                        ready.get(&successor).copied().unwrap_or(0) >= 1,
                        "{name} drained before {successor} was ready: {seen:?}"
                    );
                }
            }
            assert!(
                seen.iter().any(|(n, _, _)| n == &legacy[0]),
                "the watch saw the v0.9 child drain"
            );
            Ok(())
        })
    })
    .await
}

/// A topology key of this test's nodes only.
const RACK: &str = "lws-rollout.test/ds-rack";
const POOL: &str = "lws-rollout.test/ds-pool";

async fn add_node(nodes: &Api<Node>, pool: &str, i: usize) -> anyhow::Result<()> {
    let name = format!("{pool}-{i}");
    let capacity = json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", POOL: pool, RACK: format!("rack-{}", i % 2)}},
        "spec": {"taints": [{"key": POOL, "value": pool, "effect": "NoSchedule"}]},
        "status": {"allocatable": capacity, "capacity": capacity},
    }))?;
    nodes.create(&PostParams::default(), &node).await?;
    wait_for(nodes, &name, WAIT, |n: Option<&Node>| {
        n.and_then(|n| n.status.as_ref()?.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await
    .with_context(|| format!("node {name} Ready"))?;
    Ok(())
}

#[tokio::test]
async fn exclusive_topology_gives_each_slice_a_rack_of_its_own() -> anyhow::Result<()> {
    with_ns("ds10-place", |ns| {
        Box::pin(async move {
            let nodes = Api::<Node>::all(ns.client.clone());
            let pool = ns.name.clone();
            let outcome = std::panic::AssertUnwindSafe(async {
                // Two racks of two nodes.
                for i in 0..4 {
                    add_node(&nodes, &pool, i).await?;
                }
                let mut obj = pd("pd", 2, "vllm:1");
                obj["spec"]["placementPolicy"] = json!({"type": "ExclusiveTopology", "topology": RACK});
                for r in 0..2 {
                    let spec = &mut obj["spec"]["roles"][r]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"];
                    spec["nodeSelector"] = json!({POOL: pool});
                    spec["tolerations"] = json!([{"key": POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]);
                }
                apply(&ns, &obj).await?;
                settled(&ns, "pd").await?;
                let all = nodes
                    .list(&ListParams::default().labels(&format!("{POOL}={pool}")))
                    .await?;
                let rack_of: BTreeMap<String, String> = all
                    .items
                    .iter()
                    .map(|n| (n.name_any(), n.labels()[RACK].clone()))
                    .collect();
                let mut racks: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                for pod in ns
                    .api::<Pod>()
                    .list(&ListParams::default().labels(&format!("{SET}=pd")))
                    .await?
                {
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).context("bound")?;
                    let rack = rack_of.get(&node).with_context(|| format!("{node} is a pool node"))?;
                    let anti = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.affinity.as_ref())
                        .and_then(|a| a.pod_anti_affinity.as_ref())
                        .and_then(|a| a.required_during_scheduling_ignored_during_execution.clone())
                        .unwrap_or_default();
                    assert_eq!(anti.len(), 2, "other slices and other sets repelled");
                    racks
                        .entry(pod.labels()[SLICE_LABEL].clone())
                        .or_default()
                        .insert(rack.clone());
                }
                assert_eq!(racks.len(), 2, "{racks:?}");
                assert!(racks.values().all(|r| r.len() == 1), "a slice shares one rack: {racks:?}");
                assert_ne!(racks["0"], racks["1"], "the slices use different racks");
                anyhow::Ok(())
            })
            .catch_unwind()
            .await;
            // The pods first: KWOK finishes a deleted pod only on a node it still manages.
            let _ = ns
                .api::<DisaggregatedSet>()
                .delete_collection(&DeleteParams::foreground(), &Default::default())
                .await;
            let _ = wait_for_all(&ns.api::<Pod>(), "", WAIT, |pods| pods.is_empty()).await;
            let _ = nodes
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&format!("{POOL}={pool}")),
                )
                .await;
            match outcome {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    })
    .await
}

async fn kubectl(ns: &TestNs, args: &[&str]) -> anyhow::Result<String> {
    let kubectl = crate::isolated::bin_dir()?.join("kubectl");
    let out = tokio::process::Command::new(&kubectl)
        .args(args)
        .args(["-n", &ns.name])
        .env("KUBECONFIG", crate::harness::kubeconfig_path()?)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
async fn kubectl_scale_of_a_role_scaler_moves_only_that_roles_replicas() -> anyhow::Result<()> {
    with_ns("ds10-scale", |ns| {
        Box::pin(async move {
            let mut obj = pd("pd", 1, "vllm:1");
            obj["spec"]["roles"][1]["scaling"] = json!({"mode": "External"});
            let rev = revision_of(&ns, &obj).await?;
            apply(&ns, &obj).await?;
            let scalers = ns.api::<DisaggregatedSetRoleScaler>();
            // The controller makes the role's scaler, seeded at the role's groups, bound.
            let scaler = wait_for(&scalers, "pd-decode", WAIT, |s: Option<&DisaggregatedSetRoleScaler>| {
                s.is_some_and(|s| s.status.as_ref().is_some_and(|st| st.replicas == Some(1)))
            })
            .await?
            .context("pd-decode")?;
            assert_eq!(scaler.spec.replicas, 1);
            assert_eq!(scaler.labels()[ROLE], "decode");
            assert_eq!(scaler.owner_references()[0].name, "pd");
            settled(&ns, "pd").await?;
            let prefill = objects::lws_name("pd", 0, "prefill", &rev);
            let decode = objects::lws_name("pd", 0, "decode", &rev);
            let prefill_uid = ns.api::<LeaderWorkerSet>().get(&prefill).await?.metadata.uid;

            // The HPA's path: the scale subresource.
            let scale: Value = serde_json::from_str(&kubectl(&ns, &["get", "--raw",
                &format!("/apis/disaggregatedset.x-k8s.io/v1/namespaces/{}/disaggregatedsetrolescalers/pd-decode/scale", ns.name)]).await?)?;
            assert_eq!(scale["spec"]["replicas"], 1);
            assert_eq!(
                scale["status"]["selector"],
                "disaggregatedset.x-k8s.io/name=pd,disaggregatedset.x-k8s.io/role=decode,leaderworkerset.sigs.k8s.io/worker-index=0"
            );
            kubectl(&ns, &["scale", "disaggregatedsetrolescaler", "pd-decode", "--replicas=3"]).await?;
            let names = wait_for(&ns.api::<LeaderWorkerSet>(), &decode, WAIT, |l: Option<&LeaderWorkerSet>| {
                l.is_some_and(|l| l.spec.replicas == Some(3)
                    && l.status.as_ref().and_then(|s| s.ready_replicas) == Some(3))
            })
            .await
            .map(|_| ());
            names.context("decode scaled to 3 through its scaler")?;
            let names = settled(&ns, "pd").await?;
            assert_eq!(names, BTreeMap::from([(prefill.clone(), 1), (decode.clone(), 3)]));
            assert_eq!(
                ns.api::<LeaderWorkerSet>().get(&prefill).await?.metadata.uid,
                prefill_uid,
                "prefill untouched"
            );
            let scaler = wait_for(&scalers, "pd-decode", WAIT, |s: Option<&DisaggregatedSetRoleScaler>| {
                s.is_some_and(|s| s.status.as_ref().is_some_and(|st| st.replicas == Some(3)))
            })
            .await?
            .context("pd-decode")?;
            let ready = scaler.status.and_then(|s| s.conditions).unwrap_or_default();
            assert!(ready.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{ready:?}");

            // The role back to Static: its scaler goes, the role runs its spec.replicas.
            apply(&ns, &pd("pd", 1, "vllm:1")).await?;
            wait_for(&scalers, "pd-decode", WAIT, |s: Option<&DisaggregatedSetRoleScaler>| s.is_none())
                .await
                .context("the scaler of a Static role goes")?;
            let names = settled(&ns, "pd").await?;
            assert_eq!(names, BTreeMap::from([(prefill, 1), (decode, 1)]));
            let events = events_when(&ns, Duration::from_secs(30), |events| {
                events.iter().any(|e| e.reason.as_deref() == Some("ScalerDeleted"))
            })
            .await?;
            assert!(events.iter().any(|e| e.reason.as_deref() == Some("ScalerCreated")));
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn v010_refusals_name_the_field() -> anyhow::Result<()> {
    with_ns("ds10-admission", |ns| {
        Box::pin(async move {
            let api = ns.api::<DisaggregatedSet>();
            let refused = |obj: Value| {
                let api = api.clone();
                async move {
                    let typed: DisaggregatedSet = serde_json::from_value(obj.clone())?;
                    match api.create(&PostParams::default(), &typed).await {
                        Ok(_) => bail!("accepted: {obj}"),
                        Err(kube::Error::Api(s)) => Ok(s.message),
                        Err(e) => Err(e.into()),
                    }
                }
            };
            for slices in [0, 101] {
                let msg = refused(pd("sl", slices, "a")).await?;
                assert!(msg.contains("spec.slices"), "{msg}");
            }
            let mut placement = pd("pl", 2, "a");
            placement["spec"]["placementPolicy"] = json!({"type": "ExclusiveTopology"});
            let msg = refused(placement).await?;
            assert!(
                msg.contains("spec.placementPolicy.topology")
                    && msg.contains("topology is required when type is not None"),
                "{msg}"
            );
            // A role's own exclusive-topology annotation with a placement policy (upstream).
            let mut both = pd("both", 2, "a");
            both["spec"]["placementPolicy"] = json!({"type": "ExclusiveSlice", "topology": "rack"});
            both["spec"]["roles"][0]["metadata"] =
                json!({"annotations": {"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}});
            let msg = refused(both).await?;
            assert!(
                msg.contains("spec.placementPolicy.type") && msg.contains("exclusive-topology"),
                "{msg}"
            );
            let mut in_template = pd("tmpl", 2, "a");
            in_template["spec"]["placementPolicy"] =
                json!({"type": "ExclusiveTopology", "topology": "rack"});
            in_template["spec"]["roles"][1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] =
                json!({"annotations": {"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}});
            let msg = refused(in_template).await?;
            assert!(msg.contains("spec.placementPolicy.type"), "{msg}");
            let mut external = pd("ext", 2, "a");
            external["spec"]["roles"][1]["scaling"] = json!({"mode": "External"});
            let msg = refused(external).await?;
            assert!(msg.contains("spec.slices") && msg.contains("External"), "{msg}");
            // maxSurge 0 with maxUnavailable 0 (upstream #912), with the role's path.
            let mut stuck = pd("stuck", 1, "a");
            stuck["spec"]["roles"][0]["spec"]["rolloutStrategy"] = json!({"type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 0}});
            let msg = refused(stuck).await?;
            assert!(
                msg.contains("spec.roles[0].spec")
                    && msg.contains("maxUnavailable must not be 0 when maxSurge is 0"),
                "{msg}"
            );

            // A RoleScaler must name an External role of a live set.
            let mut obj = pd("pd", 1, "a");
            obj["spec"]["roles"][1]["scaling"] = json!({"mode": "External"});
            apply(&ns, &obj).await?;
            let scalers = ns.api::<DisaggregatedSetRoleScaler>();
            let scaler_refused = |name: &str, labels: Value| {
                let scalers = scalers.clone();
                let obj = json!({"apiVersion": "disaggregatedset.x-k8s.io/v1",
                    "kind": "DisaggregatedSetRoleScaler",
                    "metadata": {"name": name, "labels": labels}, "spec": {"replicas": 2}});
                async move {
                    let typed: DisaggregatedSetRoleScaler = serde_json::from_value(obj.clone())?;
                    match scalers.create(&PostParams::default(), &typed).await {
                        Ok(_) => bail!("accepted: {obj}"),
                        Err(kube::Error::Api(s)) => Ok(s.message),
                        Err(e) => Err(e.into()),
                    }
                }
            };
            let msg = scaler_refused("pd-router", json!({SET: "pd", ROLE: "router"})).await?;
            assert!(
                msg.contains("metadata.labels[disaggregatedset.x-k8s.io/role]")
                    && msg.contains("has no role router (its roles: prefill, decode)"),
                "{msg}"
            );
            let msg = scaler_refused("pd-prefill", json!({SET: "pd", ROLE: "prefill"})).await?;
            assert!(
                msg.contains("metadata.labels[disaggregatedset.x-k8s.io/role]")
                    && msg.contains("set its scaling.mode to External"),
                "{msg}"
            );
            let msg = scaler_refused("gone-decode", json!({SET: "gone", ROLE: "decode"})).await?;
            assert!(
                msg.contains("metadata.labels[disaggregatedset.x-k8s.io/name]")
                    && msg.contains("no DisaggregatedSet gone"),
                "{msg}"
            );
            // The controller's own scaler passes the same check.
            wait_for(&scalers, "pd-decode", WAIT, |s: Option<&DisaggregatedSetRoleScaler>| s.is_some())
                .await
                .context("the controller's scaler is admitted")?;
            Ok(())
        })
    })
    .await
}

/// A cluster upgraded without the new CRD (`helm upgrade` never updates CRDs): the manager
/// starts, does not wait for a RoleScaler watch that cannot list, reconciles the sets, and a set
/// with an External role runs it at its `spec.replicas` and says why.
#[tokio::test]
async fn without_the_role_scaler_crd_sets_still_reconcile_and_an_external_role_says_why()
-> anyhow::Result<()> {
    crate::isolated::IsolatedCluster::run("ds10-no-scaler-crd", &[], |cluster| {
        Box::pin(async move {
            use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
            let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
            let crd = "disaggregatedsetrolescalers.disaggregatedset.x-k8s.io";
            crds.delete(crd, &DeleteParams::default()).await?;
            wait_for(&crds, crd, WAIT, |c: Option<&CustomResourceDefinition>| c.is_none())
                .await
                .context("the RoleScaler CRD gone")?;
            let manager = crate::isolated::ManagerProcess::start(cluster, "ours", &[])?;
            let ns = cluster.namespace("ds").await?;
            let mut obj = pd("pd", 1, "vllm:1");
            obj["spec"]["roles"][1]["scaling"] = json!({"mode": "External"});
            obj["spec"]["roles"][1]["spec"]["replicas"] = json!(2);
            let rev = revision_of(&ns, &obj).await?;
            apply(&ns, &obj).await?;
            let names = settled(&ns, "pd").await?;
            assert_eq!(
                names,
                BTreeMap::from([
                    (objects::lws_name("pd", 0, "prefill", &rev), 1),
                    (objects::lws_name("pd", 0, "decode", &rev), 2)
                ])
            );
            let set = wait_for(&ns.api::<DisaggregatedSet>(), "pd", WAIT, |s: Option<&DisaggregatedSet>| {
                s.is_some_and(|s| condition(s, "Degraded").is_some_and(|c| c.0 == "True"))
            })
            .await?
            .context("pd")?;
            let degraded = set
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Degraded")
                .context("Degraded")?;
            assert_eq!(degraded.reason, "RoleScalerNotServed");
            assert!(
                degraded.message.contains("role decode")
                    && degraded.message.contains("disaggregatedsetrolescalers.yaml"),
                "{}",
                degraded.message
            );
            events_when(&ns, Duration::from_secs(30), |events| {
                events.iter().any(|e| {
                    e.reason.as_deref() == Some("RoleScalerNotServed")
                        && e.type_.as_deref() == Some("Warning")
                })
            })
            .await?;
            assert!(
                manager.logged("DisaggregatedSetRoleScalers"),
                "one line at start says the kind is not served: {}",
                manager.log_tail()
            );
            Ok(())
        })
    })
    .await
}
