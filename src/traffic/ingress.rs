//! The nginx canary Ingress `<ingress>-canary`: a copy of the user's Ingress whose paths to the
//! stable Service go to the canary Service instead, with ingress-nginx's canary annotations.
//! The user's Ingress itself is never changed; restoring is deleting the canary Ingress.

use super::{
    intent::CanaryRoute,
    json, names,
    observe::OwnerInfo,
    service::copy_untracked,
    write::{Kind, Owned, Problem, Target, Write},
};
use crate::k8s::field_managers;
use gateway_api::apis::standard::httproutes::HttpRouteRulesMatchesHeadersType;
use k8s_openapi::api::networking::v1::{
    HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// Every ingress-nginx canary annotation starts with this; copies of the user's are dropped.
const CANARY_PREFIX: &str = "nginx.ingress.kubernetes.io/canary";
/// Marks an Ingress as a canary of the Ingress with the same host and path.
pub const CANARY: &str = "nginx.ingress.kubernetes.io/canary";
/// Percent of requests for the canary.
pub const CANARY_WEIGHT: &str = "nginx.ingress.kubernetes.io/canary-weight";
/// Header whose value `always` (or the `-value`/`-pattern` below) selects the canary.
pub const CANARY_BY_HEADER: &str = "nginx.ingress.kubernetes.io/canary-by-header";
/// Exact header value selecting the canary.
pub const CANARY_BY_HEADER_VALUE: &str = "nginx.ingress.kubernetes.io/canary-by-header-value";
/// Regular expression on the header value selecting the canary.
pub const CANARY_BY_HEADER_PATTERN: &str = "nginx.ingress.kubernetes.io/canary-by-header-pattern";
/// Cookie whose value `always` selects the canary.
pub const CANARY_BY_COOKIE: &str = "nginx.ingress.kubernetes.io/canary-by-cookie";
/// Kruise's convention: a header match with this name means "cookie named <value>".
pub const COOKIE_MATCH_NAME: &str = "canary-by-cookie";

/// The canary Ingress for `route`, or a problem when the user's Ingress has no path to the
/// stable Service.
pub fn canary(
    ingress: &Ingress,
    stable_service: &str,
    canary_service: &str,
    route: &CanaryRoute,
    owner: &OwnerInfo,
) -> Result<Ingress, Problem> {
    let user_name = ingress.metadata.name.clone().unwrap_or_default();
    let spec = ingress.spec.clone().unwrap_or_default();
    let to_canary = |b: &IngressBackend| -> Option<IngressBackend> {
        let svc = b.service.as_ref()?;
        (svc.name == stable_service).then(|| {
            let mut b = b.clone();
            b.service.as_mut().expect("checked").name = canary_service.into();
            b
        })
    };
    let rules: Vec<IngressRule> = spec
        .rules
        .iter()
        .flatten()
        .filter_map(|rule| {
            let paths: Vec<_> = rule
                .http
                .as_ref()?
                .paths
                .iter()
                .filter_map(|p| {
                    let mut p2 = p.clone();
                    p2.backend = to_canary(&p.backend)?;
                    Some(p2)
                })
                .collect();
            (!paths.is_empty()).then(|| IngressRule {
                host: rule.host.clone(),
                http: Some(HTTPIngressRuleValue { paths }),
            })
        })
        .collect();
    let default_backend = spec.default_backend.as_ref().and_then(to_canary);
    if rules.is_empty() && default_backend.is_none() {
        return Err(Problem::NoStableBackend {
            target: Target {
                kind: Kind::Ingress,
                name: user_name,
            },
            service: stable_service.into(),
        });
    }
    let mut labels = copy_untracked(ingress.metadata.labels.as_ref());
    labels.insert(names::CANARY_OF.into(), user_name.clone());
    let mut annotations = copy_untracked(ingress.metadata.annotations.as_ref());
    annotations.retain(|k, _| !k.starts_with(CANARY_PREFIX));
    annotations.extend(canary_annotations(route));
    Ok(Ingress {
        metadata: ObjectMeta {
            name: Some(names::canary_ingress(&user_name)),
            namespace: ingress.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.owner_reference()]),
            ..Default::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: spec.ingress_class_name,
            tls: spec.tls,
            default_backend,
            rules: (!rules.is_empty()).then_some(rules),
        }),
        status: None,
    })
}

