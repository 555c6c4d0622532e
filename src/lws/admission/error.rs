//! Why the pod webhook refuses a pod.

use thiserror::Error;

/// Why a pod cannot be admitted (the webhook fails the CREATE, as upstream does).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PodDefaultError {
    /// The StatefulSet template always sets the size annotation.
    #[error("size annotation is unexpectedly missing for pod {0}")]
    MissingSize(String),
    /// An annotation that must be a number is not.
    #[error("annotation {key} of pod {pod} is not a number: {value:?}")]
    NotANumber {
        /// Pod name.
        pod: String,
        /// Annotation key.
        key: &'static str,
        /// Its value.
        value: String,
    },
    /// LWS pods are StatefulSet pods, named `<parent>-<ordinal>`.
    #[error("parsing pod ordinal for pod {0}")]
    NoOrdinal(String),
}
