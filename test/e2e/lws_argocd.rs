//! Argo CD health of LeaderWorkerSets (and DisaggregatedSets), with the customizations
//! docs/argocd.md ships: the `argocd-cm` block is read from that page and given to Argo CD's own
//! code (test/tools/argocd-health: its settings manager reads the ConfigMap, its controller's
//! health path runs the script), on every version of live objects the API server showed.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, bail};
use futures::StreamExt;
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::{LeaderWorkerSet, Rollout};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::{
    harness::{TestNs, wait_for, with_ns},
    isolated::repo,
    lws_support::{apply, available_with, create_available, held_image, lws},
    rollout_support::{create_rollout, paused_at, wait_released, wait_rollout},
    rollout_tools::{ARGOCD_HEALTH_BIN_ENV, GateKeeper, rollout, tool},
};

/// The `argocd-cm` ConfigMap docs/argocd.md gives, written to a file for argocd-health.
pub fn argocd_cm_from_docs() -> anyhow::Result<PathBuf> {
    let doc = std::fs::read_to_string(repo().join("docs/argocd.md"))?;
    let after = doc
        .split_once("<!-- argocd-cm:")
        .context("docs/argocd.md has no argocd-cm marker")?
        .1;
    let block = after
        .split_once("```yaml\n")
        .context("no yaml block after the marker")?
        .1
        .split_once("\n```")
        .context("unterminated yaml block")?
        .0;
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "argocd-cm-{}-{}.yaml",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, block)?;
    Ok(path)
}

fn rand_suffix() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Argo CD's health of one live object under the documented customizations.
pub async fn health<K: Serialize + Resource<DynamicType = ()> + Clone>(
    bin: &str,
    cm: &PathBuf,
    obj: &K,
) -> anyhow::Result<(String, String)> {
    health_with(bin, Some(cm), obj).await
}

/// Argo CD's health of one live object: its built-in checks, plus an `argocd-cm` if given.
pub async fn health_with<K: Serialize + Resource<DynamicType = ()> + Clone>(
    bin: &str,
    cm: Option<&PathBuf>,
    obj: &K,
) -> anyhow::Result<(String, String)> {
    let mut obj = obj.clone();
    obj.meta_mut().managed_fields = None;
    let mut value = serde_json::to_value(&obj)?;
    // As Argo CD's cluster cache holds live objects: with apiVersion and kind.
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    health_of_json(bin, cm, &value).await
}

