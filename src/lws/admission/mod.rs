//! What the LWS admission webhooks decide, as pure functions (`webhook::lws` and
//! `webhook::pods` serve them). Here: the defaulting CEL cannot do (`restartPolicy: Default` →
//! `None`) and the checks CEL cannot express (an annotation, and names too long for the objects
//! derived from them); everything else upstream's webhook checks lives in the CRD's CEL rules
//! (see `docs/api.md`), so it holds even with no webhook running. `pod_defaults` is what the pod
//! webhook does to a new pod (its TPU environment in `tpu`); `hold` keeps a released LWS's groups
//! on the stable revision while a release owns it.

pub mod error;
pub mod hold;
pub mod pod_defaults;
mod tpu;

use kube::ResourceExt;

use super::{labels, objects, rolling};
use crate::api::leaderworkerset::{LeaderWorkerSet, RestartPolicy};

/// Longest label value (and DNS label) Kubernetes accepts.
const MAX_LABEL: usize = 63;
/// The StatefulSet controller labels every pod `controller-revision-hash: <sts>-<hash>`, where
/// the hash is a 32-bit FNV in decimal, safe-encoded: up to 10 characters.
const REVISION_SUFFIX: usize = 1 + 10;

/// Upstream's defaulting of an empty `spec.rolloutStrategy.type`, on the object as JSON: upstream's
/// Go type has no `omitempty` on it, so every client built on upstream's API types that leaves
/// the strategy unset sends `type: ""`, which a CRD default (it fills only absent fields) and our
/// CRD's enum would refuse; upstream's webhook makes it `RollingUpdate`, and so does this.
/// Returns whether it changed the object.
pub fn default_empty_strategy_type(object: &mut serde_json::Value) -> bool {
    match object.pointer_mut("/spec/rolloutStrategy/type") {
        Some(value) if value.as_str() == Some("") => {
            *value = serde_json::Value::from(EMPTY_STRATEGY_TYPE_DEFAULT);
            true
        }
        _ => false,
    }
}

/// What an empty rollout strategy type becomes (upstream's only strategy).
pub const EMPTY_STRATEGY_TYPE_DEFAULT: &str = "RollingUpdate";

/// Upstream's defaulting that CRD defaults cannot do. Returns whether anything changed.
pub fn default_lws(lws: &mut LeaderWorkerSet) -> bool {
    let policy = &mut lws.spec.leader_worker_template.restart_policy;
    if *policy == Some(RestartPolicy::Default) {
        *policy = Some(RestartPolicy::None);
        return true;
    }
    false
}

/// Highest group index the LWS can have: `replicas - 1` plus surge groups during an update.
fn highest_group_index(lws: &LeaderWorkerSet) -> i32 {
    let replicas = objects::replicas(lws);
    let surge = objects::rolling_update(lws)
        .and_then(|r| r.max_surge.as_ref())
        .and_then(|s| rolling::scaled(s, replicas, true).ok())
        .unwrap_or(0)
        .clamp(0, replicas.max(0));
    (replicas + surge - 1).max(0)
}

/// Why the LWS's name is too long for a StatefulSet, pod or label derived from it, if it is.
///
/// The tightest constraint is the StatefulSet controller's revision label on pods:
/// `<lws>-<hash>` for leaders and `<lws>-<group>-<hash>` for workers must fit in 63 characters.
/// Upstream accepts such names and its groups then never get pods; we refuse them instead.
pub fn name_too_long(lws: &LeaderWorkerSet) -> Option<String> {
    let name = lws.name_any();
    let highest = highest_group_index(lws);
    let (longest, what) = if objects::size(lws) > 1 {
        (
            format!("{name}-{highest}"),
            format!("the worker StatefulSet of group {highest}"),
        )
    } else {
        (name.clone(), "the leader StatefulSet".to_string())
    };
    if longest.len() + REVISION_SUFFIX <= MAX_LABEL {
        return None;
    }
    let limit = MAX_LABEL - REVISION_SUFFIX - (longest.len() - name.len());
    Some(format!(
        "name {name:?} is too long for the objects derived from it: {what} is {longest:?}, and \
         the StatefulSet controller labels its pods with \"{longest}-<revision hash>\", which must \
         be at most {MAX_LABEL} characters; with {} group(s) the name may have at most {limit} \
         characters",
        highest + 1
    ))
}

