//! Step analysis (ours; off unless the Rollout's `lws-rollout.x-k8s.io/analysis` annotation
//! asks, so a Kruise manifest behaves as under Kruise): at `StepMetricsAnalysis` of an analysed
//! step the plan asks for an `AnalysisRun` made from the named templates, waits for its verdict
//! and acts on it — Successful is the step's approval, Failed rolls the release back (traffic
//! first, as a missed deadline does), Inconclusive or Error pauses for a person. The run is the
//! record: its measurements survive a restart, and the plan derives everything from it.
//!
//! An annotation rather than a spec field: the Rollout schema stays Kruise's.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use serde::Deserialize;

use crate::analysis::template::{ReleaseValues, TemplateParts, resolve};
use crate::api::analysis::{
    AnalysisRun, AnalysisRunStatus, Argument, INSTANCE_ID, INSTANCE_ID_LABEL, phase,
};
use crate::api::rollout::Rollout;
use crate::k8s::events::EventSpec;
use crate::rollout::names::{
    ANALYSIS_REVISION_LABEL, ANALYSIS_ROLLOUT_LABEL, ANALYSIS_STEP_LABEL, BACKGROUND_ANALYSIS,
    STEP_ANALYSIS, condition, event,
};
use crate::rollout::observe::RunSummary;

use super::{Draft, routing, status};

/// What a Rollout's analysis annotation asks for.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepAnalysis {
    /// The templates whose metrics make up each step's analysis.
    pub templates: Vec<TemplateRef>,
    /// Arguments for the templates.
    #[serde(default)]
    pub args: Vec<Argument>,
    /// The steps analysed (1-based); absent, every step.
    #[serde(default)]
    pub steps: Option<Vec<i32>>,
}

/// A template by name (Argo's `templateName` / `clusterScope`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateRef {
    /// Its name.
    pub template_name: String,
    /// A ClusterAnalysisTemplate rather than an AnalysisTemplate of the Rollout's namespace.
    #[serde(default)]
    pub cluster_scope: bool,
}

/// What a Rollout's background-analysis annotation asks for.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackgroundAnalysis {
    /// The templates whose metrics make up the analysis.
    pub templates: Vec<TemplateRef>,
    /// Arguments for the templates.
    #[serde(default)]
    pub args: Vec<Argument>,
    /// The step (1-based) from whose traffic on the release is analysed; absent, 1.
    #[serde(default)]
    pub starting_step: Option<i32>,
}

fn step_count(rollout: &Rollout) -> usize {
    rollout
        .spec
        .strategy
        .canary
        .as_ref()
        .map(|c| c.steps.len())
        .or_else(|| {
            rollout
                .spec
                .strategy
                .blue_green
                .as_ref()
                .map(|b| b.steps.len())
        })
        .unwrap_or(0)
}

fn check_parts(key: &str, templates: &[TemplateRef], args: &[Argument]) -> Result<(), String> {
    if templates.is_empty() {
        return Err(format!("{key}: \"templates\" names no template"));
    }
    if let Some(t) = templates.iter().find(|t| t.template_name.is_empty()) {
        return Err(format!("{key}: a template without templateName: {t:?}"));
    }
    if let Some(a) = args
        .iter()
        .find(|a| a.value.is_none() && a.value_from.is_none())
    {
        return Err(format!(
            "{key}: argument {:?} has neither value nor valueFrom",
            a.name
        ));
    }
    Ok(())
}

/// The background analysis `rollout` asks for, `Ok(None)` without one, or why its annotation
/// is wrong (admission refuses it with this message).
pub fn background_of(rollout: &Rollout) -> Result<Option<BackgroundAnalysis>, String> {
    let Some(text) = rollout.annotations().get(BACKGROUND_ANALYSIS) else {
        return Ok(None);
    };
    let parsed: BackgroundAnalysis = serde_json::from_str(text).map_err(|e| {
        format!(
            "{BACKGROUND_ANALYSIS} must be JSON like {{\"templates\": [{{\"templateName\": \"error-ratio\"}}], \
             \"startingStep\": 1}}: {e}"
        )
    })?;
    check_parts(BACKGROUND_ANALYSIS, &parsed.templates, &parsed.args)?;
    let n = step_count(rollout);
    if let Some(bad) = parsed
        .starting_step
        .filter(|s| *s < 1 || usize::try_from(*s).is_ok_and(|s| s > n))
    {
        return Err(format!(
            "{BACKGROUND_ANALYSIS}: startingStep {bad} does not exist (the strategy has {n} steps, numbered from 1)"
        ));
    }
    Ok(Some(parsed))
}

