//! `rollout undo` of a prefill/decode pair: the DisaggregatedSet's role templates put back to
//! the revision the release holds.
//!
//! A DisaggregatedSet keeps no ControllerRevisions (upstream's does not either), so the
//! templates are read back from the held pair's own LeaderWorkerSets: what the set's
//! controller adds to a role's template (its labels on both pod templates, the placement's
//! affinity terms) is taken out again, and the result is used only if it hashes to the held
//! revision — then it is byte for byte what the set ran. Anything else is refused with what to
//! do instead, never written half-right.

use k8s_openapi::api::core::v1::{PodAffinityTerm, PodSpec, PodTemplateSpec};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::Refusal;
use crate::{
    api::{
        DisaggregatedSet, LeaderWorkerSet,
        disaggregatedset::{
            DisaggregatedRoleSpec, HELD_REVISION_ANNOTATION, REVISION_LABEL, ROLE_LABEL,
            SET_NAME_LABEL, SLICE_LABEL,
        },
        leaderworkerset::LeaderWorkerTemplate,
    },
    disaggregatedset::{
        objects::{labels, place},
        revision::revision,
    },
};

/// The JSON patch that puts `set`'s role templates back to its held revision, read from the
/// held pair's LWSs among `lws`, and that revision.
pub fn pair_template_revert_patch(
    set: &DisaggregatedSet,
    lws: &[LeaderWorkerSet],
) -> Result<(Value, String), Refusal> {
    let name = set.name_any();
    let held = set
        .annotations()
        .get(HELD_REVISION_ANNOTATION)
        .filter(|v| !v.is_empty())
        .cloned()
        .ok_or_else(|| {
            Refusal::State(format!(
                "no release of DisaggregatedSet {name} is in progress (it has no \
                 {HELD_REVISION_ANNOTATION} annotation): nothing to undo"
            ))
        })?;
    if revision(&set.spec.roles).ok().as_ref() == Some(&held) {
        return Err(Refusal::State(format!(
            "the role templates of DisaggregatedSet {name} are already the held revision \
             {held}: the release is being rolled back"
        )));
    }
    let rv = set
        .resource_version()
        .ok_or_else(|| Refusal::Data("the DisaggregatedSet has no resourceVersion".into()))?;
    let mut roles = set.spec.roles.clone();
    for role in &mut roles {
        let (slice, held_lws) = held_lws(&name, &role.name, &held, lws).ok_or_else(|| {
            Refusal::State(format!(
                "the held pair (revision {held}) has no LeaderWorkerSet of role {}: its \
                 template cannot be read back; revert the set's manifest instead",
                role.name
            ))
        })?;
        let template = read_back(set, slice, role, &held, held_lws);
        role.spec
            .get_or_insert_with(Default::default)
            .leader_worker_template = template;
    }
    let got = revision(&roles).map_err(|e| Refusal::Data(e.to_string()))?;
    if got != held {
        return Err(Refusal::Data(format!(
            "the held pair's role templates, read back from its LeaderWorkerSets, are revision \
             {got}, not the held {held} (a role added, removed or renamed since, or a \
             LeaderWorkerSet edited by hand): revert the set's manifest instead"
        )));
    }
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv})];
    for (i, (role, was)) in roles.iter().zip(&set.spec.roles).enumerate() {
        let template = role
            .spec
            .as_ref()
            .map(|s| serde_json::to_value(&s.leader_worker_template))
            .transpose()
            .map_err(|e| Refusal::Data(e.to_string()))?;
        // `add` replaces an existing member; a role written without a spec gets one.
        ops.push(match was.spec {
            Some(_) => json!({"op": "add", "path": format!("/spec/roles/{i}/spec/leaderWorkerTemplate"), "value": template}),
            None => json!({"op": "add", "path": format!("/spec/roles/{i}/spec"), "value": {"leaderWorkerTemplate": template}}),
        });
    }
    Ok((Value::Array(ops), held))
}

/// The held pair's LWS of `role` with the lowest slice, and that slice.
fn held_lws<'a>(
    set: &str,
    role: &str,
    held: &str,
    lws: &'a [LeaderWorkerSet],
) -> Option<(i32, &'a LeaderWorkerSet)> {
    lws.iter()
        .filter(|l| {
            let labels = l.labels();
            labels.get(SET_NAME_LABEL).map(String::as_str) == Some(set)
                && labels.get(ROLE_LABEL).map(String::as_str) == Some(role)
                && labels.get(REVISION_LABEL).map(String::as_str) == Some(held)
        })
        .map(|l| {
            let slice = l
                .labels()
                .get(SLICE_LABEL)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            (slice, l)
        })
        .min_by_key(|(slice, _)| *slice)
}

/// `role`'s template as the set held it, from its LWS in `slice`: the set's labels and the
/// placement's affinity terms (what `objects::lws` adds) taken out.
fn read_back(
    set: &DisaggregatedSet,
    slice: i32,
    role: &DisaggregatedRoleSpec,
    held: &str,
    lws: &LeaderWorkerSet,
) -> LeaderWorkerTemplate {
    let name = set.name_any();
    let ours = labels(&name, slice, &role.name, held);
    let mut added = PodSpec::default();
    if let Some(placement) = set
        .spec
        .placement_policy
        .as_ref()
        .and_then(|p| p.effective())
    {
        place(&mut added, &name, slice, placement);
    }
    let mut template = lws.spec.leader_worker_template.clone();
    let strip = |pod: &mut PodTemplateSpec| {
        if let Some(meta) = pod.metadata.as_mut() {
            if let Some(l) = meta.labels.as_mut() {
                l.retain(|k, v| ours.get(k) != Some(v));
                if l.is_empty() {
                    meta.labels = None;
                }
            }
            if *meta == Default::default() {
                pod.metadata = None;
            }
        }
        if let Some(spec) = pod.spec.as_mut() {
            remove_terms(spec, &added);
        }
    };
    strip(&mut template.worker_template);
    if let Some(leader) = template.leader_template.as_mut() {
        strip(leader);
    }
    template
}

