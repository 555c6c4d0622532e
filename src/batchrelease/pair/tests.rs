use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::plan::*;
use crate::api::batchrelease::BatchRelease;
use crate::batchrelease::names::batch_state::{READY, UPGRADING, VERIFYING};

fn int(i: i32) -> IntOrString {
    IntOrString::Int(i)
}
fn pct(s: &str) -> IntOrString {
    IntOrString::String(s.into())
}
fn groups(pairs: &[(&str, i32)]) -> Groups {
    pairs.iter().map(|(r, g)| (r.to_string(), *g)).collect()
}
fn roles(pairs: &[(&str, i32)]) -> Vec<(String, i32)> {
    pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
}

#[test]
fn a_step_gives_every_role_its_share_rounded_up_at_least_one_at_most_all() {
    // (share, role replicas, groups)
    let table = [
        (pct("50%"), 4, 2),
        (pct("50%"), 3, 2),
        (pct("10%"), 4, 1),
        (pct("0%"), 4, 1),
        (pct("100%"), 3, 3),
        (int(1), 4, 1),
        (int(0), 4, 1),
        (int(9), 4, 4),
        (pct("bogus"), 4, 1),
        (pct("50%"), 0, 0),
    ];
    for (share, replicas, want) in table {
        assert_eq!(
            role_groups(&share, replicas),
            want,
            "{share:?} of {replicas}"
        );
    }
}

#[test]
fn a_batch_covers_every_role_and_never_shrinks_what_is_written() {
    let r = roles(&[("prefill", 2), ("decode", 4)]);
    assert_eq!(
        batch_groups(&pct("25%"), &r, None),
        Ok(groups(&[("prefill", 1), ("decode", 1)]))
    );
    assert_eq!(
        batch_groups(&pct("50%"), &r, None),
        Ok(groups(&[("prefill", 1), ("decode", 2)]))
    );
    // A jump back keeps the groups the last batch wrote.
    let written = groups(&[("prefill", 2), ("decode", 3)]);
    assert_eq!(
        batch_groups(&pct("25%"), &r, Some(&written)),
        Ok(groups(&[("prefill", 2), ("decode", 3)]))
    );
    // A role scaled down mid-release caps what is kept.
    let r = roles(&[("prefill", 1), ("decode", 4)]);
    assert_eq!(
        batch_groups(&pct("25%"), &r, Some(&written)),
        Ok(groups(&[("prefill", 1), ("decode", 3)]))
    );
    let err =
        batch_groups(&pct("50%"), &roles(&[("prefill", 2), ("decode", 0)]), None).unwrap_err();
    assert!(err.contains("role decode"), "{err}");
}

fn child(slice: i32, role: &str, revision: &str, spec: i32, ready: i32) -> RoleLws {
    RoleLws {
        slice,
        role: role.into(),
        revision: revision.into(),
        spec_replicas: spec,
        generation: 2,
        observed_generation: Some(2),
        replicas: spec,
        ready,
    }
}

fn set(slices: i32, children: Vec<RoleLws>) -> SetObserved {
    SetObserved {
        name: "pd".into(),
        slices,
        roles: roles(&[("prefill", 2), ("decode", 2)]),
        update_revision: "new".into(),
        hold: Some("old".into()),
        release_groups: None,
        in_place: false,
        external: Vec::new(),
        children,
    }
}

