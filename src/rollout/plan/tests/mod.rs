//! Table and story tests of the Rollout plan: plain data in, plan out, driven through whole
//! releases by `world`.

mod analysis;
mod bluegreen;
mod deadline;
mod pair;
mod partition;
mod world;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use self::world::{World, pct, step, three_steps};
use crate::api::rollout::{FinalisingStep, StepState};
use crate::rollout::names::{condition, event, reason};
use crate::rollout::plan::{BatchReleaseAction, FinalizerAction, HoldAction, plan, status};
use crate::traffic::intent::{CanaryRoute, TrafficIntent};

fn weight(w: &World) -> Option<i32> {
    match &w.traffic {
        Some(TrafficIntent::Release { route, .. }) => route.weight,
        // Everything to stable, the split gone from the route.
        Some(TrafficIntent::ToStable { .. }) => Some(0),
        _ => None,
    }
}

fn cond(w: &World, type_: &str) -> Option<(String, String)> {
    status::condition(&w.status(), type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn at_state(state: &'static str, index: i32) -> impl Fn(&World) -> bool {
    move |w| {
        w.canary().common.current_step_index == index
            && w.canary().common.current_step_state == state
    }
}

/// Healthy, then a template change up to step 1's pause.
fn started(steps: Vec<crate::api::rollout::CanaryStep>) -> World {
    let mut w = World::new(steps);
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Healthy");
    w.change_template("rev2");
    w.until("step 1 paused", at_state("StepPaused", 1));
    w
}

#[test]
fn whole_canary_release_three_steps_with_approval() {
    let mut w = World::new(three_steps());
    let p = w.reconcile();
    assert_eq!(p.finalizer, FinalizerAction::Add);
    assert!(p.hash_annotation.is_some());
    assert_eq!(w.status().phase.as_str(), "Healthy");
    assert_eq!(
        w.status().message.as_deref(),
        Some("workload deployment is completed")
    );
    assert_eq!(
        w.at().1,
        "Completed",
        "pre-populated so tools can tell 'done'"
    );
    assert_eq!(w.status().observed_generation, Some(1));

    w.change_template("rev2");
    let p = w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Progressing");
    assert_eq!(
        cond(&w, condition::PROGRESSING),
        Some(("True".into(), reason::INITIALIZING.into()))
    );
    assert_eq!(
        p.requeue_after,
        Some(Duration::from_secs(3)),
        "Kruise's 3 s before rolling"
    );
    assert_eq!(
        weight(&w),
        Some(0),
        "stable pinned before any canary group exists"
    );
    assert_eq!(w.canary().canary_revision, "rev2");
    assert_eq!(w.canary().common.stable_revision.as_deref(), Some("rev1"));

    w.until("step 1 upgrade", at_state("StepUpgrade", 1));
    let br = w.obs.batch_release.clone().expect("BatchRelease applied");
    assert_eq!(br.spec.release_plan.batch_partition, Some(0));
    assert_eq!(
        weight(&w),
        Some(0),
        "no weight before the canary group is ready"
    );
    w.until("step 1 traffic", at_state("StepTrafficRouting", 1));
    assert!(
        w.plans
            .last()
            .unwrap()
            .events
            .iter()
            .any(|e| e.note == "upgrade step(1) canary pods with new versions done")
    );
    w.until("step 1 paused", at_state("StepPaused", 1));
    assert_eq!(weight(&w), Some(5));
    assert_eq!(
        w.status().message.as_deref(),
        Some("Rollout is in step(1/3), and you need manually confirm to enter the next step")
    );
    // Argo CD: Suspended = StepPaused + Progressing; top-level mirrors for kubectl get.
    assert_eq!(
        w.status().current_step_state.as_ref().map(|s| s.as_str()),
        Some("StepPaused")
    );
    assert_eq!(w.status().current_step_index, Some(1));
    assert_eq!(w.canary().canary_replicas, 1);
    assert_eq!(w.canary().canary_ready_replicas, 1);
    let p = w.reconcile();
    assert_eq!(p.requeue_after, None, "waiting for approval needs no timer");

    w.approve();
    w.until("step 2 paused", at_state("StepPaused", 2));
    assert_eq!(weight(&w), Some(50));
    assert_eq!(
        w.obs
            .batch_release
            .as_ref()
            .unwrap()
            .spec
            .release_plan
            .batch_partition,
        Some(1)
    );
    assert_eq!(w.canary().canary_replicas, 2, "50% of 4 groups");

    w.approve();
    w.until("finalising", |w| {
        status::progressing_reason(&w.status()) == reason::FINALISING
    });
    assert_eq!(
        w.traffic,
        Some(TrafficIntent::Restored),
        "step 3 has no traffic: split taken down"
    );
    assert_eq!(w.canary().canary_replicas, 4);
    w.until("healthy", |w| w.status().phase == "Healthy");
    assert_eq!(
        cond(&w, condition::PROGRESSING),
        Some(("False".into(), reason::COMPLETED.into()))
    );
    assert_eq!(
        cond(&w, condition::SUCCEEDED).map(|c| c.0),
        Some("True".into())
    );
    assert_eq!(
        w.status().message.as_deref(),
        Some("Rollout progressing has been completed")
    );
    assert_eq!(w.at().1, "Completed");
    assert_eq!(w.at().2, "END");
    assert!(
        w.obs.batch_release.is_none(),
        "BatchRelease (and canary) deleted"
    );
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None);
    // Finalising order, as persisted in status across reconciles (each reconcile goes as far
    // as the cluster allows, so a record may skip steps that were already satisfied).
    let mut order: Vec<String> = w
        .plans
        .iter()
        .filter_map(|p| p.status.canary_status.as_ref())
        .map(|c| c.common.finalising_step.to_string())
        .filter(|s| !s.is_empty())
        .collect();
    order.dedup();
    assert_eq!(
        order,
        [
            "ResumeWorkload",
            "FinalisingStepRouteTrafficToStable",
            "ReleaseWorkloadControl",
            "END"
        ]
    );
    // Every step transition published an event.
    let transitions = w
        .plans
        .iter()
        .flat_map(|p| &p.events)
        .filter(|e| e.note.contains(" -> step("))
        .count();
    assert!(transitions >= 10, "{transitions} step-transition events");
    let last = w.reconcile();
    assert_eq!(
        last.traffic, None,
        "a Healthy Rollout leaves traffic objects alone"
    );
}

#[test]
fn success_releases_the_hold_first_and_moves_traffic_only_when_the_stable_groups_are_ready() {
    let mut steps = three_steps();
    steps[2].traffic = Some("100%".into());
    let mut w = started(steps);
    w.stable_rolls = false;
    w.approve();
    w.until("step 2 paused", at_state("StepPaused", 2));
    w.approve();
    w.until("resume", |w| w.at().2 == "ResumeWorkload");
    w.reconcile();
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None, "hold released");
    assert_eq!(
        weight(&w),
        Some(100),
        "canary keeps serving while the stable LWS rolls"
    );
    assert!(
        w.status()
            .message
            .unwrap()
            .contains("waiting for LeaderWorkerSet vllm to roll")
    );
    let br = w.obs.batch_release.as_ref().unwrap();
    assert_eq!(br.spec.release_plan.batch_partition, None);
    assert_eq!(
        br.spec.release_plan.finalizing_policy,
        Some(crate::api::batchrelease::FinalizingPolicy::WaitResume)
    );
    // The canary gives groups back as stable groups roll (the BatchRelease's part): its share
    // follows the groups it still has ready, each keeping the load it had.
    let give_back = |w: &mut World, spec: i32, ready: i32| {
        let c = w
            .obs
            .batch_release
            .as_mut()
            .unwrap()
            .canary
            .as_mut()
            .unwrap();
        c.spec_replicas = spec;
        c.ready = ready;
        w.reconcile();
    };
    give_back(&mut w, 3, 4);
    assert_eq!(weight(&w), Some(75), "the spec shrank: its share first");
    give_back(&mut w, 3, 3);
    assert_eq!(weight(&w), Some(75));
    give_back(&mut w, 1, 1);
    assert_eq!(weight(&w), Some(25));
    give_back(&mut w, 1, 0);
    assert_eq!(
        weight(&w),
        Some(0),
        "no weight to a canary with no ready group"
    );
    give_back(&mut w, 1, 1);
    // The stable LWS rolls.
    let s = w.obs.workload.as_mut().unwrap();
    s.current_revision = "rev2".into();
    s.updated_replicas = 4;
    w.until("traffic to stable", |w| {
        w.at().2 == "FinalisingStepRouteTrafficToStable"
    });
    w.reconcile();
    assert_eq!(weight(&w), Some(0));
    assert!(
        w.obs.batch_release.is_some(),
        "canary still there while traffic moves"
    );
    w.until("healthy", |w| w.status().phase == "Healthy");
}

