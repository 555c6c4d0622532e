//! A DisaggregatedSet released canary-style in the plan world: the sides are the set's
//! leaders told apart by its revision label, the new pair's share follows the complete pairs
//! its BatchRelease reports, and finalising lifts the hold only through the set.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::at_state;
use super::world::{World, pct, step, three_steps};
use crate::api::rollout::{CanaryStep, ObjectRef};
use crate::rollout::observe::WorkloadKind;
use crate::rollout::plan::{BatchReleaseAction, HoldAction, accept};
use crate::traffic::intent::{Leaders, TrafficIntent};

/// The three steps, releasing the set `vllm` (the world's workload, as a set).
fn pair_world() -> World {
    as_pair(World::new(three_steps()))
}

/// `w`'s release, of the set `vllm` (the world's workload, as a set), its template changed.
fn as_pair(mut w: World) -> World {
    w.obs.rollout.spec.workload_ref = ObjectRef {
        api_version: "disaggregatedset.x-k8s.io/v1".into(),
        kind: "DisaggregatedSet".into(),
        name: "vllm".into(),
    };
    let s = w.obs.workload.as_mut().unwrap();
    s.kind = WorkloadKind::DisaggregatedSet;
    s.pair_rolled = Some(true);
    s.roles = vec!["prefill".into(), "decode".into()];
    w.obs.traffic.as_mut().unwrap().stable_service = Some(role_service("prefill"));
    w.reconcile();
    assert_eq!(w.status().phase.as_str(), "Healthy");
    w.change_template("rev2");
    w.obs.workload.as_mut().unwrap().pair_rolled = Some(false);
    w
}

/// The user's Service selecting the set `vllm`'s leaders of `role`.
fn role_service(role: &str) -> k8s_openapi::api::core::v1::Service {
    crate::traffic::fixtures::service(serde_json::json!({
        "disaggregatedset.x-k8s.io/name": "vllm",
        "disaggregatedset.x-k8s.io/role": role,
    }))
}

#[test]
fn a_service_the_set_has_no_role_for_holds_the_release_with_a_message_and_an_event() {
    // (style, its world)
    let table = [
        ("canary", pair_world()),
        ("partition", partition_pair_world()),
        ("blue-green", blue_green_pair_world()),
    ];
    for (style, mut w) in table {
        w.obs.traffic.as_mut().unwrap().stable_service = Some(role_service("embed"));
        let before = w.obs.traffic.clone();
        let p = w.reconcile();
        let message = w.status().message.unwrap_or_default();
        for part in [
            "Service",
            "role embed",
            "DisaggregatedSet vllm",
            "prefill, decode",
        ] {
            assert!(message.contains(part), "{style}: {message} lacks {part}");
        }
        assert!(
            p.events
                .iter()
                .any(|e| e.severity == crate::k8s::events::Severity::Warning
                    && e.reason == crate::rollout::names::event::TRAFFIC_ROUTING_INVALID
                    && e.note.contains("role embed")),
            "{style}: {:?}",
            p.events
        );
        // Nothing moves and nothing is written to the Service, however often it is
        // reconciled; the Warning is not repeated.
        for _ in 0..3 {
            w.advance(5);
            let p = w.reconcile();
            assert!(
                p.traffic_writes.is_empty(),
                "{style}: {:?}",
                p.traffic_writes
            );
            assert!(
                p.events
                    .iter()
                    .all(|e| e.reason != crate::rollout::names::event::TRAFFIC_ROUTING_INVALID),
                "{style}"
            );
            assert_eq!(
                p.batch_release,
                crate::rollout::plan::BatchReleaseAction::Keep,
                "{style}"
            );
        }
        assert_eq!(w.obs.traffic, before, "{style}");
        // The Service fixed: the release goes on.
        w.obs.traffic.as_mut().unwrap().stable_service = Some(role_service("prefill"));
        w.until("step 1 paused", at_state("StepPaused", 1));
    }
}

