//! The BatchRelease controller, canary style for LeaderWorkerSets: a canary LWS beside the
//! stable one, scaled batch by batch. `observe` is what it looks at, `plan` decides, `canary`
//! builds the canary LWS; its name, the batch arithmetic in groups and a batch's progress are
//! the release vocabulary in `crate::release`.

pub mod apply;
pub mod canary;
pub mod controller;
pub mod names;
pub mod observe;
pub mod plan;
