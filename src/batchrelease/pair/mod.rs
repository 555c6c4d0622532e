//! The canary style for a DisaggregatedSet (a prefill/decode pair released as one;
//! docs/rollout-design.md, "Releasing a DisaggregatedSet canary-style"). Unlike an LWS release
//! this creates no workload of its own: the set's controller carries the release out while the
//! set is held, and the BatchRelease only says how far — the current batch's groups per role,
//! written as the set's release-groups annotation — and reads the batch's readiness off the
//! set's LWSs of the new revision.
//!
//! observe ([`observe`]) → pure plan ([`plan`], table-tested) → apply ([`apply`]).

pub mod plan;

#[cfg(test)]
mod tests;

use kube::ResourceExt;
use serde_json::json;

use crate::api::disaggregatedset::{
    DisaggregatedSet, HELD_REVISION_ANNOTATION, RELEASE_GROUPS_ANNOTATION,
    RELEASE_STYLE_ANNOTATION, RELEASE_STYLE_IN_PLACE, REVISION_LABEL, ROLE_LABEL, SET_NAME_LABEL,
    SLICE_LABEL,
};
use crate::api::{BatchRelease, LeaderWorkerSet};
use crate::k8s::apply::{ApiError, Applier};
use crate::k8s::events::Events;
use crate::k8s::written::Written;
use plan::{PairPlan, RoleLws, SetObserved};

/// Whether `br` is a release this module runs: a canary-style, partition-style or blue-green
/// release of a DisaggregatedSet.
pub fn releases(br: &BatchRelease) -> bool {
    br.spec.workload_ref.is_disaggregated_set() && style(br).is_some()
}

/// How `br` makes room for the new pair, when it is a style this module runs.
pub fn style(br: &BatchRelease) -> Option<plan::PairStyle> {
    use crate::api::batchrelease::RollingStyle;
    let rp = &br.spec.release_plan;
    match rp
        .rolling_style
        .unwrap_or(if rp.enable_extra_workload_for_canary {
            RollingStyle::Canary
        } else {
            RollingStyle::Partition
        }) {
        // Blue-green's second pair grows beside the stable one as a canary's does; its
        // promotion (every role whole) is the plan's.
        RollingStyle::Canary | RollingStyle::BlueGreen => Some(plan::PairStyle::Beside),
        RollingStyle::Partition => Some(plan::PairStyle::InPlace),
    }
}

/// The set `br` releases, as the plan reads it; `None` when it does not exist.
pub fn observe(
    sets: &kube::runtime::reflector::Store<DisaggregatedSet>,
    lws: &kube::runtime::reflector::Store<LeaderWorkerSet>,
    br: &BatchRelease,
) -> Option<SetObserved> {
    use kube::runtime::reflector::ObjectRef;
    let ns = br.namespace()?;
    let set = sets.get(&ObjectRef::new(&br.spec.workload_ref.name).within(&ns))?;
    Some(set_observed(
        &set,
        lws.state()
            .iter()
            .filter(|l| l.namespace().as_deref() == Some(ns.as_str()))
            .map(AsRef::as_ref),
    ))
}

/// `set` and its LWSs among `lws` (those carrying its name label).
pub fn set_observed<'a>(
    set: &DisaggregatedSet,
    lws: impl IntoIterator<Item = &'a LeaderWorkerSet>,
) -> SetObserved {
    let name = set.name_any();
    let annotations = set.annotations();
    SetObserved {
        name: name.clone(),
        slices: set.spec.slices(),
        roles: set
            .spec
            .roles
            .iter()
            .map(|r| (r.name.clone(), r.replicas()))
            .collect(),
        external: set.spec.external_roles(),
        update_revision: crate::disaggregatedset::revision::revision(&set.spec.roles)
            .unwrap_or_default(),
        hold: annotations
            .get(HELD_REVISION_ANNOTATION)
            .filter(|v| !v.is_empty())
            .cloned(),
        release_groups: annotations
            .get(RELEASE_GROUPS_ANNOTATION)
            .map(|raw| serde_json::from_str(raw).map_err(|_| raw.clone())),
        in_place: annotations
            .get(RELEASE_STYLE_ANNOTATION)
            .map(String::as_str)
            == Some(RELEASE_STYLE_IN_PLACE),
        children: lws
            .into_iter()
            .filter(|l| l.labels().get(SET_NAME_LABEL) == Some(&name))
            .map(role_lws)
            .collect(),
    }
}

fn role_lws(lws: &LeaderWorkerSet) -> RoleLws {
    let labels = lws.labels();
    let status = lws.status.clone().unwrap_or_default();
    RoleLws {
        slice: labels
            .get(SLICE_LABEL)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        role: labels.get(ROLE_LABEL).cloned().unwrap_or_default(),
        revision: labels.get(REVISION_LABEL).cloned().unwrap_or_default(),
        spec_replicas: lws.spec.replicas.unwrap_or(1),
        generation: lws.metadata.generation.unwrap_or_default(),
        observed_generation: status.observed_generation,
        replicas: status.replicas.unwrap_or(0),
        ready: status.ready_replicas.unwrap_or(0),
    }
}

/// Carries `plan` out: the release-groups and release-style annotations (one write for every
/// role, so the set never scales the new pair by one without the other), then the status,
/// events and finalizer as for an LWS release.
pub async fn apply(
    applier: &Applier,
    events: &Events,
    written: &Written,
    br: &BatchRelease,
    plan: &PairPlan,
) -> Result<(), ApiError> {
    if let Some(groups) = &plan.release_groups {
        let ns = br.namespace().unwrap_or_default();
        let value = serde_json::to_string(groups).unwrap_or_default();
        // Canary style writes no style: the annotation contract of a release beside the stable
        // pair is unchanged (absent = beside).
        let style = (plan.style == plan::PairStyle::InPlace).then_some(RELEASE_STYLE_IN_PLACE);
        applier
            .merge_patch::<DisaggregatedSet>(
                &ns,
                &br.spec.workload_ref.name,
                &json!({"metadata": {"annotations": {
                    RELEASE_GROUPS_ANNOTATION: value,
                    RELEASE_STYLE_ANNOTATION: style,
                }}}),
            )
            .await?;
    }
    let obs = super::observe::BatchReleaseObserved {
        br: br.clone(),
        ..Default::default()
    };
    super::apply::apply(applier, events, written, &obs, &plan.common).await
}
