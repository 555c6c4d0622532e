//! `POST /mutate-pod`: applies [`crate::lws::pod_defaults`] and answers with a JSON patch.

use axum::Json;
use k8s_openapi::api::core::v1::Pod;
use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview},
};
use tracing::warn;

use crate::lws::pod_defaults;

/// Path of the pod defaulting endpoint.
pub const PATH: &str = "/mutate-pod";

/// Handles one AdmissionReview.
pub async fn mutate(
    Json(review): Json<AdmissionReview<Pod>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<Pod> = match review.try_into() {
        Ok(request) => request,
        Err(err) => {
            warn!(error = %err, "malformed AdmissionReview");
            return Json(AdmissionResponse::invalid(err.to_string()).into_review());
        }
    };
    Json(respond(&request).into_review())
}

/// The admission decision for one pod (pure apart from logging).
pub fn respond(request: &AdmissionRequest<Pod>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let Some(pod) = &request.object else {
        return response;
    };
    // managedFields, set by the API server before admission and often the larger half of a
    // new pod's metadata, are never defaulted: left out of both sides of the diff instead of
    // encoded and compared twice per pod.
    let mut pod = pod.clone();
    pod.metadata.managed_fields = None;
    let pod = &pod;
    let mut defaulted = pod.clone();
    // The API server has not named the pod in the object when it comes from generateName.
    if defaulted.metadata.name.is_none() {
        defaulted.metadata.name = Some(request.name.clone());
    }
    if defaulted.metadata.namespace.is_none() {
        defaulted.metadata.namespace = request.namespace.clone();
    }
    if let Err(err) = pod_defaults::default_pod(&mut defaulted) {
        return response.deny(err.to_string());
    }
    defaulted.metadata.name = pod.metadata.name.clone();
    defaulted.metadata.namespace = pod.metadata.namespace.clone();
    let (Ok(before), Ok(after)) = (serde_json::to_value(pod), serde_json::to_value(&defaulted))
    else {
        return response.deny("cannot serialize the pod");
    };
    let patch = json_patch::diff(&before, &after);
    if patch.0.is_empty() {
        return response;
    }
    match response.clone().with_patch(patch) {
        Ok(patched) => patched,
        Err(err) => response.deny(format!("cannot encode the patch: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lws::labels;
    use kube::core::admission::AdmissionReview;
    use serde_json::json;

    #[test]
    fn the_patch_defaults_an_lws_pod_and_leaves_managed_fields_alone() {
        let review: AdmissionReview<Pod> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE", "name": "vllm-1", "namespace": "default",
                "userInfo": {}, "object": {
                    "metadata": {"name": "vllm-1", "namespace": "default",
                        "labels": {labels::NAME: "vllm", labels::WORKER_INDEX: "0"},
                        "annotations": {labels::SIZE: "2"},
                        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                            "apiVersion": "v1", "fieldsType": "FieldsV1",
                            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap();
        let request: AdmissionRequest<Pod> = review.try_into().unwrap();
        let response = respond(&request);
        assert!(response.allowed);
        let patch: Vec<serde_json::Value> =
            serde_json::from_slice(response.patch.as_deref().expect("a patch")).unwrap();
        let paths: Vec<&str> = patch.iter().filter_map(|op| op["path"].as_str()).collect();
        assert!(
            paths.iter().any(|p| p.contains("group-index")),
            "the group index label is added: {paths:?}"
        );
        assert!(
            !paths.iter().any(|p| p.contains("managedFields")),
            "managedFields are not touched: {paths:?}"
        );
    }
}
