//! The LeaderWorkerSet group controller: a drop-in for upstream LWS v0.8.
//!
//! `controller` observes and applies; everything it decides comes from the pure modules:
//! `revision` (the template hash, byte-identical to upstream, on `gojson` and `quantity`),
//! `rolling` (partition and surge), `objects` (what to create) and `status` (conditions).

pub mod admission;
pub mod applied;
pub mod controller;
pub mod gojson;
pub mod labels;
pub mod objects;
pub mod pod_defaults;
pub mod quantity;
pub mod revision;
pub mod rolling;
pub mod status;