#[test]
fn pause_with_duration_requeues_exactly_and_resumes_at_the_right_time() {
    let mut w = started(vec![
        step(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1),
            Some("5%"),
            Some(60),
        ),
        step(pct("100%"), Some("100%"), Some(0)),
    ]);
    let p = w.plans.last().unwrap().clone();
    assert_eq!(p.requeue_after, Some(Duration::from_secs(60)));
    assert_eq!(
        w.status().message.as_deref(),
        Some("Rollout is in step(1/2), and wait duration(60 seconds) to enter the next step")
    );
    w.advance(59);
    let p = w.reconcile();
    assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));
    assert_eq!(w.at().1, "StepPaused");
    w.advance(1);
    w.reconcile();
    assert_eq!(w.at().0, 2, "moved on at exactly lastUpdateTime + 60 s");
}

#[test]
fn spec_strategy_paused_stops_and_resumes() {
    let mut w = started(three_steps());
    w.approve();
    w.obs.rollout.spec.strategy.paused = true;
    w.reconcile();
    assert_eq!(
        cond(&w, condition::PROGRESSING),
        Some(("True".into(), reason::PAUSED.into()))
    );
    assert_eq!(
        w.status().message.as_deref(),
        Some("Rollout has been paused, you can resume it by kube-cli")
    );
    let before = w.at();
    w.advance(600);
    w.reconcile();
    assert_eq!(w.at(), before, "nothing moves while paused");
    w.obs.rollout.spec.strategy.paused = false;
    w.until("step 2 paused", at_state("StepPaused", 2));
}

