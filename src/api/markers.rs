//! Extraction of SSA list markers from a Kubernetes OpenAPI v3 document.
//!
//! `crdgen list-markers <openapi.json>` uses it to write `k8s_list_markers.json`; the e2e
//! suite uses it on the live apiserver's `/openapi/v3/api/v1` to prove the table is current.

use std::collections::{BTreeSet, VecDeque};

use serde_json::Value;

use super::schema::{MarkerTable, PropertyMarkers};

const REF_PREFIX: &str = "#/components/schemas/";

/// Builds the marker table of every definition reachable from `roots`.
///
/// A property is kept when it carries a list/map marker or leads to a definition with
/// properties of its own; defaults are kept only for list-map keys, which the apiserver
/// requires to be either required or defaulted.
pub fn extract(openapi: &Value, roots: &[&str]) -> MarkerTable {
    let schemas = &openapi["components"]["schemas"];
    let mut table = MarkerTable::new();
    let mut seen: BTreeSet<String> = roots.iter().map(|r| r.to_string()).collect();
    let mut queue: VecDeque<String> = seen.iter().cloned().collect();
    let mut map_keys: Vec<(String, Vec<String>)> = Vec::new();

    while let Some(def) = queue.pop_front() {
        let Some(props) = schemas[&def]["properties"].as_object() else {
            continue;
        };
        for (name, prop) in props {
            let child = reference(prop).filter(|c| schemas[c]["properties"].is_object());
            let markers = PropertyMarkers {
                r#ref: child.clone(),
                list_type: prop["x-kubernetes-list-type"].as_str().map(str::to_string),
                list_map_keys: prop["x-kubernetes-list-map-keys"].as_array().map(|keys| {
                    keys.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                }),
                map_type: prop["x-kubernetes-map-type"].as_str().map(str::to_string),
                default: None,
            };
            if markers == PropertyMarkers::default() {
                continue;
            }
            if let (Some(child), Some(keys)) = (&child, &markers.list_map_keys) {
                map_keys.push((child.clone(), keys.clone()));
            }
            if let Some(child) = &child
                && seen.insert(child.clone())
            {
                queue.push_back(child.clone());
            }
            table
                .entry(def.clone())
                .or_default()
                .insert(name.clone(), markers);
        }
    }

    for (def, keys) in map_keys {
        for key in keys {
            let default = &schemas[&def]["properties"][&key]["default"];
            if default.is_string() || default.is_number() || default.is_boolean() {
                let entry = table
                    .entry(def.clone())
                    .or_default()
                    .entry(key)
                    .or_default();
                entry.default = Some(default.clone());
            }
        }
    }
    table
}

/// The definition a property refers to, directly or through its items or map values.
fn reference(prop: &Value) -> Option<String> {
    [prop, &prop["items"], &prop["additionalProperties"]]
        .into_iter()
        .find_map(|p| {
            p["$ref"]
                .as_str()
                .or_else(|| p["allOf"][0]["$ref"].as_str())
                .and_then(|r| r.strip_prefix(REF_PREFIX))
                .map(str::to_string)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extracts_list_markers_refs_and_key_defaults() {
        let doc = json!({"components": {"schemas": {
            "Pod": {"properties": {
                "containers": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/C"}]},
                               "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                "plain": {"type": "string"}
            }},
            "C": {"properties": {
                "name": {"type": "string", "default": "main"},
                "ports": {"type": "array", "items": {"$ref": "#/components/schemas/P"},
                          "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"]}
            }},
            "P": {"properties": {"port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}
        }}});
        let table = extract(&doc, &["Pod"]);
        assert_eq!(table["Pod"]["containers"].r#ref.as_deref(), Some("C"));
        assert!(!table["Pod"].contains_key("plain"));
        assert_eq!(
            table["C"]["ports"].list_map_keys,
            Some(vec!["port".into(), "protocol".into()])
        );
        assert_eq!(table["P"]["protocol"].default, Some(json!("TCP")));
        assert_eq!(table["C"]["name"].default, Some(json!("main")));
        assert!(!table["P"].contains_key("port"));
    }
}
