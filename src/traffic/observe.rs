//! What the traffic layer reads from the cluster for one `trafficRoutings[]` entry. Plain data:
//! the caller fills it from its stores; `None` means the object does not exist.

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{core::v1::Service, networking::v1::Ingress};

/// The objects one traffic routing entry involves, as last observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrafficObserved {
    /// `trafficRoutings[].service`, the user's Service in front of the stable leaders.
    pub stable_service: Option<Service>,
    /// `<service>-canary`, whoever made it.
    pub canary_service: Option<Service>,
    /// `trafficRoutings[].gateway.httpRouteName`, when one is named.
    pub http_route: Option<HttpRoute>,
    /// `trafficRoutings[].ingress.name`, when one is named.
    pub ingress: Option<Ingress>,
    /// `<ingress>-canary`, whoever made it.
    pub canary_ingress: Option<Ingress>,
}

/// The Rollout that owns the canary objects (their `ownerReferences[0]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerInfo {
    /// `rollouts.kruise.io/v1beta1`.
    pub api_version: String,
    /// `Rollout`.
    pub kind: String,
    /// The Rollout's name.
    pub name: String,
    /// The Rollout's uid: an object named like ours but owned by someone else is never touched.
    pub uid: String,
}

impl OwnerInfo {
    /// The controller owner reference our canary objects carry.
    pub fn owner_reference(
        &self,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// Whether `meta` names this owner (by uid).
    pub fn owns(&self, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
        meta.owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == self.uid)
    }
}