/// Argo CD's health of one object given as JSON (with its apiVersion and kind), e.g. one
/// written by hand in another controller's exact shape: its built-in checks, plus an
/// `argocd-cm` if given. A script error is status `Unknown` with the error as message.
pub async fn health_of_json(
    bin: &str,
    cm: Option<&PathBuf>,
    value: &serde_json::Value,
) -> anyhow::Result<(String, String)> {
    let mut command = tokio::process::Command::new(bin);
    if let Some(cm) = cm {
        command.arg("--argocd-cm").arg(cm);
    }
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting argocd-health")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(&serde_json::to_vec(value)?).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!(
            "argocd-health failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok((
        v["status"].as_str().unwrap_or_default().to_string(),
        v["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Every version of the objects of `api` the API server shows while it runs.
pub struct Recorder<K> {
    seen: Arc<Mutex<Vec<K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Recorder<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    pub fn start(api: Api<K>) -> Self {
        let seen: Arc<Mutex<Vec<K>>> = Arc::default();
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(obj)) = events.next().await {
                sink.lock().expect("seen").push(obj);
            }
        });
        Self { seen, task }
    }

    pub fn seen(&self) -> Vec<K> {
        self.seen.lock().expect("seen").clone()
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The argocd-health binary `test/run-tests.sh` built, or `None` after one SKIPPED line.
pub fn argocd_tool() -> Option<String> {
    tool(
        ARGOCD_HEALTH_BIN_ENV,
        "Argo CD's health evaluation (argocd-health)",
        "test/tools/build-argocd-health.sh",
    )
}

async fn lws_now(ns: &TestNs, name: &str) -> anyhow::Result<LeaderWorkerSet> {
    Ok(ns.api::<LeaderWorkerSet>().get(name).await?)
}

/// Creation, a rolling update held back by a scheduling gate, an update stopped at a user
/// partition, and a group whose worker can never be scheduled — and every version of the LWSs
/// in between, none of which may make the script fail.
#[tokio::test]
async fn argocd_health_of_an_lws_follows_its_groups() -> anyhow::Result<()> {
    let Some(bin) = argocd_tool() else {
        return Ok(());
    };
    with_ns("lws-argocd", |ns| Box::pin(async move {
        let cm = argocd_cm_from_docs()?;
        let recorder = Recorder::start(ns.api::<LeaderWorkerSet>());
        let base = lws("a", 2, 2, "model:v1");
        create_available(&ns, &base).await?;
        assert_eq!(
            health(&bin, &cm, &lws_now(&ns, "a").await?).await?,
            (
                "Healthy".into(),
                "All 2 groups ready on the current revision".into()
            )
        );

        // A rolling update whose new groups are held back.
        let gates = GateKeeper::start(&ns);
        apply(&ns, &held_image(&base, "model:v2")).await?;
        let rolling = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "a",
            Duration::from_secs(60),
            |l: Option<&LeaderWorkerSet>| {
                l.is_some_and(|l| {
                    l.status.as_ref().is_some_and(|s| {
                        s.observed_generation == l.metadata.generation
                            && s.updated_replicas.unwrap_or(0) < 2
                    })
                })
            },
        )
        .await?
        .context("a")?;
        let (status, message) = health(&bin, &cm, &rolling).await?;
        assert_eq!(status, "Progressing");
        assert!(message.starts_with("Rolling update: "), "{message}");
        gates.open();
        let done = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "a",
            Duration::from_secs(120),
            available_with(2, 2),
        )
        .await?
        .context("a")?;
        assert_eq!(health(&bin, &cm, &done).await?.0, "Healthy");

        // The next template stops at a user partition: Suspended once the groups above it run
        // the new template.
        let mut partitioned = held_image(&base, "model:v3");
        partitioned["spec"]["rolloutStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"partition": 1}});
        apply(&ns, &partitioned).await?;
        let paused = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "a",
            Duration::from_secs(120),
            |l: Option<&LeaderWorkerSet>| {
                l.is_some_and(|l| {
                    l.status.as_ref().is_some_and(|s| {
                        s.observed_generation == l.metadata.generation
                            && s.updated_replicas == Some(1)
                            && s.ready_replicas == Some(2)
                    })
                })
            },
        )
        .await?
        .context("a")?;
        assert_eq!(
            health(&bin, &cm, &paused).await?,
            (
                "Suspended".into(),
                "Rolling update paused at partition 1: 1 of 2 groups updated".into()
            )
        );

        // A group whose worker can never be scheduled: Degraded once its deadline passes.
        let mut broken = lws("b", 1, 2, "model:v1");
        broken["metadata"]["annotations"] =
            json!({"lws-rollout.x-k8s.io/progress-deadline-seconds": "5"});
        broken["spec"]["leaderWorkerTemplate"]["leaderTemplate"] =
            json!({"spec": {"containers": [{"name": "model", "image": "model:v1"}]}});
        broken["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["nodeSelector"] =
            json!({"lws-rollout.test/no-such-node": "true"});
        apply(&ns, &broken).await?;
        let failed = wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "b",
            Duration::from_secs(90),
            |l: Option<&LeaderWorkerSet>| {
                l.and_then(|l| l.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter().any(|c| {
                            c.type_ == "ReplicaFailure"
                                && c.status == "True"
                                && c.reason == "ProgressDeadlineExceeded"
                        })
                    })
            },
        )
        .await?
        .context("b")?;
        assert_eq!(
            health(&bin, &cm, &failed).await?,
            (
                "Degraded".into(),
                "ProgressDeadlineExceeded: group 0 (leader b-0) is not ready 5s after its newest pod was created"
                    .into()
            )
        );
        // Before its deadline the same LWS was only Progressing.
        let seen = recorder.seen();
        let mut statuses = std::collections::BTreeSet::new();
        for obj in seen.iter().filter(|l| l.status.is_some()) {
            let (status, message) = health(&bin, &cm, obj).await?;
            if status == "Unknown" || status.is_empty() {
                bail!(
                    "Argo CD cannot assess {}: {message}; status: {:#?}",
                    obj.name_any(),
                    obj.status
                );
            }
            statuses.insert((obj.name_any(), status));
        }
        for want in [
            ("a", "Progressing"),
            ("a", "Healthy"),
            ("a", "Suspended"),
            ("b", "Progressing"),
            ("b", "Degraded"),
        ] {
            assert!(
                statuses.contains(&(want.0.to_string(), want.1.to_string())),
                "{want:?} never seen: {statuses:?}"
            );
        }
        drop(gates);
        Ok(())
    }))
    .await
}

