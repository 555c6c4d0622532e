//! Analysis of a release on real serving metrics, in Argo Rollouts' terms: an `AnalysisRun`
//! holds resolved metrics; this controller takes each measurement when it is due (one
//! Prometheus query per metric per interval), records it in the run's status — where a restart
//! finds it — and sets the run's phase. The Rollout controller creates runs from
//! `AnalysisTemplate`s and acts on their phase (`rollout::plan::analysis`).
//!
//! - [`assess`]: Argo's rules as pure functions (due times, counts, limits, phases).
//! - [`condition`]: success and failure conditions in the expr language.
//! - [`prometheus`]: the provider.
//! - [`template`]: templates and arguments resolved into a run's spec.
//! - [`controller`]: the reconcile: observe the run → due metrics → measure → write status.

pub mod assess;
pub mod condition;
pub mod controller;
pub mod prometheus;
pub mod template;
