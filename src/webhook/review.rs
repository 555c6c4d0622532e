//! The request body of every admission endpoint: an AdmissionReview, decoded by serde_json
//! straight from the bytes, without the objects' managedFields ([`crate::k8s::managed_fields`]).

use axum::{
    body::Bytes,
    extract::{FromRequest, Request},
    http::StatusCode,
};
use serde::de::DeserializeOwned;

/// An admission endpoint's AdmissionReview. axum's `Json` decodes through serde_path_to_error,
/// which keeps the path of every field it passes so that an error can name it: allocations
/// for each field of every object admitted, most of all the pods, whose admissions are the
/// webhook's work. The API server sends only
/// well-formed reviews, so those paths were never read; a body that is no AdmissionReview
/// still gets a 422 answer with serde_json's line and column.
pub struct Review<T>(pub T);

impl<T, S> FromRequest<S> for Review<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = (StatusCode, String);

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|err| (err.status(), err.body_text()))?;
        // Neither the pod nor the LWS defaults read managedFields (the patch leaves them be).
        let body = crate::k8s::managed_fields::without_managed_fields(body);
        serde_json::from_slice(&body).map(Review).map_err(|err| {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("Failed to deserialize the JSON body into the target type: {err}"),
            )
        })
    }
}

/// The request of a decoded AdmissionReview, or the answer to give when it carries none (a
/// malformed review, logged once).
pub fn request<K>(
    review: kube::core::admission::AdmissionReview<K>,
) -> Result<
    kube::core::admission::AdmissionRequest<K>,
    Box<kube::core::admission::AdmissionReview<kube::core::DynamicObject>>,
>
where
    K: kube::Resource,
{
    review
        .try_into()
        .map_err(|err: kube::core::admission::ConvertAdmissionReviewError| {
            tracing::warn!(error = %err, "malformed AdmissionReview");
            Box::new(
                kube::core::admission::AdmissionResponse::invalid(err.to_string()).into_review(),
            )
        })
}

/// The object of a request as one of our kinds; `None` when it does not parse (schema
/// validation, which runs after the mutating webhooks, then names the field).
pub fn typed<K: DeserializeOwned>(obj: Option<&kube::core::DynamicObject>) -> Option<K> {
    serde_json::to_value(obj?)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{DynamicObject, admission::AdmissionReview};

    async fn review(body: &'static [u8]) -> Result<AdmissionReview<DynamicObject>, StatusCode> {
        let request = Request::builder()
            .method("POST")
            .uri("/")
            .body(axum::body::Body::from(body))
            .unwrap();
        Review::from_request(request, &())
            .await
            .map(|Review(review)| review)
            .map_err(|(status, _)| status)
    }

    #[tokio::test]
    async fn a_review_is_decoded_and_anything_else_refused_with_422() {
        let ok = review(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
                "uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},
                "resource":{"group":"","version":"v1","resource":"pods"},
                "operation":"CREATE","userInfo":{},"object":{"metadata":{"name":"p"}}}}"#,
        )
        .await
        .expect("a review");
        assert_eq!(ok.request.expect("a request").uid, "u");
        assert_eq!(
            review(b"not json").await.err(),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
        assert_eq!(
            review(br#"{"kind": 3}"#).await.err(),
            Some(StatusCode::UNPROCESSABLE_ENTITY)
        );
    }
}
