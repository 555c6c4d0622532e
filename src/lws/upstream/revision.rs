//! The revision key (`leaderworkerset.sigs.k8s.io/template-revision-hash`) and the
//! ControllerRevision data, byte-identical to upstream LWS v0.9.0 (and, for every template
//! v0.8.0 could express, to v0.8.0) so that groups created by the upstream controller are
//! adopted without a rolling update.
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

/// Whether a recorded ControllerRevision's `data` is the revision of `spec`, whose
/// [`revision_data`] is `data`: the same bytes, or the same once the recorded template is
/// re-encoded as we (and v0.9.0) encode it today — a revision written by another version or
/// client that differs only in serialisation (`"creationTimestamp": null`, key order, an empty
/// field an older encoder wrote) is recognised, so taking over or upgrading rolls nothing.
///
/// Upstream v0.9.0's `SetMatchesRevision` decides this by restoring the recorded revision onto
/// the LWS (a strategic merge patch) and marshalling it again; we decide as it does, its two
/// quirks included (e2e `upstream_reference::revision_matching_decides_as_upstream_v09`):
/// - an LWS without `networkConfig` keeps none (the patch's `$patch: replace` of a key the LWS
///   lacks drops it), so the recorded `networkConfig` does not count and Shared is assumed;
/// - a recorded integer Go's types cannot hold (an int64 near its limit comes back from the
///   float64 round trip as 2^63) makes the revision unreadable: only equal bytes match then.
pub fn matches(recorded: &Value, spec: &Value, data: &str) -> bool {
    if gojson::marshal(recorded) == data {
        return true;
    }
    let Some(Value::Object(recorded_spec)) = recorded.get("spec") else {
        return false;
    };
    let mut restored = serde_json::Map::new();
    if let Some(template) = recorded_spec.get("leaderWorkerTemplate") {
        restored.insert("leaderWorkerTemplate".into(), template.clone());
    }
    if spec.get("networkConfig").is_some_and(|v| !v.is_null())
        && let Some(network) = recorded_spec.get("networkConfig")
    {
        restored.insert("networkConfig".into(), network.clone());
    }
    revision_data(&Value::Object(restored)).is_ok_and(|again| again == data)
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
    SpecRevision::of(spec).ok().map(|r| r.key)
}

/// The revision key the groups of an LWS with `spec` are on once they run its template: the key
/// of a `recorded` revision (key, data) that is the spec's template — recorded by another
/// controller or version under its own key, see [`matches`] — else the spec's own key. `None`
/// when the spec cannot be hashed. The Rollout and BatchRelease controllers read a release's
/// revision through this, as the LWS controller does, so an adopted revision is not taken for a
/// template change.
pub fn template_key<'a>(
    spec: &crate::api::leaderworkerset::LeaderWorkerSetSpec,
    recorded: impl IntoIterator<Item = (&'a str, &'a Value)>,
) -> Option<String> {
    let SpecRevision {
        spec,
        data,
        key: own,
    } = SpecRevision::of(spec).ok()?;
    let recorded: Vec<_> = recorded.into_iter().collect();
    if recorded.iter().any(|(key, _)| *key == own) {
        return Some(own);
    }
    Some(
        recorded
            .into_iter()
            .find(|(_, rev)| matches(rev, &spec, &data))
            .map_or(own, |(key, _)| key.to_string()),
    )
}

/// The revision data and key of one LWS spec, with the spec as JSON ([`matches`] reads it).
#[derive(Debug, PartialEq)]
pub struct SpecRevision {
    /// The spec as JSON.
    pub spec: Value,
    /// [`revision_data`] of the spec.
    pub data: String,
    /// [`revision_key`] of the data.
    pub key: String,
}

