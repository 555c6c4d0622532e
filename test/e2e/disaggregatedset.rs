//! DisaggregatedSets on the shared cluster: one LWS per role and revision with upstream's names
//! and labels, Services for complete revisions, a template change rolled across both roles
//! together, scale per role, roles added and removed, bad input refused at admission, a role's
//! LWS deleted by hand recreated, a foreign LWS never taken over — and (beyond upstream) a
//! rolling update whose new decode groups die mid-update stops and takes the half pair's
//! Services away while the old pair keeps serving.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::{DisaggregatedSet, LeaderWorkerSet};
use serde_json::{Value, json};

use crate::{
    harness::{TestNs, condition, events_when, wait_for, wait_for_all, with_ns},
    lws_support::HOLD_GATE,
    rollout_tools::GateKeeper,
};

pub(crate) const SET: &str = "disaggregatedset.x-k8s.io/name";
pub(crate) const ROLE: &str = "disaggregatedset.x-k8s.io/role";
pub(crate) const REVISION: &str = "disaggregatedset.x-k8s.io/revision";

pub(crate) fn role(name: &str, replicas: i32, image: &str, gated: bool) -> Value {
    let mut spec = json!({"containers": [{"name": "server", "image": image,
        "ports": [{"containerPort": 8000}]}]});
    if gated {
        spec["schedulingGates"] = json!([{"name": HOLD_GATE}]);
    }
    json!({"name": name, "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2,
        "workerTemplate": {"spec": spec}}}})
}

pub(crate) fn set(name: &str, roles: Value) -> Value {
    json!({"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
        "metadata": {"name": name}, "spec": {"roles": roles}})
}

pub(crate) fn pd(name: &str, prefill: i32, decode: i32, image: &str, gated: bool) -> Value {
    set(
        name,
        json!([
            role("prefill", prefill, image, gated),
            role("decode", decode, image, gated)
        ]),
    )
}

pub(crate) async fn apply(ns: &TestNs, obj: &Value) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ns.api::<DisaggregatedSet>()
        .patch(
            &name,
            &PatchParams::apply("e2e-user").force(),
            &Patch::Apply(obj),
        )
        .await?;
    Ok(())
}

pub(crate) async fn lws_of(ns: &TestNs, set: &str) -> anyhow::Result<Vec<LeaderWorkerSet>> {
    Ok(ns
        .api::<LeaderWorkerSet>()
        .list(&ListParams::default().labels(&format!("{SET}={set}")))
        .await?
        .items)
}

/// Settled: one revision, every role's LWS at its replicas and ready, Available, not
/// Progressing, and a Service per role.
pub(crate) async fn wait_settled(
    ns: &TestNs,
    name: &str,
    want: &[(&str, i32)],
) -> anyhow::Result<DisaggregatedSet> {
    let set = wait_for(
        &ns.api::<DisaggregatedSet>(),
        name,
        Duration::from_secs(180),
        |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| {
                condition(s, "Available").is_some_and(|c| c.0 == "True")
                    && condition(s, "Progressing").is_some_and(|c| c.0 == "False")
            })
        },
    )
    .await?
    .context("set")?;
    let lws = lws_of(ns, name).await?;
    let revisions: std::collections::BTreeSet<_> = lws
        .iter()
        .filter_map(|l| l.labels().get(REVISION).cloned())
        .collect();
    assert_eq!(revisions.len(), 1, "one revision left: {revisions:?}");
    let revision = revisions.into_iter().next().unwrap_or_default();
    let mut got: Vec<(String, i32)> = lws
        .iter()
        .map(|l| (l.labels()[ROLE].clone(), l.spec.replicas.unwrap_or(1)))
        .collect();
    got.sort();
    let mut expected: Vec<(String, i32)> = want.iter().map(|(r, n)| (r.to_string(), *n)).collect();
    expected.sort();
    assert_eq!(got, expected);
    wait_for_all(
        &ns.api::<Service>(),
        &format!("{SET}={name}"),
        Duration::from_secs(60),
        |svcs| {
            svcs.len() == want.len()
                && svcs
                    .iter()
                    .all(|s| s.labels().get(REVISION) == Some(&revision))
        },
    )
    .await
    .context("a Service per role of the revision")?;
    Ok(set)
}

