//! The BatchRelease controller for LeaderWorkerSets. `observe` is what it looks at, `plan`
//! decides what every style shares (deletion, the style, the phase, a template that moved on)
//! and hands the rest to the style's control module, named as the Rollout's plan names the
//! styles — `canary` (a canary LWS beside the stable one, scaled batch by batch;
//! `canary::object` builds it), `bluegreen` (the same second LWS, grown to the whole size at
//! promotion) and `partition` (no second LWS: the user's groups move in place, batch by batch,
//! under a release partition).
//! A DisaggregatedSet's release (`pair`) writes no LWS of its own: the set's controller scales
//! the new pair to the groups the BatchRelease writes on the set.
//! The canary's name, the batch arithmetic in groups and a batch's progress are the release
//! vocabulary in `crate::release`.

pub mod apply;
pub mod bluegreen;
pub mod canary;
pub mod controller;
pub mod draft;
pub mod names;
pub mod observe;
pub mod pair;
pub mod partition;
pub mod plan;
