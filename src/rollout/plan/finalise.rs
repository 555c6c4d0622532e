//! Finishing a release, in an order persisted step by step in `canaryStatus.finalisingStep`,
//! so a restarted manager resumes at the step it was in.
//!
//! The order depends on the style ([`super::style::Style::finalising_order`]; the canary
//! style's orders and why they differ from Kruise's are in [`super::canary`]). Each step checks
//! the cluster before it counts as done.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::batchrelease::FinalizingPolicy;
use crate::api::rollout::FinalisingStep;
use crate::k8s::events::EventSpec;
use crate::rollout::names::event;

pub use super::reason::{Reason, TrafficStage, reason_of, traffic_stage};
use super::{BatchReleaseAction, Draft, HoldAction, routing, status};

/// The step after `current` in `order` (`Unset` = not started yet gives the first; the last
/// gives `END`).
pub fn next(order: &[FinalisingStep], current: &FinalisingStep) -> FinalisingStep {
    if current.is_unset() {
        return order[0].clone();
    }
    match order.iter().position(|s| s == current) {
        Some(i) if i + 1 < order.len() => order[i + 1].clone(),
        _ => FinalisingStep::End,
    }
}

/// Runs the finalising steps for `reason` as far as the observed state allows. `true` when the
/// last one is done.
pub fn run(d: &mut Draft<'_>, why: Reason) -> bool {
    let order = d.style.finalising_order(why);
    for _ in 0..order.len() + 2 {
        let now = d.now;
        let canary = status::canary(d.status());
        if canary.common.finalising_step.is_unset() {
            canary.common.finalising_step = next(order, &FinalisingStep::Unset);
            canary.common.last_update_time = Some(Time(now));
        }
        let step = canary.common.finalising_step.clone();
        let done = match &step {
            FinalisingStep::End => return true,
            FinalisingStep::RouteTrafficToStable
            | FinalisingStep::RestoreStableService
            | FinalisingStep::RemoveCanaryService => routing::settled(d),
            FinalisingStep::RouteTrafficToNew => route_traffic_to_new(d),
            FinalisingStep::ResumeWorkload => resume_workload(d, why),
            FinalisingStep::ReleaseWorkloadControl => {
                if d.obs.batch_release.is_some() {
                    d.plan.batch_release = BatchReleaseAction::Delete;
                }
                // Partition style rolled back by its deadline: the template still is the new
                // one, so only the hold can take the moved groups back — lift the release
                // partition and keep the hold.
                let moved = why == Reason::AutoRollback
                    && d.obs
                        .workload
                        .as_ref()
                        .is_some_and(|w| w.release_partition.is_some());
                // A pair restarted on a third template: its traffic is on the stable pair now,
                // so the release-groups go (the hold stays): the set drains the second
                // revision's roles together, and the next release writes its own groups.
                let moved = moved
                    || (why == Reason::Continuous
                        && d.obs.workload.as_ref().is_some_and(|w| w.release_groups));
                if moved {
                    d.plan.hold = HoldAction::ReturnMoved;
                }
                // ...and the next release waits until they are drained: its own
                // release-groups, on the set before the held pair is back at its size (partition
                // style gives the second revision's groups back to it first), would keep the
                // set from ever draining the second revision (it drains no other revision
                // while a release may route to it).
                let draining = why == Reason::Continuous
                    && d.obs
                        .workload
                        .as_ref()
                        .is_some_and(|w| w.other_revision_groups);
                d.obs.batch_release.is_none() && !moved && !draining
            }
            // A value this version does not know (hand-edited): start the order again, as
            // Kruise does, and say so.
            other @ (FinalisingStep::Unset | FinalisingStep::Unknown(_)) => {
                d.event(EventSpec::warning(
                    event::UNKNOWN_STATE,
                    format!(
                        "finalisingStep \"{other}\" is not a step of this finalising order; \
                         starting the order again"
                    ),
                ));
                status::canary(d.status()).common.finalising_step =
                    next(order, &FinalisingStep::Unset);
                continue;
            }
        };
        if !done {
            return false;
        }
        let canary = status::canary(d.status());
        canary.common.finalising_step = next(order, &step);
        canary.common.last_update_time = Some(Time(now));
        if canary.common.finalising_step == FinalisingStep::End {
            return true;
        }
    }
    false
}

