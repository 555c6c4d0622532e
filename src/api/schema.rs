//! Schema helpers for the CRDs.
//!
//! k8s-openapi's schemars output describes the shape of core types but not the
//! `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` markers that server-side apply
//! needs to merge lists inside a pod template by key (containers by name, ports by
//! containerPort+protocol, …). Without them a second field manager that touches one container
//! would replace the whole list. We add them from `k8s_list_markers.json`, which is extracted
//! from a real kube-apiserver's OpenAPI document (see `test/cluster/list-markers.sh`; an e2e test
//! fails if the checked-in table drifts from the cluster's).

use std::{collections::BTreeMap, sync::LazyLock};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// CEL rule for an int-or-string that must be a non-negative integer or a percentage ≤ 100%.
pub const INT_OR_PERCENT_RULE: &str = "type(self) == int ? self >= 0 : \
     (string(self).matches('^[0-9]+%$') && int(string(self).replace('%', '')) <= 100)";

/// One property of a Kubernetes OpenAPI definition that matters to us: the definition it refers
/// to (directly or as array items / map values) and its list markers.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PropertyMarkers {
    /// Definition of the property, or of its items for arrays and its values for maps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#ref: Option<String>,
    /// `x-kubernetes-list-type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_map_keys: Option<Vec<String>>,
    /// `x-kubernetes-map-type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_type: Option<String>,
    /// Default of a scalar property (needed where it is a list-map key, e.g. port protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

/// definition name → property name → markers.
pub type MarkerTable = BTreeMap<String, BTreeMap<String, PropertyMarkers>>;

/// The checked-in marker table.
pub static LIST_MARKERS: LazyLock<MarkerTable> = LazyLock::new(|| {
    serde_json::from_str(include_str!("k8s_list_markers.json"))
        .expect("k8s_list_markers.json is valid")
});

/// Definition name of a pod template in the Kubernetes OpenAPI document.
pub const POD_TEMPLATE_SPEC: &str = "io.k8s.api.core.v1.PodTemplateSpec";
/// Definition name of a PVC in the Kubernetes OpenAPI document.
pub const PERSISTENT_VOLUME_CLAIM: &str = "io.k8s.api.core.v1.PersistentVolumeClaim";

/// Schema of a pod template inside a CRD: k8s-openapi's shape, SSA list markers, and the
/// restricted embedded metadata controller-gen emits for templates.
pub fn pod_template_spec(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = inline_schema::<PodTemplateSpec>(generator);
    annotate(&mut schema, POD_TEMPLATE_SPEC, &LIST_MARKERS);
    restrict_template_metadata(&mut schema);
    schema
}

/// Schema of `volumeClaimTemplates`: a list of PVCs, atomic like upstream's.
pub fn volume_claim_templates(generator: &mut SchemaGenerator) -> Schema {
    let mut item = inline_schema::<PersistentVolumeClaim>(generator);
    annotate(&mut item, PERSISTENT_VOLUME_CLAIM, &LIST_MARKERS);
    restrict_template_metadata(&mut item);
    let value = json!({
        "type": "array",
        "x-kubernetes-list-type": "atomic",
        "items": item,
    });
    Schema::try_from(value).expect("array schema is an object")
}

fn inline_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    // The CRD generator inlines subschemas, so this is the full tree, not a $ref.
    generator.subschema_for::<T>()
}

/// Walks `schema` (an inlined instance of definition `def`) and adds the table's markers.
pub fn annotate(schema: &mut Schema, def: &str, table: &MarkerTable) {
    if let Some(obj) = schema.as_object_mut() {
        annotate_object(obj, def, table);
    }
}

fn annotate_object(obj: &mut Map<String, Value>, def: &str, table: &MarkerTable) {
    let Some(props_markers) = table.get(def) else {
        return;
    };
    let Some(Value::Object(props)) = obj.get_mut("properties") else {
        return;
    };
    for (name, markers) in props_markers {
        let Some(Value::Object(prop)) = props.get_mut(name) else {
            continue;
        };
        if let Some(list_type) = &markers.list_type {
            prop.insert("x-kubernetes-list-type".into(), json!(list_type));
        }
        if let Some(keys) = &markers.list_map_keys {
            prop.insert("x-kubernetes-list-map-keys".into(), json!(keys));
        }
        if let Some(map_type) = &markers.map_type {
            prop.insert("x-kubernetes-map-type".into(), json!(map_type));
        }
        if let Some(default) = &markers.default {
            prop.insert("default".into(), default.clone());
        }
        let Some(child) = &markers.r#ref else {
            continue;
        };
        // Arrays carry the definition in `items`, maps in `additionalProperties`.
        let target = if let Some(Value::Object(items)) = prop.get_mut("items") {
            Some(items)
        } else if let Some(Value::Object(values)) = prop.get_mut("additionalProperties") {
            Some(values)
        } else {
            Some(&mut *prop)
        };
        if let Some(target) = target {
            annotate_object(target, child, table);
        }
    }
}

/// controller-gen's embedded ObjectMeta for templates: only these five fields survive; the
/// apiserver prunes anything else (e.g. `generateName`) exactly as it does for upstream's CRD.
fn restrict_template_metadata(schema: &mut Schema) {
    let Some(Value::Object(props)) = schema.as_object_mut().and_then(|o| o.get_mut("properties"))
    else {
        return;
    };
    props.insert("metadata".into(), template_metadata_value());
}

fn template_metadata_value() -> Value {
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "properties": {
            "annotations": string_map,
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "labels": string_map,
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        },
    })
}

/// Schema of an embedded ObjectMeta of a template (e.g. a DisaggregatedSet role's LWS
/// metadata): controller-gen's restricted form, as above.
pub fn template_metadata(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(template_metadata_value()).expect("an object schema")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_non_trivial_and_covers_pod_spec_lists() {
        let pod_spec = &LIST_MARKERS["io.k8s.api.core.v1.PodSpec"];
        assert_eq!(
            pod_spec["containers"].list_map_keys.as_deref(),
            Some(&["name".to_string()][..])
        );
        let container = &LIST_MARKERS["io.k8s.api.core.v1.Container"];
        assert_eq!(container["env"].list_type.as_deref(), Some("map"));
        let ports = container["ports"].list_map_keys.clone().unwrap_or_default();
        assert_eq!(
            ports,
            vec!["containerPort".to_string(), "protocol".to_string()]
        );
    }

    #[test]
    fn annotate_follows_refs_through_items() {
        let mut table = MarkerTable::new();
        table.entry("A".into()).or_default().insert(
            "things".into(),
            PropertyMarkers {
                r#ref: Some("B".into()),
                list_type: Some("map".into()),
                list_map_keys: Some(vec!["k".into()]),
                ..Default::default()
            },
        );
        table.entry("B".into()).or_default().insert(
            "k".into(),
            PropertyMarkers {
                default: Some(json!("x")),
                ..Default::default()
            },
        );
        let mut schema = Schema::try_from(json!({
            "type": "object",
            "properties": {"things": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}
        }))
        .unwrap();
        annotate(&mut schema, "A", &table);
        let v = schema.as_value();
        assert_eq!(v["properties"]["things"]["x-kubernetes-list-type"], "map");
        assert_eq!(
            v["properties"]["things"]["x-kubernetes-list-map-keys"],
            json!(["k"])
        );
        assert_eq!(
            v["properties"]["things"]["items"]["properties"]["k"]["default"],
            "x"
        );
    }
}
