//! The DisaggregatedSet controller (`disaggregatedset.x-k8s.io/v1`, upstream LWS v0.10.0's
//! second API): one LeaderWorkerSet per slice, role and revision, rolled together so the roles
//! never run mismatched revisions, a headless Service per role of a complete revision, and a
//! DisaggregatedSetRoleScaler per External role. The same steps as every controller here:
//! `controller` → `observe` → `plan/` (pure, table-tested; `plan/steps` is the rolling-update
//! planner) → `apply` → `status`; `admission` is what the RoleScaler webhook refuses. See
//! docs/disaggregatedset.md.

pub mod admission;
pub mod apply;
pub mod controller;
pub mod hold;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod revision;
pub mod status;
