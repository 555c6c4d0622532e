//! `POST /mutate-pod`: applies [`crate::lws::admission::pod_defaults`] and answers with a JSON patch.

use axum::Json;
use k8s_openapi::api::core::v1::Pod;
use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview},
};

use super::review::{Review, request};
use crate::lws::admission::pod_defaults;

/// Path of the pod defaulting endpoint.
pub const PATH: &str = "/mutate-pod";

/// Handles one AdmissionReview.
pub async fn mutate(
    axum::extract::State(cluster): axum::extract::State<super::Cluster>,
    Review(review): Review<AdmissionReview<Pod>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<Pod> = match request(review) {
        Ok(request) => request,
        Err(answer) => return Json(*answer),
    };
    Json(respond(request, cluster.gang_provider).into_review())
}

/// The admission decision for one pod (pure apart from logging): the JSON patch of the
/// fields defaulting changes ([`pod_defaults::patch`]), encoded from the pod itself without a
/// JSON tree of it (the rest of the pod, managedFields included, is not encoded at all).
pub fn respond(
    mut request: AdmissionRequest<Pod>,
    gang_provider: Option<crate::lws::volcano::GangProvider>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(&request);
    let Some(mut pod) = request.object.take() else {
        return response;
    };
    let before = pod_defaults::Before::of(&pod);
    // The API server has not named the pod in the object when it comes from generateName.
    // (Neither field is defaultable: no patch sets them.)
    if pod.metadata.name.is_none() {
        pod.metadata.name = Some(std::mem::take(&mut request.name));
    }
    if pod.metadata.namespace.is_none() {
        pod.metadata.namespace = request.namespace.take();
    }
    if let Err(err) = pod_defaults::default_pod_with(&mut pod, gang_provider) {
        return response.deny(err.to_string());
    }
    let ops = pod_defaults::patch(&before, &pod);
    if ops.is_empty() {
        return response;
    }
    let patch = match serde_json::to_vec(&ops) {
        Ok(patch) => patch,
        Err(err) => return response.deny(format!("cannot encode the patch: {err}")),
    };
    // `with_patch` is the only way to set the response's patch type (JSONPatch); the patch
    // itself is the one encoded above.
    match response.clone().with_patch(json_patch::Patch(Vec::new())) {
        Ok(mut patched) => {
            patched.patch = Some(patch);
            patched
        }
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
        let response = respond(request, None);
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
