//! The release's progress lives in one of two status fields, by style (Kruise writes exactly
//! one): `canaryStatus` (`canaryRevision`, `canaryReplicas`, `canaryReadyReplicas`) or
//! `blueGreenStatus` (`updatedRevision`, `updatedReplicas`, `updatedReadyReplicas`), the step
//! fields shared. The plan works on one shape, the canary one, whatever the style: [`working`]
//! reads the stored status into it and [`stored`] writes it back to the style's field, so the
//! step machine, the phases and finalising have one place to look and a blue-green status
//! never carries a `canaryStatus` (which `kubectl-kruise rollout approve` would patch first).

use crate::api::rollout::{BlueGreenStatus, CanaryStatus, RolloutStatus};

use super::style::StatusField;

/// `status` in the plan's working shape: the style's sub-status as `canary_status`.
pub fn working(mut status: RolloutStatus, field: StatusField) -> RolloutStatus {
    if field == StatusField::BlueGreen {
        status.canary_status = status.blue_green_status.take().map(|b| CanaryStatus {
            common: b.common,
            canary_revision: b.updated_revision,
            canary_replicas: b.updated_replicas,
            canary_ready_replicas: b.updated_ready_replicas,
        });
    }
    status
}

/// The working `status` written back to the style's field (the other one absent).
pub fn stored(mut status: RolloutStatus, field: StatusField) -> RolloutStatus {
    match field {
        StatusField::Canary => status.blue_green_status = None,
        StatusField::BlueGreen => {
            status.blue_green_status = status.canary_status.take().map(|c| BlueGreenStatus {
                common: c.common,
                updated_revision: c.canary_revision,
                updated_replicas: c.canary_replicas,
                updated_ready_replicas: c.canary_ready_replicas,
            });
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::{CommonStatus, StepState};

    #[test]
    fn a_blue_green_status_round_trips_through_the_working_shape_and_drops_a_canary_status() {
        let stored_bg = RolloutStatus {
            blue_green_status: Some(BlueGreenStatus {
                common: CommonStatus {
                    current_step_index: 2,
                    current_step_state: StepState::StepPaused,
                    ..CommonStatus::default()
                },
                updated_revision: "rev2".into(),
                updated_replicas: 3,
                updated_ready_replicas: 2,
            }),
            // Left from a canary life of the same Rollout: blue-green never reads it.
            canary_status: Some(CanaryStatus::default()),
            ..RolloutStatus::default()
        };
        let work = working(stored_bg.clone(), StatusField::BlueGreen);
        let c = work.canary_status.clone().expect("working shape");
        assert_eq!(
            (
                c.canary_revision.as_str(),
                c.canary_replicas,
                c.canary_ready_replicas
            ),
            ("rev2", 3, 2)
        );
        assert_eq!(c.common.current_step_state, StepState::StepPaused);
        assert!(work.blue_green_status.is_none());
        let back = stored(work, StatusField::BlueGreen);
        assert_eq!(back.blue_green_status, stored_bg.blue_green_status);
        assert!(back.canary_status.is_none());
        // The canary shape is the working shape: nothing moves, a stray blueGreenStatus goes.
        let canary = RolloutStatus {
            canary_status: Some(c.clone()),
            blue_green_status: Some(BlueGreenStatus::default()),
            ..RolloutStatus::default()
        };
        let back = stored(working(canary, StatusField::Canary), StatusField::Canary);
        assert_eq!(back.canary_status, Some(c));
        assert!(back.blue_green_status.is_none());
    }
}
