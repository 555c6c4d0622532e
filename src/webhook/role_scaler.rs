//! `POST /validate-disaggregatedsetrolescaler`: the DisaggregatedSetRoleScaler validating
//! webhook, on top of [`crate::disaggregatedset::admission`]. It reads the set the scaler's
//! labels name and refuses a scaler bound to no External role of a live set. Only a create, or
//! an update that changes the binding labels, is checked: the garbage collector's and the
//! manager's own later writes never wait on a set that is going away.

use axum::{Json, extract::State};
use kube::{
    Api, ResourceExt,
    core::{
        DynamicObject,
        admission::{AdmissionRequest, AdmissionResponse, AdmissionReview},
    },
};
use tracing::warn;

use super::review::{Review, request, typed};
use crate::{
    api::{DisaggregatedSet, disaggregatedset_role_scaler::DisaggregatedSetRoleScaler},
    disaggregatedset::admission,
};

/// Path of the RoleScaler validating endpoint.
pub const VALIDATE_PATH: &str = "/validate-disaggregatedsetrolescaler";

/// Handles one validating AdmissionReview.
pub async fn validate(
    State(cluster): State<super::Cluster>,
    Review(review): Review<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match request(review) {
        Ok(r) => r,
        Err(answer) => return Json(*answer),
    };
    let answer = AdmissionResponse::from(&request);
    let Some(new) = typed::<DisaggregatedSetRoleScaler>(request.object.as_ref()) else {
        return Json(
            answer
                .deny("the DisaggregatedSetRoleScaler does not match this controller's API types")
                .into_review(),
        );
    };
    let old = typed(request.old_object.as_ref());
    if new.metadata.deletion_timestamp.is_some()
        || old
            .as_ref()
            .is_some_and(|o| admission::binding(o) == admission::binding(&new))
    {
        return Json(answer.into_review());
    }
    let (set_name, _) = admission::binding(&new);
    let set = match set_name {
        None => None,
        Some(name) => {
            let namespace = new.namespace().unwrap_or_default();
            match Api::<DisaggregatedSet>::namespaced(cluster.client.clone(), &namespace)
                .get_opt(name)
                .await
            {
                Ok(set) => set,
                Err(err) => {
                    warn!(error = %err, "cannot read the DisaggregatedSet for admission");
                    return Json(
                        answer
                            .deny(format!("cannot read DisaggregatedSet {name}: {err}"))
                            .into_review(),
                    );
                }
            }
        }
    };
    let refusals = admission::refusals(&new, set.as_ref());
    if refusals.is_empty() {
        return Json(answer.into_review());
    }
    Json(answer.deny(refusals.join("; ")).into_review())
}
