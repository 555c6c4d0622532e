//! The user's Gateway API HTTPRoute during a release: patched, never replaced or owned.
//!
//! Weight steps add a canary backendRef (a copy of the stable one, renamed to the canary
//! Service) at the end of every rule that routes to the stable Service and split that rule's
//! stable share between the two. Match steps leave the user's rules alone and append, for each
//! such rule, a rule sending only matching requests to the canary (Kruise gives matches
//! precedence over a weight). Weight 0 without matches is the user's route unchanged.
//!
//! `spec.rules` is an atomic list for server-side apply (no list-map keys), so applying it would
//! take the whole list from the user's field manager; the route is therefore changed by a JSON
//! patch computed from the observed object. The weights we overwrite are recorded in an
//! annotation in the same patch. The route's state without us (the *base*) is always derived
//! from the observed route: drop the rules that send only to the canary, drop canary
//! backendRefs, put recorded weights back. Restoring writes the base, so it removes exactly what
//! we added, crash or not, and keeps any change the user made meanwhile.

use super::{
    intent::CanaryRoute,
    json, names,
    write::{Kind, Problem, Target, Write},
};
use crate::api::rollout::HttpRouteMatch;
use crate::k8s::field_managers;
use gateway_api::apis::standard::httproutes::{
    HttpRoute, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteRulesFilters,
    HttpRouteRulesFiltersRequestHeaderModifier, HttpRouteRulesFiltersType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesPath, HttpRouteRulesMatchesPathType,
    HttpRouteRulesMatchesQueryParamsType,
};
use std::collections::BTreeMap;

/// Gateway API limits (standard channel v1.5): rules per route, matches per rule, matches per
/// route, and the largest backendRef weight.
const MAX_RULES: usize = 16;
const MAX_MATCHES_PER_RULE: usize = 64;
const MAX_MATCHES: usize = 128;
const MAX_WEIGHT: i64 = 1_000_000;

/// Recorded weights: rule index (in the base route) → the weights of its backendRefs.
type Record = BTreeMap<String, Vec<Option<i32>>>;

/// Where a route is wanted: the user's route (`None`), or the route a release step asks for.
pub fn desired(
    route: &HttpRoute,
    stable: &str,
    canary: &str,
    want: Option<&CanaryRoute>,
) -> Result<HttpRoute, Problem> {
    let refs = Refs {
        namespace: route.metadata.namespace.as_deref(),
        stable,
        canary,
    };
    let base = base_rules(route, &refs);
    let (rules, record) = match want {
        None => (base, Record::new()),
        Some(want) => {
            if !base.iter().any(|r| refs.routes_to_stable(r)) {
                return Err(Problem::NoStableBackend {
                    target: target(route),
                    service: stable.into(),
                });
            }
            let modifier = want.request_header_modifier.as_ref();
            if !want.matches.is_empty() {
                (
                    with_matches(&base, &refs, &want.matches, modifier),
                    Record::new(),
                )
            } else {
                match want.weight.unwrap_or(0).clamp(0, 100) {
                    0 => (base, Record::new()),
                    p => {
                        with_weight(&base, &refs, p, modifier).ok_or_else(|| Problem::TooLarge {
                            target: target(route),
                            limit: format!("a backendRef weight is at most {MAX_WEIGHT}"),
                        })?
                    }
                }
            }
        }
    };
    check_limits(route, &rules)?;
    let mut out = route.clone();
    out.spec.rules = (!rules.is_empty() || route.spec.rules.is_some()).then_some(rules);
    let record = (!record.is_empty()).then(|| serde_json::to_string(&record).expect("map"));
    super::service::set_annotation(&mut out.metadata, names::ORIGINAL_WEIGHTS, record);
    Ok(out)
}

/// Whether any rule of the observed route sends to the canary Service.
pub fn sends_to_canary(route: &HttpRoute, canary: &str) -> bool {
    let refs = Refs {
        namespace: route.metadata.namespace.as_deref(),
        stable: "",
        canary,
    };
    route
        .spec
        .rules
        .iter()
        .flatten()
        .flat_map(|r| r.backend_refs.iter().flatten())
        .any(|b| refs.is(b, canary))
}

/// The patch bringing `observed` to `desired`, or `None` when it is there.
pub fn write(observed: &HttpRoute, desired: &HttpRoute) -> Option<Write> {
    json::patch_between(observed, desired).map(|patch| Write::Patch {
        target: target(observed),
        patch,
        field_manager: field_managers::TRAFFIC,
    })
}

