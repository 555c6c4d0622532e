//! `POST /mutate-disaggregatedset`: the release hold of a DisaggregatedSet
//! ([`crate::disaggregatedset::hold`]), set in the same admission as the template change that
//! starts a release. Nothing else of the set is defaulted here (the CRD's schema does that).

use axum::{Json, extract::State};
use kube::{
    ResourceExt,
    core::{
        DynamicObject,
        admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
    },
};
use tracing::warn;

use super::review::{Review, request, typed};
use crate::{
    api::disaggregatedset::{DisaggregatedSet, HELD_REVISION_ANNOTATION},
    disaggregatedset::hold,
};

/// Path of the DisaggregatedSet mutating endpoint.
pub const MUTATE_PATH: &str = "/mutate-disaggregatedset";

/// Handles one mutating AdmissionReview.
pub async fn mutate(
    State(cluster): State<super::Cluster>,
    Review(review): Review<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request = match request(review) {
        Ok(r) => r,
        Err(answer) => return Json(*answer),
    };
    match release_hold(&cluster, &request).await {
        Ok(hold) => Json(hold_response(&request, hold.as_deref()).into_review()),
        // Without knowing whether a Rollout controls this set, letting a template change
        // through could roll every stable group: refuse, the client retries.
        Err(err) => {
            warn!(error = %err, "cannot decide the DisaggregatedSet release hold");
            Json(
                AdmissionResponse::from(&request)
                    .deny(format!(
                        "cannot check for a Rollout of this DisaggregatedSet: {err}"
                    ))
                    .into_review(),
            )
        }
    }
}

/// The hold this request must carry, reading the Rollouts of the namespace (only for an
/// UPDATE: a set is created with nothing to hold).
async fn release_hold(
    cluster: &super::Cluster,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Option<String>, kube::Error> {
    if request.operation != Operation::Update {
        return Ok(None);
    }
    let (Some(old), Some(new)) = (
        typed::<DisaggregatedSet>(request.old_object.as_ref()),
        typed::<DisaggregatedSet>(request.object.as_ref()),
    ) else {
        return Ok(None);
    };
    let rollouts = cluster
        .rollouts_in(&new.namespace().unwrap_or_default())
        .await?;
    let controlled = rollouts.iter().any(|r| hold::controls(r, &new));
    Ok(hold::decide(
        &old,
        &new,
        controlled,
        field_manager(request).as_deref(),
    ))
}

fn field_manager(request: &AdmissionRequest<DynamicObject>) -> Option<String> {
    request
        .options
        .as_ref()
        .and_then(|o| o.0.get("fieldManager"))
        .and_then(|m| m.as_str())
        .map(str::to_string)
}

/// The answer (pure): allowed, with a patch adding the hold when there is one to add.
pub fn hold_response(
    request: &AdmissionRequest<DynamicObject>,
    hold: Option<&str>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(hold) = hold else {
        return response;
    };
    let has_annotations = request
        .object
        .as_ref()
        .is_some_and(|o| o.metadata.annotations.is_some());
    // A JSON pointer escapes `/` as `~1`.
    let key = HELD_REVISION_ANNOTATION
        .replace('~', "~0")
        .replace('/', "~1");
    let op = if has_annotations {
        serde_json::json!([{"op": "add", "path": format!("/metadata/annotations/{key}"), "value": hold}])
    } else {
        serde_json::json!([{"op": "add", "path": "/metadata/annotations",
            "value": {HELD_REVISION_ANNOTATION: hold}}])
    };
    match serde_json::from_value::<json_patch::Patch>(op)
        .map_err(|e| e.to_string())
        .and_then(|p| response.clone().with_patch(p).map_err(|e| e.to_string()))
    {
        Ok(patched) => patched,
        Err(err) => response.deny(format!("cannot encode the patch: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(annotations: Option<serde_json::Value>) -> AdmissionRequest<DynamicObject> {
        let mut object = serde_json::json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "ns"}, "spec": {"roles": []}
        });
        if let Some(a) = annotations {
            object["metadata"]["annotations"] = a;
        }
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "disaggregatedset.x-k8s.io", "version": "v1", "kind": "DisaggregatedSet"},
                "resource": {"group": "disaggregatedset.x-k8s.io", "version": "v1", "resource": "disaggregatedsets"},
                "operation": "UPDATE", "name": "pd", "namespace": "ns", "userInfo": {},
                "object": object.clone(), "oldObject": object,
            }
        }))
        .unwrap();
        review.try_into().unwrap()
    }

    fn patched(request: &AdmissionRequest<DynamicObject>, hold: &str) -> serde_json::Value {
        let answer = hold_response(request, Some(hold));
        assert!(answer.allowed);
        let mut object = serde_json::to_value(request.object.as_ref().unwrap()).unwrap();
        let patch: json_patch::Patch =
            serde_json::from_slice(answer.patch.as_ref().expect("a patch")).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
        object
    }

    #[test]
    fn the_hold_is_added_beside_other_annotations_or_alone() {
        let with = patched(&review(Some(serde_json::json!({"team": "a"}))), "abcd1234");
        assert_eq!(
            with["metadata"]["annotations"],
            serde_json::json!({"team": "a", HELD_REVISION_ANNOTATION: "abcd1234"})
        );
        let alone = patched(&review(None), "abcd1234");
        assert_eq!(
            alone["metadata"]["annotations"],
            serde_json::json!({HELD_REVISION_ANNOTATION: "abcd1234"})
        );
        let nothing = hold_response(&review(None), None);
        assert!(nothing.allowed && nothing.patch.is_none());
    }
}
