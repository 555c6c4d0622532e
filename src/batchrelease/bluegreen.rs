//! The blue-green style (Kruise's `bluegreenstyle/`): the second LWS grows batch by batch
//! exactly as a canary does (`canary`, whose batches, progress and status it shares), and
//! at promotion (`batchPartition` null, WaitResume) it grows to every group the user's LWS has
//! and stays at that size until the user's LWS has rolled to the released revision: it carries
//! all the traffic meanwhile, so it must hold what the user's LWS held. Rollback, disable and
//! delete finish Immediate, removing it, as a canary.

use kube::ResourceExt;

use super::canary;
use super::draft::BatchReleasePlan;
use super::observe::{BatchReleaseObserved, StableLws};
use crate::api::batchrelease::{BatchReleaseStatus, FinalizingPolicy};
use crate::release::names::canary_name;
use k8s_openapi::jiff::Timestamp;

/// Plans the release of `released` for the stable LWS `stable` (see [`canary::control`]).
pub fn control(
    obs: &BatchReleaseObserved,
    stable: &StableLws,
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    released: &str,
    now: Timestamp,
) {
    canary::control(obs, stable, out, stored, released, now);
    let rp = &obs.br.spec.release_plan;
    let promoting = rp.batch_partition.is_none()
        && rp.finalizing_policy.unwrap_or_default() == FinalizingPolicy::WaitResume;
    if !promoting || stable.update_revision != released {
        return;
    }
    let name = canary_name(&stable.lws.name_any(), released);
    let second = obs.canaries.iter().find(|c| c.lws.name_any() == name);
    canary::grow(obs, stable, out, second, &name, stable.replicas());
    if out.status.phase.as_deref() != Some(super::names::phase::COMPLETED) {
        let ready = second.map_or(0, |c| {
            crate::release::progress::CanaryCounts::of(&c.lws).ready
        });
        out.status.message = Some(format!(
            "promoting: LeaderWorkerSet {name} serves while the stable LeaderWorkerSet rolls to \
             the released revision ({ready}/{} groups ready on the new side)",
            stable.replicas()
        ));
    }
}