#[test]
fn a_batch_is_ready_only_when_every_role_of_every_slice_has_its_groups_ready() {
    let want = groups(&[("prefill", 1), ("decode", 1)]);
    let stable = |slice| {
        vec![
            child(slice, "prefill", "old", 2, 2),
            child(slice, "decode", "old", 2, 2),
        ]
    };
    // (slices, new-revision LWSs, state, complete pairs ready, incomplete role)
    type Case = (i32, Vec<RoleLws>, &'static str, i32, Option<&'static str>);
    let table: Vec<Case> = vec![
        (1, vec![], UPGRADING, 0, None),
        (
            1,
            vec![child(0, "prefill", "new", 1, 1)],
            UPGRADING,
            0,
            Some("decode"),
        ),
        (
            1,
            vec![
                child(0, "prefill", "new", 1, 1),
                child(0, "decode", "new", 1, 0),
            ],
            VERIFYING,
            0,
            Some("decode"),
        ),
        (
            1,
            vec![
                child(0, "prefill", "new", 1, 0),
                child(0, "decode", "new", 1, 0),
            ],
            VERIFYING,
            0,
            None,
        ),
        (
            1,
            vec![
                child(0, "prefill", "new", 1, 1),
                child(0, "decode", "new", 1, 1),
            ],
            READY,
            1,
            None,
        ),
        // Slice 1 has not got its pair yet.
        (
            2,
            vec![
                child(0, "prefill", "new", 1, 1),
                child(0, "decode", "new", 1, 1),
            ],
            UPGRADING,
            1,
            None,
        ),
        (
            2,
            vec![
                child(0, "prefill", "new", 1, 1),
                child(0, "decode", "new", 1, 1),
                child(1, "prefill", "new", 1, 1),
                child(1, "decode", "new", 1, 1),
            ],
            READY,
            2,
            None,
        ),
    ];
    for (slices, new, state, ready, incomplete) in table {
        let mut children: Vec<RoleLws> = (0..slices).flat_map(stable).collect();
        children.extend(new.clone());
        let p = pair_progress(&set(slices, children), "new", &want, None);
        assert_eq!(p.state, state, "{new:?}");
        assert_eq!(p.ready, ready, "{new:?}");
        assert_eq!(p.incomplete_role.as_deref(), incomplete, "{new:?}");
    }
    // A status that trails its spec is not read as the batch's.
    let mut stale = child(0, "decode", "new", 1, 1);
    stale.observed_generation = Some(1);
    let p = pair_progress(
        &set(1, vec![child(0, "prefill", "new", 1, 1), stale]),
        "new",
        &want,
        None,
    );
    assert_eq!(p.state, UPGRADING);
}

fn br(partition: Option<i32>, status: serde_json::Value) -> BatchRelease {
    serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "BatchRelease",
        "metadata": {"name": "r", "namespace": "ns", "generation": 1},
        "spec": {
            "workloadRef": {"apiVersion": "disaggregatedset.x-k8s.io/v1",
                "kind": "DisaggregatedSet", "name": "pd"},
            "releasePlan": {"batches": [{"canaryReplicas": 1}, {"canaryReplicas": "100%"}],
                "batchPartition": partition, "rollingStyle": "Canary",
                "enableExtraWorkloadForCanary": true}
        },
        "status": status
    }))
    .unwrap()
}

#[test]
fn the_plan_writes_all_roles_in_one_annotation_and_only_while_held() {
    let now = Timestamp::UNIX_EPOCH;
    let observed = set(1, vec![]);
    let p = plan(
        &br(Some(0), json!({})),
        PairStyle::Beside,
        Some(&observed),
        now,
    );
    assert_eq!(
        p.release_groups,
        Some(groups(&[("prefill", 1), ("decode", 1)]))
    );
    assert_eq!(
        p.common
            .status
            .canary_status
            .as_ref()
            .and_then(|c| c.current_batch_state.as_deref()),
        Some(UPGRADING)
    );
    // Written already by this release: no second write.
    let ours = json!({"updateRevision": "new", "canaryStatus": {"currentBatch": 0}});
    let mut written = observed.clone();
    written.release_groups = Some(Ok(groups(&[("prefill", 1), ("decode", 1)])));
    let p = plan(
        &br(Some(0), ours.clone()),
        PairStyle::Beside,
        Some(&written),
        now,
    );
    assert_eq!(p.release_groups, None);
    // More groups written by this release (a jump back) are kept; the same groups left by
    // an earlier release (a third template restarting) are not this release's.
    let mut more = observed.clone();
    more.release_groups = Some(Ok(groups(&[("prefill", 2), ("decode", 2)])));
    assert_eq!(
        plan(&br(Some(0), ours), PairStyle::Beside, Some(&more), now).release_groups,
        None
    );
    assert_eq!(
        plan(&br(Some(0), json!({})), PairStyle::Beside, Some(&more), now).release_groups,
        Some(groups(&[("prefill", 1), ("decode", 1)]))
    );
    // The last batch: every group of every role.
    let p = plan(
        &br(Some(1), json!({})),
        PairStyle::Beside,
        Some(&written),
        now,
    );
    assert_eq!(
        p.release_groups,
        Some(groups(&[("prefill", 2), ("decode", 2)]))
    );
    // Not held (the hold was lifted, or not set yet): nothing written.
    let mut free = observed.clone();
    free.hold = None;
    let p = plan(&br(Some(0), json!({})), PairStyle::Beside, Some(&free), now);
    assert_eq!(p.release_groups, None);
    assert!(
        p.common
            .status
            .message
            .unwrap()
            .contains("waiting for the hold")
    );
    // A role without replicas: a clear message and Event, nothing written.
    let mut empty = observed.clone();
    empty.roles = roles(&[("prefill", 2), ("decode", 0)]);
    let p = plan(
        &br(Some(0), json!({})),
        PairStyle::Beside,
        Some(&empty),
        now,
    );
    assert_eq!(p.release_groups, None);
    assert!(p.common.status.message.unwrap().contains("role decode"));
    assert_eq!(p.common.events.len(), 1);
    // Finalising: Completed, nothing written (the Rollout lifts hold and groups together).
    let p = plan(&br(None, json!({})), PairStyle::Beside, Some(&written), now);
    assert_eq!(p.release_groups, None);
    assert_eq!(p.common.status.phase.as_deref(), Some("Completed"));
}

