//! The fresh reads of the traffic layer: the objects one `trafficRoutings[]` entry names.
//! They belong to the user and are not cached (a cluster may hold thousands of Services), so
//! a Rollout reads them when it plans traffic — a handful of GETs per reconcile of a release.

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{core::v1::Service, networking::v1::Ingress};

use super::{names, observe::TrafficObserved};
use crate::{
    api::rollout::TrafficRoutingRef,
    k8s::apply::{ApiError, Applier},
};

/// Reads what `routing` involves in `namespace`.
pub async fn read(
    applier: &Applier,
    namespace: &str,
    routing: &TrafficRoutingRef,
) -> Result<TrafficObserved, ApiError> {
    let mut observed = TrafficObserved {
        stable_service: applier
            .get_opt::<Service>(namespace, &routing.service)
            .await?,
        canary_service: applier
            .get_opt::<Service>(namespace, &names::canary_service(&routing.service))
            .await?,
        ..Default::default()
    };
    if let Some(route) = routing
        .gateway
        .as_ref()
        .and_then(|g| g.http_route_name.as_deref())
    {
        observed.http_route = applier.get_opt::<HttpRoute>(namespace, route).await?;
    }
    if let Some(ingress) = &routing.ingress {
        observed.ingress = applier.get_opt::<Ingress>(namespace, &ingress.name).await?;
        observed.canary_ingress = applier
            .get_opt::<Ingress>(namespace, &names::canary_ingress(&ingress.name))
            .await?;
    }
    Ok(observed)
}
