//! The BatchRelease controller's decisions: from the BatchRelease, the stable LWS and the
//! second LWS(es) to what to write, what to delete, the status and events. This file decides
//! what every style shares and picks the style in one place ([`style_of`]); the style's control
//! module (`canary`) decides the rest.
//!
//! Stateless by construction: the batch run is `batchPartition` (the Rollout only raises it
//! after the previous batch was ready), and the batch state is read off the canary LWS —
//! Upgrading while it lacks the batch's groups (or its status trails its spec), Verifying
//! while too few groups are ready, Ready otherwise. A restart computes the same answer.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

pub use super::draft::{BatchReleasePlan, release_plan_hash};
use super::draft::{canary_names, note};
use super::names::{FINALIZER, batch_state, event, phase};
use super::observe::BatchReleaseObserved;
use super::{bluegreen, canary, partition};
use crate::api::batchrelease::{BatchReleaseCanaryStatus, RollingStyle};
use crate::api::rollout::{LWS_API_VERSION, LWS_KIND};

/// A release style this controller runs; each has its control module (Kruise's
/// `canary/`, `bluegreen`, `partition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    /// A canary LWS beside the stable one ([`canary`]).
    Canary,
    /// A second LWS beside the stable one, whole at promotion ([`bluegreen`]).
    BlueGreen,
    /// The user's groups moved in place under a release partition ([`partition`]).
    Partition,
}

/// The one place the style of a BatchRelease is picked, or why it is not run.
fn style_of(br: &crate::api::batchrelease::BatchRelease) -> Result<Style, String> {
    let rp = &br.spec.release_plan;
    let style = rp
        .rolling_style
        .unwrap_or(if rp.enable_extra_workload_for_canary {
            RollingStyle::Canary
        } else {
            RollingStyle::Partition
        });
    let w = &br.spec.workload_ref;
    let lws = w.api_version == LWS_API_VERSION && w.kind == LWS_KIND;
    match style {
        RollingStyle::Canary if lws => Ok(Style::Canary),
        RollingStyle::BlueGreen if lws => Ok(Style::BlueGreen),
        RollingStyle::Partition if lws => Ok(Style::Partition),
        _ => Err(format!(
            "only releases of a {LWS_API_VERSION} {LWS_KIND} are supported (rollingStyle \
             {style:?}, workload {} {})",
            w.api_version, w.kind
        )),
    }
}

/// Decides one reconcile of a BatchRelease.
pub fn plan(obs: &BatchReleaseObserved, now: Timestamp) -> BatchReleasePlan {
    let br = &obs.br;
    let stored = br.status.clone().unwrap_or_default();
    let mut out = BatchReleasePlan {
        status: stored.clone(),
        ..BatchReleasePlan::default()
    };
    out.status.observed_generation = br.metadata.generation;
    if br.metadata.deletion_timestamp.is_some() {
        out.delete_canaries = canary_names(&obs.canaries);
        out.remove_finalizer = br.finalizers().iter().any(|f| f == FINALIZER);
        return out;
    }
    let style = match style_of(br) {
        Ok(style) => style,
        Err(msg) => {
            note(&mut out, &stored, true, event::UNSUPPORTED, msg);
            out.status.phase = Some(phase::PREPARING.into());
            return out;
        }
    };
    let Some(stable) = obs.stable.as_ref() else {
        // Workload gone: nothing left to release; the canary goes too.
        out.delete_canaries = canary_names(&obs.canaries);
        out.status.phase = Some(
            if obs.canaries.is_empty() {
                phase::COMPLETED
            } else {
                phase::FINALIZING
            }
            .into(),
        );
        out.status.message = Some(format!("workload {} has gone", br.spec.workload_ref.name));
        return out;
    };
    if matches!(
        out.status.phase.as_deref(),
        None | Some("") | Some(phase::PREPARING)
    ) {
        out.status.phase = Some(phase::PROGRESSING.into());
        out.status.stable_revision = stable.hold.clone();
        out.status.update_revision = Some(stable.update_revision.clone());
        out.status.observed_workload_replicas = Some(stable.replicas());
        out.status.canary_status = Some(BatchReleaseCanaryStatus {
            current_batch_state: Some(batch_state::UPGRADING.into()),
            ..BatchReleaseCanaryStatus::default()
        });
    }
    let released = out.status.update_revision.clone().unwrap_or_default();
    match style {
        Style::Canary => canary::control(obs, stable, &mut out, &stored, &released, now),
        Style::BlueGreen => {
            bluegreen::control(obs, stable, &mut out, &stored, &released, now);
        }
        Style::Partition => {
            partition::control(obs, stable, &mut out, &stored, &released, now);
        }
    }
    out
}

#[cfg(test)]
mod tests;