/// The analysis `rollout` asks for, `Ok(None)` without one, or why its annotation is wrong
/// (admission refuses it with this message).
pub fn of(rollout: &Rollout) -> Result<Option<StepAnalysis>, String> {
    let Some(text) = rollout.annotations().get(STEP_ANALYSIS) else {
        return Ok(None);
    };
    let parsed: StepAnalysis = serde_json::from_str(text).map_err(|e| {
        format!(
            "{STEP_ANALYSIS} must be JSON like {{\"templates\": [{{\"templateName\": \"error-ratio\"}}], \
             \"args\": [{{\"name\": \"x\", \"value\": \"y\"}}], \"steps\": [1, 2]}}: {e}"
        )
    })?;
    if parsed.templates.is_empty() {
        return Err(format!("{STEP_ANALYSIS}: \"templates\" names no template"));
    }
    if let Some(t) = parsed.templates.iter().find(|t| t.template_name.is_empty()) {
        return Err(format!(
            "{STEP_ANALYSIS}: a template without templateName: {t:?}"
        ));
    }
    let n = rollout
        .spec
        .strategy
        .canary
        .as_ref()
        .map(|c| c.steps.len())
        .or_else(|| {
            rollout
                .spec
                .strategy
                .blue_green
                .as_ref()
                .map(|b| b.steps.len())
        })
        .unwrap_or(0);
    if let Some(bad) = parsed
        .steps
        .iter()
        .flatten()
        .find(|s| **s < 1 || usize::try_from(**s).is_ok_and(|s| s > n))
    {
        return Err(format!(
            "{STEP_ANALYSIS}: step {bad} does not exist (the strategy has {n} steps, numbered from 1)"
        ));
    }
    if let Some(a) = parsed
        .args
        .iter()
        .find(|a| a.value.is_none() && a.value_from.is_none())
    {
        return Err(format!(
            "{STEP_ANALYSIS}: argument {:?} has neither value nor valueFrom",
            a.name
        ));
    }
    Ok(Some(parsed))
}

/// What the analysis of a step says.
#[derive(Clone, Debug, PartialEq)]
pub enum StepVerdict {
    /// The step is not analysed.
    NotAnalysed,
    /// The analysis is being made or runs: wait for the run's next change.
    Wait,
    /// Every metric passed: the step is approved.
    Passed,
    /// A metric failed: roll back, with this reason.
    Failed(String),
    /// Inconclusive, or the metrics could not be read: a person decides, for this reason.
    NeedsPerson(String),
}

/// Name of step `index`'s run for `revision`: unique per Rollout, revision and step.
pub fn run_name(rollout: &str, revision: &str, index: i32) -> String {
    let tail = format!("-{revision}-{index}");
    let keep = 253usize.saturating_sub(tail.len());
    let head: String = rollout.chars().take(keep).collect();
    format!("{head}{tail}")
}

