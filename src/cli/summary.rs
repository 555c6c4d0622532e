//! `rollout summary` (alias `describe`): one screen about a release — the steps with their
//! replicas, groups, traffic and pause, where the release is, the groups on each side read from
//! the stable and canary LWS status, and the traffic split as it is in the cluster.

use std::fmt::Write;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{
    actions::steps,
    status::{
        PairSides, StepView, Workload, current_step, line, line_of, step_traffic, step_view,
        step_view_of,
    },
};
use crate::{
    api::{DisaggregatedSet, LeaderWorkerSet, Rollout, disaggregatedset::HELD_REVISION_ANNOTATION},
    batchrelease::pair::plan::role_groups,
    lws::labels::RELEASE_PARTITION,
    release::groups::desired_groups,
    rollout::{names::STABLE_REVISION, plan::share::StableSize},
};

/// What the summary is made of, read by the binary.
pub struct SummaryInput<'a> {
    /// The Rollout.
    pub rollout: &'a Rollout,
    /// Its workload's sides.
    pub workload: Sides<'a>,
    /// Which object the split was read from (`HTTPRoute vllm`), and its lines.
    pub traffic: Option<(String, Vec<String>)>,
}

/// The workload's sides as read.
pub enum Sides<'a> {
    /// An LWS release: the workload, if it exists, and the canary LWS of the release in
    /// flight, if any.
    Lws {
        stable: Option<&'a LeaderWorkerSet>,
        canary: Option<&'a LeaderWorkerSet>,
    },
    /// A pair release: the DisaggregatedSet, if it exists, and both sides of each role.
    Pair {
        set: Option<&'a DisaggregatedSet>,
        sides: Option<&'a PairSides>,
    },
}