#[tokio::test]
async fn a_disaggregatedset_becomes_one_lws_per_role_with_upstreams_names_and_services()
-> anyhow::Result<()> {
    with_ns("ds-create", |ns| {
        Box::pin(async move {
            apply(&ns, &pd("pd", 2, 1, "vllm:1", false)).await?;
            let s = wait_settled(&ns, "pd", &[("prefill", 2), ("decode", 1)]).await?;
            let lws = lws_of(&ns, "pd").await?;
            let revision = lws[0].labels()[REVISION].clone();
            assert_eq!(revision.len(), 8);
            for l in &lws {
                let role = l.labels()[ROLE].clone();
                assert_eq!(l.name_any(), format!("pd-0-{revision}-{role}"));
                assert_eq!(l.labels()["app"], format!("pd-0-{role}"));
                let owner = &l.owner_references()[0];
                assert_eq!(
                    (owner.kind.as_str(), owner.name.as_str(), owner.controller),
                    ("DisaggregatedSet", "pd", Some(true))
                );
                let template_labels = l
                    .spec
                    .leader_worker_template
                    .worker_template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default();
                assert_eq!(template_labels.get(ROLE), Some(&role));
            }
            let svc = ns
                .api::<Service>()
                .get(&format!("pd-0-{revision}-decode-prv"))
                .await?;
            let spec = svc.spec.context("spec")?;
            assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
            assert!(spec.ports.is_none(), "portless");
            assert_eq!(
                spec.selector.unwrap_or_default().get(REVISION),
                Some(&revision)
            );
            // Pods carry the role labels (the Service selects them).
            let pods = ns
                .api::<Pod>()
                .list(&ListParams::default().labels(&format!("{SET}=pd,{ROLE}=prefill")))
                .await?;
            assert_eq!(pods.items.len(), 4, "2 groups of 2");
            let roles = s
                .status
                .as_ref()
                .and_then(|s| s.role_statuses.clone())
                .unwrap_or_default();
            let summary: Vec<_> = roles
                .iter()
                .map(|r| {
                    (
                        r.name.as_str(),
                        r.replicas,
                        r.ready_replicas,
                        r.updated_replicas,
                    )
                })
                .collect();
            assert_eq!(
                summary,
                [
                    ("prefill", Some(2), Some(2), Some(2)),
                    ("decode", Some(1), Some(1), Some(1))
                ]
            );
            Ok(())
        })
    })
    .await
}

/// Every version of the set's LWSs and Services the API server shows, in order; `initial`:
/// it was there when the recording started.
#[derive(Clone, Debug)]
pub(crate) enum Seen {
    Lws(Box<LeaderWorkerSet>),
    Service(Box<Service>, bool),
}