/// Blue-green's switch: the BatchRelease finishes (the second LWS grows to every group the
/// user's LWS has and stays until the user's LWS has rolled); once all those groups are ready
/// the traffic goes to the second LWS (`routing`: the stable Service pinned to its leaders,
/// the route 100% to it), done when that is in place and its grace period has passed. The hold
/// stays: no group of the user's LWS restarts before everything is on the new side.
fn route_traffic_to_new(d: &mut Draft<'_>) -> bool {
    let obs = d.obs;
    let Some(workload) = obs.workload.as_ref() else {
        return true;
    };
    let desired = d
        .style
        .batch_release(d, None, Some(FinalizingPolicy::WaitResume));
    let br_done = match obs.batch_release.as_ref() {
        Some(observed) => observed.is(&desired),
        None => false,
    };
    if !br_done {
        d.plan.batch_release = BatchReleaseAction::Apply(Box::new(desired));
    }
    if !br_done || !routing::new_side_whole(obs, workload.replicas) {
        let (ready, want) = (
            obs.batch_release
                .as_ref()
                .and_then(|b| b.canary.as_ref())
                .map_or(
                    // A pair has no canary LWS: its complete new pairs ready.
                    if workload.pair_rolled.is_some() {
                        workload.ready_replicas
                    } else {
                        0
                    },
                    |c| c.ready,
                ),
            workload.replicas,
        );
        let message = format!(
            "Rollout has been completed and some closing work is being done: the new side grows \
             to {want} groups before traffic moves to it ({ready}/{want} ready)"
        );
        let message = match super::steps::external_hold(d) {
            Some(why) => format!("{message}; {why}"),
            None => message,
        };
        let now = d.now;
        status::progressing_message(d.status(), message, now);
        return false;
    }
    if !d.traffic.ready {
        // The switch is written in this reconcile: its grace period starts now, not when the
        // step began (the second LWS may have taken minutes to grow).
        let now = d.now;
        status::canary(d.status()).common.last_update_time = Some(Time(now));
    }
    routing::settled(d)
}

/// Releases the hold and tells the BatchRelease to finish; on success waits for the stable LWS
/// to have rolled completely.
fn resume_workload(d: &mut Draft<'_>, why: Reason) -> bool {
    let obs = d.obs;
    let Some(workload) = obs.workload.as_ref() else {
        return true;
    };
    if workload.hold.is_some() || workload.release_groups {
        d.plan.hold = HoldAction::Release;
    }
    let policy = if why == Reason::Success {
        FinalizingPolicy::WaitResume
    } else {
        FinalizingPolicy::Immediate
    };
    let mut br_done = true;
    if let Some(observed) = obs.batch_release.as_ref() {
        let desired = d.style.batch_release(d, None, Some(policy));
        if !observed.is(&desired) {
            d.plan.batch_release = BatchReleaseAction::Apply(Box::new(desired));
            br_done = false;
        } else {
            // Kruise's finalizingBatchRelease: done when the BatchRelease says Completed for
            // this spec, not when its spec says finalise. The next step deletes it, and what it
            // still had to undo (the patch on the moved leaders, partition style) would stay.
            br_done = observed.completed();
        }
    }
    let rolled = why != Reason::Success || workload.fully_rolled();
    if why == Reason::Success && !rolled {
        let message = format!(
            "Rollout has been completed and some closing work is being done: waiting for \
             {} {} to roll ({}/{} groups updated, {} ready)",
            workload.kind,
            workload.name,
            workload.updated_replicas,
            workload.replicas,
            workload.ready_replicas
        );
        let now = d.now;
        status::progressing_message(d.status(), message, now);
    }
    workload.hold.is_none() && !workload.release_groups && br_done && rolled
}
