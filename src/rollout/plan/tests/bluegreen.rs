//! Blue-green stories: the release in `blueGreenStatus`, the switch only to a whole new side,
//! promotion that keeps the user's LWS serving capacity, rollback and a third template.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::world::{World, pct, step};
use super::{at_state, cond};
use crate::api::batchrelease::FinalizingPolicy;
use crate::rollout::names::{condition, reason};
use crate::rollout::plan::{BatchReleaseAction, HoldAction};
use crate::traffic::intent::TrafficIntent;

const SECOND: &str = "vllm-canary-rev2";

/// One group at 0%, all groups at 0%, all groups at 100%; approval after each.
fn steps() -> Vec<crate::api::rollout::CanaryStep> {
    vec![
        step(IntOrString::Int(1), Some("0%"), None),
        step(pct("100%"), Some("0%"), None),
        step(pct("100%"), Some("100%"), None),
    ]
}

/// (LWS the stable Service serves, weight of the route to the new side).
fn serving(w: &World) -> Option<(String, i32)> {
    match &w.traffic {
        Some(TrafficIntent::Release {
            stable_lws, route, ..
        }) => Some((stable_lws.lws.clone(), route.weight.unwrap_or(0))),
        Some(TrafficIntent::ToStable { stable_lws }) => Some((stable_lws.lws.clone(), 0)),
        _ => None,
    }
}

fn started(steps: Vec<crate::api::rollout::CanaryStep>) -> World {
    let mut w = World::blue_green(steps);
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Healthy");
    let done = w
        .status()
        .blue_green_status
        .expect("first sight: blueGreenStatus");
    assert_eq!(done.common.current_step_state, "Completed");
    w.change_template("rev2");
    w.until("step 1 paused", at_state("StepPaused", 1));
    w
}

#[test]
fn a_whole_blue_green_release_switches_to_a_whole_new_side_then_hands_it_to_the_users_lws() {
    let mut w = started(steps());
    let s = w.status();
    let bg = s.blue_green_status.clone().expect("blueGreenStatus");
    assert!(s.canary_status.is_none(), "only one sub-status, as Kruise");
    assert_eq!(
        (bg.updated_revision.as_str(), bg.updated_replicas),
        ("rev2", 1)
    );
    assert_eq!(*s.current_step_state.as_ref().unwrap(), "StepPaused");
    assert_eq!(serving(&w), Some(("vllm".into(), 0)), "0% allowed");
    w.approve();
    w.until("step 2 paused", at_state("StepPaused", 2));
    assert_eq!(w.status().blue_green_status.unwrap().updated_replicas, 4);
    w.approve();
    // Blue-green always pauses, also at a last step of 100%.
    w.until("step 3 paused", at_state("StepPaused", 3));
    assert_eq!(serving(&w), Some(("vllm".into(), 100)));
    w.stable_rolls = false;
    w.approve();
    w.until("resume", |w| w.at().2 == "ResumeWorkload");
    w.reconcile();
    // The hold was released only once everything was on the new side.
    let released = w
        .plans
        .iter()
        .position(|p| p.hold == HoldAction::Release)
        .expect("hold released");
    let switched = w
        .plans
        .iter()
        .position(|p| {
            matches!(&p.traffic, Some(TrafficIntent::Release { stable_lws, .. }) if stable_lws == SECOND)
        })
        .expect("switched");
    assert!(
        switched < released,
        "switch {switched} before resume {released}"
    );
    assert_eq!(serving(&w), Some((SECOND.into(), 100)));
    let br = w.obs.batch_release.as_ref().unwrap();
    assert_eq!(br.spec.release_plan.batch_partition, None);
    assert_eq!(
        br.spec.release_plan.finalizing_policy,
        Some(FinalizingPolicy::WaitResume)
    );
    assert!(
        w.status()
            .message
            .unwrap()
            .contains("waiting for LeaderWorkerSet vllm to roll")
    );
    // The user's LWS rolls while the second serves everything.
    let s = w.obs.workload.as_mut().unwrap();
    s.current_revision = "rev2".into();
    s.updated_replicas = 4;
    w.until("traffic back", |w| {
        w.at().2 == "FinalisingStepRouteTrafficToStable"
    });
    w.reconcile();
    assert_eq!(serving(&w), Some(("vllm".into(), 0)));
    assert!(
        w.obs.batch_release.is_some(),
        "second LWS kept until traffic moved"
    );
    w.until("healthy", |w| w.status().phase == "Healthy");
    assert!(w.obs.batch_release.is_none(), "second LWS gone");
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    assert_eq!(
        cond(&w, condition::SUCCEEDED).map(|c| c.0),
        Some("True".into())
    );
    for p in &w.plans {
        assert!(p.status.canary_status.is_none(), "never a canaryStatus");
        assert!(
            p.status.blue_green_status.is_some(),
            "always a blueGreenStatus"
        );
    }
}

