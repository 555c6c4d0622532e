//! The blue-green style: a second LWS with the new template grows beside the user's LWS step
//! by step (the user's LWS is held and never restarted), traffic moves per step (0% allowed),
//! and promotion hands the new template to the user's LWS without ever lowering the serving
//! capacity. GitOps owns the user's LWS: it is never deleted, renamed or given a spec we wrote.
//!
//! | reason | order |
//! |---|---|
//! | success | RouteTrafficToNew (the second LWS grown to every group the user's LWS has; once all are ready, the stable Service and the route send everything to it) → ResumeWorkload (hold released: the user's LWS rolls, carrying no traffic; waits until every group is updated and ready) → RouteTrafficToStable (everything back to the user's LWS) → RestoreStableService → RemoveCanaryService → ReleaseWorkloadControl (the second LWS deleted) |
//! | rollback, disable, delete | RouteTrafficToStable → ResumeWorkload → ReleaseWorkloadControl → RestoreStableService → RemoveCanaryService |
//! | third template mid-release | RouteTrafficToStable → ReleaseWorkloadControl, then a new release from step 1 |
//!
//! Kruise's success order restores the stable Service before resuming the workload; here the
//! stable Service stays pinned to the second LWS while the user's LWS rolls, so in-cluster
//! clients of the Service never reach a rolling group either. Kruise refuses a third template
//! mid-release ("please rollback first"); here it restarts, as the canary style does.
//! The design and its timeline: docs/rollout-design.md, "Blue-green for an LWS".

use crate::api::batchrelease::{BatchRelease, FinalizingPolicy, RollingStyle};
use crate::api::rollout::FinalisingStep;

use super::reason::Reason;
use super::{Draft, batch, canary};

static SUCCESS_ORDER: [FinalisingStep; 6] = [
    FinalisingStep::RouteTrafficToNew,
    FinalisingStep::ResumeWorkload,
    FinalisingStep::RouteTrafficToStable,
    FinalisingStep::RestoreStableService,
    FinalisingStep::RemoveCanaryService,
    FinalisingStep::ReleaseWorkloadControl,
];
/// The order of finalising steps for a reason.
pub fn finalising_order(reason: Reason) -> &'static [FinalisingStep] {
    match reason {
        Reason::Success => &SUCCESS_ORDER,
        // Rollback, disable, delete and a third template: the canary style's orders.
        Reason::Rollback | Reason::Disabled | Reason::Deleting => &canary::CANCEL_ORDER,
        Reason::Continuous => &canary::CONTINUOUS_ORDER,
        Reason::AutoRollback => &super::deadline::ROLLBACK_ORDER,
    }
}

/// The BatchRelease the Rollout wants: one batch per step (groups of the second LWS), run up
/// to `partition` (0-based; `None` = finish: the second LWS grows to every group the user's
/// LWS has and stays until the user's LWS has rolled), owned by the Rollout.
pub fn batch_release(
    d: &Draft<'_>,
    partition: Option<i32>,
    policy: Option<FinalizingPolicy>,
) -> BatchRelease {
    let bg = d
        .obs
        .rollout
        .spec
        .strategy
        .blue_green
        .clone()
        .unwrap_or_default();
    batch::batch_release(
        d,
        batch::Shape {
            steps: &bg.steps,
            failure_threshold: bg.failure_threshold,
            patch_pod_template_metadata: None,
            rolling_style: RollingStyle::BlueGreen,
            extra_workload: false,
        },
        partition,
        policy,
    )
}
