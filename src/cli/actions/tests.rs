use serde_json::json;

use super::*;
use crate::cli::fixtures::{lws, progressing, rollout};

#[test]
fn approve_sends_kubectl_kruises_patch_only_when_paused() {
    let paused = rollout(progressing(1, "StepPaused", 1));
    assert_eq!(
        approve_patch(&paused).unwrap(),
        json!({"status": {"canaryStatus": {"currentStepState": "StepReady"}}})
    );
    for state in ["StepUpgrade", "StepReady", "Completed", ""] {
        let r = rollout(progressing(1, state, 1));
        assert!(
            matches!(approve_patch(&r), Err(Refusal::State(_))),
            "{state}"
        );
    }
    assert!(approve_patch(&rollout(json!(null))).is_err());
}

#[test]
fn approve_of_a_blue_green_status_patches_blue_green_status() {
    let mut r = rollout(json!(null));
    r.status = Some(serde_json::from_value(json!({
        "blueGreenStatus": {"currentStepState": "StepPaused", "currentStepIndex": 1, "nextStepIndex": 2,
            "podTemplateHash": "", "finalisingStep": "", "updatedRevision": "x", "updatedReplicas": 1, "updatedReadyReplicas": 1}
    })).unwrap());
    assert_eq!(
        approve_patch(&r).unwrap(),
        json!({"status": {"blueGreenStatus": {"currentStepState": "StepReady"}}})
    );
}

#[test]
fn pause_and_resume_are_spec_merge_patches() {
    assert_eq!(
        pause_patch(),
        json!({"spec": {"strategy": {"paused": true}}})
    );
    assert_eq!(
        resume_patch(),
        json!({"spec": {"strategy": {"paused": null}}})
    );
}

fn with_steps(steps: serde_json::Value, current: i32) -> Rollout {
    let mut r = rollout(progressing(current, "StepPaused", 1));
    r.spec.strategy.canary.as_mut().unwrap().steps = serde_json::from_value(steps).unwrap();
    r
}

#[test]
fn fast_undo_jumps_to_the_previous_step_without_traffic_and_most_replicas() {
    // kubectl-kruise's own example: steps without traffic are the blue-green style
    // "scale up first" steps; among them the one with the most replicas wins.
    let r = with_steps(
        json!([{"replicas": "20%"}, {"replicas": "50%"}, {"replicas": "50%", "traffic": "50%"}, {"replicas": "100%", "traffic": "100%"}]),
        4,
    );
    let (patch, step) = fast_undo_patch(&r, None).unwrap();
    assert_eq!(step, 2);
    assert_eq!(
        patch,
        json!({"status": {"canaryStatus": {"nextStepIndex": 2}}})
    );
    // A tie goes to the later step (strictly greater while scanning backwards).
    let r = with_steps(
        json!([{"replicas": 2}, {"replicas": 2}, {"replicas": 3, "traffic": "10%"}]),
        3,
    );
    assert_eq!(fast_undo_patch(&r, None).unwrap().1, 2);
    // traffic "0%" counts as none.
    let r = with_steps(
        json!([{"replicas": 1, "traffic": "0%"}, {"replicas": 2, "traffic": "10%"}]),
        2,
    );
    assert_eq!(fast_undo_patch(&r, None).unwrap().1, 1);
}

#[test]
fn fast_undo_refusals() {
    let fixture = rollout(progressing(1, "StepPaused", 1));
    assert!(
        matches!(fast_undo_patch(&fixture, None), Err(Refusal::State(m)) if m.contains("first step"))
    );
    // Every earlier step of the fixture has traffic.
    let r = rollout(progressing(3, "StepUpgrade", 1));
    assert!(matches!(fast_undo_patch(&r, None), Err(Refusal::State(m)) if m.contains("--to-step")));
    assert_eq!(fast_undo_patch(&r, Some(1)).unwrap().1, 1);
    assert!(fast_undo_patch(&r, Some(3)).is_err());
    assert!(fast_undo_patch(&r, Some(0)).is_err());
    let beyond = rollout(progressing(7, "StepUpgrade", 1));
    assert!(matches!(
        fast_undo_patch(&beyond, None),
        Err(Refusal::Data(_))
    ));
}

#[test]
fn template_revert_replaces_the_template_from_the_revision_with_a_version_test() {
    let data = json!({"spec": {
        "leaderWorkerTemplate": {"$patch": "replace", "size": 2, "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "old"}]}}},
        "networkConfig": {"$patch": "replace", "subdomainPolicy": "Shared"}
    }});
    let patch = template_revert_patch(&lws(2, Some("k1")), &data).unwrap();
    assert_eq!(
        patch,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "replace", "path": "/spec/leaderWorkerTemplate", "value": {"size": 2, "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "old"}]}}}},
            {"op": "add", "path": "/spec/networkConfig", "value": {"subdomainPolicy": "Shared"}}
        ])
    );
    // It parses as a JSON patch (what the binary sends).
    let _: json_patch::Patch = serde_json::from_value(patch).unwrap();
    assert!(template_revert_patch(&lws(2, Some("k1")), &json!({})).is_err());
}

#[test]
fn undo_needs_a_release_in_flight() {
    assert_eq!(held_revision(&lws(2, Some("k1"))).unwrap(), "k1");
    assert!(
        matches!(held_revision(&lws(2, None)), Err(Refusal::State(m)) if m.contains("nothing to undo"))
    );
    assert!(held_revision(&lws(2, Some(""))).is_err());
}
