//! Partition style in the plan world: Kruise's rollback in batches.

use std::collections::BTreeMap;

use super::world::{World, pct, step};
use super::{at_state, cond};
use crate::release::names::ROLLBACK_IN_BATCH;
use crate::rollout::names::{condition, reason};
use crate::rollout::plan::BatchReleaseAction;

/// 50% with a pause, then everything; partition style, traffic routing when `routed`, and
/// Kruise's rollback-in-batch annotation when `in_batches`.
fn partition_world(in_batches: bool, routed: bool) -> World {
    let mut w = World::new(vec![
        step(pct("50%"), None, None),
        step(pct("100%"), None, Some(0)),
    ]);
    let r = &mut w.obs.rollout;
    let canary = r.spec.strategy.canary.as_mut().unwrap();
    canary.enable_extra_workload_for_canary = false;
    if !routed {
        canary.traffic_routings = None;
        w.obs.traffic = None;
    }
    if in_batches {
        r.metadata.annotations = Some(BTreeMap::from([(
            ROLLBACK_IN_BATCH.to_string(),
            "true".to_string(),
        )]));
    }
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Healthy");
    w.change_template("rev2");
    w.until("step 1 paused", at_state("StepPaused", 1));
    w
}

/// Kruise's finalizingBatchRelease: the BatchRelease is deleted only once it says Completed for
/// its finalising spec; until then it still has work (the patch on the moved leaders). CI saw
/// the Rollout delete it a moment after writing the spec, leaving a leader patched for good.
#[test]
fn the_batch_release_is_deleted_only_once_it_says_completed() {
    let mut w = partition_world(false, false);
    w.br_finalises = false;
    w.approve();
    for _ in 0..10 {
        w.reconcile();
        w.advance(1);
    }
    let br = w
        .obs
        .batch_release
        .as_ref()
        .expect("kept while it finalises");
    assert_eq!(
        br.spec.release_plan.batch_partition, None,
        "told to finalise"
    );
    assert!(
        w.plans
            .iter()
            .all(|p| p.batch_release != BatchReleaseAction::Delete)
    );
    assert_ne!(w.status().phase.as_str(), "Healthy");
    // A Completed written for the spec before (a stale status) is not the answer either.
    let br = w.obs.batch_release.as_mut().unwrap();
    br.status.phase = Some("Completed".into());
    br.status.observed_generation = Some(br.generation - 1);
    let p = w.reconcile();
    assert_ne!(p.batch_release, BatchReleaseAction::Delete);
    w.br_finalises = true;
    w.until("healthy", |w| w.status().phase == "Healthy");
    assert!(w.obs.batch_release.is_none(), "deleted at the end");
}

#[test]
fn a_revert_with_rollback_in_batch_restarts_the_release_for_the_old_template() {
    let mut w = partition_world(true, false);
    assert!(
        w.obs
            .batch_release
            .as_ref()
            .is_some_and(|b| b.rollback_in_batch.is_none()),
        "no mark while releasing forward"
    );
    w.change_template("rev1");
    let p = w.reconcile();
    let c = w.canary();
    assert_eq!(
        (c.canary_revision.as_str(), c.common.current_step_index),
        ("rev1", 1),
        "step 1 again, for the reverted template"
    );
    assert_eq!(c.common.stable_revision.as_deref(), Some("rev1"));
    assert_eq!(
        cond(&w, condition::PROGRESSING).map(|c| c.1),
        Some(reason::IN_ROLLING.into()),
        "a release, not a cancel"
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.note.contains("rolled back in batches")),
        "{:?}",
        p.events
    );
    assert!(
        matches!(&p.batch_release, BatchReleaseAction::Apply(br)
            if br.metadata.annotations.as_ref().and_then(|a| a.get(ROLLBACK_IN_BATCH)).map(String::as_str) == Some("true")),
        "Kruise's mark on the BatchRelease: {:?}",
        p.batch_release
    );
    w.until("step 1 of the rollback paused", at_state("StepPaused", 1));
    assert_eq!(
        w.obs.workload.as_ref().unwrap().hold.as_deref(),
        Some("rev1")
    );
    w.approve();
    w.until("healthy", |w| w.status().phase == "Healthy");
    assert_eq!(
        cond(&w, condition::SUCCEEDED).map(|c| c.0),
        Some("True".into()),
        "ends as a completed release"
    );
    assert_eq!(w.obs.workload.as_ref().unwrap().hold, None);
}

#[test]
fn a_revert_without_the_annotation_or_with_traffic_routing_cancels() {
    // Kruise honours the annotation only without trafficRoutings.
    for (in_batches, routed) in [(false, false), (true, true)] {
        let mut w = partition_world(in_batches, routed);
        w.change_template("rev1");
        w.reconcile();
        assert_eq!(
            cond(&w, condition::PROGRESSING).map(|c| c.1),
            Some(reason::CANCELLING.into()),
            "annotation {in_batches}, routed {routed}"
        );
    }
}
