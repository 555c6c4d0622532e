//! What admission refuses of a DisaggregatedSetRoleScaler (pure; served by
//! `webhook::role_scaler`): a scaler is bound to one role of one set by its labels, so a scaler
//! whose labels name no set, a set that does not exist, or a role the set does not have (or
//! does not scale through a scaler) would scale nothing — refused with the field path of the
//! label. Upstream has no webhook for the kind and lets such a scaler sit unbound.

use kube::ResourceExt;

use crate::api::{
    disaggregatedset::{DisaggregatedSet, ROLE_LABEL, SET_NAME_LABEL},
    disaggregatedset_role_scaler::DisaggregatedSetRoleScaler,
};

/// The labels a scaler is bound by: (set, role), as written.
pub fn binding(scaler: &DisaggregatedSetRoleScaler) -> (Option<&String>, Option<&String>) {
    (
        scaler.labels().get(SET_NAME_LABEL),
        scaler.labels().get(ROLE_LABEL),
    )
}

/// Every refusal of `scaler`, one line each with its field path; `set`: the set its
/// `disaggregatedset.x-k8s.io/name` label names, if it exists.
pub fn refusals(
    scaler: &DisaggregatedSetRoleScaler,
    set: Option<&DisaggregatedSet>,
) -> Vec<String> {
    let path = |label: &str| format!("metadata.labels[{label}]");
    let (Some(set_name), role) = binding(scaler) else {
        return vec![format!(
            "{}: Required value: the DisaggregatedSet this scaler scales a role of",
            path(SET_NAME_LABEL)
        )];
    };
    let Some(role) = role else {
        return vec![format!(
            "{}: Required value: the role of DisaggregatedSet {set_name} this scaler scales",
            path(ROLE_LABEL)
        )];
    };
    let Some(set) = set else {
        return vec![format!(
            "{}: Invalid value: \"{set_name}\": no DisaggregatedSet {set_name} in namespace {}",
            path(SET_NAME_LABEL),
            scaler.namespace().unwrap_or_default()
        )];
    };
    let roles: Vec<&str> = set.spec.roles.iter().map(|r| r.name.as_str()).collect();
    match set.spec.roles.iter().find(|r| &r.name == role) {
        None => vec![format!(
            "{}: Invalid value: \"{role}\": DisaggregatedSet {set_name} has no role {role} (its roles: {})",
            path(ROLE_LABEL),
            roles.join(", ")
        )],
        Some(r) if !r.external() => vec![format!(
            "{}: Invalid value: \"{role}\": role {role} of DisaggregatedSet {set_name} is not scaled by a DisaggregatedSetRoleScaler: set its scaling.mode to External",
            path(ROLE_LABEL)
        )],
        Some(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scaler(labels: serde_json::Value) -> DisaggregatedSetRoleScaler {
        serde_json::from_value(json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSetRoleScaler",
            "metadata": {"name": "pd-decode", "namespace": "ns", "labels": labels},
            "spec": {"replicas": 2}
        }))
        .unwrap()
    }

    fn set() -> DisaggregatedSet {
        serde_json::from_value(json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "ns"},
            "spec": {"roles": [
                {"name": "prefill"},
                {"name": "decode", "scaling": {"mode": "External"}}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn a_scaler_must_name_an_external_role_of_a_live_set() {
        let bound = json!({SET_NAME_LABEL: "pd", ROLE_LABEL: "decode"});
        assert!(refusals(&scaler(bound.clone()), Some(&set())).is_empty());
        let table = [
            (
                json!({}),
                Some(set()),
                "metadata.labels[disaggregatedset.x-k8s.io/name]: Required value",
            ),
            (
                json!({SET_NAME_LABEL: "pd"}),
                Some(set()),
                "metadata.labels[disaggregatedset.x-k8s.io/role]: Required value",
            ),
            (
                bound,
                None,
                "metadata.labels[disaggregatedset.x-k8s.io/name]: Invalid value: \"pd\": no DisaggregatedSet pd in namespace ns",
            ),
            (
                json!({SET_NAME_LABEL: "pd", ROLE_LABEL: "router"}),
                Some(set()),
                "metadata.labels[disaggregatedset.x-k8s.io/role]: Invalid value: \"router\": DisaggregatedSet pd has no role router (its roles: prefill, decode)",
            ),
            (
                json!({SET_NAME_LABEL: "pd", ROLE_LABEL: "prefill"}),
                Some(set()),
                "is not scaled by a DisaggregatedSetRoleScaler",
            ),
        ];
        for (labels, set, want) in table {
            let got = refusals(&scaler(labels.clone()), set.as_ref());
            assert_eq!(got.len(), 1, "{labels}: {got:?}");
            assert!(got[0].contains(want), "{labels}: {got:?}");
        }
    }
}