/// The step's analysis at `StepMetricsAnalysis`: the run asked for when absent (or stale: made
/// before this step began, by an earlier release of the same revision), its verdict when done.
pub fn step(d: &mut Draft<'_>, index: i32, steps: usize) -> StepVerdict {
    let config = match of(&d.obs.rollout) {
        Ok(Some(c)) => c,
        Ok(None) => return StepVerdict::NotAnalysed,
        Err(e) => return StepVerdict::NeedsPerson(e),
    };
    if config.steps.as_ref().is_some_and(|s| !s.contains(&index)) {
        return StepVerdict::NotAnalysed;
    }
    let revision = status::canary(d.status()).canary_revision.clone();
    let name = run_name(&d.obs.rollout.name_any(), &revision, index);
    let since = status::canary(d.status()).common.last_update_time.clone();
    let stale = |r: &RunSummary| match (&r.created, &since) {
        (Some(created), Some(since)) => created.0 < since.0,
        _ => false,
    };
    if !d.obs.analysis.served {
        waiting(
            d,
            index,
            steps,
            "the analysis kinds (argoproj.io/v1alpha1 AnalysisTemplate, AnalysisRun) are not \
             served: apply crds/argoproj.io/ (or install Argo Rollouts' CRDs), then restart \
             the manager"
                .into(),
        );
        // Watched only once served: look again now and then.
        d.requeue(std::time::Duration::from_secs(30));
        return StepVerdict::Wait;
    }
    if !d.obs.analysis.synced {
        // The manager just started: its caches fill within moments.
        d.requeue(std::time::Duration::from_secs(1));
        return StepVerdict::Wait;
    }
    match d.obs.analysis.runs.get(&name) {
        Some(r) if stale(r) => {
            d.plan.analysis.delete.push(name);
            StepVerdict::Wait
        }
        Some(r) => verdict(d, &name, r, index, steps),
        None => {
            match desired_run(
                d,
                &config.templates,
                &config.args,
                &name,
                &revision,
                Some(index),
            ) {
                Ok(run) => d.plan.analysis.create.push(run),
                Err(why) => waiting(d, index, steps, why),
            }
            StepVerdict::Wait
        }
    }
}

fn verdict(d: &mut Draft<'_>, name: &str, r: &RunSummary, index: i32, steps: usize) -> StepVerdict {
    let why = || {
        format!(
            "analysis {name}: {}{}",
            r.phase,
            r.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )
    };
    match r.phase.as_str() {
        phase::SUCCESSFUL => StepVerdict::Passed,
        phase::FAILED => StepVerdict::Failed(format!("step {index}/{steps}: {}", why())),
        phase::INCONCLUSIVE | phase::ERROR => StepVerdict::NeedsPerson(why()),
        _ => {
            let values = r
                .last_values
                .iter()
                .map(|(m, v)| format!("{m}={v}"))
                .collect::<Vec<_>>()
                .join(", ");
            let msg = format!(
                "Rollout is in step({index}/{steps}), analysing the new version: analysis {name} {}{}",
                if r.phase.is_empty() {
                    phase::PENDING
                } else {
                    r.phase.as_str()
                },
                if values.is_empty() {
                    String::new()
                } else {
                    format!(" ({values})")
                }
            );
            let now = d.now;
            status::progressing_message(d.status(), msg, now);
            StepVerdict::Wait
        }
    }
}

/// The step is paused for a person because of its analysis: the reason, else `None` (an
/// analysis that passed, or a step without one).
pub fn needs_person(d: &Draft<'_>, index: i32) -> Option<String> {
    let config = match of(&d.obs.rollout) {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => return Some(e),
    };
    if config.steps.as_ref().is_some_and(|s| !s.contains(&index)) {
        return None;
    }
    let revision = d
        .plan
        .status
        .canary_status
        .as_ref()?
        .canary_revision
        .clone();
    let name = run_name(&d.obs.rollout.name_any(), &revision, index);
    let r = d.obs.analysis.runs.get(&name)?;
    matches!(r.phase.as_str(), phase::INCONCLUSIVE | phase::ERROR).then(|| {
        format!(
            "analysis {name}: {}{}",
            r.phase,
            r.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )
    })
}

/// Says in the status (and once in an Event) why the analysis cannot start.
fn waiting(d: &mut Draft<'_>, index: i32, steps: usize, why: String) {
    let msg = format!("Rollout is in step({index}/{steps}), waiting for its analysis: {why}");
    say(d, msg, &why);
}

/// The step's analysis was inconclusive or could not read its metrics: the step waits for
/// approval (`kubectl-kruise rollout approve`), saying why, with one Warning Event.
pub fn paused(d: &mut Draft<'_>, index: i32, steps: usize, why: &str) {
    let msg = format!(
        "Rollout is in step({index}/{steps}), paused by its analysis: {why}; approve to go on \
         (kubectl-kruise rollout approve), or roll back"
    );
    say(d, msg, why);
}