/// Why a spec has no [`SpecRevision`].
#[derive(Debug, thiserror::Error)]
pub enum SpecRevisionError {
    /// The spec does not encode as JSON.
    #[error("cannot encode the spec: {0}")]
    Encode(#[from] serde_json::Error),
    /// The spec cannot be hashed as upstream hashes it.
    #[error("cannot compute the template revision: {0}")]
    Hash(#[from] GoJsonError),
}

impl SpecRevision {
    /// The revision of `spec` as it is now.
    pub fn of(
        spec: &crate::api::leaderworkerset::LeaderWorkerSetSpec,
    ) -> Result<Self, SpecRevisionError> {
        let spec = serde_json::to_value(spec)?;
        let data = revision_data(&spec)?;
        let key = revision_key(&data);
        Ok(Self { spec, data, key })
    }
}

/// [`SpecRevision`]s of the LWSs a controller reconciles, one per LWS uid, reused while the
/// LWS's `metadata.generation` stays the same. The API server moves the generation on every
/// change of the spec (and of nothing else), and the hash is a function of the spec alone, so a
/// remembered revision is exactly what computing it again would give. Without this, every
/// reconcile re-encodes the whole template the Go way to hash it, although the template changes
/// once per release while reconciles follow every pod and StatefulSet event.
///
/// Memory only as a shortcut: a restarted controller computes each revision once again.
#[derive(Default)]
pub struct Memo {
    entries: crate::k8s::memo::PerUid<(i64, std::sync::Arc<SpecRevision>)>,
}

impl Memo {
    /// The revision of `lws`'s spec: remembered for its uid and generation, or computed (and
    /// remembered when the LWS has both). `Err` when the spec cannot be hashed.
    pub fn of(
        &self,
        lws: &crate::api::leaderworkerset::LeaderWorkerSet,
    ) -> Result<std::sync::Arc<SpecRevision>, SpecRevisionError> {
        let id = lws.metadata.uid.as_ref().zip(lws.metadata.generation);
        if let Some((uid, generation)) = id
            && let Some((seen, revision)) = self.entries.get(uid)
            && seen == generation
        {
            return Ok(revision);
        }
        let revision = std::sync::Arc::new(SpecRevision::of(&lws.spec)?);
        if let Some((uid, generation)) = id {
            self.entries.put(uid, (generation, revision.clone()));
        }
        Ok(revision)
    }
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

    fn lws_with(
        image: &str,
        uid: Option<&str>,
        generation: i64,
    ) -> crate::api::leaderworkerset::LeaderWorkerSet {
        let mut lws: crate::api::leaderworkerset::LeaderWorkerSet = serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "a", "namespace": "n", "generation": generation},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}}))
        .unwrap();
        lws.metadata.uid = uid.map(str::to_string);
        lws
    }

    #[test]
    fn a_remembered_revision_is_the_one_of_the_same_generation() {
        let memo = Memo::default();
        let first = memo.of(&lws_with("a", Some("u"), 1)).unwrap();
        assert_eq!(
            *first,
            SpecRevision::of(&lws_with("a", None, 1).spec).unwrap()
        );
        // The same generation is the same spec: remembered, not computed again.
        let again = memo.of(&lws_with("a", Some("u"), 1)).unwrap();
        assert!(std::sync::Arc::ptr_eq(&first, &again));
        // A new generation is computed again.
        let changed = memo.of(&lws_with("b", Some("u"), 2)).unwrap();
        assert_ne!(changed.key, first.key);
        assert_eq!(
            *changed,
            SpecRevision::of(&lws_with("b", None, 2).spec).unwrap()
        );
        // Without a uid nothing is remembered.
        let loose = memo.of(&lws_with("a", None, 1)).unwrap();
        assert!(!std::sync::Arc::ptr_eq(
            &loose,
            &memo.of(&lws_with("a", None, 1)).unwrap()
        ));
    }

    #[test]
    fn fnv1_and_safe_encoding() {
        // Values printed by Go's fnv.New32 + rand.SafeEncodeString.
        assert_eq!(revision_key(""), "65bb57b6b5");
        assert_eq!(revision_key("a"), "d8bfb88b");
    }

    #[test]
    fn a_recorded_revision_of_the_template_lends_its_key() {
        let spec: crate::api::leaderworkerset::LeaderWorkerSetSpec =
            serde_json::from_value(json!({"replicas": 1, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "a"}]}}}}))
            .unwrap();
        let data = revision_data(&serde_json::to_value(&spec).unwrap()).unwrap();
        let own = revision_key(&data);
        let mut older: Value = serde_json::from_str(&data).unwrap();
        older["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] =
            json!({"creationTimestamp": null});
        let other: Value = json!({"spec": {"leaderWorkerTemplate": {"size": 3}}});
        let key = |recorded: &[(&str, &Value)]| template_key(&spec, recorded.iter().copied());
        assert_eq!(key(&[]), Some(own.clone()), "nothing recorded: its own key");
        assert_eq!(
            key(&[("other", &other), ("older", &older)]).as_deref(),
            Some("older")
        );
        let exact: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(
            key(&[("older", &older), (own.as_str(), &exact)]),
            Some(own.clone()),
            "its own key when recorded under it"
        );
        assert_eq!(
            key(&[("other", &other)]),
            Some(own),
            "no match: its own key"
        );
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
    fn a_revision_that_differs_only_in_serialisation_matches() {
        let spec = json!({"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1000m"}}}]}}}});
        let data = revision_data(&spec).unwrap();
        let recorded: Value = serde_json::from_str(&data).unwrap();
        assert!(matches(&recorded, &spec, &data), "the same bytes");
        // As an older client wrote it: a null creationTimestamp, the quantity as typed, no
        // `resources` default, no $patch directive.
        let older = json!({"spec": {
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
                "metadata": {"creationTimestamp": null},
                "spec": {"containers": [{"image": "x", "name": "c",
                    "resources": {"limits": {"cpu": "1000m"}}}]}}},
            "networkConfig": {"subdomainPolicy": "Shared"}}});
        assert_ne!(gojson::marshal(&older), data);
        assert!(matches(&older, &spec, &data));
        // A real difference is not hidden.
        let mut other = older.clone();
        other["spec"]["leaderWorkerTemplate"]["size"] = json!(3);
        assert!(!matches(&other, &spec, &data));
        let mut image = older.clone();
        image["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] =
            json!("y");
        assert!(!matches(&image, &spec, &data));
        assert!(
            !matches(&json!({"data": 1}), &spec, &data),
            "not a revision"
        );
        // Upstream's quirks: no networkConfig on the LWS ignores the recorded one; an integer
        // beyond int64 (2^63, from the float64 round trip) cannot be read back.
        let mut unique = older.clone();
        unique["spec"]["networkConfig"] = json!({"subdomainPolicy": "UniquePerReplica"});
        assert!(matches(&unique, &spec, &data));
        let mut explicit = spec.clone();
        explicit["networkConfig"] = json!({"subdomainPolicy": "Shared"});
        assert!(!matches(&unique, &explicit, &data));
        let mut huge = spec.clone();
        huge["leaderWorkerTemplate"]["workerTemplate"]["spec"]["activeDeadlineSeconds"] =
            json!(9_223_372_036_854_775_807_i64);
        let huge_data = revision_data(&huge).unwrap();
        let huge_recorded: Value = serde_json::from_str(&huge_data).unwrap();
        assert!(matches(&huge_recorded, &huge, &huge_data), "same bytes");
        let mut pretty = huge_recorded.clone();
        pretty["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] =
            json!({"creationTimestamp": null});
        assert!(
            !matches(&pretty, &huge, &huge_data),
            "Go cannot read 2^63 into an int64"
        );
    }

    #[test]
    fn revision_names_truncate_long_lws_names() {
        let long = "a".repeat(300);
        assert_eq!(revision_name(&long, "key", 3).len(), 220 + "-key-3".len());
        assert_eq!(revision_name("vllm", "5c5fcdfb44", 1), "vllm-5c5fcdfb44-1");
    }

    #[test]
    fn a_quantity_without_a_canonical_form_is_a_typed_error() {
        use crate::lws::upstream::quantity::QuantityError;
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