#[test]
fn next_step_index_jumps_by_status_patch() {
    let mut w = started(three_steps());
    let mut s = w.status();
    s.canary_status.as_mut().unwrap().common.next_step_index = 3;
    w.obs.rollout.status = Some(s);
    w.reconcile();
    assert_eq!(
        (w.at().0, w.at().1.as_str()),
        (3, "BeforeStepUpgrade"),
        "canary has 1 group, step 3 wants 4"
    );
    assert_eq!(w.canary().common.next_step_index, -1);
    // A value out of range is corrected, not followed.
    let mut w = started(three_steps());
    let mut s = w.status();
    s.canary_status.as_mut().unwrap().common.next_step_index = 9;
    w.obs.rollout.status = Some(s);
    w.reconcile();
    assert_eq!(w.at().0, 1);
    assert_eq!(w.canary().common.next_step_index, 2);
}

#[test]
fn rollback_cancels_traffic_to_stable_first_then_removes_the_canary() {
    let mut w = started(three_steps());
    assert_eq!(weight(&w), Some(5));
    w.change_template("rev1");
    let p = w.reconcile();
    assert_eq!(
        cond(&w, condition::PROGRESSING),
        Some(("True".into(), reason::CANCELLING.into()))
    );
    assert_eq!(w.at().2, "FinalisingStepRouteTrafficToStable");
    assert_eq!(weight(&w), Some(0), "traffic back to stable first");
    assert_eq!(
        p.batch_release,
        BatchReleaseAction::Keep,
        "canary untouched until traffic moved"
    );
    assert_eq!(p.hold, HoldAction::Keep);
    let mut deleted_with_weight = None;
    for _ in 0..20 {
        if w.status().phase == "Healthy" {
            break;
        }
        let p = w.reconcile();
        if p.batch_release == BatchReleaseAction::Delete {
            deleted_with_weight = Some(weight(&w));
        }
        if let Some(d) = p.requeue_after {
            w.advance(i64::try_from(d.as_secs()).unwrap());
        }
    }
    assert_eq!(
        deleted_with_weight,
        Some(Some(0)),
        "canary removed only after weight 0"
    );
    assert_eq!(w.status().phase.as_str(), "Healthy");
    assert_eq!(
        cond(&w, condition::SUCCEEDED).map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(
        w.status().message.as_deref(),
        Some("Rollout progressing has been canceled")
    );
    assert_eq!(
        w.at().1,
        "Completed",
        "no stale StepPaused after a cancel (Kruise #339)"
    );
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    assert!(w.obs.batch_release.is_none());
    assert_eq!(
        w.obs.workload.as_ref().unwrap().current_revision,
        "rev1",
        "no stable group moved"
    );
}

#[test]
fn third_template_mid_release_restarts_the_canary_on_it() {
    let mut w = started(three_steps());
    w.change_template("rev3");
    let p = w.reconcile();
    assert!(
        p.events
            .iter()
            .any(|e| e.note.contains("continuous publishing"))
    );
    assert_eq!(weight(&w), Some(0));
    w.until("restarted", |w| w.canary().canary_revision == "rev3");
    assert!(
        w.plans
            .iter()
            .any(|p| p.batch_release == BatchReleaseAction::Delete)
    );
    assert_eq!(
        w.canary().common.stable_revision.as_deref(),
        Some("rev1"),
        "the hold still names rev1"
    );
    w.until("step 1 paused again", at_state("StepPaused", 1));
    match &w.traffic {
        Some(TrafficIntent::Release {
            canary_lws, route, ..
        }) => {
            assert_eq!(canary_lws, "vllm-canary-rev3");
            assert_eq!(route.weight, Some(5));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rollback_during_a_reset_cancels_and_cleans_up() {
    let mut w = started(three_steps());
    w.change_template("rev3");
    w.reconcile();
    w.change_template("rev1");
    w.until("healthy", |w| w.status().phase == "Healthy");
    assert_eq!(
        cond(&w, condition::SUCCEEDED).map(|c| c.0),
        Some("False".into())
    );
    assert!(w.obs.batch_release.is_none());
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None);
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    assert_eq!(w.at().1, "Completed");
}

#[test]
fn disabling_mid_release_releases_the_workload_and_restores_traffic() {
    let mut w = started(three_steps());
    w.obs.rollout.spec.disabled = true;
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Disabling");
    assert_eq!(
        w.status().message.as_deref(),
        Some("Disabling rollout, release resources")
    );
    assert_eq!(weight(&w), Some(0));
    w.until("disabled", |w| w.status().phase == "Disabled");
    assert_eq!(w.status().message.as_deref(), Some("Rollout is disabled"));
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    assert!(w.obs.batch_release.is_none());
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None);
    w.change_template("rev3");
    let p = w.reconcile();
    assert_eq!(
        p.hold,
        HoldAction::Release,
        "a disabled Rollout holds nothing"
    );
    assert_eq!(w.status().phase.as_str(), "Disabled");
    w.obs.rollout.spec.disabled = false;
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Healthy");
}

#[test]
fn deleting_mid_release_finalises_then_drops_the_finalizer() {
    let mut w = started(three_steps());
    w.obs.rollout.metadata.deletion_timestamp = Some(Time(w.now));
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Terminating");
    assert_eq!(
        cond(&w, condition::TERMINATING),
        Some(("True".into(), reason::IN_TERMINATING.into()))
    );
    let mut removed = false;
    for _ in 0..20 {
        let p = w.reconcile();
        if p.finalizer == FinalizerAction::Remove {
            removed = true;
            break;
        }
        w.advance(3);
    }
    assert!(removed);
    assert_eq!(
        cond(&w, condition::TERMINATING),
        Some(("False".into(), reason::COMPLETED.into()))
    );
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    assert!(w.obs.batch_release.is_none());
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None);
}

/// A disable or delete finalises in its own order from the top, whatever `finalisingStep` an
/// earlier finalise left: resuming another order's step skips steps. Found by the crash test: a
/// Rollout deleted right after a template change (before it reconciled it) met the last
/// release's `END` and dropped its finalizer with the new template's hold still on the LWS,
/// which then never rolled.
#[test]
fn a_disable_or_delete_runs_its_whole_order_whatever_step_was_left() {
    fn delete(w: &mut World) {
        w.obs.rollout.metadata.deletion_timestamp = Some(Time(w.now));
    }
    fn disable(w: &mut World) {
        w.obs.rollout.spec.disabled = true;
    }
    /// A release disabled mid-way, then re-enabled (which starts the status afresh: no
    /// finalising step left); the next template is changed but not yet reconciled.
    fn after_a_disabled_release(w: &mut World) {
        disable(w);
        w.until("disabled", |w| w.status().phase == "Disabled");
        w.obs.rollout.spec.disabled = false;
        w.reconcile();
        assert_eq!(w.status().phase.as_str(), "Healthy");
        assert_eq!(w.canary().common.finalising_step, "");
        w.change_template("rev3");
    }
    /// A success finalise stopped at RestoreStableService (the success order deletes the
    /// BatchRelease last; the disable/delete order, earlier).
    fn mid_success_finalise(w: &mut World) {
        w.stable_rolls = false;
        w.approve();
        w.until("step 2 paused", at_state("StepPaused", 2));
        w.approve();
        w.until("resume", |w| {
            w.at().2 == FinalisingStep::ResumeWorkload.as_str()
        });
        let mut status = w.status();
        status
            .canary_status
            .as_mut()
            .unwrap()
            .common
            .finalising_step = FinalisingStep::RestoreStableService;
        w.obs.rollout.status = Some(status);
    }
    type Case = (&'static str, fn(&mut World), fn(&mut World));
    let cases: [Case; 3] = [
        (
            "deleted after a disabled release",
            after_a_disabled_release,
            delete,
        ),
        ("deleted mid success finalise", mid_success_finalise, delete),
        (
            "disabled mid success finalise",
            mid_success_finalise,
            disable,
        ),
    ];
    for (name, setup, act) in cases {
        let mut w = started(three_steps());
        setup(&mut w);
        assert!(
            w.obs.workload.as_ref().unwrap().hold.is_some() || w.obs.batch_release.is_some(),
            "{name}: nothing to release in the setup"
        );
        act(&mut w);
        let mut finished = false;
        for _ in 0..20 {
            let p = w.reconcile();
            if p.finalizer == FinalizerAction::Remove || w.status().phase == "Disabled" {
                finished = true;
                break;
            }
            w.advance(3);
        }
        assert!(finished, "{name}: never finished");
        assert_eq!(
            w.obs.workload.as_ref().unwrap().hold,
            None,
            "{name}: the hold outlived the Rollout"
        );
        assert!(w.obs.batch_release.is_none(), "{name}: BatchRelease left");
        assert_eq!(w.traffic, Some(TrafficIntent::Restored), "{name}");
    }
}

#[test]
fn refused_rollouts_say_why_and_keep_a_canary_status() {
    type Case = (&'static str, fn(&mut World), &'static str, &'static str);
    let cases: [Case; 2] = [
        (
            "no strategy (admission refuses it; one stored before)",
            |w| w.obs.rollout.spec.strategy.canary = None,
            reason::UNSUPPORTED_STRATEGY,
            "strategy has no canary",
        ),
        (
            "second rollout",
            |w| w.obs.conflicting_rollout = Some("first".into()),
            reason::WORKLOAD_CONFLICT,
            "already released by Rollout first",
        ),
    ];
    for (what, change, why, text) in cases {
        let mut w = World::new(three_steps());
        change(&mut w);
        let p = w.reconcile();
        let c = status::condition(&w.status(), condition::ACCEPTED)
            .cloned()
            .expect(what);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", why),
            "{what}"
        );
        assert!(c.message.contains(text), "{what}: {}", c.message);
        assert_eq!(w.status().phase.as_str(), "Initial", "{what}");
        assert!(
            w.status().canary_status.is_some(),
            "{what}: Argo CD indexes canaryStatus"
        );
        assert!(
            p.events
                .iter()
                .any(|e| e.severity == crate::k8s::events::Severity::Warning
                    && e.reason == event::NOT_ACCEPTED),
            "{what}"
        );
        let again = w.reconcile();
        assert!(
            !again.events.iter().any(|e| e.reason == event::NOT_ACCEPTED),
            "{what}: event once"
        );
    }
}

/// Only Rollouts of a LeaderWorkerSet are ours; any other (a Deployment's, stored under
/// Kruise's CRD) is never reconciled, so it gets no finalizer, status, Event or traffic write.
#[test]
fn only_rollouts_of_a_leaderworkerset_are_ours() {
    use crate::rollout::plan::accept::ours;
    let cases: [(&str, &str, bool); 5] = [
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", true),
        ("apps/v1", "Deployment", false),
        ("apps.kruise.io/v1alpha1", "CloneSet", false),
        ("leaderworkerset.x-k8s.io/v2", "LeaderWorkerSet", false),
        ("leaderworkerset.x-k8s.io/v1", "StatefulSet", false),
    ];
    for (api_version, kind, want) in cases {
        let mut r = world::rollout(three_steps());
        r.spec.workload_ref.api_version = api_version.into();
        r.spec.workload_ref.kind = kind.into();
        assert_eq!(ours(&r), want, "{api_version} {kind}");
    }
}

/// A second Rollout for a workload that another Rollout is releasing — refused, then disabled
/// or deleted — never touches that release: no hold released, no traffic intent, and a delete
/// only drops its own finalizer.
#[test]
fn a_refused_rollout_disabled_or_deleted_leaves_the_running_release_alone() {
    fn second(w: &World) -> World {
        let mut other = World::new(three_steps());
        other.obs.workload = w.obs.workload.clone();
        other.obs.rollout.metadata.name = Some("vllm-again".into());
        other.obs.rollout.metadata.uid = Some("again-uid".into());
        other.obs.conflicting_rollout = Some("vllm".into());
        other
    }
    let running = started(three_steps());
    assert!(running.obs.workload.as_ref().unwrap().hold.is_some());
    type Case = (&'static str, fn(&mut World));
    let cases: [Case; 3] = [
        ("left alone", |_| {}),
        ("disabled", |w| w.obs.rollout.spec.disabled = true),
        ("deleted", |w| {
            w.obs.rollout.metadata.deletion_timestamp = Some(Time(w.now));
        }),
    ];
    for (what, act) in cases {
        let mut other = second(&running);
        let first = other.reconcile();
        assert_eq!(first.finalizer, FinalizerAction::Add, "{what}");
        act(&mut other);
        for round in 0..3 {
            let p = other.reconcile();
            assert_eq!(p.hold, HoldAction::Keep, "{what}: the hold is the other's");
            assert_eq!(p.traffic, None, "{what}: the traffic is the other's");
            assert_eq!(p.batch_release, BatchReleaseAction::Keep, "{what}");
            if what == "deleted" {
                assert_ne!(
                    other.status().phase.as_str(),
                    "Terminating",
                    "{what}: nothing to finalise"
                );
                if round == 0 {
                    assert_eq!(p.finalizer, FinalizerAction::Remove, "{what}: at once");
                }
            }
            other.advance(3);
        }
    }
}

/// The Rollout that owns a workload is the oldest that names it, and one being deleted keeps it
/// while our finalizer is on it (it is finishing its release): the next in line waits.
#[test]
fn the_oldest_rollout_owns_the_workload_until_its_finalizer_is_gone() {
    use crate::rollout::observe::owner_among;
    use k8s_openapi::jiff::SignedDuration;
    let make = |name: &str, age: i64| {
        let mut r = world::rollout(three_steps());
        r.metadata.name = Some(name.into());
        r.metadata.creation_timestamp = Some(Time(
            world::t0()
                .checked_sub(SignedDuration::from_secs(age))
                .unwrap(),
        ));
        r
    };
    let (old, young) = (make("old", 60), make("young", 10));
    assert_eq!(owner_among([&old, &young], &young).as_deref(), Some("old"));
    assert_eq!(owner_among([&old, &young], &old), None);
    let mut deleting = old.clone();
    deleting.metadata.deletion_timestamp = Some(Time(world::t0()));
    deleting.metadata.finalizers = Some(vec![crate::rollout::names::FINALIZER.into()]);
    assert_eq!(
        owner_among([&deleting, &young], &young).as_deref(),
        Some("old"),
        "finishing its release"
    );
    assert_eq!(owner_among([&deleting, &young], &deleting), None);
    deleting.metadata.finalizers = None;
    assert_eq!(owner_among([&deleting, &young], &young), None, "gone");
    let mut elsewhere = make("elsewhere", 90);
    elsewhere.spec.workload_ref.name = "other".into();
    assert_eq!(owner_among([&elsewhere, &young], &young), None);
}

/// Disabled mid-release, then enabled again: the interrupted step must not linger in
/// canaryStatus (Argo CD would read `StepPaused` + Healthy as a release in progress).
#[test]
fn re_enabled_after_a_disable_mid_release_reads_completed() {
    let mut w = started(three_steps());
    assert_eq!(w.canary().common.current_step_state, "StepPaused");
    w.obs.rollout.spec.disabled = true;
    w.until("disabled", |w| w.status().phase == "Disabled");
    w.obs.rollout.spec.disabled = false;
    w.reconcile();
    let s = w.status();
    assert_eq!(s.phase.as_str(), "Healthy");
    let c = w.canary();
    assert_eq!(
        (
            c.common.current_step_index,
            c.common.current_step_state.as_str(),
            c.common.finalising_step.as_str(),
        ),
        (3, "Completed", "")
    );
    assert_eq!(c.canary_revision, "rev2", "the template the LWS rolled to");
    assert_eq!(
        (s.current_step_index, s.current_step_state),
        (Some(3), Some(StepState::Completed))
    );
    assert_eq!(
        s.message.as_deref(),
        Some("workload deployment is completed")
    );
    // And a new template starts a release from step 1 as usual.
    w.change_template("rev3");
    w.until("step 1 paused", at_state("StepPaused", 1));
}

#[test]
fn missing_workload_resets_to_initial_and_cleans_up() {
    let mut w = started(three_steps());
    w.obs.workload = None;
    let p = w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Initial");
    assert_eq!(w.status().message.as_deref(), Some("Workload Not Found"));
    assert_eq!(p.batch_release, BatchReleaseAction::Delete);
    assert_eq!(p.traffic, Some(TrafficIntent::Restored));
    assert!(w.status().canary_status.is_some());
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == event::WORKLOAD_NOT_FOUND)
    );
}

#[test]
fn a_canary_that_never_gets_ready_stalls_visibly_without_weight() {
    let mut w = World::new(three_steps());
    w.canary_healthy = false;
    w.reconcile();
    w.change_template("rev2");
    w.until("step 1 upgrade", at_state("StepUpgrade", 1));
    w.reconcile();
    assert_eq!(
        w.status().message.as_deref(),
        Some("Rollout is in step(1/3), and upgrade workload to new version"),
        "a batch in its first seconds is not reported group by group"
    );
    let p = w.reconcile();
    assert_eq!(
        p.requeue_after,
        Some(Duration::from_secs(10)),
        "the stall deadline is a timer, not a poll"
    );
    for _ in 0..4 {
        let p = w.reconcile();
        if let Some(d) = p.requeue_after {
            w.advance(i64::try_from(d.as_secs()).unwrap());
        }
    }
    assert_eq!(w.at().1, "StepUpgrade");
    assert_eq!(
        weight(&w),
        Some(0),
        "no weight to a canary that is not ready"
    );
    let msg = w.status().message.unwrap();
    assert!(
        msg.starts_with(
            "Rollout is in step(1/3), and upgrade workload to new version; batch 1 waits"
        ),
        "{msg}"
    );
    assert!(msg.ends_with("not ready: group 0"), "{msg}");
    let warnings: Vec<_> = w
        .plans
        .iter()
        .flat_map(|p| &p.events)
        .filter(|e| e.reason == event::CANARY_NOT_READY)
        .collect();
    assert_eq!(warnings.len(), 1, "one event per new message: {warnings:?}");
}

#[test]
fn grace_period_is_honoured_after_each_traffic_change() {
    let mut w = started(three_steps());
    w.approve();
    w.until("step 2 traffic", at_state("StepTrafficRouting", 2));
    let p = w.reconcile();
    assert_eq!(weight(&w), Some(50));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(3)));
    assert_eq!(
        w.at().1,
        "StepTrafficRouting",
        "the change just made must have its 3 s"
    );
    w.advance(2);
    let p = w.reconcile();
    assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));
    assert_eq!(w.at().1, "StepTrafficRouting");
    w.advance(1);
    w.reconcile();
    assert_eq!(w.at().1, "StepPaused");
}

