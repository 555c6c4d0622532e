//! Kueue's side of an LWS made visible on the LWS (docs/kueue.md): when Kueue has not admitted
//! a group's Workload, a Warning Event on the LeaderWorkerSet says which group waits, in which
//! queue, and why in Kueue's words (the Workload's condition) — what `kubectl describe lws`
//! shows for an LWS whose queue name names no LocalQueue, or whose quota is short.
//!
//! The Workloads are Kueue's, with one exception: on a MultiKueue worker cluster, a group's
//! Workload (MultiKueue's copy, made without owners) gets its LWS as an owner, so replacing
//! the group's pods does not let the garbage collector delete it ([`plan::needs_owner`]).
//! `plan` decides (pure), `apply` writes, `controller` runs them.

pub mod apply;
pub mod controller;
pub mod plan;
