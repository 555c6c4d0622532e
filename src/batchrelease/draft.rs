//! What a BatchRelease plan is made of, shared by the plan and every style's control module:
//! the plan type, and the small steps both take (a status note, the canary names, the release
//! plan hash, progress held back when it is no news).

use sha1::{Digest, Sha1};

use kube::ResourceExt;

use super::observe::CanaryLws;
use crate::api::batchrelease::BatchReleaseStatus;
use crate::api::leaderworkerset::LeaderWorkerSet;
use crate::k8s::events::EventSpec;

/// What the apply step should do for one BatchRelease.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchReleasePlan {
    /// The new status.
    pub status: BatchReleaseStatus,
    /// The canary LWS as it should be (server-side applied unless `canary_in_place`).
    pub apply_canary: Option<LeaderWorkerSet>,
    /// The observed canary already carries every field of `apply_canary`: applying it would
    /// change nothing, so it is not written (a release step would otherwise repeat it for every
    /// event of the canary's groups).
    pub canary_in_place: bool,
    /// Delete these canary LWSes (by name).
    pub delete_canaries: Vec<String>,
    /// Partition style: write this release partition on the stable LWS (the lowest group
    /// ordinal that moves to the new template); `None` writes nothing.
    pub release_partition: Option<i32>,
    /// Partition style: merge patches of the moved groups' leader pods (`patchPodTemplateMetadata`
    /// put on, or taken off when the release ends), by pod name.
    pub leader_patches: Vec<(String, serde_json::Value)>,
    /// Partition style: the release would end now, with `patchPodTemplateMetadata` off every
    /// leader as the pod cache shows them; a patch we put on a leader a moment ago may not be
    /// in the cache yet, and once the release is Completed nothing takes it off. Read the
    /// leaders fresh ([`super::observe::confirm_leaders`]) and plan again before ending it.
    pub confirm_leaders: bool,
    /// Remove Kruise's BatchRelease finalizer (only ever present on objects Kruise wrote).
    pub remove_finalizer: bool,
    /// Events to publish on the BatchRelease.
    pub events: Vec<EventSpec>,
}

/// Hash of the release plan (`status.observedReleasePlanHash`; opaque, like Kruise's).
pub fn release_plan_hash(br: &crate::api::batchrelease::BatchRelease) -> String {
    let data = serde_json::to_string(&br.spec.release_plan).unwrap_or_default();
    Sha1::digest(data.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn canary_names(canaries: &[CanaryLws]) -> Vec<String> {
    canaries.iter().map(|c| c.lws.name_any()).collect()
}

/// Keeps the stored `updatedReplicas` when it is all that changed: a canary group being
/// created is no news to a reader (the state, the ready count and the message are, and the
/// count is written along with them), and written on its own it cost a status patch a group.
pub fn hold_progress(stored: &BatchReleaseStatus, new: &mut BatchReleaseStatus) {
    let (Some(was), Some(now)) = (stored.canary_status.as_ref(), new.canary_status.as_ref()) else {
        return;
    };
    if was.updated_replicas == now.updated_replicas {
        return;
    }
    let mut held = new.clone();
    if let Some(c) = held.canary_status.as_mut() {
        c.updated_replicas = was.updated_replicas;
    }
    if held == *stored {
        *new = held;
    }
}

/// Sets the status message and, when it is news, publishes it as an event.
pub fn note(
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    warning: bool,
    reason: &'static str,
    message: String,
) {
    if stored.message.as_deref() != Some(message.as_str()) {
        out.events.push(if warning {
            EventSpec::warning(reason, message.clone())
        } else {
            EventSpec::normal(reason, message.clone())
        });
    }
    out.status.message = Some(message);
}

/// The batch `releasePlan.batchPartition` asks for (0-based, clamped to the last batch) and
/// its `canaryReplicas`; `None`, with the status saying so, when the plan has no batches.
pub fn current_batch(
    out: &mut BatchReleasePlan,
    stored: &BatchReleaseStatus,
    rp: &crate::api::batchrelease::ReleasePlan,
) -> Option<(
    usize,
    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
)> {
    let batches = rp.batches.as_deref().unwrap_or_default();
    let Some(last) = batches.len().checked_sub(1) else {
        note(
            out,
            stored,
            true,
            super::names::event::UNSUPPORTED,
            "releasePlan has no batches".into(),
        );
        return None;
    };
    let batch = usize::try_from(rp.batch_partition.unwrap_or(0))
        .unwrap_or(0)
        .min(last);
    Some((batch, batches[batch].canary_replicas.clone()))
}
