//! The fresh reads of a Rollout reconcile: the traffic objects its `trafficRoutings` names
//! (users' objects, not cached). What they mean for the release is decided in the plan.

use kube::ResourceExt;

use super::{observe::RolloutObserved, plan::routing};
use crate::{
    k8s::apply::{ApiError, Applier},
    traffic,
};

/// Reads the traffic objects into `obs.traffic` (left `None` without trafficRoutings).
pub async fn traffic(applier: &Applier, obs: &mut RolloutObserved) -> Result<(), ApiError> {
    let Some(routing_ref) = routing::routing(obs).cloned() else {
        obs.traffic = None;
        return Ok(());
    };
    let ns = obs.rollout.namespace().unwrap_or_default();
    obs.traffic = Some(traffic::deref::read(applier, &ns, &routing_ref).await?);
    Ok(())
}
