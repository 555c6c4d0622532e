//! Step analysis (ours): a passed analysis is the step's approval, a failed one rolls the
//! release back by itself, an inconclusive one (or metrics that cannot be read) waits for a
//! person; bad or missing templates make the release wait, never roll back.

use std::collections::BTreeMap;

use super::world::{World, three_steps};
use super::{at_state, cond};
use crate::api::analysis::{AnalysisTemplateSpec, Argument, Metric, PrometheusMetric, Provider};
use crate::rollout::names::{STEP_ANALYSIS, condition, event, reason};
use crate::rollout::plan::BatchReleaseAction;
use crate::traffic::intent::TrafficIntent;

const TEMPLATE: &str = "error-ratio";

fn template() -> AnalysisTemplateSpec {
    AnalysisTemplateSpec {
        args: vec![
            Argument {
                name: "canary-service".into(),
                ..Argument::default()
            },
            Argument {
                name: "namespace".into(),
                ..Argument::default()
            },
        ],
        metrics: vec![Metric {
            name: "error-ratio".into(),
            success_condition: Some("result[0] < 0.05".into()),
            provider: Provider {
                prometheus: Some(PrometheusMetric {
                    address: "http://prometheus:9090".into(),
                    query: "ratio{service=\"{{args.namespace}}-{{args.canary-service}}\"}".into(),
                    timeout: None,
                }),
                ..Provider::default()
            },
            ..Metric::default()
        }],
    }
}

/// Three steps with no pause at all (`pause` absent), every one analysed.
fn analysed(annotation: &str) -> World {
    let mut steps = three_steps();
    for s in &mut steps {
        s.pause = None;
    }
    let mut w = World::new(steps);
    w.obs
        .rollout
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(STEP_ANALYSIS.into(), annotation.into());
    w.obs.analysis.served = true;
    w.obs.analysis.synced = true;
    w.obs.analysis.templates.insert(TEMPLATE.into(), template());
    w.reconcile();
    w
}

fn every_step() -> String {
    format!(r#"{{"templates":[{{"templateName":"{TEMPLATE}"}}]}}"#)
}

fn events(w: &World, reason: &str) -> Vec<String> {
    w.plans
        .iter()
        .flat_map(|p| &p.events)
        .filter(|e| e.reason == reason)
        .map(|e| e.note.clone())
        .collect()
}

#[test]
fn analyses_that_pass_release_to_the_end_with_no_approval() {
    let mut w = analysed(&every_step());
    w.change_template("rev2");
    w.until("completed", |w| {
        w.status().phase == "Healthy" && w.obs.workload.as_ref().unwrap().hold.is_none()
    });
    let created: Vec<_> = w
        .plans
        .iter()
        .flat_map(|p| &p.analysis.create)
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        created,
        ["vllm-rev2-1", "vllm-rev2-2", "vllm-rev2-3"],
        "one run per step"
    );
    let run = &w
        .plans
        .iter()
        .flat_map(|p| &p.analysis.create)
        .next()
        .unwrap();
    let q = &run.spec.metrics[0]
        .provider
        .prometheus
        .as_ref()
        .unwrap()
        .query;
    assert_eq!(
        q, "ratio{service=\"ns-svc-canary\"}",
        "arguments from the release"
    );
    assert_eq!(
        cond(&w, condition::SUCCEEDED).map(|c| c.0),
        Some("True".into())
    );
}

#[test]
fn a_running_analysis_holds_the_step_in_step_metrics_analysis_and_shows_its_values() {
    let mut w = analysed(&every_step());
    w.analysis_outcome = ("Running".into(), None);
    w.change_template("rev2");
    w.until("analysing", at_state("StepMetricsAnalysis", 1));
    for _ in 0..3 {
        w.advance(30);
        w.reconcile();
    }
    assert_eq!(w.at().1, "StepMetricsAnalysis");
    let msg = w.status().message.unwrap_or_default();
    assert!(
        msg.contains("vllm-rev2-1") && msg.contains("error-ratio=[0.01]"),
        "{msg}"
    );
    // The verdict arrives: the step goes on.
    w.obs.analysis.runs.get_mut("vllm-rev2-1").unwrap().phase = "Successful".into();
    w.until("step 2", |w| w.canary().common.current_step_index == 2);
}

