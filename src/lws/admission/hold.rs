//! The release hold, decided at admission: when a Rollout controls an LWS and an UPDATE
//! changes its template, the same admission records the revision the groups run now in the
//! annotation `rollouts.kruise.io/stable-revision`. The LWS controller keeps every group on that
//! revision (see `plan::revisions`), so no stable group ever rolls natively — there is no
//! moment, not even between two reconciles, when the new template is visible without the
//! hold. No user-owned spec field changes, so GitOps tools see no drift in the spec.
//!
//! Only the Rollout controller lifts the hold (a write with field manager
//! [`field_managers::RELEASE`]); any other update that drops the annotation while a Rollout
//! controls the LWS gets it back.

use crate::k8s::field_managers;
use crate::{
    api::{batchrelease::RollingStyle, leaderworkerset::LeaderWorkerSet, rollout::Rollout},
    lws::{labels, upstream::revision},
};

/// Whether `rollout` takes releases of `lws` over: it names the LWS, is enabled and not being
/// deleted, and uses a style this controller runs: canary with a canary LWS and blue-green keep
/// the user's groups on the held revision while a second LWS runs the new one; partition style
/// keeps them there until its BatchRelease sets the release partition.
pub fn controls(rollout: &Rollout, lws: &LeaderWorkerSet) -> bool {
    let target = &rollout.spec.workload_ref;
    target.kind == "LeaderWorkerSet"
        && target.api_version.starts_with("leaderworkerset.x-k8s.io/")
        && Some(target.name.as_str()) == lws.metadata.name.as_deref()
        && rollout.metadata.namespace == lws.metadata.namespace
        && !rollout.spec.disabled
        && rollout.metadata.deletion_timestamp.is_none()
        && RollingStyle::of(&rollout.spec.strategy).is_some()
}