struct Refs<'a> {
    namespace: Option<&'a str>,
    stable: &'a str,
    canary: &'a str,
}

impl Refs<'_> {
    /// Whether `b` is a reference to Service `name` in the route's namespace (group and kind
    /// may be left out: they default to the core group and `Service`).
    fn is(&self, b: &HttpRouteRulesBackendRefs, name: &str) -> bool {
        b.name == name
            && b.group.as_deref().unwrap_or("").is_empty()
            && b.kind.as_deref().unwrap_or("Service") == "Service"
            && (b.namespace.is_none() || b.namespace.as_deref() == self.namespace)
    }

    fn routes_to_stable(&self, rule: &HttpRouteRules) -> bool {
        rule.backend_refs
            .iter()
            .flatten()
            .any(|b| self.is(b, self.stable))
    }

    fn only_canary(&self, rule: &HttpRouteRules) -> bool {
        let refs = rule.backend_refs.as_deref().unwrap_or_default();
        !refs.is_empty() && refs.iter().all(|b| self.is(b, self.canary))
    }
}

/// The observed route's rules without anything of ours.
fn base_rules(route: &HttpRoute, refs: &Refs) -> Vec<HttpRouteRules> {
    let record: Record = route
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ORIGINAL_WEIGHTS))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let mut out: Vec<HttpRouteRules> = Vec::new();
    for rule in route.spec.rules.iter().flatten() {
        if refs.only_canary(rule) {
            continue;
        }
        let mut rule = rule.clone();
        if let Some(backends) = rule.backend_refs.as_mut()
            && backends.iter().any(|b| refs.is(b, refs.canary))
        {
            backends.retain(|b| !refs.is(b, refs.canary));
            let weights = record
                .get(&out.len().to_string())
                .filter(|w| w.len() == backends.len());
            for (b, w) in backends.iter_mut().zip(weights.into_iter().flatten()) {
                b.weight = *w;
            }
        }
        out.push(rule);
    }
    out
}

/// Every rule routing to the stable Service gets canary refs; the stable share of the rule is
/// split `100 - p : p`. A rule whose only backend is the stable Service gets exactly
/// `100 - p` and `p` (Kruise's numbers); in a rule with other backends too, every weight is
/// scaled by 100 so the other backends keep their share exactly. `None` when a scaled weight
/// would pass the API's maximum.
fn with_weight(
    base: &[HttpRouteRules],
    refs: &Refs,
    p: i32,
    modifier: Option<&HttpRouteRulesFiltersRequestHeaderModifier>,
) -> Option<(Vec<HttpRouteRules>, Record)> {
    let mut record = Record::new();
    let mut rules = base.to_vec();
    for (i, rule) in rules.iter_mut().enumerate() {
        if !refs.routes_to_stable(rule) {
            continue;
        }
        let backends = rule.backend_refs.as_mut().expect("routes to stable");
        record.insert(i.to_string(), backends.iter().map(|b| b.weight).collect());
        let alone = backends.len() == 1;
        let mut canaries = Vec::new();
        for b in backends.iter_mut() {
            let own = i64::from(b.weight.unwrap_or(1));
            let (stable_w, canary_w, other_w) = if alone {
                (i64::from(100 - p), i64::from(p), 0)
            } else {
                (own * i64::from(100 - p), own * i64::from(p), own * 100)
            };
            if refs.is(b, refs.stable) {
                canaries.push(canary_ref(
                    b,
                    refs.canary,
                    checked_weight(canary_w)?,
                    modifier,
                ));
                b.weight = Some(checked_weight(stable_w)?);
            } else {
                b.weight = Some(checked_weight(other_w)?);
            }
        }
        backends.extend(canaries);
    }
    Some((rules, record))
}

