//! The LeaderWorkerSet group controller: a drop-in for upstream LWS v0.8.
//!
//! The reconcile (`controller`) runs the same steps as every controller of this crate:
//! `observe` (the caches) → `deref` (the few fresh reads) → `plan` (pure: every decision) →
//! `apply` (the only writes) → status. The plan builds on pure helpers: `revision` (the
//! template hash, byte-identical to upstream, on `gojson` and `quantity`), `rolling` (partition
//! and surge), `objects` (what to create) and `status` (counters and conditions).
//! `admission` and `pod_defaults` are what the webhooks apply; `triggers` maps watch events to
//! reconciles.

pub mod admission;
pub mod apply;
pub mod context;
pub mod controller;
pub mod deref;
pub mod error;
pub mod gang;
pub mod gojson;
pub mod hold;
pub mod labels;
pub mod leader_lane;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod pod_defaults;
pub mod pod_requests;
pub mod quantity;
pub mod remembered;
pub mod revision;
pub mod rolling;
pub mod status;
pub mod triggers;
pub mod volcano;
