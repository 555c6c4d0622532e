//! `GET /metrics` on the health port: the process's registry ([`crate::k8s::metrics`]) in the
//! OpenMetrics text format.

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};

use crate::k8s::metrics::{CONTENT_TYPE, Metrics};

/// `GET /metrics`, to merge into the health server's router.
pub fn router(metrics: &Metrics) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(metrics.clone())
}

async fn scrape(State(metrics): State<Metrics>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        metrics.encode(),
    )
}