/// The summary text.
pub fn render(input: &SummaryInput<'_>) -> String {
    let r = input.rollout;
    let mut out = String::new();
    let ns = r.namespace().unwrap_or_default();
    let _ = writeln!(out, "Rollout {ns}/{}", r.name_any());
    let view = match input.workload {
        Sides::Lws { stable, canary } => {
            let _ = writeln!(out, "  {}", line(r, stable));
            lws_sides(&mut out, r, stable, canary);
            step_view(r, stable)
        }
        Sides::Pair { set, sides } => {
            let _ = writeln!(out, "  {}", line_of(r, sides.map(Workload::Pair)));
            pair_sides(&mut out, r, set, sides);
            let size = sides.map(|s| StableSize {
                replicas: s.pairs,
                slices: s.slices,
            });
            step_view_of(r, size)
        }
    };
    let _ = writeln!(out, "Steps:");
    let _ = writeln!(out, "       STEP  REPLICAS  GROUPS  TRAFFIC       PAUSE");
    for (i, step) in steps(r).iter().enumerate() {
        let n = i as i32 + 1;
        let marker = if n == view.index { "->" } else { "  " };
        let replicas = match &step.replicas {
            Some(IntOrString::Int(v)) => v.to_string(),
            Some(IntOrString::String(s)) => s.clone(),
            None => "-".into(),
        };
        let groups = match (&step.replicas, &input.workload) {
            (
                Some(v),
                Sides::Lws {
                    stable: Some(l), ..
                },
            ) => desired_groups(v, l.spec.replicas.unwrap_or(1)).to_string(),
            (Some(v), Sides::Pair { set: Some(set), .. }) => pair_groups(set, v),
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

/// The workload block of an LWS release: the stable LWS and the canary side.
fn lws_sides(
    out: &mut String,
    r: &Rollout,
    stable: Option<&LeaderWorkerSet>,
    canary: Option<&LeaderWorkerSet>,
) {
    let _ = writeln!(out, "Workload LeaderWorkerSet {}", r.spec.workload_ref.name);
    match stable {
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
    let in_place = stable.and_then(|lws| Some((lws, lws.annotations().get(RELEASE_PARTITION)?)));
    match (canary, in_place) {
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
}

/// The workload block of a pair release: the set, its hold and both sides of each role.
fn pair_sides(
    out: &mut String,
    r: &Rollout,
    set: Option<&DisaggregatedSet>,
    sides: Option<&PairSides>,
) {
    let _ = writeln!(
        out,
        "Workload DisaggregatedSet {}",
        r.spec.workload_ref.name
    );
    let Some(set) = set else {
        let _ = writeln!(out, "  not found");
        return;
    };
    let _ = writeln!(
        out,
        "  {} pairs in {} slice(s); GROUPS below are per slice, by role ({})",
        sides.map_or(0, |s| s.pairs),
        set.spec.slices(),
        set.spec
            .roles
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(hold) = set.annotations().get(HELD_REVISION_ANNOTATION) {
        let _ = writeln!(
            out,
            "  held on revision {hold} ({HELD_REVISION_ANNOTATION})"
        );
    }
    for role in sides.map_or(&[][..], |s| &s.roles[..]) {
        let _ = writeln!(
            out,
            "  {}: stable {}/{} groups ready, new {}/{} groups ready",
            role.role, role.stable_ready, role.stable, role.canary_ready, role.canary
        );
    }
}

/// A step's groups of each role in one slice, `1,2` in the set's role order: its share of
/// each role, at least one group of each (as the BatchRelease writes them).
fn pair_groups(set: &DisaggregatedSet, share: &IntOrString) -> String {
    set.spec
        .roles
        .iter()
        .map(|role| role_groups(share, role.replicas()).to_string())
        .collect::<Vec<_>>()
        .join(",")
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
            workload: Sides::Lws {
                stable: Some(&stable),
                canary: Some(&canary),
            },
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
            workload: Sides::Lws {
                stable: Some(&stable),
                canary: None,
            },
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
            workload: Sides::Lws {
                stable: None,
                canary: None,
            },
            traffic: None,
        });
        assert!(text.contains("stable: not found"), "{text}");
        assert!(text.contains("canary: none"), "{text}");
        assert!(text.contains("   1     1         ?  "), "{text}");
        assert!(text.contains("Traffic: no trafficRoutings"), "{text}");
    }

    #[test]
    fn a_pair_release_shows_both_sides_of_each_role_and_its_groups_per_role() {
        let mut r = rollout(progressing(1, "StepPaused", 1));
        r.spec.workload_ref.kind = "DisaggregatedSet".into();
        r.spec.workload_ref.name = "pd".into();
        let set: DisaggregatedSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "demo",
                "annotations": {"rollouts.kruise.io/stable-revision": "aaaa1111"}},
            "spec": {"roles": [
                {"name": "prefill", "spec": {"replicas": 2, "leaderWorkerTemplate": {
                    "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}},
                {"name": "decode", "spec": {"replicas": 4, "leaderWorkerTemplate": {
                    "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}}
            ]}
        }))
        .unwrap();
        let role = |name: &str, stable, canary_ready| crate::cli::status::RoleSides {
            role: name.into(),
            stable_ready: stable,
            stable,
            canary_ready,
            canary: 1,
        };
        let sides = PairSides {
            held: true,
            pairs: 2,
            slices: 1,
            roles: vec![role("prefill", 2, 1), role("decode", 4, 0)],
        };
        let text = render(&SummaryInput {
            rollout: &r,
            workload: Sides::Pair {
                set: Some(&set),
                sides: Some(&sides),
            },
            traffic: None,
        });
        for want in [
            "Workload DisaggregatedSet pd",
            "  2 pairs in 1 slice(s); GROUPS below are per slice, by role (prefill, decode)",
            "  held on revision aaaa1111 (rollouts.kruise.io/stable-revision)",
            "  prefill: stable 2/2 groups ready, new 1/1 groups ready",
            "  decode: stable 4/4 groups ready, new 0/1 groups ready",
            "  ->   1     1         1,1     20%           approval   StepPaused",
            "       2     50%       1,2     50%           60s",
            "       3     100%      2,4     100%          -",
        ] {
            assert!(text.contains(want), "{want:?} in:\n{text}");
        }
    }
}