/// `msg` as the Rollout's message, with a Warning Event saying `why` only when the stored
/// message differs (a repeat reconcile publishes nothing).
fn say(d: &mut Draft<'_>, msg: String, why: &str) {
    let stored = d
        .obs
        .rollout
        .status
        .as_ref()
        .and_then(|s| s.message.as_deref());
    if stored != Some(msg.as_str()) {
        d.event(EventSpec::warning(event::ANALYSIS_WAITING, why));
    }
    let now = d.now;
    status::progressing_message(d.status(), msg, now);
}

/// The values a release fills arguments from.
fn release_values(d: &Draft<'_>, revision: &str) -> ReleaseValues {
    let r = &d.obs.rollout;
    let ns = r.namespace().unwrap_or_default();
    let stable_hash = d
        .plan
        .status
        .canary_status
        .as_ref()
        .and_then(|c| c.common.stable_revision.clone())
        .unwrap_or_default();
    let mut known = BTreeMap::from([
        ("namespace".to_string(), ns.clone()),
        ("rollout".to_string(), r.name_any()),
        ("workload".to_string(), r.spec.workload_ref.name.clone()),
        (
            "canary-workload".to_string(),
            // A pair has no one LWS of the new revision (one per role and slice): the set,
            // whose pods carry the revision label `canary-revision` names.
            if d.style == super::style::Style::Partition
                || r.spec.workload_ref.is_disaggregated_set()
            {
                r.spec.workload_ref.name.clone()
            } else {
                crate::release::names::canary_name(&r.spec.workload_ref.name, revision)
            },
        ),
        ("stable-revision".to_string(), stable_hash.clone()),
        ("canary-revision".to_string(), revision.to_string()),
    ]);
    if let Some(route) = routing::routing(d.obs) {
        known.insert("stable-service".into(), route.service.clone());
        known.insert(
            "canary-service".into(),
            crate::traffic::names::canary_service(&route.service),
        );
    }
    let mut fields = BTreeMap::from([
        ("metadata.name".to_string(), r.name_any()),
        ("metadata.namespace".to_string(), ns),
    ]);
    for (k, v) in r.labels() {
        fields.insert(format!("metadata.labels['{k}']"), v.clone());
    }
    for (k, v) in r.annotations() {
        fields.insert(format!("metadata.annotations['{k}']"), v.clone());
    }
    ReleaseValues {
        stable_hash,
        latest_hash: revision.to_string(),
        fields,
        known,
    }
}

