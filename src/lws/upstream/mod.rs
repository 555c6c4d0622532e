//! What makes our LWS controller read and write what upstream's does, byte for byte: the
//! template revision hash (`revision`), computed over the pod template as Go's `encoding/json`
//! prints upstream's types (`gojson`, its type table `go_types.json` generated from upstream's
//! own types) with quantities in Go's canonical form (`quantity`).

pub mod gojson;
pub mod quantity;
pub mod revision;
