//! The Rollout controller (`rollouts.kruise.io/v1beta1`, Kruise Rollout compatible) for
//! LeaderWorkerSet workloads: `observe` is what it looks at, `plan` decides, `names` holds
//! every string it shares with Kruise. Design notes: `docs/rollout-design.md`.

pub mod admission;
pub mod apply;
pub mod controller;
pub mod deref;
pub mod metrics;
pub mod names;
pub mod observe;
pub mod plan;
