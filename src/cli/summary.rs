//! `rollout summary` (alias `describe`): one screen about a release — the steps with their
//! replicas, groups, traffic and pause, where the release is, the groups on each side read from
//! the stable and canary LWS status, and the traffic split as it is in the cluster.

use std::fmt::Write;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{
    actions::steps,
    status::{StepView, current_step, line, step_traffic, step_view},
};
use crate::{
    api::{LeaderWorkerSet, Rollout},
    lws::labels::RELEASE_PARTITION,
    release::groups::desired_groups,
    rollout::names::STABLE_REVISION,
};

/// What the summary is made of, read by the binary.
pub struct SummaryInput<'a> {
    /// The Rollout.
    pub rollout: &'a Rollout,
    /// Its workload, if it exists.
    pub stable: Option<&'a LeaderWorkerSet>,
    /// The canary LWS of the release in flight, if any.
    pub canary: Option<&'a LeaderWorkerSet>,
    /// Which object the split was read from (`HTTPRoute vllm`), and its lines.
    pub traffic: Option<(String, Vec<String>)>,
}

/// The summary text.
pub fn render(input: &SummaryInput<'_>) -> String {
    let r = input.rollout;
    let mut out = String::new();
    let ns = r.namespace().unwrap_or_default();
    let _ = writeln!(out, "Rollout {ns}/{}", r.name_any());
    let _ = writeln!(out, "  {}", line(r, input.stable));
    let view = step_view(r, input.stable);
    let _ = writeln!(out, "Workload LeaderWorkerSet {}", r.spec.workload_ref.name);
    match input.stable {
        Some(lws) => {
            let _ = writeln!(out, "  stable: {}", groups(lws));
            if let Some(hold) = lws.annotations().get(STABLE_REVISION) {
                let _ = writeln!(out, "  held on revision {hold} ({STABLE_REVISION})");
            }
        }
        None => {
            let _ = writeln!(out, "  stable: not found");
        }
    }
    let in_place = input
        .stable
        .and_then(|lws| Some((lws, lws.annotations().get(RELEASE_PARTITION)?)));
    match (input.canary, in_place) {
        (Some(lws), _) => {
            let _ = writeln!(out, "  canary: {} ({})", groups(lws), lws.name_any());
        }
        // Partition style: the new side is the user's own groups from the release partition up.
        (None, Some((lws, partition))) => {
            let last = lws.spec.replicas.unwrap_or(1) - 1;
            let _ = writeln!(
                out,
                "  canary: in place, groups {partition}..{last} of {} move to the new template \
                 ({RELEASE_PARTITION}: {partition})",
                lws.name_any()
            );
        }
        (None, None) => {
            let _ = writeln!(out, "  canary: none");
        }
    }
    let _ = writeln!(out, "Steps:");
    let _ = writeln!(out, "       STEP  REPLICAS  GROUPS  TRAFFIC       PAUSE");
    let stable_replicas = input.stable.map(|l| l.spec.replicas.unwrap_or(1));
    for (i, step) in steps(r).iter().enumerate() {
        let n = i as i32 + 1;
        let marker = if n == view.index { "->" } else { "  " };
        let replicas = match &step.replicas {
            Some(IntOrString::Int(v)) => v.to_string(),
            Some(IntOrString::String(s)) => s.clone(),
            None => "-".into(),
        };
        let groups = match (&step.replicas, stable_replicas) {
            (Some(v), Some(total)) => desired_groups(v, total).to_string(),
            _ => "?".into(),
        };
        let pause = match step.pause.as_ref().map(|p| p.duration) {
            None => "-".to_string(),
            Some(None) => "approval".to_string(),
            Some(Some(d)) => format!("{d}s"),
        };
        let traffic = step_traffic(Some(step));
        let state = if n == view.index {
            state_note(&view)
        } else {
            String::new()
        };
        let row = format!(
            "  {marker}   {n:<4}  {replicas:<8}  {groups:<6}  {traffic:<12}  {pause:<9}{state}"
        );
        let _ = writeln!(out, "{}", row.trim_end());
    }
    if view.index > 0 && current_step(steps(r), view.index).is_none() {
        let _ = writeln!(out, "  (current step {} is beyond the steps)", view.index);
    }
    match &input.traffic {
        Some((from, lines)) => {
            let _ = writeln!(out, "Traffic ({from}):");
            for l in lines {
                let _ = writeln!(out, "  {l}");
            }
        }
        None => {
            let _ = writeln!(out, "Traffic: no trafficRoutings");
        }
    }
    out
}

fn state_note(view: &StepView) -> String {
    if view.state.is_empty() {
        String::new()
    } else {
        format!("  {}", view.state)
    }
}

fn groups(lws: &LeaderWorkerSet) -> String {
    let s = lws.status.clone().unwrap_or_default();
    format!(
        "{} groups wanted, {} exist, {} ready, {} updated",
        lws.spec.replicas.unwrap_or(1),
        s.replicas.unwrap_or(0),
        s.ready_replicas.unwrap_or(0),
        s.updated_replicas.unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fixtures::{lws, progressing, rollout};

    #[test]
    fn one_screen_with_steps_sides_and_traffic() {
        let r = rollout(progressing(2, "StepPaused", 2));
        let stable = lws(4, Some("k1"));
        let mut canary = lws(2, None);
        canary.metadata.name = Some("vllm-canary-abc".into());
        let text = render(&SummaryInput {
            rollout: &r,
            stable: Some(&stable),
            canary: Some(&canary),
            traffic: Some((
                "HTTPRoute vllm".into(),
                vec!["rule 0: canary 50% (vllm 50, vllm-canary 50)".into()],
            )),
        });
        let want = "\
Rollout demo/vllm
  Progressing | step 2/3 StepPaused | canary 2/2 groups ready | traffic 50% | Rollout is in step(2/3)
Workload LeaderWorkerSet vllm
  stable: 4 groups wanted, 4 exist, 4 ready, 4 updated
  held on revision k1 (rollouts.kruise.io/stable-revision)
  canary: 2 groups wanted, 2 exist, 2 ready, 2 updated (vllm-canary-abc)
Steps:
       STEP  REPLICAS  GROUPS  TRAFFIC       PAUSE
       1     1         1       20%           approval
  ->   2     50%       2       50%           60s        StepPaused
       3     100%      4       100%          -
Traffic (HTTPRoute vllm):
  rule 0: canary 50% (vllm 50, vllm-canary 50)
";
        assert_eq!(text, want, "\n{text}");
    }

    #[test]
    fn a_partition_style_release_shows_its_groups_moved_in_place() {
        let r = rollout(progressing(1, "StepPaused", 1));
        let mut stable = lws(4, Some("k1"));
        stable
            .annotations_mut()
            .insert(RELEASE_PARTITION.into(), "3".into());
        let text = render(&SummaryInput {
            rollout: &r,
            stable: Some(&stable),
            canary: None,
            traffic: None,
        });
        assert!(
            text.contains(
                "  canary: in place, groups 3..3 of vllm move to the new template \
                 (lws-rollout.x-k8s.io/release-partition: 3)"
            ),
            "{text}"
        );
    }

    #[test]
    fn missing_objects_are_said_not_guessed() {
        let r = rollout(serde_json::json!(null));
        let text = render(&SummaryInput {
            rollout: &r,
            stable: None,
            canary: None,
            traffic: None,
        });
        assert!(text.contains("stable: not found"), "{text}");
        assert!(text.contains("canary: none"), "{text}");
        assert!(text.contains("   1     1         ?  "), "{text}");
        assert!(text.contains("Traffic: no trafficRoutings"), "{text}");
    }
}