#[test]
fn the_switch_waits_until_the_new_side_has_every_group_ready() {
    // One group at 100% of the traffic, then the switch: the second LWS must grow to 4 first.
    let mut w = started(vec![step(IntOrString::Int(1), Some("100%"), None)]);
    w.canary_healthy = false;
    w.approve();
    w.until("switching", |w| {
        w.at().2 == "FinalisingStepRouteTrafficToNew"
    });
    for _ in 0..5 {
        let p = w.reconcile();
        assert_eq!(p.hold, HoldAction::Keep, "no user group restarts yet");
        w.advance(5);
    }
    assert_eq!(
        w.obs.batch_release.as_ref().unwrap().canary.unwrap().ready,
        3
    );
    assert_eq!(
        serving(&w),
        Some(("vllm".into(), 100)),
        "the step's route stays"
    );
    assert!(w.status().message.unwrap().contains("(3/4 ready)"));
    w.obs
        .batch_release
        .as_mut()
        .unwrap()
        .canary
        .as_mut()
        .unwrap()
        .ready = 4;
    w.until("resume", |w| w.at().2 == "ResumeWorkload");
    assert_eq!(serving(&w), Some((SECOND.into(), 100)));
}

#[test]
fn a_rollback_before_promotion_moves_traffic_back_first_and_restarts_no_user_group() {
    let mut w = started(steps());
    w.approve();
    w.until("step 2 paused", at_state("StepPaused", 2));
    w.change_template("rev1");
    let p = w.reconcile();
    assert_eq!(
        cond(&w, condition::PROGRESSING),
        Some(("True".into(), reason::CANCELLING.into()))
    );
    assert_eq!(serving(&w), Some(("vllm".into(), 0)), "traffic back first");
    assert_eq!(p.batch_release, BatchReleaseAction::Keep);
    w.until("healthy", |w| w.status().phase == "Healthy");
    assert!(w.obs.batch_release.is_none());
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    let user = w.obs.workload.as_ref().unwrap();
    assert_eq!(
        (user.current_revision.as_str(), user.hold.as_ref()),
        ("rev1", None)
    );
    let bg = w.status().blue_green_status.unwrap();
    assert_eq!(bg.common.current_step_state, "Completed");
}

#[test]
fn a_third_template_mid_release_starts_over_on_it() {
    let mut w = started(steps());
    w.change_template("rev3");
    w.until("restarted", |w| {
        let c = w.canary();
        c.canary_revision == "rev3" && c.common.current_step_state == "StepPaused"
    });
    assert_eq!(w.canary().common.current_step_index, 1);
    assert_eq!(
        w.obs.workload.as_ref().unwrap().hold.as_deref(),
        Some("rev1"),
        "the user's LWS stays held on its revision"
    );
}

#[test]
fn a_blue_green_step_without_traffic_sends_nothing_to_the_new_side() {
    let w = started(vec![
        step(IntOrString::Int(1), None, None),
        step(pct("100%"), Some("100%"), None),
    ]);
    // Not the user's objects as they are (their selector would pick the new leaders too):
    // the stable Service pinned to the user's LWS, 0% to the new side.
    assert_eq!(serving(&w), Some(("vllm".into(), 0)));
}
