//! The fresh reads of a Rollout reconcile: the traffic objects its `trafficRoutings` names
//! (users' objects, not cached), and whether they already match the intent the stored status
//! asks for.

use kube::ResourceExt;

use super::{
    observe::{ObservedTraffic, RolloutObserved},
    plan::routing,
};
use crate::{
    k8s::apply::{ApiError, Applier},
    traffic::{
        self,
        observe::{OwnerInfo, TrafficObserved},
    },
};

/// The traffic objects as read, for planning the writes after the Rollout plan.
#[derive(Clone, Debug, Default)]
pub struct TrafficRead {
    /// The objects, when the Rollout routes traffic.
    pub objects: Option<TrafficObserved>,
}

/// The Rollout as owner of the canary Service and Ingress.
pub fn owner(obs: &RolloutObserved) -> OwnerInfo {
    OwnerInfo {
        api_version: "rollouts.kruise.io/v1beta1".into(),
        kind: "Rollout".into(),
        name: obs.rollout.name_any(),
        uid: obs.rollout.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Reads the traffic objects and fills `obs.traffic`.
pub async fn traffic(
    applier: &Applier,
    obs: &mut RolloutObserved,
) -> Result<TrafficRead, ApiError> {
    let Some(routing_ref) = routing::routing(obs).cloned() else {
        obs.traffic = ObservedTraffic {
            ready: true,
            ..Default::default()
        };
        return Ok(TrafficRead::default());
    };
    let ns = obs.rollout.namespace().unwrap_or_default();
    let objects = traffic::deref::read(applier, &ns, &routing_ref).await?;
    let stored = obs.rollout.status.clone().unwrap_or_default();
    let (ready, problems) = match routing::intent_for(obs, &stored) {
        None => (true, Vec::new()),
        Some(intent) => {
            let plan = traffic::plan::plan(&routing_ref, &intent, &objects, &owner(obs));
            (plan.in_place, plan.problems)
        }
    };
    obs.traffic = ObservedTraffic {
        ready,
        last_change: None,
        missing: problems
            .iter()
            .filter_map(|p| match p {
                traffic::write::Problem::Missing(t) => Some(format!("{} {}", t.kind, t.name)),
                _ => None,
            })
            .collect(),
    };
    Ok(TrafficRead {
        objects: Some(objects),
    })
}