/// ingress-nginx's canary annotations for `route`, as Kruise's nginx script writes them:
/// `canary: "true"` always; `canary-weight` when a weight is given (0 when neither weight nor
/// matches are); from the first header of each match, a cookie (Kruise's `canary-by-cookie`
/// header name) or a header with its exact value or pattern. nginx has no
/// path or query-parameter canary, so those parts of a match are not expressible here.
pub fn canary_annotations(route: &CanaryRoute) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([(CANARY.to_string(), "true".to_string())]);
    let weight = match route.weight {
        Some(w) => Some(w),
        None if route.matches.is_empty() => Some(0),
        None => None,
    };
    if let Some(w) = weight {
        out.insert(CANARY_WEIGHT.into(), w.clamp(0, 100).to_string());
    }
    // Each match contributes its first header; a later match overwrites an earlier one of
    // the same kind, so a cookie match and a header match can both be set (Kruise's order).
    for h in route
        .matches
        .iter()
        .filter_map(|m| m.headers.as_ref().and_then(|h| h.first()))
    {
        if h.name == COOKIE_MATCH_NAME {
            out.insert(CANARY_BY_COOKIE.into(), h.value.clone());
            continue;
        }
        out.remove(CANARY_BY_HEADER_VALUE);
        out.remove(CANARY_BY_HEADER_PATTERN);
        out.insert(CANARY_BY_HEADER.into(), h.name.clone());
        let key = match h.r#type {
            Some(HttpRouteRulesMatchesHeadersType::RegularExpression) => CANARY_BY_HEADER_PATTERN,
            _ => CANARY_BY_HEADER_VALUE,
        };
        out.insert(key.into(), h.value.clone());
    }
    out
}

/// The write bringing the observed canary Ingress to `desired`, or `None` when it holds it.
/// Annotations are compared exactly: a canary annotation left from an earlier step (a header
/// after a header-less step) must go, and only a full apply removes it.
pub fn apply_canary(observed: Option<&Ingress>, desired: Ingress) -> Option<Write> {
    let same = observed.is_some_and(|o| {
        json::holds(o, &desired)
            && canary_keys(o.metadata.annotations.as_ref())
                == canary_keys(desired.metadata.annotations.as_ref())
    });
    (!same).then(|| Write::Apply {
        object: Owned::Ingress(Box::new(desired)),
        field_manager: field_managers::TRAFFIC,
    })
}

