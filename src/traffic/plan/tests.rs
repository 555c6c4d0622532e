//! Whole-plan tests: ordering, problems, `in_place`, and release → restore round trips on
//! objects executed the way the API server would.

use super::plan;
use crate::traffic::{
    fixtures::*,
    intent::{CanaryRoute, TrafficIntent},
    names,
    observe::TrafficObserved,
    write::{Kind, Problem, Target, Write},
};
use serde_json::json;

fn gateway_cluster() -> TrafficObserved {
    TrafficObserved {
        stable_service: Some(service(json!({"app": "vllm"}))),
        http_route: Some(simple_route()),
        ..Default::default()
    }
}

fn ingress_cluster() -> TrafficObserved {
    TrafficObserved {
        stable_service: Some(service(json!({"app": "vllm"}))),
        ingress: Some(user_ingress()),
        ..Default::default()
    }
}

fn kinds(writes: &[Write]) -> Vec<(Kind, String, &'static str)> {
    writes
        .iter()
        .map(|w| {
            let t = w.target();
            let what = match w {
                Write::Apply { .. } => "apply",
                Write::Patch { .. } => "patch",
                Write::Delete { .. } => "delete",
            };
            (t.kind, t.name, what)
        })
        .collect()
}

fn header_match() -> CanaryRoute {
    CanaryRoute {
        weight: None,
        matches: vec![
            serde_json::from_value(json!({"headers": [{"name": "x-canary", "value": "yes"}]}))
                .unwrap(),
        ],
        request_header_modifier: None,
    }
}

#[test]
fn release_pins_and_creates_the_canary_service_before_any_route_sends_to_it() {
    let routing = gateway_routing();
    let mut cluster = gateway_cluster();
    let plans = converge(&routing, &release(weight(5)), &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [
            (Kind::Service, "svc".into(), "patch"),
            (Kind::Service, "svc-canary".into(), "apply"),
        ],
        "first pass: no route write while the canary Service has not been observed"
    );
    assert!(!plans[0].in_place);
    assert_eq!(
        kinds(&plans[1].writes),
        [(Kind::HttpRoute, "route".into(), "patch")]
    );
    assert!(
        plans[2].in_place && plans[2].writes.is_empty(),
        "then nothing to write"
    );
    assert_eq!(plans.len(), 3);
    let canary = cluster.canary_service.as_ref().unwrap();
    assert_eq!(
        canary.spec.as_ref().unwrap().selector.as_ref().unwrap()[names::LWS_NAME],
        "vllm-canary-abc"
    );
}

#[test]
fn weight_zero_may_be_planned_before_the_canary_service_exists() {
    // Nothing goes to the canary, so nothing waits: the route is simply left as it is.
    let p = plan(
        &gateway_routing(),
        &release(CanaryRoute::none()),
        &gateway_cluster(),
        &owner(),
    );
    assert_eq!(
        kinds(&p.writes),
        [
            (Kind::Service, "svc".into(), "patch"),
            (Kind::Service, "svc-canary".into(), "apply")
        ]
    );
}

#[test]
fn gateway_release_steps_then_restore_leave_the_users_objects_exactly_as_they_were() {
    let routing = gateway_routing();
    let mut cluster = gateway_cluster();
    let before = cluster.clone();
    for step in [
        weight(5),
        weight(50),
        header_match(),
        weight(100),
        CanaryRoute::none(),
    ] {
        converge(&routing, &release(step), &mut cluster, 3);
    }
    let plans = converge(&routing, &TrafficIntent::Restored, &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [
            (Kind::Service, "svc".into(), "patch"),
            (Kind::Service, "svc-canary".into(), "delete")
        ]
    );
    assert_eq!(
        content(cluster.stable_service.as_ref().unwrap()),
        content(before.stable_service.as_ref().unwrap())
    );
    assert_eq!(
        content(cluster.http_route.as_ref().unwrap()),
        content(before.http_route.as_ref().unwrap())
    );
    assert_eq!(cluster.canary_service, None);
}

#[test]
fn restore_sends_traffic_back_before_unpinning_and_deletes_the_canary_service_last() {
    let routing = gateway_routing();
    let mut cluster = gateway_cluster();
    converge(&routing, &release(weight(30)), &mut cluster, 3);
    let plans = converge(&routing, &TrafficIntent::Restored, &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [
            (Kind::HttpRoute, "route".into(), "patch"),
            (Kind::Service, "svc".into(), "patch")
        ],
        "the canary Service stays while the observed route still sends to it"
    );
    assert_eq!(
        kinds(&plans[1].writes),
        [(Kind::Service, "svc-canary".into(), "delete")]
    );
    assert!(plans[2].in_place);
}