/// Takes `added`'s required pod (anti-)affinity terms out of `pod`, and what they leave empty.
fn remove_terms(pod: &mut PodSpec, added: &PodSpec) {
    let (Some(affinity), Some(theirs)) = (pod.affinity.as_mut(), added.affinity.as_ref()) else {
        return;
    };
    without(
        &mut affinity.pod_affinity,
        theirs.pod_affinity.as_ref(),
        |a| &mut a.required_during_scheduling_ignored_during_execution,
        |a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        },
    );
    without(
        &mut affinity.pod_anti_affinity,
        theirs.pod_anti_affinity.as_ref(),
        |a| &mut a.required_during_scheduling_ignored_during_execution,
        |a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        },
    );
    if *affinity == Default::default() {
        pod.affinity = None;
    }
}

/// `part` without the required terms `theirs` has, and `None` once nothing is left of it.
fn without<A: Default + PartialEq>(
    part: &mut Option<A>,
    theirs: Option<&A>,
    terms: impl Fn(&mut A) -> &mut Option<Vec<PodAffinityTerm>>,
    their_terms: impl Fn(&A) -> Option<&Vec<PodAffinityTerm>>,
) {
    let Some(a) = part.as_mut() else {
        return;
    };
    let gone = theirs.and_then(&their_terms).cloned().unwrap_or_default();
    let kept = terms(a);
    if let Some(list) = kept.as_mut() {
        list.retain(|t| !gone.contains(t));
        if list.is_empty() {
            *kept = None;
        }
    }
    if *a == A::default() {
        *part = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disaggregatedset::objects::lws as child;

    /// A two-role set on `image`, with a placement policy when `placed`, held on `held`.
    fn set(image: &str, placed: bool, held: Option<&str>) -> DisaggregatedSet {
        let role = |name: &str| {
            json!({"name": name, "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": {"metadata": {"labels": {"tier": "lead"}},
                    "spec": {"containers": [{"name": "c", "image": image}]}},
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}})
        };
        let mut annotations = serde_json::Map::new();
        if let Some(h) = held {
            annotations.insert(HELD_REVISION_ANNOTATION.into(), json!(h));
        }
        let mut spec = json!({"roles": [role("prefill"), role("decode")]});
        if placed {
            spec["slices"] = json!(2);
            spec["placementPolicy"] = json!({"type": "ExclusiveTopology", "topology": "rack"});
        }
        serde_json::from_value(json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "demo", "resourceVersion": "7", "uid": "u",
                "annotations": annotations},
            "spec": spec
        }))
        .unwrap()
    }

    /// The set's LWSs of every slice for its template as it is now.
    fn children(set: &DisaggregatedSet) -> Vec<LeaderWorkerSet> {
        let rev = revision(&set.spec.roles).unwrap();
        let mut out = Vec::new();
        for slice in 0..set.spec.slices() {
            for role in &set.spec.roles {
                out.push(child(set, slice, role, &rev, 2));
            }
        }
        out
    }

    #[test]
    fn the_held_templates_are_read_back_from_the_held_pair_whatever_its_placement() {
        for placed in [false, true] {
            let stable = set("vllm:1", placed, None);
            let held = revision(&stable.spec.roles).unwrap();
            let lws = children(&stable);
            let released = set("vllm:2", placed, Some(&held));
            let (patch, revision) = pair_template_revert_patch(&released, &lws).unwrap();
            assert_eq!(revision, held, "placed: {placed}");
            let mut doc = serde_json::to_value(&released).unwrap();
            let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
            json_patch::patch(&mut doc, &patch).unwrap();
            assert_eq!(
                doc["spec"],
                serde_json::to_value(&stable).unwrap()["spec"],
                "placed: {placed}"
            );
        }
    }

    #[test]
    fn nothing_to_undo_or_nothing_to_read_back_is_refused() {
        let stable = set("vllm:1", false, None);
        let held = revision(&stable.spec.roles).unwrap();
        let lws = children(&stable);
        // No release in flight.
        let err = pair_template_revert_patch(&set("vllm:2", false, None), &lws).unwrap_err();
        assert!(err.to_string().contains("nothing to undo"), "{err}");
        // Already back on the held revision.
        let err = pair_template_revert_patch(&set("vllm:1", false, Some(&held)), &lws).unwrap_err();
        assert!(
            err.to_string().contains("already the held revision"),
            "{err}"
        );
        // The held pair's LWSs are gone.
        let released = set("vllm:2", false, Some(&held));
        let err = pair_template_revert_patch(&released, &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("has no LeaderWorkerSet of role prefill"),
            "{err}"
        );
        // A held LWS edited by hand no longer hashes to the held revision.
        let mut edited = lws.clone();
        edited[1].spec.leader_worker_template.size = Some(4);
        let err = pair_template_revert_patch(&released, &edited).unwrap_err();
        assert!(err.to_string().contains("not the held"), "{err}");
    }
}