/// (stable side, new side, canary weight) of the last traffic the plans asked for.
fn sides(w: &World) -> (Leaders, Leaders, i32) {
    match w.traffic.as_ref() {
        Some(TrafficIntent::Release {
            stable_lws,
            canary_lws,
            route,
        }) => (
            stable_lws.clone(),
            canary_lws.clone(),
            route.weight.unwrap_or(0),
        ),
        other => panic!("no release traffic: {other:?}"),
    }
}

#[test]
fn a_pair_routes_by_the_sets_revision_and_only_while_it_is_complete() {
    let mut w = pair_world();
    w.until("step 1 paused", at_state("StepPaused", 1));
    let (stable, new, weight) = sides(&w);
    assert_eq!(stable, Leaders::of_set("vllm", Some("rev1".into())));
    assert_eq!(new, Leaders::of_set("vllm", Some("rev2".into())));
    assert_eq!(weight, 5);

    // One role of the new pair loses its last ready group: the BatchRelease reports no
    // complete pair, and the weight goes back to 0 while the step stays where it is.
    w.canary_healthy = false;
    w.reconcile();
    w.reconcile();
    let (_, _, weight) = sides(&w);
    assert_eq!(weight, 0, "an incomplete pair gets no traffic");
    assert_eq!(w.at().0, 1);

    // Whole again: the step's share comes back.
    w.canary_healthy = true;
    w.reconcile();
    w.reconcile();
    assert_eq!(sides(&w).2, 5);
}

#[test]
fn a_finished_pair_release_lifts_the_hold_and_waits_for_the_set_to_roll() {
    let mut w = pair_world();
    w.until("step 1 paused", at_state("StepPaused", 1));
    w.approve();
    w.until("step 2 paused", at_state("StepPaused", 2));
    w.approve();
    w.until("the hold lifted", |w| {
        w.plans
            .last()
            .is_some_and(|p| p.hold == HoldAction::Release)
    });
    // Until the set has rolled the release is not over (the world lifted the hold, the set's
    // LWSs still show the old pair).
    for _ in 0..3 {
        w.reconcile();
    }
    assert_eq!(w.status().phase.as_str(), "Progressing");
    w.obs.workload.as_mut().unwrap().pair_rolled = Some(true);
    w.until("Healthy", |w| w.status().phase.as_str() == "Healthy");
}

#[test]
fn a_pair_is_accepted_in_every_style() {
    let mut w = pair_world();
    w.obs
        .rollout
        .spec
        .strategy
        .canary
        .as_mut()
        .unwrap()
        .enable_extra_workload_for_canary = false;
    assert_eq!(accept::not_accepted(&w.obs), None, "partition style");
    w.obs.rollout.spec.strategy = serde_json::from_value(serde_json::json!(
        {"blueGreen": {"steps": [{"replicas": "100%"}]}}
    ))
    .unwrap();
    assert_eq!(accept::not_accepted(&w.obs), None, "blue-green");
}

