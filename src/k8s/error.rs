//! Failure categories. Every controller error says which one it is, and the category alone
//! decides what happens next — so the policy is the same in every controller:
//!
//! | category | meaning | requeue | event |
//! |---|---|---|---|
//! | `Spec` | the object as written cannot work | none: wait for it to change | Warning, once per message |
//! | `Blocked` | something outside the spec is in the way (a foreign object, a missing node label) | every 10 s, since what blocks is not watched | Warning, once per message |
//! | `Transient` | the API server or network failed | exponential backoff, 1 s → 60 s | none (logged once) |

use std::time::Duration;

/// What kind of failure an error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// The spec cannot be realised until a user changes it.
    Spec,
    /// Something we do not own or watch is in the way.
    Blocked,
    /// A failure that retrying can fix.
    Transient,
}

/// How long to wait before looking at a blocked object again.
pub const BLOCKED_RECHECK: Duration = Duration::from_secs(10);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

impl Category {
    /// Label value for metrics and logs.
    pub fn metric_label(self) -> &'static str {
        match self {
            Category::Spec => "spec",
            Category::Blocked => "blocked",
            Category::Transient => "transient",
        }
    }

    /// When to reconcile again after `attempt` consecutive failures (1 = the first): `None`
    /// waits for a change of the object.
    pub fn requeue_after(self, attempt: u32) -> Option<Duration> {
        match self {
            Category::Spec => None,
            Category::Blocked => Some(BLOCKED_RECHECK),
            Category::Transient => {
                let factor = 1u32 << attempt.saturating_sub(1).min(6);
                Some((BACKOFF_BASE * factor).min(BACKOFF_MAX))
            }
        }
    }
}

/// An error that knows its category.
pub trait Categorized {
    /// The category.
    fn category(&self) -> Category;

    /// The reconciled object itself was deleted while the reconcile ran (e.g. its status write
    /// answered 404): not a failure, nothing to retry, nothing to warn about.
    fn object_gone(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_back_off_exponentially_up_to_a_minute() {
        let waits: Vec<_> = (1..=9)
            .map(|n| Category::Transient.requeue_after(n).unwrap().as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn spec_errors_wait_for_a_change_and_blocked_ones_recheck() {
        assert_eq!(Category::Spec.requeue_after(3), None);
        assert_eq!(Category::Blocked.requeue_after(1), Some(BLOCKED_RECHECK));
    }
}