/// An LWS a Rollout releases stays Healthy for the whole release (its groups stay ready on the
/// held revision; the Rollout's health says where the release is), and is Healthy again once the
/// release is done.
#[tokio::test]
async fn argocd_health_of_an_lws_held_by_a_rollout_stays_healthy() -> anyhow::Result<()> {
    let Some(bin) = argocd_tool() else {
        return Ok(());
    };
    with_ns("lws-argocd-held", |ns| {
        Box::pin(async move {
            let cm = argocd_cm_from_docs()?;
            let base = lws("vllm", 2, 2, "model:v1");
            create_available(&ns, &base).await?;
            create_rollout(
                &ns,
                &rollout(
                    "vllm",
                    "vllm",
                    json!([{"replicas": 1, "pause": {}}, {"replicas": "100%"}]),
                ),
            )
            .await?;
            let recorder = Recorder::start(ns.api::<LeaderWorkerSet>());
            let gates = GateKeeper::start(&ns);
            apply(&ns, &held_image(&base, "model:v2")).await?;
            gates.open();
            wait_rollout(&ns, "paused at step 1", paused_at(1)).await?;
            let held = lws_now(&ns, "vllm").await?;
            let (status, message) = health(&bin, &cm, &held).await?;
            assert_eq!(status, "Healthy", "{message}");
            assert!(
                message.starts_with("Held by a Rollout on revision "),
                "{message}"
            );
            ns.api::<Rollout>()
                .patch_status(
                    "vllm",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(
                        json!({"status": {"canaryStatus": {"currentStepState": "StepReady"}}}),
                    ),
                )
                .await?;
            wait_released(&ns).await?;
            let done = wait_for(
                &ns.api::<LeaderWorkerSet>(),
                "vllm",
                Duration::from_secs(120),
                available_with(2, 2),
            )
            .await?
            .context("vllm")?;
            assert_eq!(health(&bin, &cm, &done).await?.0, "Healthy");

            // Every version of the stable LWS while held with its groups ready: Healthy.
            let mut held_versions = 0;
            for obj in recorder.seen().iter().filter(|l| l.name_any() == "vllm") {
                let hold = obj
                    .annotations()
                    .get("rollouts.kruise.io/stable-revision")
                    .is_some_and(|v| !v.is_empty());
                let ready = obj.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
                    && obj.status.as_ref().and_then(|s| s.observed_generation)
                        == obj.metadata.generation;
                let (status, message) = health(&bin, &cm, obj).await?;
                if status == "Unknown" || status.is_empty() {
                    bail!("Argo CD cannot assess the LWS: {message}");
                }
                if hold && ready {
                    held_versions += 1;
                    assert_eq!(status, "Healthy", "held and ready: {message}");
                }
            }
            // The LWS changes little during a release: the hold and the template in one write,
            // its status once; at least that version was seen held.
            assert!(held_versions >= 1, "the release was seen: {held_versions}");
            drop(gates);
            Ok(())
        })
    })
    .await
}

