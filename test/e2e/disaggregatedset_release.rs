//! A DisaggregatedSet held by a Rollout, the set's side of a pair release
//! (docs/rollout-design.md, "Releasing a DisaggregatedSet canary-style"): the template change's
//! own admission records the hold, the set runs the new revision only at the groups the
//! release writes (both roles in one reconcile), the new pair serves only once complete, and
//! the release lifting the hold hands the set back to its own rolling update, which continues
//! from the canary without recreating it. The release's writes are made here with its field
//! managers, so this proves the set's half of the contract on its own.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Service;
use kube::{
    ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use lws_rollout::api::{
    DisaggregatedSet, LeaderWorkerSet, Rollout,
    disaggregatedset::{HELD_REVISION_ANNOTATION, RELEASE_GROUPS_ANNOTATION},
};
use serde_json::{Value, json};

use crate::{
    disaggregatedset::{
        REVISION, ROLE, Recording, Seen, apply, lws_of, pd, services_only_for_complete_revisions,
        wait_settled,
    },
    harness::{TestNs, condition, events_when, wait_for, wait_for_all},
};

const BATCHRELEASE: &str = "lws-rollout-batchrelease";
const RELEASE: &str = "lws-rollout-release";

/// An enabled canary Rollout of the set `pd` (its controller does not release sets yet; here
/// it only has to exist for the hold).
async fn rollout_of_pd(ns: &TestNs) -> anyhow::Result<()> {
    let rollout: Rollout = serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": "pd"},
        "spec": {"workloadRef": {"apiVersion": "disaggregatedset.x-k8s.io/v1",
                "kind": "DisaggregatedSet", "name": "pd"},
            "strategy": {"canary": {"enableExtraWorkloadForCanary": true,
                "steps": [{"replicas": 1}, {"replicas": "100%"}]}}}
    }))?;
    ns.api::<Rollout>()
        .create(&PostParams::default(), &rollout)
        .await?;
    Ok(())
}

fn hold_of(set: &DisaggregatedSet) -> Option<String> {
    set.annotations().get(HELD_REVISION_ANNOTATION).cloned()
}

/// A merge patch of the set's annotations under `manager`; the set as stored after it.
async fn annotate(
    ns: &TestNs,
    manager: &str,
    annotations: Value,
) -> anyhow::Result<DisaggregatedSet> {
    let pp = PatchParams {
        field_manager: Some(manager.into()),
        ..Default::default()
    };
    Ok(ns
        .api::<DisaggregatedSet>()
        .patch(
            "pd",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await?)
}

/// The set once its controller reports it held for the current generation: every role of the
/// held revision at its replicas and ready, the release's side the Rollout's business.
async fn wait_held(ns: &TestNs) -> anyhow::Result<DisaggregatedSet> {
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        "pd",
        Duration::from_secs(180),
        |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| {
                condition(s, "Progressing")
                    .is_some_and(|c| c.0 == "False" && c.1 == "HeldByRollout")
                    && condition(s, "Degraded").is_some_and(|c| c.0 == "False")
            })
        },
    )
    .await?
    .context("the set")
}

/// The set's own rolling update done once the hold is gone: the annotation change makes no new
/// generation, so a status that still says held is waited out before the settled checks.
async fn wait_released(ns: &TestNs, want: &[(&str, i32)]) -> anyhow::Result<()> {
    wait_for(
        &ns.api::<DisaggregatedSet>(),
        "pd",
        Duration::from_secs(240),
        |s: Option<&DisaggregatedSet>| {
            s.is_some_and(|s| {
                hold_of(s).is_none()
                    && condition(s, "Progressing")
                        .is_some_and(|c| c.0 == "False" && c.1 == "Complete")
            })
        },
    )
    .await?;
    wait_settled(ns, "pd", want).await?;
    Ok(())
}

/// (revision, role) → (replicas, uid) of the set's LWSs.
async fn lws_by_revision(ns: &TestNs) -> anyhow::Result<BTreeMap<(String, String), (i32, String)>> {
    Ok(lws_of(ns, "pd")
        .await?
        .iter()
        .map(|l| {
            (
                (l.labels()[REVISION].clone(), l.labels()[ROLE].clone()),
                (l.spec.replicas.unwrap_or(1), l.uid().unwrap_or_default()),
            )
        })
        .collect())
}

