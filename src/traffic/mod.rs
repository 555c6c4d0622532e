//! Traffic shifting for releases, as pure planning: `intent` is what a release asks of the
//! traffic layer; `plan` turns it, with what `observe` read from the cluster, into ordered
//! writes (`write`) and the problems a Rollout reports. `service`, `gateway` and `ingress` build
//! the desired state of each kind of object; `json` holds the patch and comparison helpers they
//! share. See `docs/traffic.md`.

pub mod apply;
pub mod deref;
pub mod gateway;
pub mod ingress;
pub mod intent;
mod json;
pub mod names;
pub mod observe;
pub mod plan;
pub mod service;
pub mod write;

#[cfg(test)]
pub(crate) mod fixtures;