/// The LWS webhook's checks, as `field: message` strings; empty when the LWS is acceptable.
/// `old` is the stored object on UPDATE.
pub fn validate(lws: &LeaderWorkerSet, old: Option<&LeaderWorkerSet>) -> Vec<String> {
    let mut errors = Vec::new();
    if lws.spec.leader_worker_template.sub_group_policy.is_none()
        && let Some(value) = lws.annotations().get(labels::SUBGROUP_EXCLUSIVE_TOPOLOGY)
    {
        errors.push(format!(
            "metadata.annotations[{}]: Invalid value: {value:?}: cannot have \
             subgroup-exclusive-topology without subGroupSize set",
            labels::SUBGROUP_EXCLUSIVE_TOPOLOGY
        ));
    }
    errors.extend(gang_errors(lws, old));
    // On UPDATE only refuse a change that makes things worse: an LWS stored before this check
    // existed must stay editable.
    if let Some(problem) = name_too_long(lws)
        && old.is_none_or(|old| name_too_long(old).is_none())
    {
        errors.push(format!("metadata.name: Invalid value: {problem}"));
    }
    errors
}

/// The gang-scheduling annotation (docs/lws.md, "Gang scheduling"): one value, fixed once the
/// LWS exists (its pod templates carry it: a change would replace every leader at once, and
/// a group half in a gang could never bind), and not with `startupPolicy: LeaderReady`, whose
/// workers wait for a Ready leader that the scheduler binds only with its workers.
fn gang_errors(lws: &LeaderWorkerSet, old: Option<&LeaderWorkerSet>) -> Vec<String> {
    let key = labels::GANG_SCHEDULING;
    let value = lws.annotations().get(key);
    let mut errors = Vec::new();
    if let Some(old) = old
        && old.annotations().get(key) != value
    {
        errors.push(format!(
            "metadata.annotations[{key}]: Forbidden: cannot be added, changed or removed once \
             the LeaderWorkerSet exists (its groups' pods carry it); create a new \
             LeaderWorkerSet instead"
        ));
        return errors;
    }
    if let Some(value) = value
        && value != labels::GANG_NATIVE
    {
        errors.push(format!(
            "metadata.annotations[{key}]: Unsupported value: {value:?}: supported values: {:?}",
            labels::GANG_NATIVE
        ));
    }
    if value.is_some()
        && lws.spec.startup_policy == Some(crate::api::leaderworkerset::StartupPolicy::LeaderReady)
    {
        errors.push(format!(
            "metadata.annotations[{key}]: Invalid value: cannot be combined with startupPolicy \
             LeaderReady: the workers would wait for a Ready leader, and a gang's leader is \
             bound only together with its workers"
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_strategy_type_becomes_rolling_update_and_nothing_else_changes() {
        let mut empty = serde_json::json!({"spec": {"rolloutStrategy": {"type": "", "rollingUpdateConfiguration": {"maxSurge": 1}}}});
        assert!(default_empty_strategy_type(&mut empty));
        assert_eq!(
            empty,
            serde_json::json!({"spec": {"rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 1}}}})
        );
        for untouched in [
            serde_json::json!({"spec": {"rolloutStrategy": {"type": "RollingUpdate"}}}),
            serde_json::json!({"spec": {"rolloutStrategy": {}}}),
            serde_json::json!({"spec": {}}),
            serde_json::json!({"spec": {"rolloutStrategy": {"type": "Recreate"}}}),
        ] {
            let mut object = untouched.clone();
            assert!(!default_empty_strategy_type(&mut object), "{untouched}");
            assert_eq!(object, untouched);
        }
    }

    fn lws(yaml: &str) -> LeaderWorkerSet {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn named(name: &str, replicas: i32, size: i32, surge: i32) -> LeaderWorkerSet {
        lws(&format!(
            r#"
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  rolloutStrategy:
    type: RollingUpdate
    rollingUpdateConfiguration: {{maxSurge: {surge}, maxUnavailable: 1}}
  leaderWorkerTemplate:
    size: {size}
    workerTemplate: {{spec: {{containers: [{{name: c, image: i}}]}}}}
"#
        ))
    }

    #[test]
    fn gang_scheduling_is_fixed_at_creation_and_refused_with_leader_ready() {
        let gang = |value: &str| {
            let mut l = named("a", 2, 4, 0);
            l.annotations_mut()
                .insert(labels::GANG_SCHEDULING.into(), value.into());
            l
        };
        assert!(validate(&gang("native"), None).is_empty());
        assert!(validate(&gang("native"), Some(&gang("native"))).is_empty());
        let bad = validate(&gang("volcano"), None);
        assert!(bad[0].contains("Unsupported value"), "{bad:?}");
        let plain = named("a", 2, 4, 0);
        for (new, old) in [(&gang("native"), &plain), (&plain, &gang("native"))] {
            let refused = validate(new, Some(old));
            assert!(
                refused[0].contains("once the LeaderWorkerSet exists"),
                "{refused:?}"
            );
        }
        let mut leader_ready = gang("native");
        leader_ready.spec.startup_policy =
            Some(crate::api::leaderworkerset::StartupPolicy::LeaderReady);
        let refused = validate(&leader_ready, None);
        assert!(refused[0].contains("LeaderReady"), "{refused:?}");
    }

    #[test]
    fn default_restart_policy_becomes_none_and_others_stay() {
        let mut l = named("a", 1, 2, 0);
        l.spec.leader_worker_template.restart_policy = Some(RestartPolicy::Default);
        assert!(default_lws(&mut l));
        assert_eq!(
            l.spec.leader_worker_template.restart_policy,
            Some(RestartPolicy::None)
        );
        assert!(!default_lws(&mut l), "idempotent");
        l.spec.leader_worker_template.restart_policy =
            Some(RestartPolicy::RecreateGroupOnPodRestart);
        assert!(!default_lws(&mut l));
    }

    #[test]
    fn names_are_limited_by_the_longest_revision_label() {
        // size 1: only the leader StatefulSet: 52 + "-" + 10 = 63.
        assert_eq!(name_too_long(&named(&"a".repeat(52), 3, 1, 0)), None);
        assert!(name_too_long(&named(&"a".repeat(53), 3, 1, 0)).is_some());
        // 10 groups (0..=9): "<name>-9-<hash>" → name ≤ 50.
        assert_eq!(name_too_long(&named(&"a".repeat(50), 10, 4, 0)), None);
        let msg = name_too_long(&named(&"a".repeat(51), 10, 4, 0)).unwrap();
        assert!(msg.contains("at most 50 characters"), "{msg}");
        assert!(msg.contains("group 9"), "{msg}");
        // Surge groups count: 10 + 1 surge → index 10 → name ≤ 49.
        assert!(name_too_long(&named(&"a".repeat(50), 10, 4, 1)).is_some());
        assert_eq!(name_too_long(&named(&"a".repeat(49), 10, 4, 1)), None);
        // Zero replicas: index 0.
        assert_eq!(name_too_long(&named(&"a".repeat(50), 0, 4, 0)), None);
    }

    #[test]
    fn subgroup_topology_needs_a_subgroup_policy() {
        let mut l = named("a", 1, 4, 0);
        l.metadata.annotations = Some(
            [(
                labels::SUBGROUP_EXCLUSIVE_TOPOLOGY.to_string(),
                "zone".to_string(),
            )]
            .into(),
        );
        let errors = validate(&l, None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("without subGroupSize set"), "{errors:?}");
        l.spec.leader_worker_template.sub_group_policy = Some(Default::default());
        assert!(validate(&l, None).is_empty());
    }

    #[test]
    fn an_update_may_keep_but_not_introduce_a_long_name() {
        let long = named(&"a".repeat(50), 11, 4, 0);
        let short_groups = named(&"a".repeat(50), 10, 4, 0);
        assert!(validate(&short_groups, None).is_empty());
        assert_eq!(validate(&long, None).len(), 1);
        assert_eq!(
            validate(&long, Some(&short_groups)).len(),
            1,
            "scaling into it"
        );
        assert!(validate(&long, Some(&long)).is_empty(), "already stored");
    }
}