#[test]
fn a_failed_analysis_rolls_back_traffic_first_and_never_retries_the_revision() {
    let mut w = analysed(&every_step());
    w.analysis_outcome = (
        "Failed".into(),
        Some("metric \"error-ratio\" failed: value [0.5] against successCondition \"result[0] < 0.05\"".into()),
    );
    w.change_template("rev2");
    w.until("rolled back", |w| {
        w.obs.batch_release.is_none()
            && cond(w, condition::PROGRESSING).is_some_and(|c| c.1 == reason::ANALYSIS_FAILED)
    });
    let c = super::super::status::condition(&w.status(), condition::PROGRESSING)
        .cloned()
        .unwrap();
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("error-ratio")
            && c.message.contains("[0.5]")
            && c.message.contains("result[0] < 0.05"),
        "{}",
        c.message
    );
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
        Some("rev1")
    );
    assert!(
        w.obs.batch_release.is_none(),
        "the failed revision is not retried"
    );
    assert_eq!(events(&w, event::ANALYSIS_FAILED).len(), 1);
    // A new template starts a new release, analysed again.
    w.analysis_outcome = ("Successful".into(), None);
    w.change_template("rev3");
    w.until("healthy on rev3", |w| {
        w.status().phase == "Healthy" && w.obs.workload.as_ref().unwrap().current_revision == "rev3"
    });
}

#[test]
fn an_inconclusive_analysis_pauses_for_a_person_and_approval_goes_on() {
    let mut w = analysed(&every_step());
    w.analysis_outcome = (
        "Error".into(),
        Some("metric \"error-ratio\": 5 measurements in a row could not be taken: Prometheus at http://prometheus:9090 is unreachable".into()),
    );
    w.change_template("rev2");
    w.until("paused", at_state("StepPaused", 1));
    for _ in 0..3 {
        w.advance(60);
        w.reconcile();
    }
    assert_eq!(
        w.at().1,
        "StepPaused",
        "never moves on, never rolls back by itself"
    );
    assert!(w.obs.batch_release.is_some());
    let msg = w.status().message.unwrap_or_default();
    assert!(
        msg.contains("unreachable") && msg.contains("approve"),
        "{msg}"
    );
    assert_eq!(events(&w, event::ANALYSIS_WAITING).len(), 1, "one Warning");
    w.analysis_outcome = ("Successful".into(), None);
    w.approve();
    w.until("step 2", |w| w.canary().common.current_step_index == 2);
}

#[test]
fn a_missing_template_makes_the_release_wait_saying_so_and_it_goes_on_once_created() {
    let mut w = analysed(&every_step());
    w.obs.analysis.templates.clear();
    w.change_template("rev2");
    w.until("analysing", at_state("StepMetricsAnalysis", 1));
    for _ in 0..3 {
        w.advance(30);
        w.reconcile();
    }
    assert_eq!(w.at().1, "StepMetricsAnalysis");
    let msg = w.status().message.unwrap_or_default();
    assert!(
        msg.contains("AnalysisTemplate error-ratio not found"),
        "{msg}"
    );
    assert_eq!(events(&w, event::ANALYSIS_WAITING).len(), 1);
    assert!(w.obs.batch_release.is_some(), "never a rollback");
    w.obs.analysis.templates.insert(TEMPLATE.into(), template());
    w.until("step 2", |w| w.canary().common.current_step_index == 2);
}

#[test]
fn a_run_left_by_an_earlier_release_of_the_same_revision_is_replaced_not_believed() {
    let mut w = analysed(&every_step());
    w.obs.analysis.runs.insert(
        "vllm-rev2-1".into(),
        crate::rollout::observe::RunSummary {
            phase: "Failed".into(),
            created: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(w.now)),
            ..Default::default()
        },
    );
    w.advance(60);
    w.change_template("rev2");
    w.until("step 2", |w| w.canary().common.current_step_index == 2);
    assert!(w.plans.iter().any(|p| p.analysis.delete == ["vllm-rev2-1"]));
    assert!(events(&w, event::ANALYSIS_FAILED).is_empty());
}

#[test]
fn only_the_steps_named_are_analysed_and_the_others_pause_as_kruise_does() {
    let mut w = analysed(&format!(
        r#"{{"templates":[{{"templateName":"{TEMPLATE}"}}],"steps":[2]}}"#
    ));
    w.change_template("rev2");
    w.until("step 1 paused", at_state("StepPaused", 1));
    assert!(w.plans.iter().all(|p| p.analysis.create.is_empty()));
    w.approve();
    w.until("step 3", |w| w.canary().common.current_step_index == 3);
    let created: Vec<_> = w
        .plans
        .iter()
        .flat_map(|p| &p.analysis.create)
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(created, ["vllm-rev2-2"]);
}