#[test]
fn previous_weight_is_kept_while_adding_groups_only_if_its_groups_are_ready() {
    let mut w = started(three_steps());
    w.approve();
    // Approved at once: the route the pause was entered with still has its grace period.
    w.advance(3);
    w.reconcile();
    assert_eq!(w.at().1, "StepUpgrade");
    assert_eq!(
        weight(&w),
        Some(5),
        "step 1's groups still ready: 5% stays while step 2 scales"
    );
    let mut s = w.status();
    s.canary_status.as_mut().unwrap().canary_ready_replicas = 0;
    assert_eq!(
        crate::rollout::plan::routing::intent_for(&w.obs, &s),
        Some(TrafficIntent::Release {
            stable_lws: "vllm".into(),
            canary_lws: "vllm-canary-rev2".into(),
            route: CanaryRoute::none()
        })
    );
}

#[test]
fn a_missing_service_or_route_gives_a_condition_and_an_event() {
    let mut w = World::new(three_steps());
    w.reconcile();
    let route = w.obs.traffic.as_mut().unwrap().http_route.take();
    w.change_template("rev2");
    let p = w.reconcile();
    assert_eq!(
        w.status().message.as_deref(),
        Some("trafficRoutings: HTTPRoute route not found")
    );
    let c = status::condition(&w.status(), condition::PROGRESSING)
        .unwrap()
        .clone();
    assert_eq!(c.message, "trafficRoutings: HTTPRoute route not found");
    assert!(
        p.events
            .iter()
            .any(|e| e.severity == crate::k8s::events::Severity::Warning
                && e.reason == event::TRAFFIC_ROUTING_NOT_FOUND)
    );
    // Traffic objects are not watched: only a requeue notices the user creating them.
    assert!(p.requeue_after.is_some(), "polls for the missing object");
    w.advance(10);
    let p = w.reconcile();
    assert_eq!(
        status::progressing_reason(&w.status()),
        reason::INITIALIZING,
        "waits for it"
    );
    assert!(p.requeue_after.is_some(), "still polls");
    w.obs.traffic.as_mut().unwrap().http_route = route;
    w.advance(10);
    w.reconcile();
    assert_eq!(status::progressing_reason(&w.status()), reason::IN_ROLLING);
}

