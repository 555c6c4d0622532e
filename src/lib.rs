//! lws-rollout: a LeaderWorkerSet controller with Kruise-Rollout compatible progressive
//! delivery. See `docs/architecture.md` for how the pieces fit together.
#![forbid(unsafe_code)]

pub mod api;
pub mod k8s;
pub mod lws;
pub mod manager;
pub mod webhook;
