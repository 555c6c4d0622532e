//! The per-Rollout series (`lws_rollout_rollout_*`, docs/install.md "Metrics"): where each
//! Rollout's release stands, read from the controller's caches at each scrape, so nothing is
//! kept that a restart or a new leader would have to rebuild.

use k8s_openapi::jiff::Timestamp;
use kube::{ResourceExt, runtime::reflector::Store};

use crate::api::{analysis::AnalysisRun, rollout::Rollout};
use crate::k8s::metrics::{ReleaseRow, ReleaseView};
use crate::rollout::names::ANALYSIS_ROLLOUT_LABEL;

/// The row of one Rollout at `now`; `runs` are AnalysisRuns of its namespace (those of other
/// Rollouts are skipped): the newest one's phase is its last analysis verdict.
pub fn row<'a>(
    rollout: &Rollout,
    runs: impl IntoIterator<Item = &'a AnalysisRun>,
    now: Timestamp,
) -> ReleaseRow {
    let name = rollout.name_any();
    let namespace = rollout.namespace().unwrap_or_default();
    let strategy = &rollout.spec.strategy;
    let steps = match (&strategy.canary, &strategy.blue_green) {
        (Some(c), _) => c.steps.len(),
        (None, Some(b)) => b.steps.len(),
        (None, None) => 0,
    };
    let status = rollout.status.as_ref();
    let common = status.and_then(|s| {
        s.canary_status
            .as_ref()
            .map(|c| &c.common)
            .or(s.blue_green_status.as_ref().map(|b| &b.common))
    });
    let analysis = runs
        .into_iter()
        .filter(|r| {
            r.namespace().as_deref() == Some(namespace.as_str())
                && r.labels().get(ANALYSIS_ROLLOUT_LABEL) == Some(&name)
        })
        .max_by_key(|r| (r.creation_timestamp().map(|t| t.0), r.name_any()))
        .and_then(|r| r.status.as_ref()?.phase.clone())
        .filter(|p| !p.is_empty());
    ReleaseRow {
        phase: status.map(|s| s.phase.to_string()).unwrap_or_default(),
        step: common.map_or(0, |c| i64::from(c.current_step_index)),
        steps: i64::try_from(steps).unwrap_or(i64::MAX),
        step_state: common
            .map(|c| c.current_step_state.to_string())
            .unwrap_or_default(),
        state_seconds: common
            .and_then(|c| c.last_update_time.as_ref())
            .map(|t| now.duration_since(t.0).as_secs_f64().max(0.0)),
        paused: strategy.paused,
        analysis,
        conditions: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect(),
        namespace,
        name,
    }
}

/// The rows of every cached Rollout, for the metrics registry while this replica leads.
pub struct CachedReleases {
    /// The Rollout controller's cache.
    pub rollouts: Store<Rollout>,
    /// The AnalysisRun cache, where the API server serves Argo's analysis kinds.
    pub runs: Option<Store<AnalysisRun>>,
}

impl ReleaseView for CachedReleases {
    fn rows(&self) -> Vec<ReleaseRow> {
        let now = Timestamp::now();
        let runs = self.runs.as_ref().map(Store::state).unwrap_or_default();
        self.rollouts
            .state()
            .iter()
            .map(|r| row(r, runs.iter().map(|r| &**r), now))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).expect("valid")
    }

    fn run(name: &str, rollout: &str, created: &str, phase: &str) -> AnalysisRun {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun",
            "metadata": {"name": name, "namespace": "demo", "creationTimestamp": created,
                         "labels": {ANALYSIS_ROLLOUT_LABEL: rollout}},
            "spec": {"metrics": []},
            "status": {"phase": phase}
        }))
        .expect("a run")
    }

    #[test]
    fn a_paused_blue_green_step_with_its_newest_analysis() {
        let rollout: Rollout = serde_json::from_value(json!({
            "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
            "metadata": {"name": "vllm", "namespace": "demo"},
            "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm"},
                     "strategy": {"paused": true, "blueGreen": {"steps": [{"replicas": 1}, {"replicas": "100%"}]}}},
            "status": {"phase": "Progressing",
                       "blueGreenStatus": {"currentStepIndex": 1, "currentStepState": "StepPaused",
                                           "lastUpdateTime": "1970-01-01T00:01:40Z"},
                       "conditions": [{"type": "Progressing", "status": "True", "reason": "Paused", "message": ""}]}
        }))
        .expect("a rollout");
        let runs = [
            run("vllm-1", "vllm", "1970-01-01T00:00:10Z", "Successful"),
            run("vllm-2", "vllm", "1970-01-01T00:01:00Z", "Failed"),
            run("other-9", "other", "1970-01-01T00:01:30Z", "Running"),
        ];
        let got = row(&rollout, &runs, at(130));
        assert_eq!(
            got,
            ReleaseRow {
                namespace: "demo".into(),
                name: "vllm".into(),
                phase: "Progressing".into(),
                step: 1,
                steps: 2,
                step_state: "StepPaused".into(),
                state_seconds: Some(30.0),
                paused: true,
                analysis: Some("Failed".into()),
                conditions: vec![("Progressing".into(), "True".into(), "Paused".into())],
            }
        );
    }

    #[test]
    fn a_rollout_without_status_or_runs_has_no_step_state_or_verdict() {
        let rollout: Rollout = serde_json::from_value(json!({
            "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
            "metadata": {"name": "vllm", "namespace": "demo"},
            "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "vllm"},
                     "strategy": {"canary": {"steps": [{"replicas": 1}]}}}
        }))
        .expect("a rollout");
        let got = row(&rollout, &[], at(0));
        assert_eq!((got.step, got.steps), (0, 1));
        assert!(got.step_state.is_empty() && got.phase.is_empty());
        assert_eq!((got.state_seconds, got.analysis), (None, None));
    }
}