#[test]
fn a_changed_plan_recomputes_the_step() {
    let mut w = started(three_steps());
    // Same step count, step 1 now wants 2 groups: the canary's 1 group fits step 1 still.
    w.obs.rollout.spec.strategy.canary.as_mut().unwrap().steps[0].replicas = Some(pct("50%"));
    w.reconcile();
    assert_eq!(w.at().0, 1);
    assert_ne!(w.canary().common.rollout_hash, None);
    assert_eq!(
        w.canary().common.rollout_hash.as_deref(),
        w.obs
            .rollout
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(crate::rollout::names::HASH_ANNOTATION)
            .map(String::as_str)
    );
}

#[test]
fn a_ready_canary_moves_the_step_before_the_batch_release_says_so_and_progress_alone_is_not_written()
 {
    let mut steps = three_steps();
    for s in &mut steps {
        s.traffic = None;
    }
    let mut w = started(steps);
    w.approve();
    w.until("step 2 upgrade", at_state("StepUpgrade", 2));
    let stored = w.status();
    let br = w.obs.batch_release.as_mut().unwrap();
    // The BatchRelease's status still describes batch 1; its canary LWS has the second group,
    // not ready yet.
    br.status.observed_generation = Some(br.generation - 1);
    let c = br.status.canary_status.as_mut().unwrap();
    c.current_batch = 0;
    c.updated_replicas = 1;
    c.updated_ready_replicas = 1;
    let mut canary = br.canary.unwrap();
    canary.spec_replicas = 2;
    canary.replicas = 2;
    canary.ready = 1;
    br.canary = Some(canary);
    let p = plan(&w.obs, w.now);
    assert_eq!(
        p.status, stored,
        "a group created but not ready changes nothing a reader acts on: no status write"
    );
    // The group becomes ready (after the grace period every state change of a step without
    // traffic waits, while the split comes down): the same reconcile moves on, whatever the
    // BatchRelease says.
    w.advance(3);
    canary.ready = 2;
    w.obs.batch_release.as_mut().unwrap().canary = Some(canary);
    let p = plan(&w.obs, w.now);
    let c = p.status.canary_status.clone().unwrap();
    assert_eq!(
        (
            c.common.current_step_index,
            c.common.current_step_state.as_str()
        ),
        (2, "StepPaused")
    );
    assert_eq!((c.canary_replicas, c.canary_ready_replicas), (2, 2));
    assert_eq!(
        c.common.message.as_deref(),
        Some("BatchRelease is at state Ready, rollout-id rev2, step 2")
    );
    // Every state passed on the way is still published as an Event.
    let moves: Vec<&str> = p
        .events
        .iter()
        .filter(|e| e.note.contains(" -> step("))
        .map(|e| e.note.as_str())
        .collect();
    assert!(moves.len() >= 3, "{moves:?}");
}

