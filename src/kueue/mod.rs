//! Kueue's side of an LWS made visible on the LWS (docs/kueue.md): when Kueue has not admitted
//! a group's Workload, a Warning Event on the LeaderWorkerSet says which group waits, in which
//! queue, and why in Kueue's words (the Workload's condition) — what `kubectl describe lws`
//! shows for an LWS whose queue name names no LocalQueue, or whose quota is short. Read only:
//! the Workloads are Kueue's. `plan` decides (pure), `controller` runs it.

pub mod controller;
pub mod plan;
