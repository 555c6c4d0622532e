//! The traffic split as it is in the cluster (not as the step plans it), read from the objects
//! the traffic layer writes (docs/traffic.md): the HTTPRoute's backendRef weights, or the nginx
//! canary Ingress's annotations.

use serde_json::Value;

/// nginx's canary annotation prefix.
const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// The canary Service's name for a stable Service (the traffic layer's naming).
pub fn canary_service(service: &str) -> String {
    format!("{service}-canary")
}

/// One line per HTTPRoute rule that involves the stable or canary Service, e.g.
/// `rule 0: canary 20% (vllm 80, vllm-canary 20)`, `rule 1: matches -> canary`, or
/// `no canary backend: all to vllm` when the route is as the user wrote it.
pub fn route_split(route: &Value, service: &str) -> Vec<String> {
    let canary = canary_service(service);
    let mut lines = Vec::new();
    let rules = route["spec"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let refs = rule["backendRefs"].as_array().cloned().unwrap_or_default();
        let named: Vec<(String, i64)> = refs
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap_or_default().to_string(),
                    // Gateway API's default weight is 1.
                    r["weight"].as_i64().unwrap_or(1),
                )
            })
            .collect();
        let has = |n: &str| named.iter().any(|(name, _)| name == n);
        if !has(service) && !has(&canary) {
            continue;
        }
        if named.iter().all(|(n, _)| *n == canary) {
            lines.push(format!("rule {i}: matches -> canary"));
            continue;
        }
        let total: i64 = named.iter().map(|(_, w)| *w).sum();
        let to_canary: i64 = named
            .iter()
            .filter(|(n, _)| *n == canary)
            .map(|(_, w)| *w)
            .sum();
        let weights = named
            .iter()
            .map(|(n, w)| format!("{n} {w}"))
            .collect::<Vec<_>>()
            .join(", ");
        let pct = if total > 0 {
            to_canary * 100 / total
        } else {
            0
        };
        lines.push(format!("rule {i}: canary {pct}% ({weights})"));
    }
    if lines.iter().all(|l| l.contains("canary 0%")) && !lines.iter().any(|l| l.contains(&canary)) {
        return vec![format!("no canary backend: all to {service}")];
    }
    lines
}

/// The nginx canary Ingress's routing: `canary-weight 20`, `header x-canary=yes`, … or, with
/// no canary Ingress, that everything goes to the stable backend.
pub fn ingress_split(canary_ingress: Option<&Value>) -> Vec<String> {
    let Some(ing) = canary_ingress else {
        return vec!["no canary Ingress: all to stable".into()];
    };
    let ann = |k: &str| {
        ing["metadata"]["annotations"][format!("{NGINX}{k}")]
            .as_str()
            .map(str::to_string)
    };
    let mut parts = Vec::new();
    if let Some(w) = ann("canary-weight") {
        parts.push(format!("canary-weight {w}"));
    }
    if let Some(h) = ann("canary-by-header") {
        let v = ann("canary-by-header-value")
            .or_else(|| ann("canary-by-header-pattern").map(|p| format!("~{p}")))
            .unwrap_or_default();
        parts.push(format!("header {h}={v}"));
    }
    if let Some(c) = ann("canary-by-cookie") {
        parts.push(format!("cookie {c}"));
    }
    vec![parts.join(", ")]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn weighted_rule_shows_the_canary_share_and_the_weights() {
        let route = json!({"spec": {"rules": [
            {"backendRefs": [{"name": "vllm", "port": 80, "weight": 80}, {"name": "vllm-canary", "port": 80, "weight": 20}]},
            {"backendRefs": [{"name": "other", "port": 80}]},
            {"matches": [{"headers": [{"name": "x", "value": "y"}]}], "backendRefs": [{"name": "vllm-canary", "port": 80}]}
        ]}});
        assert_eq!(
            route_split(&route, "vllm"),
            vec![
                "rule 0: canary 20% (vllm 80, vllm-canary 20)".to_string(),
                "rule 2: matches -> canary".to_string()
            ]
        );
    }

    #[test]
    fn a_route_without_canary_backends_sends_all_to_stable() {
        let route = json!({"spec": {"rules": [{"backendRefs": [{"name": "vllm", "port": 80}]}]}});
        assert_eq!(
            route_split(&route, "vllm"),
            vec!["no canary backend: all to vllm".to_string()]
        );
    }

    #[test]
    fn nginx_canary_annotations_are_read_back() {
        let ing = json!({"metadata": {"annotations": {
            "nginx.ingress.kubernetes.io/canary": "true",
            "nginx.ingress.kubernetes.io/canary-weight": "20",
            "nginx.ingress.kubernetes.io/canary-by-header": "x-canary",
            "nginx.ingress.kubernetes.io/canary-by-header-value": "yes"
        }}});
        assert_eq!(
            ingress_split(Some(&ing)),
            vec!["canary-weight 20, header x-canary=yes".to_string()]
        );
        assert_eq!(
            ingress_split(None),
            vec!["no canary Ingress: all to stable".to_string()]
        );
    }
}
