//! JSON helpers the builders share: a guarded patch between an observed and a desired object,
//! and "does the observed object already hold everything we would apply".

use json_patch::{Patch, PatchOperation, TestOperation, jsonptr::PointerBuf};
use serde::Serialize;
use serde_json::Value;

/// The JSON patch that turns `observed` into `desired`, or `None` when they are equal.
/// Element-wise (a list only grows or shrinks at its end), so fields of the user's object our
/// typed structs do not know survive, and guarded by a `test` of the observed resourceVersion.
pub fn patch_between<T: Serialize>(observed: &T, desired: &T) -> Option<Patch> {
    let from = serde_json::to_value(observed).expect("k8s objects serialize");
    let to = serde_json::to_value(desired).expect("k8s objects serialize");
    let ops = json_patch::diff(&from, &to).0;
    if ops.is_empty() {
        return None;
    }
    let mut all = Vec::with_capacity(ops.len() + 1);
    if let Some(rv) = from.pointer("/metadata/resourceVersion") {
        all.push(PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: rv.clone(),
        }));
    }
    all.extend(ops);
    Some(Patch(all))
}

/// Whether `observed` holds every field of `desired` with the same value (objects may have
/// more keys; lists must have the same length). Server-set fields (cluster IP, defaults,
/// status) thus never make an applied object look out of date.
pub fn holds<T: Serialize>(observed: &T, desired: &T) -> bool {
    let o = serde_json::to_value(observed).expect("k8s objects serialize");
    let d = serde_json::to_value(desired).expect("k8s objects serialize");
    contains(&o, &d)
}

fn contains(observed: &Value, desired: &Value) -> bool {
    match (observed, desired) {
        (Value::Object(o), Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| o.get(k).is_some_and(|ov| contains(ov, dv))),
        (Value::Array(o), Value::Array(d)) => {
            o.len() == d.len() && o.iter().zip(d).all(|(ov, dv)| contains(ov, dv))
        }
        (o, d) => o == d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patch_is_guarded_by_resource_version_and_none_when_equal() {
        let a = json!({"metadata": {"resourceVersion": "7", "annotations": {"x/y": "1"}}});
        assert_eq!(patch_between(&a, &a), None);
        let b = json!({"metadata": {"resourceVersion": "7", "annotations": {"x/y": "2"}}});
        let patch = serde_json::to_value(patch_between(&a, &b).unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "replace", "path": "/metadata/annotations/x~1y", "value": "2"}
            ])
        );
    }

    #[test]
    fn holds_ignores_extra_keys_but_not_extra_list_items() {
        let observed = json!({"a": {"b": 1, "c": 2}, "l": [{"x": 1, "y": 2}]});
        assert!(contains(
            &observed,
            &json!({"a": {"b": 1}, "l": [{"x": 1}]})
        ));
        assert!(!contains(&observed, &json!({"a": {"b": 2}})));
        assert!(!contains(&observed, &json!({"l": []})));
        assert!(!contains(&observed, &json!({"d": 1})));
    }
}
