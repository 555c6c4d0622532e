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
