//! Counts and times every admission request by endpoint and outcome, reading the outcome from
//! the AdmissionReview answer itself, so no handler has to report it (and none can forget).

use std::time::Instant;

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::Response,
};

use crate::k8s::metrics::Metrics;

/// AdmissionReview answers are small; a larger one is not ours to count precisely.
const MAX_ANSWER: usize = 4 << 20;

/// The two fields of an AdmissionReview answer the outcome reads; serde skips the rest (the
/// patch itself, a denial's message) without allocating it, on every admission request.
#[derive(serde::Deserialize)]
struct Answer {
    response: Option<AnswerResponse>,
}

#[derive(serde::Deserialize)]
struct AnswerResponse {
    allowed: Option<bool>,
    patch: Option<serde::de::IgnoredAny>,
}

/// What an answer says: `denied` (allowed is false), `patched` (a mutation), `allowed`, or
/// `error` (not a 2xx AdmissionReview, e.g. a request body that was not one).
pub fn outcome(status: u16, body: &[u8]) -> &'static str {
    if !(200..300).contains(&status) {
        return "error";
    }
    let Ok(Answer {
        response: Some(response),
    }) = serde_json::from_slice::<Answer>(body)
    else {
        return "error";
    };
    match (response.allowed, response.patch) {
        (Some(false), _) => "denied",
        (Some(true), Some(_)) => "patched",
        (Some(true), None) => "allowed",
        (None, _) => "error",
    }
}

/// Middleware for the webhook routes (`route_layer`, so the endpoint label is always one of
/// our paths, never an arbitrary one a client made up).
pub async fn record(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    // Under route_layer the path is exactly one of the routes (they take no parameters).
    let endpoint = request.uri().path().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_ANSWER)
        .await
        .unwrap_or_default();
    metrics.webhook_request(
        &endpoint,
        outcome(parts.status.as_u16(), &body),
        started.elapsed().as_secs_f64(),
    );
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::outcome;

    #[test]
    fn outcomes_come_from_the_review_answer() {
        let review = |r: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{r}}}"#
            )
        };
        assert_eq!(
            outcome(200, review(r#"{"uid":"u","allowed":true}"#).as_bytes()),
            "allowed"
        );
        assert_eq!(
            outcome(
                200,
                review(r#"{"uid":"u","allowed":true,"patchType":"JSONPatch","patch":"W10="}"#)
                    .as_bytes()
            ),
            "patched"
        );
        assert_eq!(
            outcome(
                200,
                review(r#"{"uid":"u","allowed":false,"status":{"message":"no"}}"#).as_bytes()
            ),
            "denied"
        );
        assert_eq!(
            outcome(422, b"Failed to deserialize the JSON body"),
            "error"
        );
        assert_eq!(outcome(200, b"not json"), "error");
        assert_eq!(
            outcome(
                200,
                review(r#"{"uid":"u","allowed":true,"patch":null}"#).as_bytes()
            ),
            "allowed",
            "a null patch is no mutation"
        );
        assert_eq!(outcome(200, br#"{"kind":"AdmissionReview"}"#), "error");
    }
}
