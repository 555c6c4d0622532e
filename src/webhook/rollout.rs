//! `POST /validate-rollout`: the Rollout validating webhook, on top of
//! [`crate::rollout::admission`]. It reads the namespace's Rollouts (one workload, one Rollout)
//! and answers with every refusal, one line each.

use axum::{Json, extract::State};
use kube::{
    ResourceExt,
    core::{
        DynamicObject,
        admission::{AdmissionRequest, AdmissionResponse, AdmissionReview},
    },
};
use tracing::warn;

use super::review::{Review, request, typed};
use crate::{
    api::{disaggregatedset::DisaggregatedSet, rollout::Rollout},
    rollout::admission,
};
use k8s_openapi::api::core::v1::Service;

/// Path of the Rollout validating endpoint.
pub const VALIDATE_PATH: &str = "/validate-rollout";

/// Handles one validating AdmissionReview.
pub async fn validate(
    State(cluster): State<super::Cluster>,
    Review(review): Review<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match request(review) {
        Ok(r) => r,
        Err(answer) => return Json(*answer),
    };
    let Some(new) = typed::<Rollout>(request.object.as_ref()) else {
        // Schema validation ran before us; an object it let through that we cannot read is a
        // version skew between the CRD and this binary: say so rather than guess.
        return Json(
            AdmissionResponse::from(&request)
                .deny("the Rollout does not match this controller's API types")
                .into_review(),
        );
    };
    let old = typed::<Rollout>(request.old_object.as_ref());
    if new.metadata.deletion_timestamp.is_some() || old.as_ref().is_some_and(|o| o.spec == new.spec)
    {
        // Nothing the rules look at changed (a finalizer, a label): no need to list.
        return Json(AdmissionResponse::from(&request).into_review());
    }
    let namespace = new.namespace().unwrap_or_default();
    let others = match cluster.rollouts_in(&namespace).await {
        Ok(list) => list,
        Err(err) => {
            warn!(error = %err, "cannot list Rollouts for admission");
            return Json(
                AdmissionResponse::from(&request)
                    .deny(format!(
                        "cannot check for another Rollout of this workload: {err}"
                    ))
                    .into_review(),
            );
        }
    };
    let mut answer = response(&request, &new, old.as_ref(), &others);
    if answer.allowed
        && let Some(refusal) = pair_service(&cluster, &new, old.as_ref(), &namespace).await
    {
        answer = AdmissionResponse::from(&request).deny(refusal.to_string());
    }
    Json(answer.into_review())
}

/// A pair Rollout naming a Service that is not a role Service of its set, when both exist
/// now (two reads; the Rollout's controller reports what is created or changed later, and
/// what cannot be read here).
async fn pair_service(
    cluster: &super::Cluster,
    new: &Rollout,
    old: Option<&Rollout>,
    namespace: &str,
) -> Option<admission::Refusal> {
    let check = admission::pair_service_to_check(new, old)?;
    let sets = kube::Api::<DisaggregatedSet>::namespaced(cluster.client.clone(), namespace);
    let services = kube::Api::<Service>::namespaced(cluster.client.clone(), namespace);
    let (set, service) = match (
        sets.get_opt(&check.set).await,
        services.get_opt(&check.service).await,
    ) {
        (Ok(Some(set)), Ok(Some(service))) => (set, service),
        (Err(err), _) | (_, Err(err)) => {
            warn!(error = %err, "cannot read a pair Rollout's set or Service for admission");
            return None;
        }
        _ => return None,
    };
    admission::pair_service_refusal(check.field, &set, &service)
}

/// The answer for `new` (pure).
pub fn response(
    request: &AdmissionRequest<DynamicObject>,
    new: &Rollout,
    old: Option<&Rollout>,
    others: &[Rollout],
) -> AdmissionResponse {
    let answer = AdmissionResponse::from(request);
    let refusals = admission::validate(new, old, others);
    if refusals.is_empty() {
        return answer;
    }
    let lines: Vec<String> = refusals.iter().map(ToString::to_string).collect();
    answer.deny(lines.join("; "))
}
