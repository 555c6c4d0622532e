//! `rollout status`: one line per observed change, and when to stop.
//!
//! A release is over when the Rollout is `Healthy` for its current generation **and** the LWS no
//! longer carries the hold (`rollouts.kruise.io/stable-revision`). The hold is set by the LWS
//! webhook in the same write as the template change, so a `status` started right after
//! `kubectl apply` never mistakes the Healthy of the previous release for the end of this one.
//! The outcome is the `Succeeded` condition: `False` means the release was cancelled (rolled
//! back); `True` or absent (never released) means success.

use kube::ResourceExt;

use super::actions::steps;
use crate::{
    api::{
        DisaggregatedSet, LeaderWorkerSet, Rollout,
        disaggregatedset::{REVISION_LABEL, ROLE_LABEL, SET_NAME_LABEL},
        rollout::{CanaryStep, FinalisingStep, Phase, RolloutStatus, StepState},
    },
    rollout::names::{STABLE_REVISION, condition, reason},
    rollout::plan::share::StableSize,
};

/// What `rollout status` does after an observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not over yet: keep watching.
    Waiting,
    /// The release finished (or there is none to wait for): exit 0.
    Succeeded,
    /// It will not finish by itself: cancelled, disabled, refused, deleted. Exit non-zero.
    Failed(String),
}

/// The workload a Rollout releases, as `rollout status` reads it.
#[derive(Debug, Clone, Copy)]
pub enum Workload<'a> {
    /// A LeaderWorkerSet.
    Lws(&'a LeaderWorkerSet),
    /// A DisaggregatedSet: a prefill/decode pair, read off the set and its LWSs.
    Pair(&'a PairSides),
}

impl Workload<'_> {
    /// It carries the hold (`rollouts.kruise.io/stable-revision`): a release is not over.
    fn held(&self) -> bool {
        match self {
            Workload::Lws(l) => l
                .annotations()
                .get(STABLE_REVISION)
                .is_some_and(|v| !v.is_empty()),
            Workload::Pair(p) => p.held,
        }
    }

    /// What a step's share is of: an LWS's groups, a pair's complete pairs (over its slices).
    fn size(&self) -> StableSize {
        match self {
            Workload::Lws(l) => StableSize {
                replicas: l.spec.replicas.unwrap_or(1),
                slices: 1,
            },
            Workload::Pair(p) => StableSize {
                replicas: p.pairs,
                slices: p.slices,
            },
        }
    }
}

/// Both sides of every role of a pair release: what `rollout status` shows of a
/// DisaggregatedSet, whose counts no single LWS has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairSides {
    /// The set carries the hold.
    pub held: bool,
    /// The set's size in pairs: per slice, the fewest groups any role has, summed over slices.
    pub pairs: i32,
    /// The set's slices: a step takes its share of each.
    pub slices: i32,
    /// Per role, in the set's order.
    pub roles: Vec<RoleSides>,
}

/// One role of a pair release, summed over the set's slices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleSides {
    /// The role's name.
    pub role: String,
    /// Groups of the stable side (every revision but the new one): ready, then asked.
    pub stable_ready: i32,
    pub stable: i32,
    /// Groups of the new revision: ready, then asked.
    pub canary_ready: i32,
    pub canary: i32,
}

/// Both sides of every role of `set` from its LWSs among `lws`. The new side is the revision
/// the Rollout releases (`canaryStatus.canaryRevision`), so a rollback still shows the new
/// pair draining; before any release, the set's template revision.
pub fn pair_sides(rollout: &Rollout, set: &DisaggregatedSet, lws: &[LeaderWorkerSet]) -> PairSides {
    let name = set.name_any();
    let children: Vec<&LeaderWorkerSet> = lws
        .iter()
        .filter(|l| l.labels().get(SET_NAME_LABEL) == Some(&name))
        .collect();
    let workload = crate::rollout::observe::pair_workload(set, children.iter().copied());
    let new = rollout
        .status
        .as_ref()
        .and_then(|s| s.canary_status.as_ref())
        .map(|c| c.canary_revision.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| workload.update_revision.clone());
    let roles = set
        .spec
        .roles
        .iter()
        .map(|role| {
            let mut sides = RoleSides {
                role: role.name.clone(),
                ..RoleSides::default()
            };
            for l in children
                .iter()
                .filter(|l| l.labels().get(ROLE_LABEL) == Some(&role.name))
            {
                let asked = l.spec.replicas.unwrap_or(1);
                let ready = l
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0);
                if l.labels().get(REVISION_LABEL) == Some(&new) {
                    sides.canary += asked;
                    sides.canary_ready += ready;
                } else {
                    sides.stable += asked;
                    sides.stable_ready += ready;
                }
            }
            sides
        })
        .collect();
    PairSides {
        held: workload.hold.is_some(),
        pairs: workload.replicas,
        slices: workload.slices,
        roles,
    }
}

