//! What can go wrong in an LWS reconcile, each with its category (see
//! [`crate::k8s::error`]): the category picks the event, the metric label and the requeue.

use thiserror::Error;

use crate::k8s::{
    apply::ApiError,
    error::{Categorized, Category},
};

/// Why the LWS cannot be realised (right now): becomes the `ReplicaFailure` condition and a
/// Warning event. Planning produces these instead of errors, so a bad spec is reported once
/// and then waits for a change, instead of failing every reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The condition's reason, e.g. `NameTooLong`.
    pub reason: &'static str,
    /// What a user reads.
    pub message: String,
    /// Spec (wait for a change) or Blocked (look again now and then).
    pub category: Category,
}

impl Failure {
    /// The spec cannot work as written.
    pub fn spec(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            category: Category::Spec,
        }
    }

    /// Something we do not own or watch is in the way.
    pub fn blocked(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            category: Category::Blocked,
        }
    }
}

/// A reconcile that could not finish.
#[derive(Debug, Error)]
pub enum Error {
    /// The API server or the network failed.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl Categorized for Error {
    fn category(&self) -> Category {
        match self {
            Error::Api(err) => err.category(),
        }
    }

    fn object_gone(&self) -> bool {
        match self {
            Error::Api(err) => err.object_gone(),
        }
    }
}
