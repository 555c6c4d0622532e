//! Whether a server-side apply would change anything, so that a reconcile with nothing to do
//! writes nothing (upstream re-applies its leader StatefulSet on every reconcile).

use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::Value;

/// Whether applying `desired` to `observed` would change nothing. A field the API server drops
/// is not a difference: `rollingUpdate.maxUnavailable` needs the MaxUnavailableStatefulSet
/// feature, and a v1.36.3 API server with default feature gates drops it (measured), which
/// would otherwise make every reconcile write.
pub fn statefulset_as_desired(desired: &StatefulSet, observed: &StatefulSet) -> bool {
    let (Ok(mut want), Ok(have)) = (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) else {
        return false;
    };
    let dropped = have
        .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
        .is_none();
    if dropped
        && let Some(rolling) = want
            .pointer_mut("/spec/updateStrategy/rollingUpdate")
            .and_then(|r| r.as_object_mut())
    {
        rolling.remove("maxUnavailable");
    }
    already_applied(&want, &have)
}

/// True when every field of `desired` is already in `observed` with the same value: objects
/// may hold more keys (defaults, other managers' fields, status), lists must have the same
/// length and match element by element. Then applying `desired` — which always sets the same
/// set of fields — is a no-op. Anything else (a value differs, a list grew or shrank, a
/// quantity the API server canonicalised) answers false and the apply happens.
pub fn already_applied(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(k, v)| match have.get(k) {
            Some(h) => already_applied(v, h),
            None => is_empty(v),
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| already_applied(w, h))
        }
        // An empty desired object or list the API server dropped is no difference either.
        (want, Value::Null) => is_empty(want),
        (want, have) => want == have,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::already_applied;
    use serde_json::json;

    #[test]
    fn a_dropped_max_unavailable_is_no_difference_but_a_partition_is() {
        use super::statefulset_as_desired;
        let sts = |partition: i32,
                   max_unavailable: Option<i32>|
         -> k8s_openapi::api::apps::v1::StatefulSet {
            let mut rolling = json!({"partition": partition});
            if let Some(m) = max_unavailable {
                rolling["maxUnavailable"] = json!(m);
            }
            serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {
                "selector": {}, "serviceName": "x", "template": {},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}}))
            .unwrap()
        };
        assert!(statefulset_as_desired(&sts(2, Some(1)), &sts(2, None)));
        assert!(statefulset_as_desired(&sts(2, Some(1)), &sts(2, Some(1))));
        assert!(!statefulset_as_desired(&sts(2, Some(1)), &sts(2, Some(2))));
        assert!(!statefulset_as_desired(&sts(1, Some(1)), &sts(2, None)));
    }

    #[test]
    fn defaults_and_extra_fields_do_not_count() {
        let desired = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "c", "image": "i:1"}]}}}});
        let observed = json!({"metadata": {"uid": "u"}, "spec": {"replicas": 3,
            "revisionHistoryLimit": 10, "template": {"spec": {"containers": [
            {"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"replicas": 3}});
        assert!(already_applied(&desired, &observed));
    }

    #[test]
    fn a_changed_value_or_list_length_means_apply() {
        let desired = json!({"spec": {"replicas": 3, "env": [{"name": "A"}]}});
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"replicas": 2, "env": [{"name": "A"}]}})
        ));
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"replicas": 3, "env": [{"name": "A"}, {"name": "B"}]}})
        ));
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"replicas": 3, "env": [{"name": "B"}]}})
        ));
        assert!(!already_applied(
            &desired,
            &json!({"spec": {"env": [{"name": "A"}]}})
        ));
    }

    #[test]
    fn empty_objects_the_server_dropped_are_equal() {
        assert!(already_applied(
            &json!({"a": {}, "b": [], "c": 1}),
            &json!({"c": 1})
        ));
        assert!(already_applied(&json!({"a": {}}), &json!({"a": null})));
        assert!(
            !already_applied(&json!({"a": 0}), &json!({})),
            "a scalar is never empty"
        );
    }
}
