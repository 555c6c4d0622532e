//! `plan`: from one routing entry, the intent and the observed objects to ordered writes.
//!
//! Ordering the traffic layer owns (the Rollout plan owns readiness and grace periods):
//! - Release: pin the stable Service, then the canary Service, then the route or canary
//!   Ingress. A route change that sends anything to the canary Service waits until that
//!   Service has been observed, so no weight can point at a Service that does not exist.
//! - Restored: the route or canary Ingress first (no request goes to the canary), then the
//!   stable Service's selector; the canary Service is deleted only once no route or Ingress
//!   that we observe sends to it.

use super::{
    gateway, ingress,
    intent::{CanaryRoute, TrafficIntent},
    names,
    observe::{OwnerInfo, TrafficObserved},
    service,
    write::{Kind, Problem, Target, Write},
};
use crate::api::rollout::TrafficRoutingRef;

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
    let mut out = TrafficPlan::default();
    let canary_name = names::canary_service(&routing.service);
    // The canary objects are ours only when this Rollout owns them.
    let canary_svc = owned(observed.canary_service.as_ref(), |s| &s.metadata, owner);
    let canary_ing = owned(observed.canary_ingress.as_ref(), |i| &i.metadata, owner);
    match intent {
        TrafficIntent::Release {
            stable_lws,
            canary_lws,
            route,
        } => release(
            routing,
            observed,
            owner,
            (stable_lws, canary_lws, route),
            &canary_name,
            (canary_svc, canary_ing),
            &mut out,
        ),
        TrafficIntent::Restored => restore(
            routing,
            observed,
            &canary_name,
            (canary_svc, canary_ing),
            &mut out,
        ),
    }
    out.in_place = out.writes.is_empty() && out.problems.is_empty();
    out
}

/// Whether the observed canary object is ours (`Some(true)`), someone else's (`Some(false)`),
/// or absent (`None`).
fn owned<T>(
    object: Option<&T>,
    meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    owner: &OwnerInfo,
) -> Option<bool> {
    object.map(|o| owner.owns(meta(o)))
}

fn release(
    routing: &TrafficRoutingRef,
    observed: &TrafficObserved,
    owner: &OwnerInfo,
    (stable_lws, canary_lws, route): (&str, &str, &CanaryRoute),
    canary_name: &str,
    (canary_svc, canary_ing): (Option<bool>, Option<bool>),
    out: &mut TrafficPlan,
) {
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
        out.problems.push(Problem::Missing(Target {
            kind: Kind::Service,
            name: routing.service.clone(),
        }));
        missing_routes(routing, observed, out);
        return;
    };
    match service::pin(stable, stable_lws) {
        Ok(w) => out.writes.extend(w),
        Err(p) => out.problems.push(p),
    }
    if canary_svc == Some(false) {
        out.problems.push(Problem::NotOurs(Target {
            kind: Kind::Service,
            name: canary_name.into(),
        }));
    } else {
        match service::canary(stable, canary_lws, owner) {
            Ok(desired) => out.writes.extend(service::apply_canary(
                observed.canary_service.as_ref(),
                desired,
            )),
            Err(p) => out.problems.push(p),
        }
    }
    // A route may send to the canary Service only once we have seen it exist as ours.
    let canary_exists = canary_svc == Some(true);

    if let Some(gw) = routing
        .gateway
        .as_ref()
        .and_then(|g| g.http_route_name.as_ref())
    {
        match observed.http_route.as_ref() {
            None => out.problems.push(missing(Kind::HttpRoute, gw)),
            Some(r) => match gateway::desired(r, &routing.service, canary_name, Some(route)) {
                Ok(desired) => {
                    if canary_exists || !gateway::sends_to_canary(&desired, canary_name) {
                        out.writes.extend(gateway::write(r, &desired));
                    }
                }
                Err(p) => out.problems.push(p),
            },
        }
    }
    if let Some(ing) = routing.ingress.as_ref() {
        let class = ing.class_type.as_deref().unwrap_or("nginx");
        if class != "nginx" {
            out.problems.push(Problem::Unsupported(format!(
                "ingress classType {class:?} (only nginx)"
            )));
        } else if canary_ing == Some(false) {
            out.problems.push(Problem::NotOurs(Target {
                kind: Kind::Ingress,
                name: names::canary_ingress(&ing.name),
            }));
        } else {
            match observed.ingress.as_ref() {
                None => out.problems.push(missing(Kind::Ingress, &ing.name)),
                Some(user) => {
                    match ingress::canary(user, &routing.service, canary_name, route, owner) {
                        Ok(desired) if canary_exists => out.writes.extend(ingress::apply_canary(
                            observed.canary_ingress.as_ref(),
                            desired,
                        )),
                        Ok(_) => {}
                        Err(p) => out.problems.push(p),
                    }
                }
            }
        }
    }
}

/// With the stable Service missing nothing is planned, but every other missing object is
/// named too, so one look at the condition tells the whole story.
fn missing_routes(routing: &TrafficRoutingRef, observed: &TrafficObserved, out: &mut TrafficPlan) {
    if let Some(gw) = routing
        .gateway
        .as_ref()
        .and_then(|g| g.http_route_name.as_ref())
        && observed.http_route.is_none()
    {
        out.problems.push(missing(Kind::HttpRoute, gw));
    }
    if let Some(ing) = routing.ingress.as_ref()
        && observed.ingress.is_none()
    {
        out.problems.push(missing(Kind::Ingress, &ing.name));
    }
}

/// Restoring never reports a missing user object: with the object gone there is nothing of
/// ours on it, and a Rollout whose Service was deleted must still finish cleaning up.
fn restore(
    routing: &TrafficRoutingRef,
    observed: &TrafficObserved,
    canary_name: &str,
    (canary_svc, canary_ing): (Option<bool>, Option<bool>),
    out: &mut TrafficPlan,
) {
    let mut still_routed = false;
    if let Some(r) = observed.http_route.as_ref() {
        if let Ok(desired) = gateway::desired(r, &routing.service, canary_name, None) {
            out.writes.extend(gateway::write(r, &desired));
        }
        still_routed |= gateway::sends_to_canary(r, canary_name);
    }
    if let (Some(true), Some(ing)) = (canary_ing, observed.canary_ingress.as_ref()) {
        out.writes.push(delete(Kind::Ingress, &ing.metadata));
        still_routed = true;
    }
    if let Some(stable) = observed.stable_service.as_ref() {
        out.writes.extend(service::unpin(stable));
    }
    if let (Some(true), Some(svc)) = (canary_svc, observed.canary_service.as_ref())
        && !still_routed
    {
        out.writes.push(delete(Kind::Service, &svc.metadata));
    }
}

fn missing(kind: Kind, name: &str) -> Problem {
    Problem::Missing(Target {
        kind,
        name: name.into(),
    })
}

fn delete(kind: Kind, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Write {
    Write::Delete {
        target: Target {
            kind,
            name: meta.name.clone().unwrap_or_default(),
        },
        uid: meta.uid.clone().unwrap_or_default(),
    }
}