fn canary_keys(map: Option<&BTreeMap<String, String>>) -> Vec<&String> {
    map.into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(CANARY_PREFIX))
        .map(|(k, _)| k)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::fixtures::*;
    use serde_json::json;

    fn annotations(route: CanaryRoute) -> serde_json::Value {
        json_of(&canary(&user_ingress(), "svc", "svc-canary", &route, &owner()).unwrap())["metadata"]
            ["annotations"]
            .clone()
    }

    fn with_header(weight: Option<i32>, h: serde_json::Value) -> CanaryRoute {
        CanaryRoute {
            weight,
            matches: vec![serde_json::from_value(json!({"headers": [h]})).unwrap()],
            request_header_modifier: None,
        }
    }

    #[test]
    fn canary_ingress_copies_only_paths_to_the_stable_service() {
        let c =
            json_of(&canary(&user_ingress(), "svc", "svc-canary", &weight(5), &owner()).unwrap());
        assert_eq!(
            c["spec"],
            json!({
                "ingressClassName": "nginx",
                "tls": [{"hosts": ["models.example"], "secretName": "tls"}],
                "rules": [{"host": "models.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "svc-canary", "port": {"number": 80}}}}
                ]}}]
            })
        );
        assert_eq!(c["metadata"]["name"], "web-canary");
        assert_eq!(
            c["metadata"]["labels"],
            json!({"app": "vllm", names::CANARY_OF: "web"})
        );
        assert_eq!(c["metadata"]["ownerReferences"][0]["uid"], "rollout-uid");
    }

    #[test]
    fn weight_header_cookie_and_both() {
        let base = json!({"nginx.ingress.kubernetes.io/proxy-body-size": "8m", CANARY: "true"});
        let with = |extra: serde_json::Value| {
            let mut m = base.clone();
            m.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            m
        };
        // The user's own stale canary-weight (77) is never copied.
        assert_eq!(annotations(weight(5)), with(json!({CANARY_WEIGHT: "5"})));
        assert_eq!(
            annotations(CanaryRoute::none()),
            with(json!({CANARY_WEIGHT: "0"}))
        );
        assert_eq!(
            annotations(with_header(
                None,
                json!({"name": "x-canary", "value": "yes"})
            )),
            with(json!({CANARY_BY_HEADER: "x-canary", CANARY_BY_HEADER_VALUE: "yes"}))
        );
        assert_eq!(
            annotations(with_header(
                None,
                json!({"name": "x-canary", "type": "RegularExpression", "value": "y.*"})
            )),
            with(json!({CANARY_BY_HEADER: "x-canary", CANARY_BY_HEADER_PATTERN: "y.*"}))
        );
        assert_eq!(
            annotations(with_header(
                None,
                json!({"name": COOKIE_MATCH_NAME, "value": "beta"})
            )),
            with(json!({CANARY_BY_COOKIE: "beta"}))
        );
        assert_eq!(
            annotations(with_header(
                Some(20),
                json!({"name": "x-canary", "value": "yes"})
            )),
            with(
                json!({CANARY_WEIGHT: "20", CANARY_BY_HEADER: "x-canary", CANARY_BY_HEADER_VALUE: "yes"})
            )
        );
    }

    #[test]
    fn a_cookie_match_and_a_header_match_are_both_written() {
        let route = CanaryRoute {
            weight: None,
            matches: vec![
                serde_json::from_value(json!({"headers": [{"name": COOKIE_MATCH_NAME, "value": "beta"}]})).unwrap(),
                serde_json::from_value(json!({"headers": [{"name": "x-a", "type": "RegularExpression", "value": "1"}]})).unwrap(),
                serde_json::from_value(json!({"headers": [{"name": "x-b", "value": "2"}, {"name": "ignored", "value": "3"}]})).unwrap(),
            ],
            request_header_modifier: None,
        };
        let a = annotations(route);
        assert_eq!(a[CANARY_BY_COOKIE], "beta");
        assert_eq!(
            (&a[CANARY_BY_HEADER], &a[CANARY_BY_HEADER_VALUE]),
            (&json!("x-b"), &json!("2"))
        );
        assert!(
            a.get(CANARY_BY_HEADER_PATTERN).is_none(),
            "the later header replaced the pattern"
        );
        assert!(
            a.get(CANARY_WEIGHT).is_none(),
            "matches without a weight: no weight"
        );
    }

    #[test]
    fn an_ingress_without_a_path_to_the_stable_service_is_a_problem() {
        assert_eq!(
            canary(&user_ingress(), "nope", "nope-canary", &weight(5), &owner()).unwrap_err(),
            Problem::NoStableBackend {
                target: Target {
                    kind: Kind::Ingress,
                    name: "web".into()
                },
                service: "nope".into()
            }
        );
    }

    #[test]
    fn a_changed_step_reapplies_and_an_unchanged_one_does_not() {
        let header = canary(
            &user_ingress(),
            "svc",
            "svc-canary",
            &with_header(Some(10), json!({"name": "x-canary", "value": "yes"})),
            &owner(),
        )
        .unwrap();
        assert!(apply_canary(None, header.clone()).is_some());
        assert_eq!(apply_canary(Some(&header), header.clone()), None);
        // Dropping the header leaves every remaining annotation equal: still a write, since
        // only an apply removes the stale canary-by-header.
        let weight_only =
            canary(&user_ingress(), "svc", "svc-canary", &weight(10), &owner()).unwrap();
        assert!(apply_canary(Some(&header), weight_only).is_some());
    }
}
