//! Test fixtures: objects as the API server stores them (defaults filled in), and a stand-in
//! for the applier that executes a plan's writes on a `TrafficObserved` the way the API server
//! would (JSON patch with its `test`, apply, delete with a uid precondition).

use super::{
    intent::{CanaryRoute, TrafficIntent},
    observe::{OwnerInfo, TrafficObserved},
    plan::{TrafficPlan, plan},
    write::{Kind, Owned, Write},
};
use crate::api::rollout::{GatewayTrafficRouting, IngressTrafficRouting, TrafficRoutingRef};
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{core::v1::Service, networking::v1::Ingress};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

pub const NS: &str = "ns";

pub fn owner() -> OwnerInfo {
    OwnerInfo {
        api_version: "rollouts.kruise.io/v1beta1".into(),
        kind: "Rollout".into(),
        name: "r".into(),
        uid: "rollout-uid".into(),
    }
}

fn typed<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture deserializes")
}

/// The user's Service `svc` as stored: allocated IPs, defaults, Argo CD tracking.
pub fn service(selector: Value) -> Service {
    typed(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "svc", "namespace": NS, "uid": "svc-uid", "resourceVersion": "10",
            "labels": {"app": "vllm", "app.kubernetes.io/instance": "demo"},
            "annotations": {
                "argocd.argoproj.io/tracking-id": "demo:/Service:ns/svc",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "team": "inference"
            }
        },
        "spec": {
            "type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
            "selector": selector,
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8000}]
        }
    }))
}

/// The same Service as a `LoadBalancer` with everything the cluster allocates for one.
pub fn load_balancer_service() -> Service {
    let mut v = serde_json::to_value(service(json!({"app": "vllm"}))).unwrap();
    let spec = v["spec"].as_object_mut().unwrap();
    spec.insert("type".into(), json!("LoadBalancer"));
    spec.insert("externalTrafficPolicy".into(), json!("Local"));
    spec.insert("healthCheckNodePort".into(), json!(31999));
    spec.insert("allocateLoadBalancerNodePorts".into(), json!(true));
    spec.insert("loadBalancerIP".into(), json!("203.0.113.7"));
    spec.insert("loadBalancerSourceRanges".into(), json!(["10.0.0.0/8"]));
    spec.insert("externalIPs".into(), json!(["192.0.2.1"]));
    spec["ports"][0]["nodePort"] = json!(30080);
    v["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}});
    typed(v)
}

/// A stable backendRef as stored (group, kind and weight defaulted).
pub fn backend(name: &str, weight: i64) -> Value {
    json!({"group": "", "kind": "Service", "name": name, "port": 80, "weight": weight})
}

/// A catch-all match as stored.
pub fn catch_all() -> Value {
    json!({"path": {"type": "PathPrefix", "value": "/"}})
}

/// HTTPRoute `route` with `rules` (already in stored form).
pub fn route(rules: Value) -> HttpRoute {
    typed(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "route", "namespace": NS, "uid": "route-uid", "resourceVersion": "20",
                     "annotations": {"argocd.argoproj.io/tracking-id": "demo:gateway.networking.k8s.io/HTTPRoute:ns/route"}},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
            "hostnames": ["models.example"],
            "rules": rules
        },
        "status": {"parents": []}
    }))
}

/// The simplest route: one catch-all rule to `svc`.
pub fn simple_route() -> HttpRoute {
    route(json!([{"matches": [catch_all()], "backendRefs": [backend("svc", 1)]}]))
}

/// The user's nginx Ingress `web`: a path to `svc`, a path to `other`, TLS.
pub fn user_ingress() -> Ingress {
    typed(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {
            "name": "web", "namespace": NS, "uid": "web-uid", "resourceVersion": "30",
            "labels": {"app": "vllm"},
            "annotations": {
                "nginx.ingress.kubernetes.io/proxy-body-size": "8m",
                "nginx.ingress.kubernetes.io/canary-weight": "77",
                "argocd.argoproj.io/tracking-id": "demo:networking.k8s.io/Ingress:ns/web"
            }
        },
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"hosts": ["models.example"], "secretName": "tls"}],
            "rules": [
                {"host": "models.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "svc", "port": {"number": 80}}}},
                    {"path": "/other", "pathType": "Prefix", "backend": {"service": {"name": "other", "port": {"number": 80}}}}
                ]}},
                {"host": "admin.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "other", "port": {"number": 80}}}}
                ]}}
            ]
        }
    }))
}