#[tokio::test]
async fn a_held_set_runs_the_release_groups_of_both_roles_and_resumes_from_the_canary()
-> anyhow::Result<()> {
    crate::harness::with_ns("ds-held", |ns| {
        Box::pin(async move {
            apply(&ns, &pd("pd", 2, 2, "vllm:1", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 2), ("decode", 2)]).await?;
            let stable = lws_by_revision(&ns).await?;
            let held = stable.keys().next().context("an LWS")?.0.clone();
            rollout_of_pd(&ns).await?;

            // The template change: the hold is in the stored object of the same write.
            apply(&ns, &pd("pd", 2, 2, "vllm:2", false)).await?;
            let set = ns.api::<DisaggregatedSet>().get("pd").await?;
            assert_eq!(hold_of(&set).as_deref(), Some(held.as_str()));
            let recording = Recording::start(&ns, "pd");

            // Reconciled for the new template: nothing of the new revision, the stable pair as
            // it was (same LWSs, same replicas).
            wait_held(&ns).await?;
            assert_eq!(lws_by_revision(&ns).await?, stable, "no stable LWS moved");

            // The release's first batch: a group of each role.
            annotate(
                &ns,
                BATCHRELEASE,
                json!({RELEASE_GROUPS_ANNOTATION: r#"{"prefill":1,"decode":1}"#}),
            )
            .await?;
            let both = wait_for_all(
                &ns.api::<LeaderWorkerSet>(),
                "disaggregatedset.x-k8s.io/name=pd",
                Duration::from_secs(120),
                |lws| {
                    lws.iter()
                        .filter(|l| l.labels()[REVISION] != held)
                        .filter(|l| {
                            l.status
                                .as_ref()
                                .and_then(|s| s.ready_replicas)
                                .unwrap_or(0)
                                >= 1
                        })
                        .count()
                        == 2
                },
            )
            .await
            .context("both roles' canaries ready")?;
            let canary: BTreeMap<String, (i32, String)> = both
                .iter()
                .filter(|l| l.labels()[REVISION] != held)
                .map(|l| {
                    (
                        l.labels()[ROLE].clone(),
                        (l.spec.replicas.unwrap_or(1), l.uid().unwrap_or_default()),
                    )
                })
                .collect();
            let new_revision = both
                .iter()
                .map(|l| l.labels()[REVISION].clone())
                .find(|r| *r != held)
                .context("the new revision")?;
            assert_eq!(
                canary.values().map(|(r, _)| *r).collect::<Vec<_>>(),
                [1, 1],
                "a group per role"
            );
            // The new pair serves once complete; the stable one still does.
            wait_for_all(
                &ns.api::<Service>(),
                "disaggregatedset.x-k8s.io/name=pd",
                Duration::from_secs(60),
                |svcs| {
                    let of = |r: &str| {
                        svcs.iter()
                            .filter(|s| s.labels().get(REVISION).map(String::as_str) == Some(r))
                            .count()
                    };
                    of(&new_revision) == 2 && of(&held) == 2
                },
            )
            .await
            .context("both pairs' Services")?;
            let now = lws_by_revision(&ns).await?;
            for (key, value) in &stable {
                assert_eq!(now.get(key), Some(value), "stable {key:?} unchanged");
            }
            // Both canaries were created at their batch (not at 0 and stepped up), and no
            // Service of the new pair appeared before both roles had a ready group.
            for item in recording.seen() {
                if let Seen::Lws(l) = item
                    && l.labels()[REVISION] == new_revision
                {
                    assert_eq!(l.spec.replicas, Some(1), "{} as first seen", l.name_any());
                }
            }
            ensure!(
                services_only_for_complete_revisions(&recording, &["prefill", "decode"])? >= 2,
                "the new pair's Services were seen appearing"
            );
            drop(recording);

            // Approve: the release lifts the hold and its groups in one write.
            let set = annotate(
                &ns,
                RELEASE,
                json!({HELD_REVISION_ANNOTATION: null, RELEASE_GROUPS_ANNOTATION: null}),
            )
            .await?;
            assert_eq!(
                hold_of(&set),
                None,
                "the release's own write lifts the hold"
            );
            wait_released(&ns, &[("prefill", 2), ("decode", 2)]).await?;
            let done = lws_by_revision(&ns).await?;
            for (role, (_, uid)) in &canary {
                let (replicas, now_uid) = done
                    .get(&(new_revision.clone(), role.clone()))
                    .with_context(|| format!("{role} of the new revision"))?;
                assert_eq!(*replicas, 2);
                assert_eq!(now_uid, uid, "{role}'s canary LWS kept, not recreated");
            }
            assert!(
                done.keys().all(|(r, _)| *r == new_revision),
                "the held pair is gone: {done:?}"
            );
            Ok(())
        })
    })
    .await
}

#[tokio::test]
async fn another_writer_dropping_the_hold_gets_it_back() -> anyhow::Result<()> {
    crate::harness::with_ns("ds-hold-back", |ns| {
        Box::pin(async move {
            apply(&ns, &pd("pd", 1, 1, "vllm:1", false)).await?;
            wait_settled(&ns, "pd", &[("prefill", 1), ("decode", 1)]).await?;
            let held = lws_of(&ns, "pd").await?[0].labels()[REVISION].clone();
            rollout_of_pd(&ns).await?;
            apply(&ns, &pd("pd", 1, 1, "vllm:2", false)).await?;

            // A merge patch by kubectl removing it.
            let set = annotate(&ns, "kubectl", json!({HELD_REVISION_ANNOTATION: null})).await?;
            assert_eq!(hold_of(&set).as_deref(), Some(held.as_str()));
            // A whole-object replace without it.
            let mut set = ns.api::<DisaggregatedSet>().get("pd").await?;
            set.annotations_mut().remove(HELD_REVISION_ANNOTATION);
            let pp = PostParams {
                field_manager: Some("kubectl".into()),
                ..Default::default()
            };
            let set = ns
                .api::<DisaggregatedSet>()
                .replace("pd", &pp, &set)
                .await?;
            assert_eq!(hold_of(&set).as_deref(), Some(held.as_str()));
            wait_held(&ns).await?;
            ensure!(
                lws_of(&ns, "pd")
                    .await?
                    .iter()
                    .all(|l| l.labels()[REVISION] == held),
                "nothing of the new revision while held"
            );

            // Release groups that cannot be read: said in the status and an Event, nothing
            // of the new revision made.
            annotate(
                &ns,
                BATCHRELEASE,
                json!({RELEASE_GROUPS_ANNOTATION: "prefill=1"}),
            )
            .await?;
            wait_for(
                &ns.api::<DisaggregatedSet>(),
                "pd",
                Duration::from_secs(60),
                |s: Option<&DisaggregatedSet>| {
                    s.and_then(|s| condition(s, "Degraded"))
                        .is_some_and(|c| c.0 == "True" && c.1 == "InvalidReleaseGroups")
                },
            )
            .await?;
            events_when(&ns, Duration::from_secs(60), |events| {
                events.iter().any(|e| {
                    e.reason.as_deref() == Some("InvalidReleaseGroups")
                        && e.type_.as_deref() == Some("Warning")
                })
            })
            .await
            .context("a Warning event")?;
            ensure!(
                lws_of(&ns, "pd")
                    .await?
                    .iter()
                    .all(|l| l.labels()[REVISION] == held),
                "nothing of the new revision for unreadable groups"
            );

            // The release's own write lifts it (and its groups); the set then rolls on its own.
            let set = annotate(
                &ns,
                RELEASE,
                json!({HELD_REVISION_ANNOTATION: null, RELEASE_GROUPS_ANNOTATION: null}),
            )
            .await?;
            assert_eq!(hold_of(&set), None);
            wait_released(&ns, &[("prefill", 1), ("decode", 1)]).await?;
            ensure!(
                lws_of(&ns, "pd")
                    .await?
                    .iter()
                    .all(|l| l.labels()[REVISION] != held),
                "rolled to the new revision"
            );
            Ok(())
        })
    })
    .await
}