fn held(lws: &LeaderWorkerSet) -> Option<&str> {
    lws.metadata
        .annotations
        .as_ref()?
        .get(labels::HELD_REVISION)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The template as the revision hash sees it; when it cannot be hashed, the raw fields (a
/// spurious difference only sets a hold that changes nothing).
fn template_identity(lws: &LeaderWorkerSet) -> String {
    let spec = serde_json::to_value(&lws.spec).unwrap_or_default();
    match revision::revision_data(&spec) {
        Ok(data) => revision::revision_key(&data),
        Err(_) => format!("{}{}", spec["leaderWorkerTemplate"], spec["networkConfig"]),
    }
}

/// The hold annotation an UPDATE from `old` to `new` must carry, or `None` to leave the
/// annotations as the request has them. `controlled`: a Rollout controls the LWS.
/// `running_revision`: the revision the groups run now (asked only when a hold starts).
pub fn decide(
    old: &LeaderWorkerSet,
    new: &LeaderWorkerSet,
    controlled: bool,
    field_manager: Option<&str>,
    running_revision: impl FnOnce() -> String,
) -> Option<String> {
    if !controlled || held(new).is_some() {
        return None;
    }
    if let Some(stable) = held(old) {
        return (field_manager != Some(field_managers::RELEASE)).then(|| stable.to_string());
    }
    (template_identity(old) != template_identity(new)).then(running_revision)
}

/// The release partition an UPDATE from `old` to `new` must carry, or `None` to leave it as
/// the request has it: a template change while a partition-style release has groups moved in
/// place freezes every group where it is (partition = replicas), so a revert or a third
/// template rolls nothing before the Rollout has moved traffic off the moved groups. The
/// Rollout controller's own write (which removes the annotation with the hold) is left alone.
pub fn freeze(
    old: &LeaderWorkerSet,
    new: &LeaderWorkerSet,
    field_manager: Option<&str>,
) -> Option<String> {
    let partition = |l: &LeaderWorkerSet| {
        l.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::RELEASE_PARTITION))
            .cloned()
    };
    let was = partition(old)?;
    if field_manager == Some(field_managers::RELEASE) {
        return None;
    }
    let frozen = new.spec.replicas.unwrap_or(1).max(0).to_string();
    let changed = template_identity(old) != template_identity(new);
    match (changed, partition(new)) {
        (true, Some(p)) if p == frozen => None,
        (true, _) => Some(frozen),
        // Dropped by someone else mid-release: back as it was.
        (false, None) => Some(was),
        (false, Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lws(image: &str, hold: Option<&str>) -> LeaderWorkerSet {
        let mut obj = json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}
        });
        if let Some(h) = hold {
            obj["metadata"]["annotations"] = json!({labels::HELD_REVISION: h});
        }
        serde_json::from_value(obj).unwrap()
    }

    fn rollout(extra: serde_json::Value) -> Rollout {
        let mut obj = json!({
            "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet", "name": "m"},
                "strategy": {"canary": {"enableExtraWorkloadForCanary": true,
                    "steps": [{"replicas": 1}]}}}
        });
        crate::lws::plan::merge_json(&mut obj, extra);
        serde_json::from_value(obj).unwrap()
    }

    #[test]
    fn only_an_enabled_canary_or_blue_green_rollout_of_this_lws_controls_it() {
        let m = lws("a", None);
        assert!(controls(&rollout(json!({})), &m));
        assert!(controls(
            &rollout(json!({"spec": {"strategy": {"canary": null,
                "blueGreen": {"steps": [{"replicas": "100%"}]}}}})),
            &m
        ));
        assert!(!controls(&rollout(json!({"spec": {"disabled": true}})), &m));
        assert!(!controls(
            &rollout(json!({"spec": {"workloadRef": {"name": "other"}}})),
            &m
        ));
        assert!(controls(
            &rollout(
                json!({"spec": {"strategy": {"canary": {"enableExtraWorkloadForCanary": false}}}})
            ),
            &m
        ));
        assert!(!controls(
            &rollout(json!({"metadata": {"namespace": "elsewhere"}})),
            &m
        ));
    }

    #[test]
    fn a_template_change_mid_partition_release_freezes_every_group() {
        let with = |image: &str, p: Option<&str>| {
            let mut l = lws(image, Some("k1"));
            if let Some(p) = p {
                l.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(labels::RELEASE_PARTITION.into(), p.into());
            }
            l
        };
        let cases = [
            (
                "revert or third template: frozen at replicas",
                with("b", Some("1")),
                with("a", Some("1")),
                Some("kubectl"),
                Some("2"),
            ),
            (
                "already frozen: nothing",
                with("b", Some("1")),
                with("a", Some("2")),
                Some("kubectl"),
                None,
            ),
            (
                "the BatchRelease lowering it: nothing",
                with("b", Some("2")),
                with("b", Some("1")),
                Some(field_managers::BATCHRELEASE),
                None,
            ),
            (
                "dropped by a user: back",
                with("b", Some("1")),
                with("b", None),
                Some("kubectl"),
                Some("1"),
            ),
            (
                "removed with the hold by the Rollout: nothing",
                with("b", Some("1")),
                lws("b", None),
                Some(field_managers::RELEASE),
                None,
            ),
            (
                "no release partition: nothing",
                with("b", None),
                with("a", None),
                Some("kubectl"),
                None,
            ),
        ];
        for (name, old, new, manager, want) in cases {
            assert_eq!(freeze(&old, &new, manager).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn hold_decisions() {
        let running = || "stable-key".to_string();
        type Case<'a> = (
            &'a str,
            LeaderWorkerSet,
            LeaderWorkerSet,
            bool,
            Option<&'a str>,
            Option<&'a str>,
        );
        let cases: [Case; 7] = [
            (
                "a template change under a Rollout starts the hold",
                lws("a", None),
                lws("b", None),
                true,
                None,
                Some("stable-key"),
            ),
            (
                "no Rollout: nothing",
                lws("a", None),
                lws("b", None),
                false,
                None,
                None,
            ),
            (
                "no template change: nothing",
                lws("a", None),
                lws("a", None),
                true,
                None,
                None,
            ),
            (
                "a hold the request carries stays as it is",
                lws("a", Some("k1")),
                lws("c", Some("k1")),
                true,
                None,
                None,
            ),
            (
                "a user dropping the hold mid-release gets it back",
                lws("b", Some("k1")),
                lws("b", None),
                true,
                Some("kubectl"),
                Some("k1"),
            ),
            (
                "the Rollout controller releases it",
                lws("b", Some("k1")),
                lws("b", None),
                true,
                Some(field_managers::RELEASE),
                None,
            ),
            (
                "without a Rollout anyone may drop it",
                lws("b", Some("k1")),
                lws("b", None),
                false,
                Some("kubectl"),
                None,
            ),
        ];
        for (name, old, new, controlled, manager, want) in cases {
            assert_eq!(
                decide(&old, &new, controlled, manager, running).as_deref(),
                want,
                "{name}"
            );
        }
    }
}
