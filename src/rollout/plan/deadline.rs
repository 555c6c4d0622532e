//! Release deadlines (ours; off unless the Rollout asks, so a Kruise manifest behaves as under
//! Kruise): a step's batch that is not ready within `lws-rollout.x-k8s.io/progress-deadline-seconds`
//! of the step starting to scale sets `Progressing=False` / `ProgressDeadlineExceeded`, with the
//! groups that are not ready and why, and a Warning Event; with
//! `lws-rollout.x-k8s.io/rollback-on-deadline: "true"` the release then rolls itself back
//! (traffic to the stable side first, the new side removed) and stays rolled back — the
//! workload held on its stable revision — until its template changes. Annotations rather than
//! spec fields: the Rollout schema stays Kruise's, and Kruise's own tools ignore them.

use crate::api::rollout::{FinalisingStep, Rollout};
use crate::rollout::names::{PROGRESS_DEADLINE, ROLLBACK_ON_DEADLINE};

/// What the Rollout asks of a late batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// Seconds from the start of a step's scaling.
    pub seconds: i64,
    /// Roll back by itself once passed.
    pub rollback: bool,
}

/// The deadline `rollout` asks for, `Ok(None)` without one, or why its annotations are wrong
/// (admission refuses them with this message).
pub fn of(rollout: &Rollout) -> Result<Option<Deadline>, String> {
    let annotations = rollout.metadata.annotations.as_ref();
    let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let rollback = match get(ROLLBACK_ON_DEADLINE) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(format!(
                "{ROLLBACK_ON_DEADLINE} must be \"true\" or \"false\", not {other:?}"
            ));
        }
    };
    let Some(text) = get(PROGRESS_DEADLINE) else {
        if rollback {
            return Err(format!(
                "{ROLLBACK_ON_DEADLINE} needs {PROGRESS_DEADLINE} (the seconds a batch may take)"
            ));
        }
        return Ok(None);
    };
    match text.parse::<i64>() {
        Ok(seconds) if seconds > 0 => Ok(Some(Deadline { seconds, rollback })),
        _ => Err(format!(
            "{PROGRESS_DEADLINE} must be a whole number of seconds greater than 0, not {text:?}"
        )),
    }
}

/// The finalising order of an automatic rollback, whatever the style: traffic to the stable
/// side, the new side removed, the user's objects restored. No `ResumeWorkload`: the hold
/// stays, so the workload never takes the revision that missed its deadline until its
/// template changes.
pub static ROLLBACK_ORDER: [FinalisingStep; 4] = [
    FinalisingStep::RouteTrafficToStable,
    FinalisingStep::ReleaseWorkloadControl,
    FinalisingStep::RestoreStableService,
    FinalisingStep::RemoveCanaryService,
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn with(annotations: &[(&str, &str)]) -> Rollout {
        let mut r = Rollout::new("r", Default::default());
        r.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        r
    }

    #[test]
    fn deadlines_are_read_from_the_annotations_and_bad_values_say_why() {
        assert_eq!(of(&with(&[])), Ok(None));
        assert_eq!(
            of(&with(&[(PROGRESS_DEADLINE, "600")])),
            Ok(Some(Deadline {
                seconds: 600,
                rollback: false
            }))
        );
        assert_eq!(
            of(&with(&[
                (PROGRESS_DEADLINE, "30"),
                (ROLLBACK_ON_DEADLINE, "true")
            ])),
            Ok(Some(Deadline {
                seconds: 30,
                rollback: true
            }))
        );
        for (bad, why) in [
            (vec![(PROGRESS_DEADLINE, "0")], "greater than 0"),
            (vec![(PROGRESS_DEADLINE, "10m")], "whole number of seconds"),
            (vec![(ROLLBACK_ON_DEADLINE, "yes")], "\"true\" or \"false\""),
            (vec![(ROLLBACK_ON_DEADLINE, "true")], "needs"),
        ] {
            let got = of(&with(&bad)).expect_err("refused");
            assert!(got.contains(why), "{bad:?}: {got}");
        }
    }
}
