//! Release deadlines (ours): a late batch is reported, and with automatic rollback the release
//! undoes itself and stays undone until the template changes.

use super::world::{World, three_steps};
use super::{at_state, cond};
use crate::rollout::names::{PROGRESS_DEADLINE, ROLLBACK_ON_DEADLINE, condition, event, reason};
use crate::rollout::plan::BatchReleaseAction;
use crate::traffic::intent::TrafficIntent;

fn with_deadline(seconds: &str, rollback: bool) -> World {
    let mut w = World::new(three_steps());
    let a = w
        .obs
        .rollout
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    a.insert(PROGRESS_DEADLINE.into(), seconds.into());
    if rollback {
        a.insert(ROLLBACK_ON_DEADLINE.into(), "true".into());
    }
    w.canary_healthy = false;
    w.reconcile();
    w.change_template("rev2");
    w.until("step 1 upgrade", at_state("StepUpgrade", 1));
    w
}

fn events(w: &World, reason: &str) -> usize {
    w.plans
        .iter()
        .flat_map(|p| &p.events)
        .filter(|e| e.reason == reason)
        .count()
}

/// Reconciles with the clock moving by each requeue until `done`.
fn run_until(w: &mut World, what: &str, done: impl Fn(&World) -> bool) {
    w.until(what, done);
}

#[test]
fn a_batch_late_past_its_deadline_says_so_once_and_the_release_goes_on_when_it_gets_ready() {
    let mut w = with_deadline("30", false);
    let p = w.reconcile();
    assert!(
        p.requeue_after.is_some_and(|d| d.as_secs() <= 30),
        "the deadline is a timer"
    );
    run_until(&mut w, "deadline", |w| {
        cond(w, condition::PROGRESSING).is_some_and(|c| c.1 == reason::DEADLINE_EXCEEDED)
    });
    assert_eq!(cond(&w, condition::PROGRESSING).unwrap().0, "False");
    let msg = w.status().message.unwrap();
    assert!(
        msg.contains("not ready within 30s") && msg.contains("not ready: group 0"),
        "{msg}"
    );
    for _ in 0..3 {
        w.advance(10);
        w.reconcile();
    }
    assert_eq!(events(&w, event::DEADLINE_EXCEEDED), 1, "one Warning");
    assert_eq!(w.at().1, "StepUpgrade", "no rollback unless asked");
    assert!(w.obs.batch_release.is_some());
    // The group gets ready after all: the release goes on.
    w.canary_healthy = true;
    run_until(&mut w, "step 1 paused", at_state("StepPaused", 1));
    assert_eq!(
        cond(&w, condition::PROGRESSING),
        Some(("True".into(), reason::IN_ROLLING.into()))
    );
}

#[test]
fn with_automatic_rollback_a_late_release_undoes_itself_and_waits_for_a_new_template() {
    let mut w = with_deadline("30", true);
    run_until(&mut w, "rolled back", |w| {
        w.obs.batch_release.is_none()
            && cond(w, condition::PROGRESSING)
                .is_some_and(|c| c.1 == reason::ROLLED_BACK_ON_DEADLINE)
    });
    assert!(
        w.plans
            .iter()
            .any(|p| p.batch_release == BatchReleaseAction::Delete)
    );
    for _ in 0..3 {
        w.advance(30);
        w.reconcile();
    }
    assert_eq!(w.traffic, Some(TrafficIntent::Restored));
    assert_eq!(
        w.obs.workload.as_ref().unwrap().hold.as_deref(),
        Some("rev1"),
        "the workload stays on its stable revision"
    );
    assert!(
        w.obs.batch_release.is_none(),
        "the same revision is never retried"
    );
    assert_eq!(events(&w, event::ROLLED_BACK_ON_DEADLINE), 1);
    assert_eq!(w.status().phase.as_str(), "Progressing");
    let c = cond(&w, condition::PROGRESSING).unwrap();
    assert_eq!(
        (c.0.as_str(), c.1.as_str()),
        ("False", reason::ROLLED_BACK_ON_DEADLINE)
    );
    // The template goes back: a cancel that moves no group, then Healthy.
    w.change_template("rev1");
    run_until(&mut w, "healthy", |w| w.status().phase == "Healthy");
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None);
    assert_eq!(w.obs.workload.as_ref().unwrap().current_revision, "rev1");
}

#[test]
fn after_an_automatic_rollback_a_new_template_starts_a_new_release() {
    let mut w = with_deadline("30", true);
    run_until(&mut w, "rolled back", |w| {
        w.obs.batch_release.is_none()
            && cond(w, condition::PROGRESSING)
                .is_some_and(|c| c.1 == reason::ROLLED_BACK_ON_DEADLINE)
    });
    w.canary_healthy = true;
    w.change_template("rev3");
    run_until(&mut w, "rev3 at step 1", |w| {
        w.canary().canary_revision == "rev3" && w.canary().common.current_step_state == "StepPaused"
    });
    assert_eq!(
        cond(&w, condition::PROGRESSING).map(|c| c.0),
        Some("True".into())
    );
}