#[test]
fn partition_style_writes_its_style_with_the_groups_and_again_when_it_is_lost() {
    let now = Timestamp::UNIX_EPOCH;
    let ours = json!({"updateRevision": "new", "canaryStatus": {"currentBatch": 0}});
    // (style, the set's style annotation says in place, groups already written, write?)
    let table = [
        (PairStyle::InPlace, false, false, true),
        (PairStyle::InPlace, false, true, true),
        (PairStyle::InPlace, true, true, false),
        (PairStyle::Beside, true, true, true),
        (PairStyle::Beside, false, true, false),
    ];
    for (style, in_place, written, write) in table {
        let mut observed = set(1, vec![]);
        observed.in_place = in_place;
        if written {
            observed.release_groups = Some(Ok(groups(&[("prefill", 1), ("decode", 1)])));
        }
        let p = plan(&br(Some(0), ours.clone()), style, Some(&observed), now);
        assert_eq!(
            p.release_groups,
            write.then(|| groups(&[("prefill", 1), ("decode", 1)])),
            "{style:?}, in place {in_place}, written {written}"
        );
        assert_eq!(p.style, style);
    }
}

#[test]
fn partition_style_refuses_a_batch_that_would_leave_the_stable_pair_half() {
    // (prefill, decode replicas, share, refused)
    let table = [
        (2, 2, pct("50%"), false),
        (2, 2, pct("100%"), false),
        (1, 4, pct("25%"), true),
        (1, 4, pct("100%"), false),
        (2, 4, pct("75%"), true),
        (2, 4, pct("50%"), false),
    ];
    for (prefill, decode, share, refused) in table {
        let r = roles(&[("prefill", prefill), ("decode", decode)]);
        let g = batch_groups(&share, &r, None).unwrap();
        let why = half_held_pair(&g, &r, 0);
        assert_eq!(
            why.is_some(),
            refused,
            "{prefill}/{decode} {share:?}: {why:?}"
        );
    }
    let mut observed = set(1, vec![]);
    observed.roles = roles(&[("prefill", 1), ("decode", 4)]);
    let p = plan(
        &br(Some(0), json!({})),
        PairStyle::InPlace,
        Some(&observed),
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(p.release_groups, None, "nothing moves");
    let msg = p.common.status.message.unwrap();
    assert!(msg.contains("without prefill"), "{msg}");
    assert_eq!(p.common.events.len(), 1);
}

#[test]
fn blue_green_promotion_grows_every_role_whole_while_held_then_completes() {
    let now = Timestamp::UNIX_EPOCH;
    let blue_green = |policy: &str| {
        let mut b = br(
            None,
            json!({"updateRevision": "new", "phase": "Progressing",
                "canaryStatus": {"currentBatch": 1}}),
        );
        b.spec.release_plan.rolling_style = Some(crate::api::batchrelease::RollingStyle::BlueGreen);
        b.spec.release_plan.enable_extra_workload_for_canary = false;
        b.spec.release_plan.finalizing_policy = serde_json::from_value(json!(policy)).unwrap();
        b
    };
    let mut observed = set(1, vec![]);
    observed.roles = roles(&[("prefill", 2), ("decode", 4)]);
    observed.release_groups = Some(Ok(groups(&[("prefill", 1), ("decode", 1)])));
    // (policy, held, the groups written, phase)
    let table = [
        (
            "WaitResume",
            true,
            Some(groups(&[("prefill", 2), ("decode", 4)])),
            "Progressing",
        ),
        ("WaitResume", false, None, "Completed"),
        ("Immediate", true, None, "Completed"),
    ];
    for (policy, held, written, phase) in table {
        let mut o = observed.clone();
        if !held {
            o.hold = None;
        }
        let p = plan(&blue_green(policy), PairStyle::Beside, Some(&o), now);
        assert_eq!(p.release_groups, written, "{policy} held {held}");
        assert_eq!(
            p.common.status.phase.as_deref(),
            Some(phase),
            "{policy} held {held}"
        );
    }
}

#[test]
fn a_role_scaled_externally_mid_release_holds_the_batch_and_says_so() {
    let now = Timestamp::UNIX_EPOCH;
    let written = groups(&[("prefill", 1), ("decode", 1)]);
    let new_pair = |decode_ready| {
        vec![
            child(0, "prefill", "old", 2, 2),
            child(0, "decode", "old", 2, 2),
            child(0, "prefill", "new", 1, 1),
            child(0, "decode", "new", 1, decode_ready),
        ]
    };
    let mut observed = set(1, new_pair(1));
    observed.release_groups = Some(Ok(written.clone()));
    observed.external = vec!["decode".into()];
    // Batch 1 was ready; the step moved on to batch 2 after decode turned External.
    let stored = json!({"updateRevision": "new", "phase": "Progressing",
        "canaryStatus": {"currentBatch": 0, "currentBatchState": "Ready",
            "updatedReplicas": 1, "updatedReadyReplicas": 1}});
    // (batchPartition, decode's new groups ready, what the status must say)
    type Case = (i32, i32, &'static [&'static str]);
    let table: [Case; 3] = [
        (
            1,
            1,
            &[
                "role decode is scaled externally",
                "holds at batch 1",
                "Static",
            ],
        ),
        (0, 1, &["role decode is scaled externally", "batch 1"]),
        // The new pair loses decode meanwhile: still read, still said.
        (
            1,
            0,
            &[
                "role decode is scaled externally",
                "role decode has no ready group",
            ],
        ),
    ];
    for (partition, decode_ready, says) in table {
        let mut obs = observed.clone();
        obs.children = new_pair(decode_ready);
        let p = plan(
            &br(Some(partition), stored.clone()),
            PairStyle::Beside,
            Some(&obs),
            now,
        );
        assert_eq!(p.release_groups, None, "no batch is written while held");
        let c = p.common.status.canary_status.clone().unwrap();
        assert_eq!(c.current_batch, 0, "the batch held is the one written");
        assert_eq!(c.updated_ready_replicas, decode_ready);
        let message = p.common.status.message.clone().unwrap();
        for part in says {
            assert!(message.contains(part), "{message} lacks {part}");
        }
        assert!(
            p.common
                .events
                .iter()
                .any(|e| e.reason == "RoleScaledExternally" && e.note.contains("role decode")),
            "{:?}",
            p.common.events
        );
        // Said once: the same hold again is no new Warning.
        let mut again = br(Some(partition), stored.clone());
        again.status = Some(p.common.status.clone());
        let p = plan(&again, PairStyle::Beside, Some(&obs), now);
        assert!(
            p.common
                .events
                .iter()
                .all(|e| e.reason != "RoleScaledExternally"),
            "{:?}",
            p.common.events
        );
    }
    // External before anything was written: nothing is, and the status says why.
    let mut fresh = set(1, vec![]);
    fresh.external = vec!["prefill".into(), "decode".into()];
    let p = plan(
        &br(Some(0), json!({})),
        PairStyle::Beside,
        Some(&fresh),
        now,
    );
    assert_eq!(p.release_groups, None);
    let message = p.common.status.message.unwrap();
    assert!(
        message.contains("roles prefill, decode are scaled externally"),
        "{message}"
    );
    // Static again: the next batch is written.
    let mut back = observed.clone();
    back.external.clear();
    let p = plan(&br(Some(1), stored), PairStyle::Beside, Some(&back), now);
    assert_eq!(
        p.release_groups,
        Some(groups(&[("prefill", 2), ("decode", 2)]))
    );
}