/// The run step `index` asks for, or why it cannot be made (a template missing, an argument
/// without a value).
fn desired_run(
    d: &Draft<'_>,
    templates: &[TemplateRef],
    args: &[Argument],
    name: &str,
    revision: &str,
    index: Option<i32>,
) -> Result<AnalysisRun, String> {
    let a = &d.obs.analysis;
    let ns = d.obs.rollout.namespace().unwrap_or_default();
    let mut parts = Vec::with_capacity(templates.len());
    for t in templates {
        let part = if t.cluster_scope {
            a.cluster_templates
                .get(&t.template_name)
                .map(|s| TemplateParts {
                    name: &t.template_name,
                    args: &s.args,
                    metrics: &s.metrics,
                })
        } else {
            a.templates.get(&t.template_name).map(|s| TemplateParts {
                name: &t.template_name,
                args: &s.args,
                metrics: &s.metrics,
            })
        };
        parts.push(part.ok_or_else(|| {
            if t.cluster_scope {
                format!("ClusterAnalysisTemplate {} not found", t.template_name)
            } else {
                format!(
                    "AnalysisTemplate {} not found in namespace {ns}",
                    t.template_name
                )
            }
        })?);
    }
    let spec = resolve(&parts, args, &release_values(d, revision))?;
    for m in spec.metrics.iter().filter(|_| index.is_some()) {
        match crate::analysis::assess::limits(m) {
            Ok(l) if l.count.is_none() => {
                return Err(format!(
                    "metric {:?} has an interval but no count: a step's analysis would never end",
                    m.name
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
    }
    let r = &d.obs.rollout;
    let mut run = AnalysisRun::new(name, spec);
    run.metadata.namespace = Some(ns);
    let mut labels = BTreeMap::from([
        (INSTANCE_ID_LABEL.to_string(), INSTANCE_ID.to_string()),
        (ANALYSIS_ROLLOUT_LABEL.to_string(), r.name_any()),
        (ANALYSIS_REVISION_LABEL.to_string(), revision.to_string()),
    ]);
    if let Some(index) = index {
        labels.insert(ANALYSIS_STEP_LABEL.to_string(), index.to_string());
    }
    run.metadata.labels = Some(labels);
    run.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "rollouts.kruise.io/v1beta1".into(),
        kind: "Rollout".into(),
        name: r.name_any(),
        uid: r.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    run.status = Some(AnalysisRunStatus {
        phase: Some(phase::PENDING.into()),
        ..AnalysisRunStatus::default()
    });
    Ok(run)
}

/// Name of the background run for `revision`.
pub fn background_name(rollout: &str, revision: &str) -> String {
    let tail = format!("-{revision}-background");
    let keep = 253usize.saturating_sub(tail.len());
    let head: String = rollout.chars().take(keep).collect();
    format!("{head}{tail}")
}

/// What the background analysis says now.
#[derive(Clone, Debug, PartialEq)]
pub enum Background {
    /// None asked for, not started yet, or running with no verdict.
    Quiet,
    /// A metric failed: roll back, with this reason.
    Failed(String),
    /// Inconclusive, or its metrics could not be read: hold the release for a person.
    NeedsPerson(String),
}

/// The background analysis of the release in flight: its run asked for once the starting
/// step's traffic has moved (a run older than the release — the Progressing condition's last
/// transition — is an earlier release's, deleted and made again), and its verdict.
pub fn background(d: &mut Draft<'_>) -> Background {
    let Ok(Some(config)) = background_of(&d.obs.rollout) else {
        return Background::Quiet;
    };
    if !d.obs.analysis.served || !d.obs.analysis.synced {
        // Said by the step analysis, or by the next reconcile once the caches are filled.
        if d.obs.analysis.served {
            d.requeue(std::time::Duration::from_secs(1));
        }
        return Background::Quiet;
    }
    let c = status::canary(d.status()).clone();
    let from = config.starting_step.unwrap_or(1);
    let moved = c.common.current_step_index > from
        || (c.common.current_step_index == from
            && matches!(
                c.common.current_step_state,
                crate::api::rollout::StepState::StepMetricsAnalysis
                    | crate::api::rollout::StepState::StepPaused
                    | crate::api::rollout::StepState::StepReady
                    | crate::api::rollout::StepState::Completed
            ));
    if !moved {
        return Background::Quiet;
    }
    let name = background_name(&d.obs.rollout.name_any(), &c.canary_revision);
    let started = status::condition(&d.plan.status, condition::PROGRESSING)
        .and_then(|c| c.last_transition_time.clone());
    match d.obs.analysis.runs.get(&name) {
        Some(r)
            if r.created
                .as_ref()
                .zip(started.as_ref())
                .is_some_and(|(c, s)| c.0 < s.0) =>
        {
            d.plan.analysis.delete.push(name);
            Background::Quiet
        }
        Some(r) => match r.phase.as_str() {
            phase::FAILED => Background::Failed(format!(
                "background analysis {name} failed: {}",
                r.message.as_deref().unwrap_or("")
            )),
            phase::INCONCLUSIVE | phase::ERROR => Background::NeedsPerson(format!(
                "background analysis {name}: {}{}",
                r.phase,
                r.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )),
            _ => Background::Quiet,
        },
        None => {
            match desired_run(
                d,
                &config.templates,
                &config.args,
                &name,
                &c.canary_revision,
                None,
            ) {
                Ok(run) => d.plan.analysis.create.push(run),
                Err(why) => {
                    let index = c.common.current_step_index;
                    let n = step_count(&d.obs.rollout);
                    waiting(d, index, n, format!("background analysis: {why}"));
                }
            }
            Background::Quiet
        }
    }
}

/// Stops the background run of the release in flight (its release is over).
pub fn end_background(d: &mut Draft<'_>) {
    let Some(c) = d.plan.status.canary_status.as_ref() else {
        return;
    };
    let name = background_name(&d.obs.rollout.name_any(), &c.canary_revision);
    if d.obs
        .analysis
        .runs
        .get(&name)
        .is_some_and(|r| !r.terminated && !phase::is_done(&r.phase))
    {
        d.plan.analysis.terminate.push(name);
    }
}
