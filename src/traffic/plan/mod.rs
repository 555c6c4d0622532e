//! `plan`: from one routing entry, the intent and the observed objects to ordered writes.
//!
//! Ordering the traffic layer owns (the Rollout plan owns readiness and grace periods):
//! - Release: pin the stable Service, then the canary Service, then the route or canary
//!   Ingress. A route change that sends anything to the canary Service waits until that
//!   Service has been observed, so no weight can point at a Service that does not exist.
//! - ToStable: the route back to the user's rules and the canary Ingress deleted, with the
//!   stable Service still pinned (the canary LWS may still be there).
//! - Restored: the route or canary Ingress first (no request goes to the canary), then the
//!   stable Service's selector; the canary Service is deleted only once no route or Ingress
//!   that we observe sends to it.

use super::{
    gateway, ingress,
    intent::{CanaryRoute, Leaders, TrafficIntent},
    names,
    observe::{OwnerInfo, TrafficObserved},
    service,
    write::{Kind, Problem, Target, Write},
};
use crate::api::rollout::TrafficRoutingRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What the traffic layer must do for one intent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrafficPlan {
    /// Writes to execute in order, stopping at the first failure.
    pub writes: Vec<Write>,
    /// The cluster already matches the intent: no write is needed and nothing is in the way.
    /// The Rollout may start its grace period / move on when this turns true.
    pub in_place: bool,
    /// What keeps the intent from being reached, for a condition and an Event.
    pub problems: Vec<Problem>,
}

/// Plans the writes bringing the cluster to `intent` for `routing`.
pub fn plan(
    routing: &TrafficRoutingRef,
    intent: &TrafficIntent,
    observed: &TrafficObserved,
    owner: &OwnerInfo,
) -> TrafficPlan {
    let ctx = Ctx {
        routing,
        observed,
        owner,
        canary_name: names::canary_service(&routing.service),
        canary_svc: owned(observed.canary_service.as_ref().map(|s| &s.metadata), owner),
        canary_ing: owned(observed.canary_ingress.as_ref().map(|i| &i.metadata), owner),
    };
    let mut out = TrafficPlan::default();
    match intent {
        TrafficIntent::Release {
            stable_lws,
            canary_lws,
            route,
        } => ctx.release(stable_lws, canary_lws, route, &mut out),
        TrafficIntent::ToStable { stable_lws } => ctx.to_stable(stable_lws, &mut out),
        TrafficIntent::Restored => ctx.restore(&mut out),
    }
    // One cause can surface twice (a Service without selector is neither pinnable nor
    // copyable); report it once.
    let mut seen = Vec::new();
    out.problems.retain(|p| {
        let new = !seen.contains(p);
        seen.push(p.clone());
        new
    });
    out.in_place = out.writes.is_empty() && out.problems.is_empty();
    out
}

/// Whether an observed canary object is ours (`Some(true)`), someone else's (`Some(false)`),
/// or absent (`None`). Only this Rollout's objects are ever written or deleted.
fn owned(meta: Option<&ObjectMeta>, owner: &OwnerInfo) -> Option<bool> {
    meta.map(|m| owner.owns(m))
}

struct Ctx<'a> {
    routing: &'a TrafficRoutingRef,
    observed: &'a TrafficObserved,
    owner: &'a OwnerInfo,
    canary_name: String,
    canary_svc: Option<bool>,
    canary_ing: Option<bool>,
}