/// A DisaggregatedSet's health through its creation, a rolling update of both roles, and a
/// set one of whose role LWS names belongs to someone else.
#[tokio::test]
async fn argocd_health_of_a_disaggregatedset_follows_its_roles() -> anyhow::Result<()> {
    use lws_rollout::api::DisaggregatedSet;
    let Some(bin) = argocd_tool() else {
        return Ok(());
    };
    with_ns("ds-argocd", |ns| {
        Box::pin(async move {
            let cm = argocd_cm_from_docs()?;
            let recorder = Recorder::start(ns.api::<DisaggregatedSet>());
            let set = |name: &str, image: &str| {
                let role = |r: &str| {
                    json!({"name": r, "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                        "restartPolicy": "RecreateGroupOnPodRestart",
                        "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}})
                };
                json!({"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
                    "metadata": {"name": name}, "spec": {"roles": [role("prefill"), role("decode")]}})
            };
            let api = ns.api::<DisaggregatedSet>();
            let apply_set = |obj: serde_json::Value| {
                let api = api.clone();
                async move {
                    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
                    api.patch(
                        &name,
                        &kube::api::PatchParams::apply("e2e-user").force(),
                        &kube::api::Patch::Apply(&obj),
                    )
                    .await
                }
            };
            let settled = |s: Option<&DisaggregatedSet>| {
                s.and_then(|s| s.status.as_ref().map(|st| (s, st)))
                    .and_then(|(s, st)| st.conditions.as_ref().map(|c| (s, c)))
                    .is_some_and(|(s, c)| {
                        let is = |t: &str, v: &str| {
                            c.iter().any(|c| {
                                c.type_ == t
                                    && c.status == v
                                    && c.observed_generation == s.metadata.generation
                            })
                        };
                        is("Available", "True") && is("Progressing", "False")
                    })
            };
            apply_set(set("pd", "v1")).await?;
            let first = wait_for(&api, "pd", Duration::from_secs(120), settled)
                .await?
                .context("pd")?;
            assert_eq!(health(&bin, &cm, &first).await?.0, "Healthy");
            apply_set(set("pd", "v2")).await?;
            let rolling = wait_for(&api, "pd", Duration::from_secs(60), |s: Option<&DisaggregatedSet>| {
                s.and_then(|s| s.status.as_ref())
                    .and_then(|st| st.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.reason == "RollingUpdate" && c.status == "True"))
            })
            .await?
            .context("pd")?;
            let (status, message) = health(&bin, &cm, &rolling).await?;
            assert_eq!(status, "Progressing");
            assert!(message.starts_with("rolling update to revision "), "{message}");
            let done = wait_for(&api, "pd", Duration::from_secs(180), settled)
                .await?
                .context("pd")?;
            assert_eq!(health(&bin, &cm, &done).await?.0, "Healthy");

            // A role's LWS name taken by an LWS of someone else.
            let probe: DisaggregatedSet = serde_json::from_value(set("taken", "v1"))?;
            let stored = api
                .create(&kube::api::PostParams { dry_run: true, ..Default::default() }, &probe)
                .await?;
            let revision = lws_rollout::disaggregatedset::revision::revision(&stored.spec.roles)?;
            let foreign: LeaderWorkerSet = serde_json::from_value(json!({
                "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": format!("taken-0-{revision}-decode")},
                "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
            }))?;
            ns.api::<LeaderWorkerSet>()
                .create(&kube::api::PostParams::default(), &foreign)
                .await?;
            apply_set(set("taken", "v1")).await?;
            let degraded = wait_for(&api, "taken", Duration::from_secs(60), |s: Option<&DisaggregatedSet>| {
                s.and_then(|s| s.status.as_ref())
                    .and_then(|st| st.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Degraded" && c.status == "True"))
            })
            .await?
            .context("taken")?;
            let (status, message) = health(&bin, &cm, &degraded).await?;
            assert_eq!(status, "Degraded");
            assert!(message.starts_with("ObjectConflict: LeaderWorkerSet taken-"), "{message}");

            let mut statuses = std::collections::BTreeSet::new();
            for obj in recorder.seen() {
                let (status, message) = health(&bin, &cm, &obj).await?;
                if status == "Unknown" || status.is_empty() {
                    bail!("Argo CD cannot assess {}: {message}", obj.name_any());
                }
                statuses.insert((obj.name_any(), status));
            }
            for want in [("pd", "Progressing"), ("pd", "Healthy"), ("taken", "Degraded")] {
                assert!(
                    statuses.contains(&(want.0.to_string(), want.1.to_string())),
                    "{want:?} never seen: {statuses:?}"
                );
            }
            Ok(())
        })
    })
    .await
}
