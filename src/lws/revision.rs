//! The revision key (`leaderworkerset.sigs.k8s.io/template-revision-hash`) and the
//! ControllerRevision data, byte-identical to upstream LWS v0.8.0 so that groups created by the
//! upstream controller are adopted without a rolling update.
//!
//! Upstream stores `{"spec":{"leaderWorkerTemplate":{…,"$patch":"replace"},
//! "networkConfig":{…,"$patch":"replace"}}}` — the Go encoding of those two fields, re-marshalled
//! through a generic map (sorted keys, float64 numbers) — and hashes it with 32-bit FNV-1,
//! printed in decimal and mapped through `SafeEncodeString`.

use serde_json::{Value, json};

use super::gojson::{self, GoJsonError, LEADER_WORKER_TEMPLATE, NETWORK_CONFIG};

/// `data.raw` of the ControllerRevision for an LWS spec (the spec as JSON, as stored).
pub fn revision_data(spec: &Value) -> Result<String, GoJsonError> {
    let mut template = gojson::normalize(spec.get("leaderWorkerTemplate"), LEADER_WORKER_TEMPLATE)?;
    // An LWS from before networkConfig existed hashes as if it said Shared (upstream does this
    // so the key does not change when the field gets defaulted later).
    let shared = json!({"subdomainPolicy": "Shared"});
    let network = match spec.get("networkConfig").filter(|v| !v.is_null()) {
        Some(v) => gojson::normalize(Some(v), NETWORK_CONFIG)?,
        None => gojson::normalize(Some(&shared), NETWORK_CONFIG)?,
    };
    let mut network = network;
    for part in [&mut template, &mut network] {
        if let Value::Object(map) = part {
            map.insert("$patch".into(), Value::String("replace".into()));
        }
    }
    Ok(gojson::marshal(
        &json!({"spec": {"leaderWorkerTemplate": template, "networkConfig": network}}),
    ))
}

/// The revision key of `data.raw`: FNV-1 (not 1a) 32-bit, decimal, `SafeEncodeString`.
pub fn revision_key(data: &str) -> String {
    const ALPHANUMS: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    for byte in data.as_bytes() {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(*byte);
    }
    hash.to_string()
        .bytes()
        .map(|c| ALPHANUMS[usize::from(c) % ALPHANUMS.len()] as char)
        .collect()
}

/// The revision key of an LWS spec as it is now, or `None` when the spec cannot be hashed as
/// upstream hashes it (the LWS controller reports that; readers just see no key).
pub fn spec_key(spec: &crate::api::leaderworkerset::LeaderWorkerSetSpec) -> Option<String> {
    let spec = serde_json::to_value(spec).ok()?;
    revision_data(&spec).ok().map(|data| revision_key(&data))
}

/// ControllerRevision name: `<lws name, at most 220 bytes>-<key>-<revision number>`.
pub fn revision_name(lws_name: &str, key: &str, number: i64) -> String {
    let mut end = lws_name.len().min(220);
    while !lws_name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{key}-{number}", &lws_name[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1_and_safe_encoding() {
        // Values printed by Go's fnv.New32 + rand.SafeEncodeString.
        assert_eq!(revision_key(""), "65bb57b6b5");
        assert_eq!(revision_key("a"), "d8bfb88b");
    }

    #[test]
    fn missing_network_config_hashes_as_shared() {
        let base = json!({"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let mut explicit = base.clone();
        explicit["networkConfig"] = json!({"subdomainPolicy": "Shared"});
        assert_eq!(
            revision_data(&base).unwrap(),
            revision_data(&explicit).unwrap()
        );
    }

    #[test]
    fn replicas_and_strategy_do_not_change_the_revision_but_size_does() {
        let base = json!({"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [{"name": "c"}]}}}});
        let mut scaled = base.clone();
        scaled["replicas"] = json!(9);
        scaled["rolloutStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 2}});
        assert_eq!(revision_data(&base), revision_data(&scaled));
        let mut resized = base.clone();
        resized["leaderWorkerTemplate"]["size"] = json!(3);
        assert_ne!(revision_data(&base), revision_data(&resized));
    }

    #[test]
    fn revision_names_truncate_long_lws_names() {
        let long = "a".repeat(300);
        assert_eq!(revision_name(&long, "key", 3).len(), 220 + "-key-3".len());
        assert_eq!(revision_name("vllm", "5c5fcdfb44", 1), "vllm-5c5fcdfb44-1");
    }

    #[test]
    fn a_quantity_without_a_canonical_form_is_a_typed_error() {
        use crate::lws::quantity::QuantityError;
        let spec = |q: &str| {
            json!({"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"cpu": q}}}]}}}})
        };
        let path = ".workerTemplate.spec.containers[0].resources.limits.cpu";
        // Upstream's CRD pattern admits a fractional exponent; Go's parser does not.
        assert_eq!(
            revision_data(&spec("1e1.5")),
            Err(GoJsonError::Quantity {
                path: path.into(),
                source: QuantityError::Invalid("1e1.5".into()),
            })
        );
        // Go panics computing this one.
        let panics = "1234567890123456789e2147483639";
        assert_eq!(
            revision_data(&spec(panics)),
            Err(GoJsonError::Quantity {
                path: path.into(),
                source: QuantityError::Unplannable(panics.into()),
            })
        );
        // Beyond 64 bits is fine: Go hashes it.
        assert!(revision_data(&spec("123456789012345678901234567890123456789012")).is_ok());
    }
}
