//! Traffic shifting for releases. `intent` is what a release asks of the traffic layer.

pub mod intent;