/// The canary weight of the last traffic the plans asked for (0 for anything but a split).
fn weight(w: &World) -> i32 {
    match w.traffic.as_ref() {
        Some(TrafficIntent::Release { route, .. }) => route.weight.unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn a_third_template_takes_the_release_groups_back_only_once_the_traffic_is_on_stable() {
    let mut w = pair_world();
    w.until("step 1 paused", at_state("StepPaused", 1));
    assert_eq!(weight(&w), 5);
    // The set carries the release's groups; a third template arrives.
    w.obs.workload.as_mut().unwrap().release_groups = true;
    w.change_template("rev3");
    w.until("the release-groups taken back", |w| {
        w.plans
            .last()
            .is_some_and(|p| p.hold == HoldAction::ReturnMoved)
    });
    assert_eq!(
        weight(&w),
        0,
        "the second revision's pair gets nothing first"
    );
    let held = w.obs.workload.as_ref().unwrap().hold.clone();
    assert_eq!(held.as_deref(), Some("rev1"), "the hold stays");
    // The release starts over on the third template.
    w.until("restarted at step 1", |w| {
        at_state("StepPaused", 1)(w) && w.canary().canary_revision == "rev3"
    });
    assert_eq!(weight(&w), 5);
}

#[test]
fn a_third_template_starts_over_only_once_the_second_revisions_groups_are_drained() {
    // (style, its world): partition style gives the second revision's groups back to the held
    // pair first, so they outlive the release-groups by as long as the held groups take to
    // come back; a new release's groups written meanwhile would keep them running.
    let table = [
        ("canary", pair_world()),
        ("partition", partition_pair_world()),
        ("blue-green", blue_green_pair_world()),
    ];
    for (style, mut w) in table {
        w.until("step 1 paused", at_state("StepPaused", 1));
        w.change_template("rev3");
        let set = w.obs.workload.as_mut().unwrap();
        set.release_groups = true;
        set.other_revision_groups = true;
        w.until("the release-groups taken back", |w| {
            w.plans
                .last()
                .is_some_and(|p| p.hold == HoldAction::ReturnMoved)
        });
        for _ in 0..3 {
            let p = w.reconcile();
            assert!(
                !matches!(p.batch_release, BatchReleaseAction::Apply(_)),
                "{style}: no BatchRelease for the third template while the second drains"
            );
        }
        assert_eq!(
            w.canary().common.finalising_step,
            crate::api::rollout::FinalisingStep::ReleaseWorkloadControl,
            "{style}: the restart waits for the second revision's groups"
        );
        assert_eq!(weight(&w), 0, "{style}: the stable pair has the traffic");
        w.obs.workload.as_mut().unwrap().other_revision_groups = false;
        w.until("restarted at step 1", |w| {
            at_state("StepPaused", 1)(w) && w.canary().canary_revision == "rev3"
        });
    }
}

/// The partition example's steps (one group of each role at 50%, then everything at 100%),
/// partition style: the new pair takes the stable pair's groups.
fn partition_pair_world() -> World {
    let mut w = pair_world();
    let canary = w.obs.rollout.spec.strategy.canary.as_mut().unwrap();
    canary.enable_extra_workload_for_canary = false;
    canary.steps = vec![
        step(IntOrString::Int(1), Some("50%"), None),
        step(pct("100%"), Some("100%"), None),
    ];
    w
}

/// The blue-green example's steps: every group of each role at 0%, then the switch to 100%.
fn blue_green_pair_world() -> World {
    as_pair(World::blue_green(vec![
        step(pct("100%"), Some("0%"), None),
        step(pct("100%"), Some("100%"), None),
    ]))
}

/// The BatchRelease's current batch (0-based) as the last plan left its spec.
fn batch(w: &World) -> Option<i32> {
    w.obs
        .batch_release
        .as_ref()
        .and_then(|b| b.spec.release_plan.batch_partition)
}

#[test]
fn a_partition_step_moving_the_stable_pairs_last_groups_sends_it_nothing_first() {
    let mut w = partition_pair_world();
    w.until("step 1 paused", at_state("StepPaused", 1));
    assert_eq!(weight(&w), 50);
    assert_eq!(batch(&w), Some(0));
    // Step 2 moves every stable group: the new pair (one ready group of each role) gets
    // everything before the BatchRelease asks for the stable pair's last groups.
    w.approve();
    let mut moved_at_weight = None;
    for _ in 0..20 {
        let before = weight(&w);
        let p = w.reconcile();
        if let BatchReleaseAction::Apply(br) = &p.batch_release
            && br.spec.release_plan.batch_partition == Some(1)
        {
            moved_at_weight = Some(before);
            break;
        }
        if let Some(d) = p.requeue_after {
            w.advance(i64::try_from(d.as_secs().max(1)).unwrap());
        }
    }
    assert_eq!(
        moved_at_weight,
        Some(100),
        "the last stable groups move only once the route sends them nothing"
    );
    // The BatchRelease's status still describes the batch before (it has not seen the new
    // spec): the new pair's ready groups are still ready, the route stays.
    let br = w.obs.batch_release.as_mut().unwrap();
    br.status.observed_generation = Some(br.generation - 1);
    let c = br.status.canary_status.as_mut().unwrap();
    c.current_batch = 0;
    c.updated_replicas = 1;
    c.updated_ready_replicas = 1;
    br.status.observed_generation = Some(br.generation - 1);
    w.reconcile();
    assert_eq!(
        weight(&w),
        100,
        "a BatchRelease status that has not caught up is no reason to go back"
    );
    // Until the step is done the new pair keeps everything.
    while w.canary().common.current_step_state != "Completed" {
        let p = w.reconcile();
        assert_eq!(weight(&w), 100, "at {:?}", w.at());
        if let Some(d) = p.requeue_after {
            w.advance(i64::try_from(d.as_secs().max(1)).unwrap());
        }
    }
}

#[test]
fn a_partition_step_leaving_the_stable_pair_a_group_keeps_the_previous_split_while_it_moves() {
    let mut w = partition_pair_world();
    w.obs.rollout.spec.strategy.canary.as_mut().unwrap().steps = vec![
        step(IntOrString::Int(1), Some("25%"), None),
        step(pct("50%"), Some("50%"), None),
        step(pct("100%"), Some("100%"), None),
    ];
    w.until("step 1 paused", at_state("StepPaused", 1));
    w.approve();
    w.reconcile();
    assert_eq!(
        w.canary().common.current_step_index,
        2,
        "on to step 2 at once"
    );
    assert_eq!(
        weight(&w),
        25,
        "the stable pair keeps groups: the previous split"
    );
}

/// A partition-style release of a set of `slices` slices of `per_slice` pairs, in `steps`.
fn sliced_partition_pair_world(slices: i32, per_slice: i32, steps: Vec<CanaryStep>) -> World {
    let mut w = World::new(steps);
    w.obs
        .rollout
        .spec
        .strategy
        .canary
        .as_mut()
        .unwrap()
        .enable_extra_workload_for_canary = false;
    let s = w.obs.workload.as_mut().unwrap();
    s.slices = slices;
    s.replicas = slices * per_slice;
    s.ready_replicas = s.replicas;
    s.updated_replicas = s.replicas;
    as_pair(w)
}

/// The canary weight the route had when the plan asked the BatchRelease for the last step's
/// batch, every step before it approved.
fn weight_when_the_last_batch_moves(w: &mut World) -> Option<i32> {
    let n = routing_steps(w);
    for index in 1..n {
        w.until("step paused", at_state("StepPaused", index));
        w.approve();
    }
    let last = n - 1;
    for _ in 0..20 {
        let before = weight(w);
        let p = w.reconcile();
        if let BatchReleaseAction::Apply(br) = &p.batch_release
            && br.spec.release_plan.batch_partition == Some(last)
        {
            return Some(before);
        }
        if let Some(d) = p.requeue_after {
            w.advance(i64::try_from(d.as_secs().max(1)).unwrap());
        }
    }
    None
}

fn routing_steps(w: &World) -> i32 {
    i32::try_from(crate::rollout::plan::routing::steps(&w.obs).len()).unwrap()
}

/// A set's step takes its share of every slice (`batchrelease::pair`), while the Rollout's
/// counts are pairs summed over slices: a step that moves every stable group of every slice
/// sends everything to the new pair before its groups move, whatever the slices; a step that
/// leaves each slice a stable group keeps the previous split while it moves.
#[test]
fn a_partition_step_moving_every_slices_last_stable_groups_sends_them_nothing_first() {
    let int = IntOrString::Int;
    // (slices, pairs per slice, steps (replicas, traffic), weight while the last batch moves)
    let table = [
        (1, 2, vec![(int(1), "50%"), (int(2), "100%")], 100),
        (2, 2, vec![(int(1), "50%"), (int(2), "100%")], 100),
        (1, 4, vec![(int(1), "25%"), (int(2), "50%")], 25),
        (2, 3, vec![(int(1), "30%"), (int(2), "60%")], 30),
        (
            2,
            3,
            vec![(int(1), "30%"), (int(2), "60%"), (int(3), "100%")],
            100,
        ),
        (2, 2, vec![(pct("50%"), "50%"), (pct("100%"), "100%")], 100),
        // 60% of a slice's two pairs is both of them, rounded up in each slice.
        (2, 2, vec![(pct("25%"), "25%"), (pct("60%"), "60%")], 100),
        (1, 4, vec![(pct("25%"), "25%"), (pct("60%"), "60%")], 25),
    ];
    for (slices, per_slice, steps, want) in table {
        let case = format!("{slices} slice(s) of {per_slice}, steps {steps:?}");
        let steps = steps
            .into_iter()
            .map(|(replicas, traffic)| step(replicas, Some(traffic), None))
            .collect();
        let mut w = sliced_partition_pair_world(slices, per_slice, steps);
        assert_eq!(
            weight_when_the_last_batch_moves(&mut w),
            Some(want),
            "{case}"
        );
        if want == 100 {
            // The stable side stays without traffic to the end of the step.
            let done = |w: &World| {
                matches!(
                    w.canary().common.current_step_state.as_str(),
                    "StepPaused" | "Completed"
                )
            };
            for _ in 0..40 {
                if done(&w) {
                    break;
                }
                let p = w.reconcile();
                assert_eq!(weight(&w), 100, "{case}: at {:?}", w.at());
                if let Some(d) = p.requeue_after {
                    w.advance(i64::try_from(d.as_secs().max(1)).unwrap());
                }
            }
            assert!(done(&w), "{case}: the step never ended; at {:?}", w.at());
        }
    }
}

#[test]
fn a_paused_pair_release_names_a_role_scaled_externally_in_every_style() {
    // What the BatchRelease says while it holds (`batchrelease::pair`), shortened.
    let holds = "role decode is scaled externally (scaling.mode: External): ... so the \
                 release holds at batch 1 with the groups it has; batch 1 (decode 1, prefill 1) \
                 is Ready";
    // (style, its world)
    let table = [
        ("canary", pair_world()),
        ("partition", partition_pair_world()),
        ("blue-green", blue_green_pair_world()),
    ];
    for (style, mut w) in table {
        w.until("step 1 paused", at_state("StepPaused", 1));
        // Decode handed to an HPA while the step waits for approval: the Rollout sees the set
        // first, then the BatchRelease's status message (nothing else of it) changes.
        w.obs.workload.as_mut().unwrap().external_roles = vec!["decode".into()];
        w.reconcile();
        let paused = w.status();
        w.obs.batch_release.as_mut().unwrap().status.message = Some(holds.into());
        let p = crate::rollout::plan::plan(&w.obs, w.now);
        let field = crate::rollout::plan::style::in_flight(&w.obs.rollout).status_field();
        let c = crate::rollout::plan::substatus::working(p.status.clone(), field)
            .canary_status
            .unwrap();
        assert_eq!(
            (
                c.common.current_step_index,
                c.common.current_step_state.as_str()
            ),
            (1, "StepPaused"),
            "{style}: the step still waits"
        );
        let sub = c.common.message.unwrap_or_default();
        assert!(
            sub.contains("role decode is scaled externally"),
            "{style}: the sub-status message is the BatchRelease's: {sub}"
        );
        let top = p.status.message.clone().unwrap_or_default();
        assert!(
            top.starts_with("Rollout is in step(1/") && top.contains("manually confirm"),
            "{style}: still Kruise's pause: {top}"
        );
        assert!(
            top.contains("role decode is scaled externally"),
            "{style}: kubectl get's MESSAGE says why: {top}"
        );
        assert_ne!(
            p.status, paused,
            "{style}: the BatchRelease's news is written at once"
        );
        // Static again: the message is Kruise's alone.
        w.obs.workload.as_mut().unwrap().external_roles.clear();
        w.obs.batch_release.as_mut().unwrap().status.message = None;
        w.reconcile();
        let top = w.status().message.unwrap_or_default();
        assert!(!top.contains("scaled externally"), "{style}: {top}");
    }
}