#[test]
fn ingress_release_steps_then_restore() {
    let routing = ingress_routing();
    let mut cluster = ingress_cluster();
    let before = cluster.clone();
    let plans = converge(&routing, &release(weight(5)), &mut cluster, 3);
    assert_eq!(
        kinds(&plans[1].writes),
        [(Kind::Ingress, "web-canary".into(), "apply")]
    );
    let weight_of = |c: &TrafficObserved| {
        c.canary_ingress
            .as_ref()
            .unwrap()
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(super::ingress::CANARY_WEIGHT)
            .cloned()
    };
    assert_eq!(weight_of(&cluster).as_deref(), Some("5"));
    converge(&routing, &release(header_match()), &mut cluster, 3);
    assert_eq!(weight_of(&cluster), None);
    converge(&routing, &release(CanaryRoute::none()), &mut cluster, 3);
    assert_eq!(weight_of(&cluster).as_deref(), Some("0"));
    let plans = converge(&routing, &TrafficIntent::Restored, &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [
            (Kind::Ingress, "web-canary".into(), "delete"),
            (Kind::Service, "svc".into(), "patch")
        ]
    );
    assert_eq!(
        kinds(&plans[1].writes),
        [(Kind::Service, "svc-canary".into(), "delete")]
    );
    assert_eq!(
        cluster.ingress, before.ingress,
        "the user's Ingress is never written"
    );
    assert_eq!(
        content(cluster.stable_service.as_ref().unwrap()),
        content(before.stable_service.as_ref().unwrap())
    );
    assert_eq!(
        (cluster.canary_ingress, cluster.canary_service),
        (None, None)
    );
}

#[test]
fn missing_objects_are_problems_and_never_in_place() {
    let missing = |kind, name: &str| {
        Problem::Missing(Target {
            kind,
            name: name.into(),
        })
    };
    let p = plan(
        &gateway_routing(),
        &release(weight(5)),
        &TrafficObserved::default(),
        &owner(),
    );
    assert_eq!(
        p.problems,
        [
            missing(Kind::Service, "svc"),
            missing(Kind::HttpRoute, "route")
        ]
    );
    assert!(p.writes.is_empty() && !p.in_place);

    let p = plan(
        &ingress_routing(),
        &release(weight(5)),
        &TrafficObserved::default(),
        &owner(),
    );
    assert_eq!(
        p.problems,
        [missing(Kind::Service, "svc"), missing(Kind::Ingress, "web")]
    );

    // The Service exists, the route is gone (deleted mid-release): the Service side still
    // proceeds, the route is a problem.
    let mut cluster = gateway_cluster();
    cluster.http_route = None;
    let p = plan(&gateway_routing(), &release(weight(5)), &cluster, &owner());
    assert_eq!(p.problems, [missing(Kind::HttpRoute, "route")]);
    assert_eq!(p.writes.len(), 2);
    assert!(!p.in_place);

    let mut cluster = ingress_cluster();
    cluster.ingress = None;
    let p = plan(&ingress_routing(), &release(weight(5)), &cluster, &owner());
    assert_eq!(p.problems, [missing(Kind::Ingress, "web")]);
}

#[test]
fn restoring_with_user_objects_gone_still_cleans_up_and_reports_nothing() {
    let routing = gateway_routing();
    let mut cluster = gateway_cluster();
    converge(&routing, &release(weight(30)), &mut cluster, 3);
    cluster.stable_service = None;
    cluster.http_route = None;
    let plans = converge(&routing, &TrafficIntent::Restored, &mut cluster, 2);
    assert_eq!(
        kinds(&plans[0].writes),
        [(Kind::Service, "svc-canary".into(), "delete")]
    );
    assert!(plans.iter().all(|p| p.problems.is_empty()));
    assert!(plans.last().unwrap().in_place);
}

#[test]
fn canary_objects_owned_by_someone_else_are_never_touched() {
    let mut foreign = service(json!({"app": "someone-else"}));
    foreign.metadata.name = Some("svc-canary".into());
    let mut cluster = gateway_cluster();
    cluster.canary_service = Some(foreign);
    let p = plan(&gateway_routing(), &release(weight(5)), &cluster, &owner());
    assert_eq!(
        p.problems,
        [Problem::NotOurs(Target {
            kind: Kind::Service,
            name: "svc-canary".into()
        })]
    );
    assert_eq!(
        kinds(&p.writes),
        [(Kind::Service, "svc".into(), "patch")],
        "no route write either"
    );
    let p = plan(
        &gateway_routing(),
        &TrafficIntent::Restored,
        &cluster,
        &owner(),
    );
    assert!(p.writes.is_empty() && p.in_place, "not ours: not deleted");
}

