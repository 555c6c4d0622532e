//! The LeaderWorkerSet group controller: a drop-in for upstream LWS v0.10.
//!
//! The reconcile (`controller`) runs the same steps as every controller of this crate:
//! `observe` (the caches) → `deref` (the few fresh reads) → `plan` (pure: every decision) →
//! `apply` (the only writes) → status. The plan builds on pure helpers: `upstream` (what must
//! be byte-identical to upstream: the template revision hash, Go's JSON and quantities),
//! `rolling` (partition and surge), `objects` (what to create) and `status` (counters and
//! conditions). `admission` is what the webhooks decide (checks, pod defaults, the release
//! hold); `triggers` maps watch events to reconciles.

pub mod admission;
pub mod apply;
pub mod context;
pub mod controller;
pub mod deref;
pub mod error;
pub mod gang;
pub mod labels;
pub mod leader_lane;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod pod_requests;
pub mod remembered;
pub mod rolling;
pub mod status;
pub mod triggers;
pub mod upstream;
pub mod volcano;
