//! `POST /mutate-lws` and `POST /validate-lws`: the LeaderWorkerSet webhooks, on top of
//! [`crate::lws::admission`].

use axum::{Json, extract::State};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::{
    Api, ResourceExt,
    core::{
        DynamicObject,
        admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
    },
};
use tracing::warn;

use super::review::{Review, request, typed};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    lws::{
        admission::{self, hold},
        labels,
        upstream::revision,
    },
};

/// Path of the LWS defaulting endpoint.
pub const MUTATE_PATH: &str = "/mutate-lws";
/// Path of the LWS validating endpoint.
pub const VALIDATE_PATH: &str = "/validate-lws";

/// Handles one defaulting AdmissionReview: upstream's defaults, and the release hold.
pub async fn mutate(
    State(cluster): State<super::Cluster>,
    Review(review): Review<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request = match request(review) {
        Ok(r) => r,
        Err(answer) => return Json(*answer),
    };
    let hold = match release_hold(&cluster, &request).await {
        Ok(hold) => hold,
        // Without knowing whether a Rollout controls this LWS, letting a template change
        // through could roll every stable group: refuse, the client retries.
        Err(err) => {
            warn!(error = %err, "cannot decide the release hold");
            return Json(
                AdmissionResponse::from(&request)
                    .deny(format!(
                        "cannot check for a Rollout of this LeaderWorkerSet: {err}"
                    ))
                    .into_review(),
            );
        }
    };
    Json(default_response(&request, &hold).into_review())
}