/// Kruise's strings round-trip exactly, and a value this version does not know is kept as
/// written (a status is never unreadable because of it).
#[test]
fn states_read_and_write_kruises_exact_strings_and_keep_unknown_values() {
    use crate::api::rollout::{Phase, RolloutStatus};
    let json = serde_json::json!({
        "phase": "Progressing",
        "currentStepState": "StepPaused",
        "canaryStatus": {"currentStepIndex": 1, "nextStepIndex": 2,
            "currentStepState": "StepWhatever", "finalisingStep": "FinalisingStepRouteTrafficToStable",
            "podTemplateHash": "", "canaryRevision": "r", "canaryReplicas": 1, "canaryReadyReplicas": 1},
    });
    let status: RolloutStatus = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(status.phase, Phase::Progressing);
    assert_eq!(status.current_step_state, Some(StepState::StepPaused));
    let c = status.canary_status.clone().unwrap();
    assert_eq!(
        c.common.current_step_state,
        StepState::Unknown("StepWhatever".into())
    );
    assert_eq!(
        c.common.finalising_step,
        FinalisingStep::RouteTrafficToStable
    );
    let back = serde_json::to_value(&status).unwrap();
    assert_eq!(back["canaryStatus"]["currentStepState"], "StepWhatever");
    assert_eq!(
        back["canaryStatus"]["finalisingStep"],
        json["canaryStatus"]["finalisingStep"]
    );
    assert_eq!(back["phase"], "Progressing");
    assert_eq!(FinalisingStep::End.as_str(), "END");
    let empty: RolloutStatus = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(empty.phase, Phase::Unset);
    assert!(serde_json::to_value(&empty).unwrap().get("phase").is_none());
}