pub fn gateway_routing() -> TrafficRoutingRef {
    TrafficRoutingRef {
        service: "svc".into(),
        gateway: Some(GatewayTrafficRouting {
            http_route_name: Some("route".into()),
        }),
        ..Default::default()
    }
}

pub fn ingress_routing() -> TrafficRoutingRef {
    TrafficRoutingRef {
        service: "svc".into(),
        ingress: Some(IngressTrafficRouting {
            class_type: None,
            name: "web".into(),
        }),
        ..Default::default()
    }
}

pub fn release(route: CanaryRoute) -> TrafficIntent {
    TrafficIntent::Release {
        stable_lws: "vllm".into(),
        canary_lws: "vllm-canary-abc".into(),
        route,
    }
}

pub fn weight(p: i32) -> CanaryRoute {
    CanaryRoute {
        weight: Some(p),
        ..CanaryRoute::none()
    }
}

pub fn json_of<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

/// Executes `writes` in order as the API server would; panics on a failed `test` (a plan
/// computed from what it observed must apply cleanly).
pub fn execute(observed: &mut TrafficObserved, writes: &[Write]) {
    for w in writes {
        match w {
            Write::Patch { target, patch, .. } => match target.kind {
                Kind::Service => patch_slot(&mut observed.stable_service, patch),
                Kind::HttpRoute => patch_slot(&mut observed.http_route, patch),
                Kind::Ingress => panic!("the user's Ingress is never patched"),
            },
            Write::Apply { object, .. } => match object {
                Owned::Service(s) => {
                    let mut v = json_of(s.as_ref());
                    let (uid, ip) = observed
                        .canary_service
                        .as_ref()
                        .map(|o| {
                            let o = json_of(o);
                            (o["metadata"]["uid"].clone(), o["spec"]["clusterIP"].clone())
                        })
                        .unwrap_or((json!("canary-svc-uid"), json!("10.96.0.99")));
                    v["metadata"]["uid"] = uid;
                    v["metadata"]["resourceVersion"] = json!("100");
                    if v["spec"].get("clusterIP").is_none() {
                        v["spec"]["clusterIP"] = ip.clone();
                        v["spec"]["clusterIPs"] = json!([ip]);
                    }
                    observed.canary_service = Some(typed(v));
                }
                Owned::Ingress(i) => {
                    let mut v = json_of(i.as_ref());
                    v["metadata"]["uid"] = json!("canary-ing-uid");
                    observed.canary_ingress = Some(typed(v));
                }
            },
            Write::Delete { target, uid } => {
                let gone = match (target.kind, target.name.ends_with("-canary")) {
                    (Kind::Service, true) => observed.canary_service.take().map(|o| o.metadata),
                    (Kind::Ingress, true) => observed.canary_ingress.take().map(|o| o.metadata),
                    _ => panic!("only canary objects are deleted, not {target:?}"),
                };
                assert_eq!(
                    gone.and_then(|m| m.uid).as_ref(),
                    Some(uid),
                    "uid precondition"
                );
            }
        }
    }
}

fn patch_slot<T: Serialize + DeserializeOwned>(slot: &mut Option<T>, patch: &json_patch::Patch) {
    let mut v = json_of(slot.as_ref().expect("patched object exists"));
    json_patch::patch(&mut v, patch).expect("patch applies to what it was computed from");
    let rv: u64 = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    v["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
    *slot = Some(typed(v));
}

/// Plans and executes until the plan is in place (at most `passes` rounds, as a controller
/// re-observing after each round would); returns the plans seen.
pub fn converge(
    routing: &TrafficRoutingRef,
    intent: &TrafficIntent,
    observed: &mut TrafficObserved,
    passes: usize,
) -> Vec<TrafficPlan> {
    let mut seen = Vec::new();
    for _ in 0..=passes {
        let p = plan(routing, intent, observed, &owner());
        assert_eq!(
            p.in_place,
            p.writes.is_empty() && p.problems.is_empty(),
            "in_place is exactly 'nothing to write, nothing in the way'"
        );
        let done = p.in_place;
        execute(observed, &p.writes);
        seen.push(p);
        if done {
            return seen;
        }
    }
    panic!("not in place after {passes} passes: {:#?}", seen.last());
}

/// An object without its resourceVersion, for "equal to before" comparisons.
pub fn content<T: Serialize>(t: &T) -> Value {
    let mut v = json_of(t);
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    v
}