#[test]
fn unsupported_routing_is_a_problem() {
    let mut routing = ingress_routing();
    routing.ingress.as_mut().unwrap().class_type = Some("aliyun-alb".into());
    routing.custom_network_refs = Some(vec![Default::default()]);
    let p = plan(&routing, &release(weight(5)), &ingress_cluster(), &owner());
    assert_eq!(p.problems.len(), 2);
    assert!(
        p.problems
            .iter()
            .all(|p| p.reason() == "TrafficRoutingUnsupported"),
        "{:?}",
        p.problems
    );
}

#[test]
fn a_new_canary_lws_mid_release_moves_only_the_canary_selector() {
    let routing = gateway_routing();
    let mut cluster = gateway_cluster();
    converge(&routing, &release(weight(5)), &mut cluster, 3);
    let third = TrafficIntent::Release {
        stable_lws: "vllm".into(),
        canary_lws: "vllm-canary-def".into(),
        route: weight(5),
    };
    let plans = converge(&routing, &third, &mut cluster, 2);
    assert_eq!(
        kinds(&plans[0].writes),
        [(Kind::Service, "svc-canary".into(), "apply")]
    );
    assert_eq!(
        cluster
            .canary_service
            .unwrap()
            .spec
            .unwrap()
            .selector
            .unwrap()[names::LWS_NAME],
        "vllm-canary-def"
    );
}

#[test]
fn problems_have_messages_naming_the_object() {
    let p = Problem::Missing(Target {
        kind: Kind::HttpRoute,
        name: "route".into(),
    });
    assert_eq!(p.to_string(), "HTTPRoute route not found");
    assert_eq!(p.reason(), "TrafficObjectNotFound");
}

#[test]
fn a_service_without_selector_is_reported_once_and_nothing_routes_to_a_canary() {
    let mut cluster = gateway_cluster();
    cluster.stable_service = Some(service(json!({})));
    let p = plan(&gateway_routing(), &release(weight(5)), &cluster, &owner());
    assert_eq!(p.problems, [Problem::NoSelector("svc".into())]);
    assert!(p.writes.is_empty() && !p.in_place, "{:?}", p.writes);
}

/// Route-traffic-to-stable, as Kruise's finalising step: the canary Ingress goes and the route
/// is the user's again, while the stable Service stays pinned (the canary LWS may still run,
/// with leaders that carry the same labels) and the canary Service stays for its own step.
#[test]
fn to_stable_deletes_the_canary_ingress_and_restores_the_route_but_keeps_the_pin() {
    let to_stable = TrafficIntent::ToStable {
        stable_lws: "vllm".into(),
    };
    let routing = ingress_routing();
    let mut cluster = ingress_cluster();
    converge(&routing, &release(weight(30)), &mut cluster, 3);
    let pinned = cluster.stable_service.clone();
    let plans = converge(&routing, &to_stable, &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [(Kind::Ingress, "web-canary".into(), "delete")]
    );
    assert!(plans[1].in_place);
    assert_eq!(cluster.canary_ingress, None);
    assert!(cluster.canary_service.is_some(), "removed at its own step");
    assert_eq!(
        cluster.stable_service, pinned,
        "still pinned to the stable leaders"
    );

    let routing = gateway_routing();
    let mut cluster = gateway_cluster();
    let before = cluster.clone();
    converge(&routing, &release(weight(30)), &mut cluster, 3);
    let pinned = cluster.stable_service.clone();
    let plans = converge(&routing, &to_stable, &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [(Kind::HttpRoute, "route".into(), "patch")]
    );
    assert_eq!(
        content(cluster.http_route.as_ref().unwrap()),
        content(before.http_route.as_ref().unwrap()),
        "the user's route as it was"
    );
    assert_eq!(cluster.stable_service, pinned);
    // Then the rest of the restore: unpin, and the canary Service last.
    let plans = converge(&routing, &TrafficIntent::Restored, &mut cluster, 3);
    assert_eq!(
        kinds(&plans[0].writes),
        [
            (Kind::Service, "svc".into(), "patch"),
            (Kind::Service, "svc-canary".into(), "delete")
        ]
    );
    assert_eq!(
        content(cluster.stable_service.as_ref().unwrap()),
        content(before.stable_service.as_ref().unwrap())
    );
}