/// The release annotations this UPDATE must carry ([`hold::decide`], [`hold::freeze`]),
/// reading the Rollouts of the namespace and the revision the groups run.
async fn release_hold(
    cluster: &super::Cluster,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Vec<(&'static str, String)>, kube::Error> {
    if request.operation != Operation::Update {
        return Ok(Vec::new());
    }
    let (Some(old), Some(new)) = (
        typed::<LeaderWorkerSet>(request.old_object.as_ref()),
        typed::<LeaderWorkerSet>(request.object.as_ref()),
    ) else {
        return Ok(Vec::new());
    };
    let namespace = new.namespace().unwrap_or_default();
    let rollouts = cluster.rollouts_in(&namespace).await?;
    let controlled = rollouts.iter().any(|r| hold::controls(r, &new));
    if !controlled {
        return Ok(Vec::new());
    }
    // What the groups run: the leader StatefulSet's revision label; the old spec's revision
    // when there is no StatefulSet yet.
    let running = Api::<StatefulSet>::namespaced(cluster.client.clone(), &namespace)
        .get_opt(&new.name_any())
        .await?
        .and_then(|sts| sts.labels().get(labels::REVISION).cloned());
    let field_manager = request
        .options
        .as_ref()
        .and_then(|o| o.0.get("fieldManager"))
        .and_then(|m| m.as_str())
        .map(str::to_string);
    let mut annotations = Vec::new();
    if let Some(partition) = hold::freeze(&old, &new, field_manager.as_deref()) {
        annotations.push((labels::RELEASE_PARTITION, partition));
    }
    if let Some(key) = hold::decide(&old, &new, controlled, field_manager.as_deref(), || {
        running.unwrap_or_else(|| revision::spec_key(&old.spec).unwrap_or_default())
    }) {
        annotations.push((labels::HELD_REVISION, key));
    }
    Ok(annotations)
}

/// The defaulting decision (pure): upstream's defaults, and the release `annotations` when
/// given (the hold, the release partition).
pub fn default_response(
    request: &AdmissionRequest<DynamicObject>,
    annotations: &[(&'static str, String)],
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(mut object) = request
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok())
    else {
        return response;
    };
    // Before decoding: `type: ""` is no value of our API types.
    let empty_type = admission::default_empty_strategy_type(&mut object);
    let Ok(before) = serde_json::from_value::<LeaderWorkerSet>(object) else {
        return response;
    };
    let mut after = before.clone();
    let defaulted = admission::default_lws(&mut after) || empty_type;
    for (key, value) in annotations {
        after.annotations_mut().insert((*key).into(), value.clone());
    }
    if !defaulted && annotations.is_empty() {
        return response;
    }
    let (Ok(before), Ok(after)) = (serde_json::to_value(&before), serde_json::to_value(&after))
    else {
        return response.deny("cannot serialize the LeaderWorkerSet");
    };
    let mut patch = json_patch::diff(&before, &after);
    if empty_type {
        let replace = serde_json::json!({
            "op": "replace",
            "path": "/spec/rolloutStrategy/type",
            "value": admission::EMPTY_STRATEGY_TYPE_DEFAULT,
        });
        match serde_json::from_value(replace) {
            Ok(op) => patch.0.insert(0, op),
            Err(err) => return response.deny(format!("cannot encode the patch: {err}")),
        }
    }
    match response.clone().with_patch(patch) {
        Ok(patched) => patched,
        Err(err) => response.deny(format!("cannot encode the patch: {err}")),
    }
}

/// Handles one validating AdmissionReview.
pub async fn validate(
    Review(review): Review<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request = match request(review) {
        Ok(r) => r,
        Err(answer) => return Json(*answer),
    };
    Json(validate_response(&request).into_review())
}

/// The validating decision (pure).
pub fn validate_response(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(lws) = typed(request.object.as_ref()) else {
        // Schema validation ran before us; an object it let through but we cannot read is a
        // version skew between the CRD and this binary: say so rather than guess.
        return response.deny("the LeaderWorkerSet does not match this controller's API types");
    };
    let old = typed::<LeaderWorkerSet>(request.old_object.as_ref());
    let errors = admission::validate(&lws, old.as_ref());
    if errors.is_empty() {
        return response;
    }
    response.deny(errors.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::Operation;

    fn review(object: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "leaderworkerset.x-k8s.io", "version": "v1", "kind": "LeaderWorkerSet"},
                "resource": {"group": "leaderworkerset.x-k8s.io", "version": "v1", "resource": "leaderworkersets"},
                "operation": "CREATE",
                "name": "x", "namespace": "ns",
                "userInfo": {},
                "object": object,
            }
        }))
        .unwrap();
        let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        assert_eq!(request.operation, Operation::Create);
        request
    }

    fn lws(restart: &str, annotations: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "x", "namespace": "ns", "annotations": annotations},
            "spec": {"leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": restart,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            }},
        })
    }

    #[test]
    fn restart_policy_default_is_patched_to_none() {
        let resp = default_response(&review(lws("Default", serde_json::json!({}))), &[]);
        assert!(resp.allowed);
        let patch: serde_json::Value =
            serde_json::from_slice(resp.patch.as_ref().expect("a patch")).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([{"op": "replace", "path": "/spec/leaderWorkerTemplate/restartPolicy", "value": "None"}])
        );
        let untouched = default_response(&review(lws("None", serde_json::json!({}))), &[]);
        assert!(untouched.allowed && untouched.patch.is_none());
    }

    #[test]
    fn an_empty_rollout_strategy_type_is_patched_to_rolling_update() {
        // What a client built on upstream's Go types sends when it leaves the strategy unset.
        let mut object = lws("None", serde_json::json!({}));
        object["spec"]["rolloutStrategy"] = serde_json::json!({"type": ""});
        let resp = default_response(&review(object), &[]);
        assert!(resp.allowed);
        let patch: serde_json::Value =
            serde_json::from_slice(resp.patch.as_ref().expect("a patch")).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([{"op": "replace", "path": "/spec/rolloutStrategy/type", "value": "RollingUpdate"}])
        );
    }

    #[test]
    fn unparseable_objects_are_left_to_schema_validation() {
        let resp = default_response(&review(lws("Bogus", serde_json::json!({}))), &[]);
        assert!(resp.allowed && resp.patch.is_none());
    }

    #[test]
    fn the_validator_names_the_annotation() {
        let bad = lws(
            "None",
            serde_json::json!({"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "zone"}),
        );
        let resp = validate_response(&review(bad));
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains(
                "metadata.annotations[leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology]"
            ),
            "{}",
            resp.result.message
        );
        assert!(validate_response(&review(lws("None", serde_json::json!({})))).allowed);
    }
}