/// For each rule routing to the stable Service, one more rule sending the requests that match
/// the step to the canary only. A step match without a path narrows each of the rule's own
/// matches (its headers and query parameters are added), so it is more specific and wins by
/// Gateway API precedence; a step match with a path stands alone and is added once, to the
/// first such rule.
fn with_matches(
    base: &[HttpRouteRules],
    refs: &Refs,
    matches: &[HttpRouteMatch],
    modifier: Option<&HttpRouteRulesFiltersRequestHeaderModifier>,
) -> Vec<HttpRouteRules> {
    let mut out = base.to_vec();
    let mut paths_placed = false;
    for rule in base.iter().filter(|r| refs.routes_to_stable(r)) {
        let own = rule
            .matches
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| vec![HttpRouteRulesMatches::default()]);
        let mut generated: Vec<HttpRouteRulesMatches> = Vec::new();
        for m in matches {
            let candidates = if m.path.is_some() {
                if paths_placed {
                    continue;
                }
                vec![HttpRouteRulesMatches {
                    path: m.path.clone(),
                    headers: m.headers.clone(),
                    query_params: m.query_params.clone(),
                    method: None,
                }]
            } else {
                own.iter()
                    .map(|o| {
                        let mut n = o.clone();
                        extend(&mut n.headers, m.headers.as_deref());
                        extend(&mut n.query_params, m.query_params.as_deref());
                        n
                    })
                    .collect()
            };
            for c in candidates.into_iter().map(normalised) {
                if !generated.contains(&c) {
                    generated.push(c);
                }
            }
        }
        paths_placed = true;
        if generated.is_empty() {
            continue;
        }
        let backends = rule
            .backend_refs
            .iter()
            .flatten()
            .filter(|b| refs.is(b, refs.stable))
            .map(|b| canary_ref(b, refs.canary, b.weight.unwrap_or(1), None))
            .collect();
        out.push(HttpRouteRules {
            matches: Some(generated),
            filters: with_modifier(rule.filters.clone(), modifier),
            backend_refs: Some(backends),
            timeouts: rule.timeouts.clone(),
            // Rule names must be unique in a route; the canary rule needs none.
            name: None,
        });
    }
    out
}

fn extend<T: Clone>(into: &mut Option<Vec<T>>, more: Option<&[T]>) {
    if let Some(more) = more.filter(|m| !m.is_empty()) {
        into.get_or_insert_with(Vec::new).extend_from_slice(more);
    }
}

/// A match with the API server's defaults filled in, so what we write compares equal to what
/// we read back (path `PathPrefix /`, header and query match type `Exact`).
fn normalised(mut m: HttpRouteRulesMatches) -> HttpRouteRulesMatches {
    let path = m
        .path
        .get_or_insert_with(HttpRouteRulesMatchesPath::default);
    path.r#type
        .get_or_insert(HttpRouteRulesMatchesPathType::PathPrefix);
    path.value.get_or_insert_with(|| "/".into());
    for h in m.headers.iter_mut().flatten() {
        h.r#type
            .get_or_insert(HttpRouteRulesMatchesHeadersType::Exact);
    }
    for q in m.query_params.iter_mut().flatten() {
        q.r#type
            .get_or_insert(HttpRouteRulesMatchesQueryParamsType::Exact);
    }
    m
}

fn checked_weight(w: i64) -> Option<i32> {
    (w <= MAX_WEIGHT).then(|| i32::try_from(w).expect("at most MAX_WEIGHT"))
}

/// A copy of the stable ref pointing at the canary Service. In a weighted rule the header
/// modifier goes on this backendRef, the only place that changes canary-bound requests only.
fn canary_ref(
    stable: &HttpRouteRulesBackendRefs,
    canary: &str,
    weight: i32,
    modifier: Option<&HttpRouteRulesFiltersRequestHeaderModifier>,
) -> HttpRouteRulesBackendRefs {
    let mut b = stable.clone();
    b.name = canary.into();
    b.weight = Some(weight);
    if modifier.is_some() {
        // Same JSON shape on both levels; convert through the rule-level type to merge.
        let rule_level: Option<Vec<HttpRouteRulesFilters>> = b.filters.as_ref().map(convert);
        b.filters = with_modifier(rule_level, modifier).map(|f| convert(&f));
    }
    b
}

