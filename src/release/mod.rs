//! The release vocabulary the Rollout and BatchRelease controllers share, below both of them:
//! the names of what a release creates beside the user's LWS, batch arithmetic in groups, and a
//! batch's progress read off the LWS that carries the new template. Neither controller imports
//! the other; both import this.

pub mod groups;
pub mod names;
pub mod progress;
pub mod revision;