#[test]
fn annotations_that_cannot_be_read_say_what_is_allowed() {
    let mut r = super::world::rollout(three_steps());
    let set = |r: &mut crate::api::rollout::Rollout, v: &str| {
        r.metadata.annotations = Some(BTreeMap::from([(STEP_ANALYSIS.to_string(), v.to_string())]));
    };
    for (bad, why) in [
        ("not json", "must be JSON"),
        (r#"{"templates":[]}"#, "names no template"),
        (
            r#"{"templates":[{"templateName":"x"}],"steps":[4]}"#,
            "step 4 does not exist",
        ),
        (
            r#"{"templates":[{"templateName":"x"}],"args":[{"name":"a"}]}"#,
            "neither value nor valueFrom",
        ),
        (r#"{"templates":[{"name":"x"}]}"#, "unknown field"),
    ] {
        set(&mut r, bad);
        let e = crate::rollout::plan::analysis::of(&r).expect_err(bad);
        assert!(e.contains(why), "{bad}: {e}");
    }
    set(&mut r, &every_step());
    assert!(crate::rollout::plan::analysis::of(&r).is_ok_and(|a| a.is_some()));
}

/// Three steps of no pause at all (duration 0), analysed in the background from step 1.
fn background(outcome: &str, message: Option<&str>) -> World {
    let mut steps = three_steps();
    for s in &mut steps {
        s.pause = Some(crate::api::rollout::RolloutPause { duration: Some(0) });
    }
    let mut w = World::new(steps);
    w.obs
        .rollout
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            crate::rollout::names::BACKGROUND_ANALYSIS.into(),
            format!(r#"{{"templates":[{{"templateName":"{TEMPLATE}"}}],"startingStep":1}}"#),
        );
    w.obs.analysis.served = true;
    w.obs.analysis.synced = true;
    w.obs.analysis.templates.insert(TEMPLATE.into(), template());
    w.analysis_outcome = (outcome.into(), message.map(str::to_string));
    w.reconcile();
    w
}

#[test]
fn a_background_analysis_runs_from_its_step_to_the_end_and_is_stopped_there() {
    let mut w = background("Running", None);
    w.change_template("rev2");
    w.until("completed", |w| {
        w.status().phase == "Healthy" && w.obs.workload.as_ref().unwrap().hold.is_none()
    });
    let created: Vec<_> = w
        .plans
        .iter()
        .flat_map(|p| &p.analysis.create)
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        created,
        ["vllm-rev2-background"],
        "one run for the whole release"
    );
    assert!(
        w.plans
            .iter()
            .any(|p| p.analysis.terminate == ["vllm-rev2-background"]),
        "stopped at the end"
    );
}

#[test]
fn a_failing_background_analysis_rolls_back_at_whatever_step() {
    let mut w = background("Running", None);
    w.change_template("rev2");
    w.until("background running", |w| {
        w.obs.analysis.runs.contains_key("vllm-rev2-background")
    });
    w.obs
        .analysis
        .runs
        .get_mut("vllm-rev2-background")
        .unwrap()
        .phase = "Failed".into();
    w.until("rolled back", |w| {
        w.obs.batch_release.is_none()
            && cond(w, condition::PROGRESSING).is_some_and(|c| c.1 == reason::ANALYSIS_FAILED)
    });
    w.until("traffic restored", |w| {
        w.traffic == Some(TrafficIntent::Restored)
    });
    assert_eq!(
        w.obs.workload.as_ref().unwrap().hold.as_deref(),
        Some("rev1")
    );
}

#[test]
fn an_inconclusive_background_analysis_holds_the_step_until_approved_then_starts_over() {
    let mut w = background("Inconclusive", Some("metric \"error-ratio\" inconclusive"));
    w.change_template("rev2");
    w.until("held", |w| {
        w.at().1 == "StepPaused"
            && w.status()
                .message
                .unwrap_or_default()
                .contains("background analysis")
    });
    let held_at = w.at().0;
    for _ in 0..3 {
        w.advance(60);
        w.reconcile();
    }
    assert_eq!(
        w.at(),
        (
            held_at,
            "StepPaused".into(),
            "".into(),
            "Progressing".into()
        ),
        "a duration does not end a held step"
    );
    w.analysis_outcome = ("Running".into(), None);
    w.approve();
    w.until("next step", |w| {
        w.canary().common.current_step_index == held_at + 1
    });
    assert!(
        w.plans
            .iter()
            .any(|p| p.analysis.delete == ["vllm-rev2-background"]),
        "started over"
    );
    w.until("completed", |w| w.status().phase == "Healthy");
}
