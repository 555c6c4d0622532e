//! Setting status conditions the Kubernetes way: one condition per type, and
//! `lastTransitionTime` moves only when the status flips. Works for any condition type that
//! exposes these fields (the core `metav1.Condition` and Kruise's Rollout condition).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The fields every condition type has.
pub trait ConditionFields: Clone + PartialEq {
    /// `type`.
    fn type_(&self) -> &str;
    /// `status`: "True", "False" or "Unknown".
    fn status(&self) -> &str;
    /// Sets `lastTransitionTime`.
    fn set_transition_time(&mut self, time: Option<Time>);
    /// `lastTransitionTime`.
    fn transition_time(&self) -> Option<Time>;
}

impl ConditionFields for Condition {
    fn type_(&self) -> &str {
        &self.type_
    }
    fn status(&self) -> &str {
        &self.status
    }
    fn set_transition_time(&mut self, time: Option<Time>) {
        if let Some(time) = time {
            self.last_transition_time = time;
        }
    }
    fn transition_time(&self) -> Option<Time> {
        Some(self.last_transition_time.clone())
    }
}

/// Puts `new` in place of the condition of its type (or adds it). When the status did not
/// change, the old `lastTransitionTime` is kept. Returns whether anything changed.
pub fn upsert<C: ConditionFields>(conditions: &mut Vec<C>, mut new: C) -> bool {
    match conditions.iter().position(|c| c.type_() == new.type_()) {
        Some(i) => {
            if conditions[i].status() == new.status() {
                new.set_transition_time(conditions[i].transition_time());
            }
            if conditions[i] == new {
                return false;
            }
            conditions[i] = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// Removes the condition of `type_`. Returns whether it was there.
pub fn remove<C: ConditionFields>(conditions: &mut Vec<C>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_() != type_);
    before != conditions.len()
}

/// The condition of `type_`, if any.
pub fn find<'a, C: ConditionFields>(conditions: &'a [C], type_: &str) -> Option<&'a C> {
    conditions.iter().find(|c| c.type_() == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn cond(status: &str, reason: &str, at: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::from_second(at).unwrap()),
            observed_generation: None,
        }
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut conditions = vec![cond("True", "A", 1)];
        assert!(upsert(&mut conditions, cond("True", "B", 2)));
        assert_eq!(conditions[0].reason, "B");
        assert_eq!(
            conditions[0].last_transition_time,
            cond("True", "", 1).last_transition_time
        );
        assert!(
            !upsert(&mut conditions, cond("True", "B", 3)),
            "nothing new"
        );
        assert!(upsert(&mut conditions, cond("False", "C", 4)));
        assert_eq!(
            conditions[0].last_transition_time,
            cond("", "", 4).last_transition_time
        );
        assert!(remove(&mut conditions, "Ready"));
        assert!(conditions.is_empty());
    }
}