pub(crate) struct Recording {
    seen: Arc<Mutex<Vec<Seen>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recording {
    pub(crate) fn start(ns: &TestNs, set: &str) -> Self {
        use kube::runtime::watcher::Event;
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let config = watcher::Config::default().labels(&format!("{SET}={set}"));
        let (a, b) = (seen.clone(), seen.clone());
        let lws_api: Api<LeaderWorkerSet> = ns.api();
        let svc_api: Api<Service> = ns.api();
        let (c1, c2) = (config.clone(), config);
        let tasks = vec![
            tokio::spawn(async move {
                let mut s = watcher(lws_api, c1)
                    .default_backoff()
                    .applied_objects()
                    .boxed();
                while let Some(Ok(l)) = s.next().await {
                    a.lock().expect("seen").push(Seen::Lws(Box::new(l)));
                }
            }),
            tokio::spawn(async move {
                let mut s = watcher(svc_api, c2).default_backoff().boxed();
                while let Some(Ok(event)) = s.next().await {
                    let item = match event {
                        Event::InitApply(svc) => Seen::Service(Box::new(svc), true),
                        Event::Apply(svc) => Seen::Service(Box::new(svc), false),
                        _ => continue,
                    };
                    b.lock().expect("seen").push(item);
                }
            }),
        ];
        Self { seen, tasks }
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// Replays the recording: the last seen LWS of each (revision, role); checks that a revision's
/// Service created while it ran is only created once every role of it had a ready group.
pub(crate) fn services_only_for_complete_revisions(
    recording: &Recording,
    roles: &[&str],
) -> anyhow::Result<usize> {
    let seen = recording.seen();
    let mut lws: BTreeMap<(String, String), LeaderWorkerSet> = BTreeMap::new();
    let mut first_seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    for item in &seen {
        match item {
            Seen::Lws(l) => {
                lws.insert(
                    (l.labels()[REVISION].clone(), l.labels()[ROLE].clone()),
                    (**l).clone(),
                );
            }
            Seen::Service(s, initial) => {
                if !first_seen.insert(s.name_any()) || *initial {
                    continue;
                }
                let rev = s.labels()[REVISION].clone();
                for role in roles {
                    let ready = lws
                        .get(&(rev.clone(), role.to_string()))
                        .and_then(|l| l.status.as_ref())
                        .and_then(|s| s.ready_replicas)
                        .unwrap_or(0);
                    if ready < 1 {
                        bail!(
                            "Service {} appeared while role {role} of revision {rev} had no ready group",
                            s.name_any()
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

#[tokio::test]
async fn a_template_change_rolls_both_roles_together_and_cleans_up_the_old_pair()
-> anyhow::Result<()> {
    with_ns("ds-roll", |ns| {
        Box::pin(async move {
            apply(&ns, &pd("pd", 2, 2, "vllm:1", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 2), ("decode", 2)]).await?;
            let old_revision = lws_of(&ns, "pd").await?[0].labels()[REVISION].clone();
            let recording = Recording::start(&ns, "pd");
            apply(&ns, &pd("pd", 2, 2, "vllm:2", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 2), ("decode", 2)]).await?;
            let lws = lws_of(&ns, "pd").await?;
            assert!(
                lws.iter().all(|l| l.labels()[REVISION] != old_revision),
                "the old pair is gone"
            );
            let pods = ns
                .api::<Pod>()
                .list(&ListParams::default().labels(&format!("{SET}=pd")))
                .await?;
            assert!(
                pods.items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .all(|p| p
                        .spec
                        .as_ref()
                        .is_some_and(|s| s.containers[0].image.as_deref() == Some("vllm:2")))
            );
            let seen = recording.seen();
            // The old pair's LWSs went to 0 together and were deleted together: never one role of
            // it at 0 replicas for longer than the other's write of the same reconcile.
            let mut old: BTreeMap<String, i32> = BTreeMap::new();
            let (mut halves, mut was_half) = (0, false);
            for item in &seen {
                if let Seen::Lws(l) = item
                    && l.labels()[REVISION] == old_revision
                {
                    old.insert(l.labels()[ROLE].clone(), l.spec.replicas.unwrap_or(1));
                    let zeros = old.values().filter(|r| **r == 0).count();
                    let half = old.len() == 2 && zeros == 1;
                    halves += usize::from(half && !was_half);
                    was_half = half;
                }
            }
            assert!(!was_half, "the old pair did not end half drained");
            assert!(
                halves <= 1,
                "the old pair was half drained {halves} times (once: between the two writes of one step)"
            );
            assert!(services_only_for_complete_revisions(&recording, &["prefill", "decode"])? >= 2);
            let events = events_when(&ns, Duration::from_secs(30), |events| {
                events
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("RollingUpdateCompleted"))
            })
            .await?;
            let reasons: std::collections::BTreeSet<_> =
                events.iter().filter_map(|e| e.reason.clone()).collect();
            for want in [
                "RollingUpdateStarted",
                "ScalingUp",
                "ScalingDown",
                "LWSDeleted",
                "RollingUpdateCompleted",
            ] {
                assert!(reasons.contains(want), "{want} in {reasons:?}");
            }
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn roles_scale_on_their_own_and_roles_can_be_added_and_removed() -> anyhow::Result<()> {
    with_ns("ds-scale", |ns| {
        Box::pin(async move {
            apply(&ns, &pd("pd", 1, 1, "vllm:1", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 1), ("decode", 1)]).await?;
            let before = lws_of(&ns, "pd").await?;
            apply(&ns, &pd("pd", 3, 1, "vllm:1", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 3), ("decode", 1)]).await?;
            let after = lws_of(&ns, "pd").await?;
            let uids = |l: &[LeaderWorkerSet]| {
                l.iter().map(|l| l.metadata.uid.clone()).collect::<Vec<_>>()
            };
            assert_eq!(uids(&before), uids(&after), "a scale is no new revision");
            // A role added: a new revision with three roles, rolled in.
            let three = set(
                "pd",
                json!([
                    role("prefill", 3, "vllm:1", false),
                    role("decode", 1, "vllm:1", false),
                    role("router", 1, "vllm:1", false)
                ]),
            );
            apply(&ns, &three).await?;
            wait_settled(&ns, "pd", &[("prefill", 3), ("decode", 1), ("router", 1)]).await?;
            // And removed again.
            apply(&ns, &pd("pd", 3, 1, "vllm:1", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 3), ("decode", 1)]).await?;
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn bad_disaggregatedsets_are_refused_at_admission_with_the_field_path() -> anyhow::Result<()>
{
    with_ns("ds-admission", |ns| {
        Box::pin(async move {
            let api = ns.api::<DisaggregatedSet>();
            let refused = |obj: Value| {
                let api = api.clone();
                async move {
                    let typed: DisaggregatedSet = match serde_json::from_value(obj.clone()) {
                        Ok(t) => t,
                        Err(e) => bail!("not even our type: {e}"),
                    };
                    match api.create(&PostParams::default(), &typed).await {
                        Ok(_) => bail!("accepted: {obj}"),
                        Err(kube::Error::Api(s)) => Ok(s.message),
                        Err(e) => Err(e.into()),
                    }
                }
            };
            let dup = set(
                "dup",
                json!([
                    role("prefill", 1, "a", false),
                    role("prefill", 1, "a", false)
                ]),
            );
            let msg = refused(dup).await?;
            assert!(
                msg.contains("spec.roles[1]") && msg.contains("Duplicate value"),
                "{msg}"
            );
            let msg = refused(set("none", json!([]))).await?;
            assert!(
                msg.contains("spec.roles") && msg.contains("at least 2 items"),
                "{msg}"
            );
            let mut bad_size = pd("size", 1, 1, "a", false);
            bad_size["spec"]["roles"][1]["spec"]["leaderWorkerTemplate"]["size"] = json!(0);
            let msg = refused(bad_size).await?;
            assert!(
                msg.contains("spec.roles[1].spec.leaderWorkerTemplate.size"),
                "{msg}"
            );
            let mut partition = pd("part", 1, 1, "a", false);
            partition["spec"]["roles"][0]["spec"]["rolloutStrategy"] =
                json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"partition": 1}});
            let msg = refused(partition).await?;
            assert!(
                msg.contains("spec.roles[0]") && msg.contains("partition"),
                "{msg}"
            );
            // v0.10 (#912): a role that could neither surge nor take a group down.
            let mut stuck = pd("stuck", 1, 1, "a", false);
            stuck["spec"]["roles"][1]["spec"]["rolloutStrategy"] = json!({"type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 0}});
            let msg = refused(stuck).await?;
            assert!(
                msg.contains("spec.roles[1].spec")
                    && msg.contains("maxUnavailable must not be 0 when maxSurge is 0"),
                "{msg}"
            );
            let msg = refused(pd("zero", 0, 1, "a", false)).await?;
            assert!(
                msg.contains("replicas must be zero for all non-External roles or non-zero for all non-External roles"),
                "{msg}"
            );
            let long = pd(&"x".repeat(45), 1, 1, "a", false);
            let msg = refused(long).await?;
            assert!(msg.contains("48 characters"), "{msg}");
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn a_roles_lws_deleted_by_hand_comes_back_and_a_foreign_one_is_never_taken_over()
-> anyhow::Result<()> {
    with_ns("ds-repair", |ns| Box::pin(async move {
        apply(&ns, &pd("pd", 1, 1, "vllm:1", false)).await?;
        wait_settled(&ns, "pd", &[("prefill", 1), ("decode", 1)]).await?;
        let lws = lws_of(&ns, "pd").await?;
        let decode = lws.iter().find(|l| l.labels()[ROLE] == "decode").context("decode")?.clone();
        ns.api::<LeaderWorkerSet>().delete(&decode.name_any(), &DeleteParams::default()).await?;
        let old_uid = decode.metadata.uid.clone();
        wait_for(&ns.api::<LeaderWorkerSet>(), &decode.name_any(), Duration::from_secs(60), move |l: Option<&LeaderWorkerSet>| {
            l.is_some_and(|l| l.metadata.uid != old_uid)
        })
        .await
        .context("recreated")?;
        wait_settled(&ns, "pd", &[("prefill", 1), ("decode", 1)]).await?;

        // Another owner's LWS with the name the set wants for a role.
        let probe = pd("other", 1, 1, "vllm:1", false);
        // The revision of the set as stored (its CRD defaults applied): a server-side dry run.
        let typed: DisaggregatedSet = serde_json::from_value(probe.clone())?;
        let stored = ns
            .api::<DisaggregatedSet>()
            .create(&PostParams { dry_run: true, ..Default::default() }, &typed)
            .await?;
        let revision = lws_rollout::disaggregatedset::revision::revision(&stored.spec.roles)?;
        let foreign: LeaderWorkerSet = serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": format!("other-0-{revision}-decode")},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "mine"}]}}}}
        }))?;
        let foreign = ns.api::<LeaderWorkerSet>().create(&PostParams::default(), &foreign).await?;
        apply(&ns, &probe).await?;
        let s = wait_for(&ns.api::<DisaggregatedSet>(), "other", Duration::from_secs(60), |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| condition(s, "Degraded").is_some_and(|c| c.0 == "True"))
        })
        .await?
        .context("other")?;
        let degraded = s.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "Degraded").context("Degraded")?;
        assert_eq!(degraded.reason, "ObjectConflict");
        assert!(degraded.message.contains(&foreign.name_any()), "{}", degraded.message);
        let events = events_when(&ns, Duration::from_secs(30), |events| {
            events.iter().any(|e| e.reason.as_deref() == Some("ObjectConflict"))
        })
        .await?;
        assert!(events.iter().any(|e| e.reason.as_deref() == Some("ObjectConflict") && e.type_.as_deref() == Some("Warning")));
        let now = ns.api::<LeaderWorkerSet>().get(&foreign.name_any()).await?;
        assert_eq!(now.metadata.uid, foreign.metadata.uid);
        assert!(now.owner_references().is_empty(), "never adopted");
        assert!(now.labels().get(SET).is_none());
        Ok(())
    }))
    .await
}

/// Beyond upstream: a rolling update whose new decode groups die mid-update. The new pair's
/// Services go (no traffic to a prefill without its decode), nothing moves while the new pair
/// is not whole, the old pair keeps its groups and Services; once the decode groups are back,
/// the update completes.
#[tokio::test]
async fn killing_one_roles_groups_mid_update_takes_the_half_pair_out_of_service()
-> anyhow::Result<()> {
    with_ns("ds-kill", |ns| Box::pin(async move {
        apply(&ns, &pd("pd", 2, 2, "vllm:1", false)).await?;
        wait_settled(&ns, "pd", &[("prefill", 2), ("decode", 2)]).await?;
        let old_revision = lws_of(&ns, "pd").await?[0].labels()[REVISION].clone();
        let recording = Recording::start(&ns, "pd");
        let gates = GateKeeper::start(&ns);
        gates.open();
        apply(&ns, &pd("pd", 2, 2, "vllm:2", true)).await?;
        // The new pair serves (its Services exist) while the old one still runs.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let new_revision = loop {
            let lws = lws_of(&ns, "pd").await?;
            let new: Vec<_> = lws.iter().filter(|l| l.labels()[REVISION] != old_revision).collect();
            if let Some(l) = new.first() {
                break l.labels()[REVISION].clone();
            }
            if tokio::time::Instant::now() > deadline {
                bail!("no LWS of a new revision after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        wait_for_all(&ns.api::<Service>(), &format!("{SET}=pd,{REVISION}={new_revision}"), Duration::from_secs(120), |s| s.len() == 2)
            .await
            .context("the new pair serves")?;
        // From now on new pods stay Pending: kill the new decode groups.
        drop(gates);
        let decode_lws = format!("pd-0-{new_revision}-decode");
        let leaders = ns.api::<Pod>().list(&ListParams::default()
            .labels(&format!("leaderworkerset.sigs.k8s.io/name={decode_lws},leaderworkerset.sigs.k8s.io/worker-index=0"))).await?;
        assert!(!leaders.items.is_empty());
        for p in &leaders.items {
            ns.api::<Pod>().delete(&p.name_any(), &DeleteParams::default()).await?;
        }
        // The half pair loses its Services; the old pair keeps its groups and Services.
        wait_for_all(&ns.api::<Service>(), &format!("{SET}=pd,{REVISION}={new_revision}"), Duration::from_secs(60), |s| s.is_empty())
            .await
            .context("the new pair's Services go while its decode has no ready group")?;
        let old_lws: Vec<_> = lws_of(&ns, "pd").await?.into_iter().filter(|l| l.labels()[REVISION] == old_revision).collect();
        assert_eq!(old_lws.len(), 2, "the old pair is still there");
        assert!(old_lws.iter().all(|l| l.spec.replicas.unwrap_or(1) >= 1), "{old_lws:?}");
        let old_services = ns.api::<Service>().list(&ListParams::default().labels(&format!("{SET}=pd,{REVISION}={old_revision}"))).await?;
        assert_eq!(old_services.items.len(), 2, "the old pair keeps serving");
        // Let the decode groups come back: the update completes.
        let gates = GateKeeper::start(&ns);
        gates.open();
        wait_settled(&ns, "pd", &[("prefill", 2), ("decode", 2)]).await?;
        drop(gates);
        assert!(services_only_for_complete_revisions(&recording, &["prefill", "decode"])? >= 2);
        Ok(())
    }))
    .await
}