impl Ctx<'_> {
    fn release(
        &self,
        stable_lws: &Leaders,
        canary_lws: &Leaders,
        route: &CanaryRoute,
        out: &mut TrafficPlan,
    ) {
        let (routing, observed) = (self.routing, self.observed);
        if routing
            .custom_network_refs
            .as_ref()
            .is_some_and(|r| !r.is_empty())
        {
            out.problems.push(Problem::Unsupported(
                "trafficRoutings[].customNetworkRefs".into(),
            ));
        }
        let Some(stable) = observed.stable_service.as_ref() else {
            out.problems.push(missing(Kind::Service, &routing.service));
            self.missing_routes(out);
            return;
        };
        match service::pin(stable, stable_lws) {
            Ok(w) => out.writes.extend(w),
            Err(p) => out.problems.push(p),
        }
        if self.canary_svc == Some(false) {
            out.problems
                .push(Problem::NotOurs(target(Kind::Service, &self.canary_name)));
        } else {
            match service::canary(stable, canary_lws, self.owner) {
                Ok(desired) => out.writes.extend(service::apply_canary(
                    observed.canary_service.as_ref(),
                    desired,
                )),
                Err(p) => out.problems.push(p),
            }
        }
        // A route may send to the canary Service only once we have seen it exist as ours.
        let canary_exists = self.canary_svc == Some(true);
        if let Some(name) = self.http_route_name() {
            match observed.http_route.as_ref() {
                None => out.problems.push(missing(Kind::HttpRoute, name)),
                Some(r) => {
                    match gateway::desired(r, &routing.service, &self.canary_name, Some(route)) {
                        Ok(desired) => {
                            if canary_exists
                                || !gateway::sends_to_canary(&desired, &self.canary_name)
                            {
                                out.writes.extend(gateway::write(r, &desired));
                            }
                        }
                        Err(p) => out.problems.push(p),
                    }
                }
            }
        }
        if let Some(ing) = routing.ingress.as_ref() {
            let class = ing.class_type.as_deref().unwrap_or("nginx");
            if class != "nginx" {
                out.problems.push(Problem::Unsupported(format!(
                    "ingress classType {class:?} (only nginx)"
                )));
            } else if self.canary_ing == Some(false) {
                out.problems.push(Problem::NotOurs(target(
                    Kind::Ingress,
                    &names::canary_ingress(&ing.name),
                )));
            } else {
                match observed.ingress.as_ref() {
                    None => out.problems.push(missing(Kind::Ingress, &ing.name)),
                    Some(user) => match ingress::canary(
                        user,
                        &routing.service,
                        &self.canary_name,
                        route,
                        self.owner,
                    ) {
                        // Even at weight 0: a canary Ingress whose backend does not exist yet
                        // is one more thing for the proxy to get wrong.
                        Ok(desired) if canary_exists => out.writes.extend(ingress::apply_canary(
                            observed.canary_ingress.as_ref(),
                            desired,
                        )),
                        Ok(_) => {}
                        Err(p) => out.problems.push(p),
                    },
                }
            }
        }
    }

    /// Everything to stable: the stable Service stays pinned, the route goes back to the user's
    /// rules and the canary Ingress goes; the canary Service is left as it is.
    fn to_stable(&self, stable_lws: &Leaders, out: &mut TrafficPlan) {
        let observed = self.observed;
        if let Some(r) = observed.http_route.as_ref()
            && let Ok(desired) = gateway::desired(r, &self.routing.service, &self.canary_name, None)
        {
            out.writes.extend(gateway::write(r, &desired));
        }
        if let (Some(true), Some(ing)) = (self.canary_ing, observed.canary_ingress.as_ref()) {
            out.writes.push(delete(Kind::Ingress, &ing.metadata));
        }
        match observed.stable_service.as_ref() {
            Some(stable) => match service::pin(stable, stable_lws) {
                Ok(w) => out.writes.extend(w),
                Err(p) => out.problems.push(p),
            },
            None => out
                .problems
                .push(missing(Kind::Service, &self.routing.service)),
        }
    }

    /// Restoring never reports a missing user object: with the object gone there is nothing
    /// of ours on it, and a Rollout whose Service was deleted must still finish cleaning up.
    fn restore(&self, out: &mut TrafficPlan) {
        let observed = self.observed;
        let mut still_routed = false;
        if let Some(r) = observed.http_route.as_ref() {
            if let Ok(desired) = gateway::desired(r, &self.routing.service, &self.canary_name, None)
            {
                out.writes.extend(gateway::write(r, &desired));
            }
            still_routed |= gateway::sends_to_canary(r, &self.canary_name);
        }
        if let (Some(true), Some(ing)) = (self.canary_ing, observed.canary_ingress.as_ref()) {
            out.writes.push(delete(Kind::Ingress, &ing.metadata));
            still_routed = true;
        }
        if let Some(stable) = observed.stable_service.as_ref() {
            out.writes.extend(service::unpin(stable));
        }
        if let (Some(true), Some(svc)) = (self.canary_svc, observed.canary_service.as_ref())
            && !still_routed
        {
            out.writes.push(delete(Kind::Service, &svc.metadata));
        }
    }

    fn http_route_name(&self) -> Option<&str> {
        self.routing
            .gateway
            .as_ref()
            .and_then(|g| g.http_route_name.as_deref())
    }

    /// With the stable Service missing nothing is planned, but every other missing object is
    /// named too, so one look at the condition tells the whole story.
    fn missing_routes(&self, out: &mut TrafficPlan) {
        if let Some(name) = self.http_route_name()
            && self.observed.http_route.is_none()
        {
            out.problems.push(missing(Kind::HttpRoute, name));
        }
        if let Some(ing) = self.routing.ingress.as_ref()
            && self.observed.ingress.is_none()
        {
            out.problems.push(missing(Kind::Ingress, &ing.name));
        }
    }
}

fn target(kind: Kind, name: &str) -> Target {
    Target {
        kind,
        name: name.into(),
    }
}

fn missing(kind: Kind, name: &str) -> Problem {
    Problem::Missing(target(kind, name))
}

fn delete(kind: Kind, meta: &ObjectMeta) -> Write {
    Write::Delete {
        target: target(kind, meta.name.as_deref().unwrap_or_default()),
        uid: meta.uid.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests;