/// `prefill stable 2/2 canary 1/1 | decode stable 2/2 canary 0/1`: per role, ready/asked
/// groups of each side.
pub fn pair_text(sides: &PairSides) -> String {
    sides
        .roles
        .iter()
        .map(|r| {
            format!(
                "{} stable {}/{} canary {}/{}",
                r.role, r.stable_ready, r.stable, r.canary_ready, r.canary
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The verdict for the Rollout (`None`: deleted) and its LWS (`None`: missing).
pub fn verdict(rollout: Option<&Rollout>, lws: Option<&LeaderWorkerSet>) -> Verdict {
    verdict_of(rollout, lws.map(Workload::Lws))
}

/// The verdict for the Rollout (`None`: deleted) and its workload (`None`: missing).
pub fn verdict_of(rollout: Option<&Rollout>, workload: Option<Workload<'_>>) -> Verdict {
    let Some(rollout) = rollout else {
        return Verdict::Failed("the Rollout was deleted".into());
    };
    let status = rollout.status.clone().unwrap_or_default();
    let phase = &status.phase;
    if rollout.metadata.deletion_timestamp.is_some() || *phase == Phase::Terminating {
        return Verdict::Failed("the Rollout is being deleted".into());
    }
    if let Some(c) = find_condition(&status, condition::ACCEPTED).filter(|c| c.status == "False") {
        return Verdict::Failed(format!(
            "the Rollout is not accepted ({}): {}",
            c.reason, c.message
        ));
    }
    if rollout.spec.disabled || matches!(phase, Phase::Disabled | Phase::Disabling) {
        return Verdict::Failed("the Rollout is disabled: the workload updates without it".into());
    }
    if status.observed_generation != rollout.metadata.generation {
        return Verdict::Waiting;
    }
    // Our deadlines: a late batch or a release that rolled itself back will not finish without
    // someone acting (kubectl rollout status fails a Deployment's ProgressDeadlineExceeded too).
    if let Some(c) = find_condition(&status, condition::PROGRESSING).filter(|c| {
        c.status == "False"
            && (c.reason == reason::DEADLINE_EXCEEDED
                || c.reason == reason::ROLLED_BACK_ON_DEADLINE
                || c.reason == reason::ANALYSIS_FAILED)
    }) {
        return Verdict::Failed(format!("{}: {}", c.reason, c.message));
    }
    let held = workload.is_none_or(|w| w.held());
    if *phase != Phase::Healthy || held {
        return Verdict::Waiting;
    }
    match find_condition(&status, condition::SUCCEEDED) {
        Some(c) if c.status == "False" => Verdict::Failed(format!(
            "the release was cancelled: {}",
            status.message.as_deref().unwrap_or("rolled back")
        )),
        _ => Verdict::Succeeded,
    }
}

fn find_condition<'a>(
    status: &'a RolloutStatus,
    type_: &str,
) -> Option<&'a crate::api::rollout::RolloutCondition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The step-level view shared by the status line and the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepView {
    /// 1-based current step, 0 before any release.
    pub index: i32,
    /// Number of steps.
    pub total: usize,
    /// `currentStepState`, or `""`.
    pub state: String,
    /// `finalisingStep`, or `""`.
    pub finalising: String,
    /// Canary groups ready / existing.
    pub canary_ready: i32,
    /// Canary groups that exist.
    pub canary_replicas: i32,
    /// Canary groups the current step wants; `None` without the LWS to scale against.
    pub canary_desired: Option<i32>,
}

/// The current step of the Rollout, with groups resolved against the stable LWS's replicas.
pub fn step_view(rollout: &Rollout, lws: Option<&LeaderWorkerSet>) -> StepView {
    step_view_of(rollout, lws.map(|l| Workload::Lws(l).size()))
}

/// The current step of the Rollout, with groups resolved against the workload's size, as the
/// Rollout counts them (`None`: unknown, the workload missing).
pub fn step_view_of(rollout: &Rollout, stable: Option<StableSize>) -> StepView {
    let status = rollout.status.clone().unwrap_or_default();
    let common = status
        .canary_status
        .as_ref()
        .map(|c| (&c.common, c.canary_ready_replicas, c.canary_replicas))
        .or_else(|| {
            status
                .blue_green_status
                .as_ref()
                .map(|b| (&b.common, b.updated_ready_replicas, b.updated_replicas))
        });
    let steps = steps(rollout);
    let index = status
        .current_step_index
        .or(common.map(|c| c.0.current_step_index))
        .unwrap_or(0);
    let canary_desired = current_step(steps, index).and_then(|s| {
        let replicas = s.replicas.as_ref()?;
        Some(stable?.groups(replicas))
    });
    StepView {
        index,
        total: steps.len(),
        state: common
            .map(|c| c.0.current_step_state.to_string())
            .unwrap_or_default(),
        finalising: common
            .map(|c| c.0.finalising_step.to_string())
            .unwrap_or_default(),
        canary_ready: common.map_or(0, |c| c.1),
        canary_replicas: common.map_or(0, |c| c.2),
        canary_desired: canary_desired.or(if index == 0 { Some(0) } else { None }),
    }
}

/// The step at a 1-based index.
pub fn current_step(steps: &[CanaryStep], index: i32) -> Option<&CanaryStep> {
    usize::try_from(index)
        .ok()?
        .checked_sub(1)
        .and_then(|i| steps.get(i))
}

/// How a step routes traffic: `20%`, `matches` (header/path rules), `matches+20%`, or `0%`.
pub fn step_traffic(step: Option<&CanaryStep>) -> String {
    let Some(step) = step else {
        return "0%".into();
    };
    let matches = step.matches.as_ref().is_some_and(|m| !m.is_empty());
    match (matches, step.traffic.as_deref()) {
        (true, Some(t)) => format!("matches+{t}"),
        (true, None) => "matches".into(),
        (false, Some(t)) => t.into(),
        (false, None) => "0%".into(),
    }
}

/// Whether the current step's traffic is already in place (states from StepTrafficRouting on);
/// before that the step's traffic is where it is going, shown with an arrow.
fn traffic_applied(state: &str) -> bool {
    !matches!(
        StepState::parse(state),
        StepState::BeforeStepUpgrade | StepState::StepUpgrade | StepState::Unset
    )
}

/// One `rollout status` line, e.g.
/// `Progressing | step 2/3 StepPaused | canary 2/2 groups ready | traffic 50% | <message>`;
/// between releases (`Healthy`, or never released) only the phase, step and message.
pub fn line(rollout: &Rollout, lws: Option<&LeaderWorkerSet>) -> String {
    line_of(rollout, lws.map(Workload::Lws))
}

/// [`line`] for any workload. Of a pair release the canary counts complete pairs, and both
/// sides of every role follow the traffic (e.g. `... | traffic 20% | prefill stable 2/2
/// canary 1/1 | decode stable 2/2 canary 0/1 | <message>`).
pub fn line_of(rollout: &Rollout, workload: Option<Workload<'_>>) -> String {
    let status = rollout.status.clone().unwrap_or_default();
    let view = step_view_of(rollout, workload.map(|w| w.size()));
    let unit = match workload {
        Some(Workload::Pair(_)) => "pairs",
        _ => "groups",
    };
    let phase = if status.phase.is_unset() {
        "<no status>"
    } else {
        status.phase.as_str()
    };
    let mut parts = vec![phase.to_string()];
    if rollout.spec.strategy.paused {
        parts[0].push_str(" (paused)");
    }
    let mut step = format!("step {}/{}", view.index, view.total);
    if !view.state.is_empty() {
        step.push(' ');
        step.push_str(&view.state);
    }
    let idle = status.phase == Phase::Healthy || view.index == 0;
    if !idle
        && view.state == StepState::Completed.as_str()
        && !view.finalising.is_empty()
        && view.finalising != FinalisingStep::End.as_str()
    {
        step.push_str(&format!(" finalising {}", view.finalising));
    }
    parts.push(step);
    // Between releases the canary counters are the last release's; they say nothing now.
    if !idle {
        let desired = view
            .canary_desired
            .map_or_else(|| "?".to_string(), |d| d.to_string());
        parts.push(format!(
            "canary {}/{desired} {unit} ready",
            view.canary_ready
        ));
        let t = step_traffic(current_step(steps(rollout), view.index));
        let incomplete_pair =
            matches!(workload, Some(Workload::Pair(_))) && view.canary_ready == 0 && t != "0%";
        let traffic = if !traffic_applied(&view.state) {
            format!("-> {t}")
        } else if incomplete_pair {
            // The route gives a pair without every role ready nothing, whatever the step says.
            format!("0% ({t} once the new pair is complete)")
        } else {
            t
        };
        parts.push(format!("traffic {traffic}"));
        if let Some(Workload::Pair(sides)) = workload {
            parts.push(pair_text(sides));
        }
    }
    if let Some(msg) = status.message.as_deref().filter(|m| !m.is_empty()) {
        parts.push(msg.to_string());
    }
    parts.join(" | ")
}

#[cfg(test)]
mod tests;
