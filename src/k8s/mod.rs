//! The shared controller kit: what every controller of this crate needs to talk to the API
//! server, and nothing that decides anything. Business logic lives in the controllers'
//! `plan` modules; these helpers only carry their decisions out.
//!
//! - [`client`]: one way to build a client (kubeconfig or in-cluster, our User-Agent).
//! - [`apply`]: the [`apply::Applier`] — create-if-absent, server-side apply, the no-op check,
//!   deletes with uid preconditions, status patches — and the mapping of API errors to outcomes;
//!   [`apply_body`] escapes what the API server's YAML reader of apply bodies refuses.
//! - [`events`]: Events for any object, with reasons as named constants.
//! - [`expected`]: our creates the caches have not shown yet, so they are not planned twice.
//! - [`memo`]: answers remembered per object uid with the versions they were computed from.
//! - [`watch`]: label-filtered watches whose caches are shared between controllers;
//!   [`label_index`] groups a cache by (namespace, label value) so a reader skips the scan.
//! - [`conditions`]: setting a status condition without losing when it last changed.
//! - [`backoff`]: consecutive failures per object, the requeue and the log line of a failure;
//!   [`log_gate`] folds the same error from many objects into one line per backoff step.
//! - [`field_managers`]: the name of every writer of ours, as `managedFields` shows it.
//! - [`error`]: the failure categories that drive event reasons, metric labels and requeues.
//! - [`managed_fields`]: managedFields taken out of the API server's JSON before it is
//!   decoded (nothing here reads them).
//! - [`pod`]: the pod as the caches keep it ([`pod::CachedPod`]) and the facts every controller
//!   reads the same way (readiness); its labels and annotations packed as [`pairs::Pairs`].
//! - [`throttle`]: per-key reconcile triggers, at most two per window, the first and the
//!   urgent ones at once.

pub mod apply;
pub mod apply_body;
pub mod backoff;
pub mod client;
pub mod conditions;
pub mod error;
pub mod events;
pub mod expected;
pub mod field_managers;
pub mod label_index;
pub mod log_gate;
pub mod managed_fields;
pub mod memo;
pub mod metrics;
pub mod pairs;
pub mod pod;
pub mod runner;
pub mod throttle;
pub mod watch;
pub mod written;
