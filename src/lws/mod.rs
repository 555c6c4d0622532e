//! The LeaderWorkerSet group controller: a drop-in for upstream LWS v0.8.
//!
//! So far: the revision hash (byte-identical to upstream) and the Go-JSON re-encoding and
//! quantity canonicalisation it rests on. The reconcilers build on these.

pub mod gojson;
pub mod labels;
pub mod objects;
pub mod quantity;
pub mod revision;
pub mod rolling;
pub mod status;
