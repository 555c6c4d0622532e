//! The revision of a DisaggregatedSet (label `disaggregatedset.x-k8s.io/revision`, part of the
//! name of every LWS and Service it makes), byte-identical to upstream v0.9.0's
//! `ComputeRevision`: the first 8 hex digits of the sha256 of Go's `json.Marshal` of
//! `[{"name": <role>, "template": <the role's typed LeaderWorkerTemplate>}, …]` in spec order.
//! Only the roles' names and templates count: replicas, rollout strategy, network config and
//! metadata do not make a new revision. Equal keys mean a set upstream built is adopted with
//! its LeaderWorkerSets as they are (e2e `upstream_reference::disaggregatedset_revisions_*`).

use serde_json::Value;

use crate::{
    api::disaggregatedset::DisaggregatedRoleSpec,
    lws::upstream::gojson::{self, GoJsonError, LEADER_WORKER_TEMPLATE},
};

/// Hex digits of the sha256 kept.
const LENGTH: usize = 8;

/// The bytes upstream hashes.
pub fn revision_data(roles: &[DisaggregatedRoleSpec]) -> Result<String, GoJsonError> {
    let mut out = String::from("[");
    for (i, role) in roles.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let template = role
            .spec
            .as_ref()
            .map(|s| serde_json::to_value(&s.leader_worker_template))
            .transpose()
            .map_err(|e| GoJsonError::Shape {
                path: format!(".roles[{i}].spec.leaderWorkerTemplate"),
                expected: e.to_string(),
            })?;
        out.push_str(r#"{"name":"#);
        out.push_str(&gojson::marshal(&Value::String(role.name.clone())));
        out.push_str(r#","template":"#);
        out.push_str(&gojson::marshal_typed(
            template.as_ref(),
            LEADER_WORKER_TEMPLATE,
        )?);
        out.push('}');
    }
    out.push(']');
    Ok(out)
}

/// The revision of the set's roles.
pub fn revision(roles: &[DisaggregatedRoleSpec]) -> Result<String, GoJsonError> {
    let data = revision_data(roles)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, data.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(hex[..LENGTH].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roles(value: Value) -> Vec<DisaggregatedRoleSpec> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_names_and_templates_count() {
        let base = json!([
            {"name": "prefill", "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 1,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}},
            {"name": "decode", "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 1,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}}
        ]);
        let key = revision(&roles(base.clone())).unwrap();
        assert_eq!(key.len(), 8);
        let mut scaled = base.clone();
        scaled[0]["spec"]["replicas"] = json!(5);
        scaled[1]["metadata"] = json!({"labels": {"x": "y"}});
        scaled[1]["spec"]["rolloutStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 2}});
        assert_eq!(revision(&roles(scaled)).unwrap(), key);
        let mut image = base.clone();
        image[1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] =
            json!("b");
        assert_ne!(revision(&roles(image)).unwrap(), key);
        let mut renamed = base.clone();
        renamed[1]["name"] = json!("decoder");
        assert_ne!(revision(&roles(renamed)).unwrap(), key);
        // Go writes struct fields in declaration order, integers as integers.
        let data = revision_data(&roles(base)).unwrap();
        assert!(
            data.starts_with(r#"[{"name":"prefill","template":{"workerTemplate":{"metadata":{},"spec":{"containers":[{"name":"c","image":"a","resources":{}}]}},"size":1}}"#),
            "{data}"
        );
    }
}