/// An unknown stored phase, step state or finalising step is handled in an arm of its own:
/// a Warning Event says what was found and what was done, and the machine goes on from a
/// known place — never a silent branch.
#[test]
fn unknown_stored_states_are_reported_and_recovered_from() {
    use crate::api::rollout::Phase;
    let warned = |p: &crate::rollout::plan::RolloutPlan, text: &str| {
        p.events.iter().any(|e| {
            e.severity == crate::k8s::events::Severity::Warning
                && e.reason == event::UNKNOWN_STATE
                && e.note.contains(text)
        })
    };
    // A phase nobody knows: Initial again, then Healthy.
    let mut w = World::new(three_steps());
    w.reconcile();
    let mut s = w.status();
    s.phase = Phase::Unknown("Sideways".into());
    w.obs.rollout.status = Some(s);
    let p = w.reconcile();
    assert!(warned(&p, "status.phase \"Sideways\""), "{:#?}", p.events);
    assert_eq!(w.status().phase, Phase::Healthy);

    // A step state nobody knows, mid-release: the step starts again.
    let mut w = started(three_steps());
    let mut s = w.status();
    s.canary_status.as_mut().unwrap().common.current_step_state =
        StepState::Unknown("StepWhatever".into());
    w.obs.rollout.status = Some(s);
    let p = w.reconcile();
    assert!(
        warned(&p, "currentStepState \"StepWhatever\""),
        "{:#?}",
        p.events
    );
    w.until("step 1 paused again", at_state("StepPaused", 1));

    // A finalising step nobody knows, while cancelling: the order starts again and finishes.
    let mut w = started(three_steps());
    w.change_template("rev1");
    w.reconcile();
    let mut s = w.status();
    s.canary_status.as_mut().unwrap().common.finalising_step =
        FinalisingStep::Unknown("Elsewhere".into());
    w.obs.rollout.status = Some(s);
    let p = w.reconcile();
    assert!(
        warned(&p, "finalisingStep \"Elsewhere\""),
        "{:#?}",
        p.events
    );
    w.until("cancelled", |w| w.status().phase == Phase::Healthy);
}
