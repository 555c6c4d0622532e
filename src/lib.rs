//! lws-rollout: a LeaderWorkerSet controller with Kruise-Rollout compatible progressive
//! delivery. See `docs/architecture.md` for how the pieces fit together.
#![forbid(unsafe_code)]

pub mod analysis;
pub mod api;
pub mod batchrelease;
pub mod cli;
pub mod disaggregatedset;
pub mod k8s;
pub mod kueue;
#[cfg(test)]
mod layering;
pub mod lws;
pub mod manager;
pub mod release;
pub mod rollout;
pub mod traffic;
pub mod webhook;