/// `filters` with the step's RequestHeaderModifier: merged into an existing one (the API
/// refuses two of the same type in one list), else added.
fn with_modifier(
    filters: Option<Vec<HttpRouteRulesFilters>>,
    modifier: Option<&HttpRouteRulesFiltersRequestHeaderModifier>,
) -> Option<Vec<HttpRouteRulesFilters>> {
    let Some(modifier) = modifier else {
        return filters;
    };
    let mut filters = filters.unwrap_or_default();
    match filters
        .iter_mut()
        .find(|f| f.r#type == HttpRouteRulesFiltersType::RequestHeaderModifier)
    {
        Some(existing) => {
            let e = existing
                .request_header_modifier
                .get_or_insert_with(Default::default);
            let set = e.set.get_or_insert_with(Vec::new);
            for s in modifier.set.iter().flatten() {
                set.retain(|x| !x.name.eq_ignore_ascii_case(&s.name));
                set.push(s.clone());
            }
            extend(&mut e.add, modifier.add.as_deref());
            for r in modifier.remove.iter().flatten() {
                let remove = e.remove.get_or_insert_with(Vec::new);
                if !remove.iter().any(|x| x.eq_ignore_ascii_case(r)) {
                    remove.push(r.clone());
                }
            }
            if e.set.as_ref().is_some_and(Vec::is_empty) {
                e.set = None;
            }
        }
        None => filters.push(HttpRouteRulesFilters {
            r#type: HttpRouteRulesFiltersType::RequestHeaderModifier,
            request_header_modifier: Some(modifier.clone()),
            ..Default::default()
        }),
    }
    Some(filters)
}

fn convert<A: serde::Serialize, B: serde::de::DeserializeOwned>(a: &A) -> B {
    serde_json::from_value(serde_json::to_value(a).expect("serializes"))
        .expect("rule-level and backend-level filters share their JSON shape")
}

fn check_limits(route: &HttpRoute, rules: &[HttpRouteRules]) -> Result<(), Problem> {
    let per_rule = |r: &HttpRouteRules| r.matches.as_ref().map_or(0, Vec::len);
    let limit = if rules.len() > MAX_RULES {
        Some(format!("a route has at most {MAX_RULES} rules"))
    } else if rules.iter().any(|r| per_rule(r) > MAX_MATCHES_PER_RULE) {
        Some(format!("a rule has at most {MAX_MATCHES_PER_RULE} matches"))
    } else if rules.iter().map(per_rule).sum::<usize>() > MAX_MATCHES {
        Some(format!("a route has at most {MAX_MATCHES} matches"))
    } else {
        None
    };
    match limit {
        Some(limit) => Err(Problem::TooLarge {
            target: target(route),
            limit,
        }),
        None => Ok(()),
    }
}

fn target(route: &HttpRoute) -> Target {
    Target {
        kind: Kind::HttpRoute,
        name: route.metadata.name.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::fixtures::*;
    use serde_json::{Value, json};

    fn rules_after(route: &HttpRoute, want: Option<&CanaryRoute>) -> Value {
        json_of(&desired(route, "svc", "svc-canary", want).unwrap())["spec"]["rules"].clone()
    }

    /// Applies the patch as the API server would and returns the stored route.
    fn patched(route: &HttpRoute, want: Option<&CanaryRoute>) -> HttpRoute {
        let d = desired(route, "svc", "svc-canary", want).unwrap();
        let mut obs = crate::traffic::observe::TrafficObserved {
            http_route: Some(route.clone()),
            ..Default::default()
        };
        execute(&mut obs, &write(route, &d).into_iter().collect::<Vec<_>>());
        obs.http_route.unwrap()
    }

    fn header(name: &str, value: &str) -> Value {
        json!({"name": name, "value": value})
    }

    fn step_match(v: Value) -> HttpRouteMatch {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn weights_split_the_stable_rule_and_restore_exactly() {
        let user = simple_route();
        for (p, stable_w, canary_w) in [(5, 95, 5), (50, 50, 50), (100, 0, 100)] {
            let route = patched(&user, Some(&weight(p)));
            assert_eq!(
                json_of(&route)["spec"]["rules"],
                json!([{"matches": [catch_all()],
                        "backendRefs": [backend("svc", stable_w), backend("svc-canary", canary_w)]}]),
                "{p}%"
            );
            assert_eq!(
                route.metadata.annotations.as_ref().unwrap()[names::ORIGINAL_WEIGHTS],
                r#"{"0":[1]}"#
            );
            // Idempotent: the stored route is what a second plan wants.
            let again = desired(&route, "svc", "svc-canary", Some(&weight(p))).unwrap();
            assert_eq!(
                write(&route, &again),
                None,
                "{p}%: second plan writes nothing"
            );
            // Restore: the user's route, byte for byte (but the resourceVersion).
            assert_eq!(
                content(&patched(&route, None)),
                content(&user),
                "{p}% restore"
            );
        }
    }

    #[test]
    fn weight_zero_without_matches_is_the_users_route() {
        let user = simple_route();
        let mid = patched(&user, Some(&weight(30)));
        let zero = patched(&mid, Some(&CanaryRoute::none()));
        assert_eq!(content(&zero), content(&user));
        assert!(!sends_to_canary(&zero, "svc-canary"));
        assert_eq!(
            write(
                &user,
                &desired(&user, "svc", "svc-canary", Some(&CanaryRoute::none())).unwrap()
            ),
            None
        );
    }

    #[test]
    fn only_rules_and_refs_to_the_stable_service_change_and_shares_of_others_are_kept() {
        let user = route(json!([
            {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}], "backendRefs": [backend("svc", 1)]},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/docs"}}], "backendRefs": [backend("docs", 1)]},
            {"matches": [catch_all()], "backendRefs": [backend("svc", 3), backend("legacy", 1)]},
            // Same name, other namespace: not our Service.
            {"matches": [{"path": {"type": "Exact", "value": "/x"}}],
             "backendRefs": [{"group": "", "kind": "Service", "name": "svc", "namespace": "elsewhere", "port": 80, "weight": 1}]}
        ]));
        let r = patched(&user, Some(&weight(5)));
        let rules = json_of(&r)["spec"]["rules"].clone();
        assert_eq!(
            rules[0]["backendRefs"],
            json!([backend("svc", 95), backend("svc-canary", 5)])
        );
        assert_eq!(rules[1], json_of(&user)["spec"]["rules"][1]);
        // 3:1 between svc and legacy before; svc's 3 is split 95:5 and legacy keeps its quarter.
        assert_eq!(
            rules[2]["backendRefs"],
            json!([
                backend("svc", 285),
                backend("legacy", 100),
                backend("svc-canary", 15)
            ])
        );
        assert_eq!(rules[3], json_of(&user)["spec"]["rules"][3]);
        assert_eq!(
            r.metadata.annotations.as_ref().unwrap()[names::ORIGINAL_WEIGHTS],
            r#"{"0":[1],"2":[3,1]}"#
        );
        assert_eq!(content(&patched(&r, None)), content(&user));
    }

    #[test]
    fn header_query_and_path_matches_become_canary_only_rules_beside_the_users() {
        let user = route(json!([
            {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}, "method": "POST"},
                         {"path": {"type": "PathPrefix", "value": "/v2"}}],
             "backendRefs": [backend("svc", 1)]},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/chat"}}],
             "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
             "backendRefs": [backend("svc", 1)]}
        ]));
        let want = CanaryRoute {
            weight: Some(20), // ignored: matches take precedence for Gateway API
            matches: vec![
                step_match(
                    json!({"headers": [header("x-canary", "yes")], "queryParams": [{"name": "v", "value": "2"}]}),
                ),
                step_match(
                    json!({"path": {"type": "Exact", "value": "/canary"}, "headers": [{"name": "x-a", "type": "RegularExpression", "value": "b.*"}]}),
                ),
            ],
            request_header_modifier: None,
        };
        let r = patched(&user, Some(&want));
        let rules = json_of(&r)["spec"]["rules"].clone();
        let users = json_of(&user)["spec"]["rules"].clone();
        assert_eq!(rules[0], users[0], "user rules untouched in match mode");
        assert_eq!(rules[1], users[1]);
        let narrowed = |path: &str, method: Option<&str>| {
            let mut m = json!({"path": {"type": "PathPrefix", "value": path},
                "headers": [{"name": "x-canary", "type": "Exact", "value": "yes"}],
                "queryParams": [{"name": "v", "type": "Exact", "value": "2"}]});
            if let Some(method) = method {
                m["method"] = json!(method);
            }
            m
        };
        let standalone = json!({"path": {"type": "Exact", "value": "/canary"},
            "headers": [{"name": "x-a", "type": "RegularExpression", "value": "b.*"}]});
        assert_eq!(
            rules[2],
            json!({"matches": [narrowed("/v1", Some("POST")), narrowed("/v2", None), standalone],
                   "backendRefs": [backend("svc-canary", 1)]})
        );
        // The path-bearing match is attached once; the rule's own filters come along.
        assert_eq!(
            rules[3],
            json!({"matches": [narrowed("/chat", None)], "filters": users[1]["filters"],
                   "backendRefs": [backend("svc-canary", 1)]})
        );
        assert_eq!(rules.as_array().unwrap().len(), 4);
        assert!(
            r.metadata
                .annotations
                .as_ref()
                .unwrap()
                .get(names::ORIGINAL_WEIGHTS)
                .is_none()
        );
        let again = desired(&r, "svc", "svc-canary", Some(&want)).unwrap();
        assert_eq!(write(&r, &again), None, "second plan writes nothing");
        assert_eq!(content(&patched(&r, None)), content(&user));
    }

    #[test]
    fn weight_to_match_step_keeps_the_stable_rule_unlike_upstream() {
        let user = simple_route();
        let weighted = patched(&user, Some(&weight(50)));
        let want = CanaryRoute {
            weight: None,
            matches: vec![step_match(json!({"headers": [header("x-canary", "yes")]}))],
            request_header_modifier: None,
        };
        let matched = patched(&weighted, Some(&want));
        let rules = json_of(&matched)["spec"]["rules"].clone();
        assert_eq!(
            rules[0],
            json_of(&user)["spec"]["rules"][0],
            "stable rule back to the user's"
        );
        assert_eq!(rules[1]["backendRefs"], json!([backend("svc-canary", 1)]));
        assert_eq!(content(&patched(&matched, None)), content(&user));
    }

    #[test]
    fn request_header_modifier_goes_on_canary_bound_requests_only() {
        let user = route(json!([{"matches": [catch_all()],
            "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-Env", "value": "prod"}], "remove": ["x-debug"]}}],
            "backendRefs": [backend("svc", 1)]}]));
        let modifier: HttpRouteRulesFiltersRequestHeaderModifier = serde_json::from_value(
            json!({"set": [{"name": "x-env", "value": "canary"}], "add": [{"name": "x-canary", "value": "1"}]}),
        )
        .unwrap();
        // Match mode: merged into the canary rule's own RequestHeaderModifier (one per rule).
        let want = CanaryRoute {
            weight: None,
            matches: vec![step_match(json!({"headers": [header("x-canary", "yes")]}))],
            request_header_modifier: Some(modifier.clone()),
        };
        let rules = rules_after(&user, Some(&want));
        assert_eq!(
            rules[1]["filters"],
            json!([{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                "set": [{"name": "x-env", "value": "canary"}],
                "add": [{"name": "x-canary", "value": "1"}],
                "remove": ["x-debug"]}}])
        );
        assert_eq!(rules[0], json_of(&user)["spec"]["rules"][0]);
        // Weight mode: on the canary backendRef, the stable ref untouched but its weight.
        let want = CanaryRoute {
            weight: Some(10),
            matches: vec![],
            request_header_modifier: Some(modifier),
        };
        let rules = rules_after(&user, Some(&want));
        assert_eq!(rules[0]["backendRefs"][0], backend("svc", 90));
        assert_eq!(
            rules[0]["backendRefs"][1]["filters"],
            json!([{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                "set": [{"name": "x-env", "value": "canary"}], "add": [{"name": "x-canary", "value": "1"}]}}])
        );
    }

    #[test]
    fn a_route_without_the_stable_service_or_past_api_limits_is_a_problem() {
        let other = route(json!([{"matches": [catch_all()], "backendRefs": [backend("docs", 1)]}]));
        assert!(matches!(
            desired(&other, "svc", "svc-canary", Some(&weight(5))),
            Err(Problem::NoStableBackend { .. })
        ));
        // Restoring such a route is fine (nothing of ours on it).
        assert!(desired(&other, "svc", "svc-canary", None).is_ok());
        let sixteen: Vec<Value> = (0..16)
            .map(|i| json!({"matches": [{"path": {"type": "PathPrefix", "value": format!("/{i}")}}], "backendRefs": [backend("svc", 1)]}))
            .collect();
        let full = route(Value::Array(sixteen));
        let want = CanaryRoute {
            weight: None,
            matches: vec![step_match(json!({"headers": [header("x-canary", "yes")]}))],
            request_header_modifier: None,
        };
        assert!(matches!(
            desired(&full, "svc", "svc-canary", Some(&want)),
            Err(Problem::TooLarge { limit, .. }) if limit.contains("16 rules")
        ));
        assert!(desired(&full, "svc", "svc-canary", Some(&weight(5))).is_ok());
        let heavy = route(json!([{"backendRefs": [backend("svc", 20_000), backend("b", 1)]}]));
        assert!(matches!(
            desired(&heavy, "svc", "svc-canary", Some(&weight(5))),
            Err(Problem::TooLarge { .. })
        ));
    }
}
