//! Whether the Service a pair's `trafficRoutings[].service` names is a role Service of the set
//! it releases. The release pins that Service to the set's held revision (it sets the set's
//! name and revision labels on the selector) and copies it as `<service>-canary`: a Service
//! selecting another set's pods would be taken over, one selecting a role the set does not have
//! (or no role, so decode leaders too) would route clients to nothing or to the wrong role, and
//! the set's own headless Services are rewritten by its controller. Such a Service is refused
//! at admission when the set and the Service exist then, and otherwise reported (a
//! `TrafficRoutingInvalid` Warning and the Rollout's message) while nothing is written to it.

use k8s_openapi::api::core::v1::Service;

use crate::api::disaggregatedset::{ROLE_LABEL, SET_NAME_LABEL};

/// Why `service` is not a Service selecting one role of DisaggregatedSet `set` (whose roles
/// are `roles`, in spec order), or `None` when it is. The selector read is the user's (the one
/// recorded while a release pins it).
pub fn problem(service: &Service, set: &str, roles: &[String]) -> Option<String> {
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let listed = roles.join(", ");
    let example = roles.first().map_or_else(String::new, |first| {
        format!(" (e.g. selector {SET_NAME_LABEL}: {set}, {ROLE_LABEL}: {first})")
    });
    let wanted = format!(
        "a pair's trafficRoutings[].service must select the leaders of one role of \
         DisaggregatedSet {set} (its roles: {listed}){example}"
    );
    let owned_by_set = service
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DisaggregatedSet");
    if owned_by_set {
        return Some(format!(
            "Service {name} is a DisaggregatedSet's own headless Service (its controller writes \
             the selector); {wanted}"
        ));
    }
    let Some(selector) = crate::traffic::service::user_selector(service) else {
        return Some(format!("Service {name} has no selector; {wanted}"));
    };
    if let Some(other) = selector.get(SET_NAME_LABEL).filter(|s| *s != set) {
        return Some(format!(
            "Service {name} selects the pods of DisaggregatedSet {other} ({SET_NAME_LABEL}: \
             {other}), not of {set}; {wanted}"
        ));
    }
    match selector.get(ROLE_LABEL) {
        None => Some(format!(
            "Service {name} selects no one role (its selector has no {ROLE_LABEL}); {wanted}"
        )),
        Some(role) if !roles.iter().any(|r| r == role) => Some(format!(
            "Service {name} selects role {role}, which DisaggregatedSet {set} does not have; \
             {wanted}"
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::disaggregatedset::REVISION_LABEL;
    use crate::traffic::names::ORIGINAL_SELECTOR;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    fn service(selector: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "pd-prefill"},
            "spec": {"selector": selector},
        }))
        .unwrap()
    }

    fn roles() -> Vec<String> {
        vec!["prefill".into(), "decode".into()]
    }

    #[test]
    fn a_service_is_a_role_service_only_when_it_selects_one_role_of_the_set() {
        let n = SET_NAME_LABEL;
        let r = ROLE_LABEL;
        // (selector, what the problem must say; None = accepted)
        let cases: Vec<(serde_json::Value, Option<Vec<&str>>)> = vec![
            // The example's Service, with or without the set's name and a worker index.
            (json!({n: "pd", r: "prefill"}), None),
            (
                json!({n: "pd", r: "prefill", "leaderworkerset.sigs.k8s.io/worker-index": "0"}),
                None,
            ),
            (json!({r: "decode", "app": "vllm"}), None),
            // A role the set does not have.
            (
                json!({n: "pd", r: "embed"}),
                Some(vec!["role embed", "does not have", "prefill, decode"]),
            ),
            // Another set's pods.
            (
                json!({n: "other", r: "prefill"}),
                Some(vec![
                    "DisaggregatedSet other",
                    "not of pd",
                    "prefill, decode",
                ]),
            ),
            // No role: prefill and decode leaders alike.
            (
                json!({n: "pd"}),
                Some(vec!["no one role", "prefill, decode"]),
            ),
            (json!({"app": "vllm"}), Some(vec!["no one role"])),
            (json!({}), Some(vec!["has no selector", "prefill, decode"])),
        ];
        for (selector, want) in cases {
            let got = problem(&service(selector.clone()), "pd", &roles());
            match (&want, &got) {
                (None, None) => {}
                (Some(parts), Some(msg)) => {
                    assert!(msg.contains("Service pd-prefill"), "{msg}");
                    for part in parts {
                        assert!(msg.contains(part), "{selector}: {msg} lacks {part}");
                    }
                }
                _ => panic!("{selector}: got {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn a_pinned_service_is_judged_by_the_selector_its_user_wrote() {
        // Mid-release the selector carries the held revision; the recorded one is the user's.
        let mut svc = service(json!({SET_NAME_LABEL: "pd", ROLE_LABEL: "prefill",
            REVISION_LABEL: "h",
            "leaderworkerset.sigs.k8s.io/worker-index": "0"}));
        svc.metadata.annotations = Some(
            [(
                ORIGINAL_SELECTOR.to_string(),
                json!({SET_NAME_LABEL: "pd", ROLE_LABEL: "prefill"}).to_string(),
            )]
            .into(),
        );
        assert_eq!(problem(&svc, "pd", &roles()), None);
    }

    #[test]
    fn the_sets_own_headless_service_is_refused() {
        let mut svc = service(json!({SET_NAME_LABEL: "pd", ROLE_LABEL: "prefill"}));
        svc.metadata.owner_references = Some(vec![OwnerReference {
            kind: "DisaggregatedSet".into(),
            name: "pd".into(),
            ..OwnerReference::default()
        }]);
        let msg = problem(&svc, "pd", &roles()).expect("refused");
        assert!(msg.contains("own headless Service"), "{msg}");
    }
}
