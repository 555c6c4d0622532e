//! The release hold of a DisaggregatedSet, decided at admission (the `/mutate-disaggregatedset`
//! webhook): when a Rollout controls the set and an UPDATE changes its revision, the same
//! admission records the revision the set runs now in `rollouts.kruise.io/stable-revision`.
//! While that annotation is there the set's controller keeps the held revision at the roles'
//! replicas and runs the new one only as far as the release says
//! (`lws-rollout.x-k8s.io/release-groups`; see `plan`), so no stable group rolls on its own —
//! not even between the write and the controller's next reconcile. No spec field is
//! rewritten, so GitOps tools see no drift.
//!
//! Only the Rollout controller lifts the hold (a write with field manager
//! [`field_managers::RELEASE`]); any other update that drops it while a Rollout controls the
//! set gets it back, as for an LWS (`crate::lws::admission::hold`).

use crate::{
    api::{
        batchrelease::RollingStyle,
        disaggregatedset::{DisaggregatedSet, HELD_REVISION_ANNOTATION},
        rollout::Rollout,
    },
    k8s::field_managers,
};

use super::revision;

/// Whether `rollout` takes releases of `set` over: it names the set, is enabled and not being
/// deleted, and uses a style the release controllers run.
pub fn controls(rollout: &Rollout, set: &DisaggregatedSet) -> bool {
    rollout.spec.workload_ref.is_disaggregated_set()
        && Some(rollout.spec.workload_ref.name.as_str()) == set.metadata.name.as_deref()
        && rollout.metadata.namespace == set.metadata.namespace
        && !rollout.spec.disabled
        && rollout.metadata.deletion_timestamp.is_none()
        && RollingStyle::of(&rollout.spec.strategy).is_some()
}

/// The held revision, when the set carries a (non-empty) hold.
pub fn held(set: &DisaggregatedSet) -> Option<&str> {
    set.metadata
        .annotations
        .as_ref()?
        .get(HELD_REVISION_ANNOTATION)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The revision of the set's roles; when they cannot be hashed, their raw JSON (a spurious
/// difference only sets a hold, which changes nothing the set runs).
fn identity(set: &DisaggregatedSet) -> String {
    revision::revision(&set.spec.roles)
        .unwrap_or_else(|_| serde_json::to_string(&set.spec.roles).unwrap_or_default())
}

/// The hold annotation an UPDATE from `old` to `new` must carry, or `None` to leave the
/// annotations as the request has them. `controlled`: a Rollout controls the set. The held
/// revision is the one the old object's template makes: what the set runs (or rolls to) when
/// the change arrives.
pub fn decide(
    old: &DisaggregatedSet,
    new: &DisaggregatedSet,
    controlled: bool,
    field_manager: Option<&str>,
) -> Option<String> {
    if !controlled || held(new).is_some() {
        return None;
    }
    if let Some(stable) = held(old) {
        return (field_manager != Some(field_managers::RELEASE)).then(|| stable.to_string());
    }
    let running = identity(old);
    (running != identity(new)).then_some(running)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(image: &str, hold: Option<&str>) -> DisaggregatedSet {
        let role = |name: &str| {
            json!({"name": name, "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 1,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}})
        };
        let mut obj = json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "ns"},
            "spec": {"roles": [role("prefill"), role("decode")]}
        });
        if let Some(h) = hold {
            obj["metadata"]["annotations"] = json!({HELD_REVISION_ANNOTATION: h});
        }
        serde_json::from_value(obj).unwrap()
    }

    fn rollout(extra: serde_json::Value) -> Rollout {
        let mut obj = json!({
            "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"workloadRef": {"apiVersion": "disaggregatedset.x-k8s.io/v1",
                "kind": "DisaggregatedSet", "name": "pd"},
                "strategy": {"canary": {"steps": [{"replicas": 1}]}}}
        });
        crate::lws::plan::merge_json(&mut obj, extra);
        serde_json::from_value(obj).unwrap()
    }

    #[test]
    fn only_an_enabled_rollout_naming_this_set_controls_it() {
        let s = set("a", None);
        assert!(controls(&rollout(json!({})), &s));
        assert!(controls(
            &rollout(json!({"spec": {"strategy": {"canary": null,
                "blueGreen": {"steps": [{"replicas": "100%"}]}}}})),
            &s
        ));
        assert!(!controls(&rollout(json!({"spec": {"disabled": true}})), &s));
        assert!(!controls(
            &rollout(json!({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}})),
            &s
        ));
        assert!(!controls(
            &rollout(json!({"spec": {"workloadRef": {"name": "other"}}})),
            &s
        ));
        assert!(!controls(
            &rollout(json!({"metadata": {"namespace": "elsewhere"}})),
            &s
        ));
        assert!(
            !controls(
                &rollout(json!({"spec": {"workloadRef": {
                    "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}}})),
                &s
            ),
            "an LWS of the same name is another workload"
        );
        assert!(!controls(
            &rollout(json!({"spec": {"strategy": {"canary": null}}})),
            &s
        ));
    }

    #[test]
    fn hold_decisions() {
        let running = identity(&set("a", None));
        type Case<'a> = (
            &'a str,
            DisaggregatedSet,
            DisaggregatedSet,
            bool,
            Option<&'a str>,
            Option<&'a str>,
        );
        let cases: [Case; 9] = [
            (
                "a template change under a Rollout holds the running revision",
                set("a", None),
                set("b", None),
                true,
                Some("kubectl"),
                Some(running.as_str()),
            ),
            (
                "no Rollout: nothing",
                set("a", None),
                set("b", None),
                false,
                None,
                None,
            ),
            (
                "no revision change (metadata, replicas): nothing",
                set("a", None),
                set("a", None),
                true,
                None,
                None,
            ),
            (
                "a hold the request carries stays as it is",
                set("a", Some("k1")),
                set("c", Some("k1")),
                true,
                None,
                None,
            ),
            (
                "a third template keeps the first hold",
                set("b", Some("k1")),
                set("c", None),
                true,
                Some("kubectl"),
                Some("k1"),
            ),
            (
                "another writer dropping the hold gets it back",
                set("b", Some("k1")),
                set("b", None),
                true,
                Some("kubectl"),
                Some("k1"),
            ),
            (
                "a write without a field manager dropping it gets it back",
                set("b", Some("k1")),
                set("b", None),
                true,
                None,
                Some("k1"),
            ),
            (
                "the release lifts it",
                set("b", Some("k1")),
                set("b", None),
                true,
                Some(field_managers::RELEASE),
                None,
            ),
            (
                "without a Rollout anyone may drop it",
                set("b", Some("k1")),
                set("b", None),
                false,
                Some("kubectl"),
                None,
            ),
        ];
        for (name, old, new, controlled, manager, want) in cases {
            assert_eq!(
                decide(&old, &new, controlled, manager).as_deref(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_replicas_change_is_not_a_revision_change() {
        let old = set("a", None);
        let mut new = old.clone();
        if let Some(spec) = new.spec.roles[0].spec.as_mut() {
            spec.replicas = Some(5);
        }
        assert_eq!(decide(&old, &new, true, None), None);
    }
}
