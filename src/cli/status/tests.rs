use serde_json::json;

use super::*;
use crate::cli::fixtures::{lws, progressing, rollout};

fn healthy(succeeded: Option<&str>) -> Rollout {
    let mut conditions = vec![];
    if let Some(s) = succeeded {
        conditions.push(json!({"type": "Succeeded", "status": s, "reason": "", "message": ""}));
    }
    let message = if succeeded == Some("False") {
        "Rollout progressing has been canceled"
    } else {
        "Rollout progressing has been completed"
    };
    rollout(json!({
        "observedGeneration": 1, "phase": "Healthy", "message": message,
        "currentStepIndex": 3, "currentStepState": "Completed", "conditions": conditions,
        "canaryStatus": {"currentStepIndex": 3, "currentStepState": "Completed", "nextStepIndex": -1,
            "podTemplateHash": "", "finalisingStep": "", "canaryRevision": "", "canaryReplicas": 0, "canaryReadyReplicas": 0}
    }))
}

#[test]
fn done_only_when_healthy_and_the_hold_is_gone() {
    assert_eq!(
        verdict(Some(&healthy(Some("True"))), Some(&lws(4, None))),
        Verdict::Succeeded
    );
    // Healthy from the previous release, but the webhook already holds the LWS for a new one.
    assert_eq!(
        verdict(Some(&healthy(Some("True"))), Some(&lws(4, Some("k1")))),
        Verdict::Waiting
    );
    // Never released: Healthy with no Succeeded condition.
    assert_eq!(
        verdict(Some(&healthy(None)), Some(&lws(4, None))),
        Verdict::Succeeded
    );
    for state in ["StepUpgrade", "StepPaused", "Completed"] {
        let r = rollout(progressing(2, state, 2));
        assert_eq!(
            verdict(Some(&r), Some(&lws(4, Some("k1")))),
            Verdict::Waiting,
            "{state}"
        );
    }
    // The LWS missing: nothing to judge yet.
    assert_eq!(
        verdict(Some(&healthy(Some("True"))), None),
        Verdict::Waiting
    );
}

#[test]
fn a_stale_status_is_not_judged() {
    let mut r = healthy(Some("True"));
    r.metadata.generation = Some(2);
    assert_eq!(verdict(Some(&r), Some(&lws(4, None))), Verdict::Waiting);
}

#[test]
fn cancel_disable_refusal_and_deletion_fail() {
    let v = verdict(Some(&healthy(Some("False"))), Some(&lws(4, None)));
    assert!(matches!(v, Verdict::Failed(m) if m.contains("cancelled") && m.contains("canceled")));
    let mut disabled = rollout(progressing(1, "StepPaused", 1));
    disabled.spec.disabled = true;
    assert!(
        matches!(verdict(Some(&disabled), Some(&lws(4, None))), Verdict::Failed(m) if m.contains("disabled"))
    );
    let refused = rollout(
        json!({"observedGeneration": 1, "phase": "Initial", "conditions": [
        {"type": "Accepted", "status": "False", "reason": "UnsupportedStrategy", "message": "blue-green is not supported yet"}]}),
    );
    assert!(
        matches!(verdict(Some(&refused), Some(&lws(4, None))), Verdict::Failed(m) if m.contains("UnsupportedStrategy"))
    );
    let mut terminating = rollout(progressing(1, "StepPaused", 1));
    terminating.status.as_mut().unwrap().phase = "Terminating".into();
    assert!(matches!(
        verdict(Some(&terminating), Some(&lws(4, None))),
        Verdict::Failed(_)
    ));
    assert!(
        matches!(verdict(None, Some(&lws(4, None))), Verdict::Failed(m) if m.contains("deleted"))
    );
}

#[test]
fn status_lines_name_phase_step_state_groups_and_traffic() {
    let r = rollout(progressing(1, "StepPaused", 1));
    assert_eq!(
        line(&r, Some(&lws(4, Some("k1")))),
        "Progressing | step 1/3 StepPaused | canary 1/1 groups ready | traffic 20% | Rollout is in step(1/3)"
    );
    // Step 2 is 50% of 4 groups = 2; while upgrading, the traffic is where it is going.
    let r = rollout(progressing(2, "StepUpgrade", 1));
    assert_eq!(
        line(&r, Some(&lws(4, Some("k1")))),
        "Progressing | step 2/3 StepUpgrade | canary 1/2 groups ready | traffic -> 50% | Rollout is in step(2/3)"
    );
    // Without the LWS the desired groups are unknown; paused shows in the phase.
    let mut r = rollout(progressing(2, "StepUpgrade", 1));
    r.spec.strategy.paused = true;
    assert!(
        line(&r, None)
            .starts_with("Progressing (paused) | step 2/3 StepUpgrade | canary 1/? groups ready")
    );
    assert_eq!(
        line(&healthy(Some("True")), Some(&lws(4, None))),
        "Healthy | step 3/3 Completed | Rollout progressing has been completed"
    );
    assert_eq!(line(&rollout(json!(null)), None), "<no status> | step 0/3");
}

#[test]
fn finalising_is_shown() {
    let mut s = progressing(3, "Completed", 4);
    s["canaryStatus"]["finalisingStep"] = json!("ResumeWorkload");
    let r = rollout(s);
    assert!(line(&r, Some(&lws(4, None))).contains("step 3/3 Completed finalising ResumeWorkload"));
    // Done: END is not shown, nor the last release's canary counters.
    let mut s = progressing(3, "Completed", 4);
    s["phase"] = json!("Healthy");
    s["canaryStatus"]["finalisingStep"] = json!("END");
    s["message"] = json!("Rollout progressing has been completed");
    assert_eq!(
        line(&rollout(s), Some(&lws(4, None))),
        "Healthy | step 3/3 Completed | Rollout progressing has been completed"
    );
}

#[test]
fn a_missed_deadline_or_an_automatic_rollback_fails_the_wait() {
    for why in ["ProgressDeadlineExceeded", "RolledBackOnDeadline"] {
        let r = rollout(json!({
            "observedGeneration": 1, "phase": "Progressing",
            "conditions": [{"type": "Progressing", "status": "False", "reason": why,
                "message": "step 1/3: the batch was not ready within 60s"}],
            "canaryStatus": {"currentStepIndex": 1, "currentStepState": "StepUpgrade",
                "nextStepIndex": 2, "podTemplateHash": "", "finalisingStep": "",
                "canaryRevision": "r2", "canaryReplicas": 1, "canaryReadyReplicas": 0}
        }));
        match verdict(Some(&r), Some(&lws(4, Some("k1")))) {
            Verdict::Failed(m) => assert!(m.starts_with(why) && m.contains("within 60s"), "{m}"),
            other => panic!("{why}: {other:?}"),
        }
    }
}

/// A pair release paused at step 1: set `pd` (prefill 2, decode 2) held on revision `h`, the
/// new revision `abc` with one prefill group ready and its decode group not.
fn pair_at_step_one() -> (Rollout, crate::api::DisaggregatedSet, Vec<LeaderWorkerSet>) {
    let set: crate::api::DisaggregatedSet = serde_json::from_value(json!({
        "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
        "metadata": {"name": "pd", "namespace": "demo", "generation": 2,
            "annotations": {"rollouts.kruise.io/stable-revision": "h"}},
        "spec": {"roles": [
            {"name": "prefill", "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "new"}]}}}}},
            {"name": "decode", "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "new"}]}}}}}
        ]}
    }))
    .expect("a valid set");
    let child = |role: &str, revision: &str, replicas: i32, ready: i32| -> LeaderWorkerSet {
        serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": format!("pd-0-{revision}-{role}"), "namespace": "demo",
                "generation": 1, "labels": {
                "disaggregatedset.x-k8s.io/name": "pd", "disaggregatedset.x-k8s.io/role": role,
                "disaggregatedset.x-k8s.io/revision": revision}},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2, "workerTemplate":
                {"spec": {"containers": [{"name": "c", "image": "x"}]}}}},
            "status": {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready}
        }))
        .expect("a valid LWS")
    };
    let lws = vec![
        child("prefill", "h", 2, 2),
        child("decode", "h", 2, 2),
        child("prefill", "abc", 1, 1),
        child("decode", "abc", 1, 0),
    ];
    (rollout(progressing(1, "StepPaused", 0)), set, lws)
}

#[test]
fn a_pair_release_shows_both_sides_of_every_role() {
    let (r, set, lws) = pair_at_step_one();
    let sides = pair_sides(&r, &set, &lws);
    assert!(sides.held);
    assert_eq!(
        pair_text(&sides),
        "prefill stable 2/2 canary 1/1 | decode stable 2/2 canary 0/1"
    );
    let line = line_of(&r, Some(Workload::Pair(&sides)));
    assert!(
        line.contains("canary 0/1 pairs ready | traffic 0% (20% once the new pair is complete) | prefill stable 2/2 canary 1/1 | decode stable 2/2 canary 0/1"),
        "{line}"
    );
    // Held: not over, whatever the Rollout says.
    assert_eq!(
        verdict_of(Some(&healthy(Some("True"))), Some(Workload::Pair(&sides))),
        Verdict::Waiting
    );
    let released = PairSides {
        held: false,
        ..sides
    };
    assert_eq!(
        verdict_of(
            Some(&healthy(Some("True"))),
            Some(Workload::Pair(&released))
        ),
        Verdict::Succeeded
    );
}

#[test]
fn a_pair_steps_groups_are_taken_in_each_slice() {
    let (r, _, _) = pair_at_step_one();
    // Step 1 (`replicas: 1`) of a set of two slices of two pairs: one pair in each slice.
    let sides = PairSides {
        held: true,
        pairs: 4,
        slices: 2,
        roles: vec![],
    };
    let line = line_of(&r, Some(Workload::Pair(&sides)));
    assert!(line.contains("canary 0/2 pairs ready"), "{line}");
}
