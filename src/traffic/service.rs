//! The stable Service's pin and restore, and the canary Service copied from it.
//!
//! Both Services select leader pods only: traffic reaches a group through its leader. The
//! stable Service is pinned by adding `leaderworkerset.sigs.k8s.io/name: <stable LWS>` (a canary
//! LWS copies the leader template's labels, so the user's selector alone would also select
//! canary leaders). Both selectors also get `worker-index: "0"` unless the user's selector
//! already names a worker index: leaders always carry that label, so it never drops a leader,
//! and without it a selector built from labels shared with the worker template would send
//! requests straight to workers. The same rule on both sides keeps a weight meaning the same
//! thing on both.
//!
//! `spec.selector` is an atomic map for server-side apply, so an apply would take the whole
//! selector from the user's field manager (and conflict with Argo CD's). The pin is therefore a
//! JSON patch computed from the observed Service, and the user's selector is recorded in an
//! annotation in the same patch, so the restore is exact even after a crash.

use super::{
    intent::Leaders,
    json, names,
    observe::OwnerInfo,
    write::{Kind, Owned, Problem, Target, Write},
};
use crate::k8s::field_managers;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

type Selector = BTreeMap<String, String>;

/// The selector the user wrote: the recorded one while our pin is in place, else the current
/// one (also when the user rewrote the selector during the release: theirs wins).
pub fn user_selector(stable: &Service) -> Option<Selector> {
    let current = selector(stable)?;
    Some(match recorded(stable) {
        Some(original) if is_pin_of(&current, &original) => original,
        _ => current,
    })
}

/// `selector` restricted to `leaders`.
pub fn leader_selector(selector: &Selector, leaders: &Leaders) -> Selector {
    let mut out = selector.clone();
    let (name_key, revision_key) = if leaders.set {
        (names::SET_NAME, names::SET_REVISION)
    } else {
        (names::LWS_NAME, names::REVISION)
    };
    out.insert(name_key.into(), leaders.lws.clone());
    if let Some(revision) = &leaders.revision {
        out.insert(revision_key.into(), revision.clone());
    }
    out.entry(names::WORKER_INDEX.into())
        .or_insert_with(|| "0".into());
    out
}

/// The patch pinning the stable Service to `stable_lws`, or `None` when it is.
pub fn pin(stable: &Service, stable_lws: &Leaders) -> Result<Option<Write>, Problem> {
    let name = stable.metadata.name.clone().unwrap_or_default();
    let original = user_selector(stable).ok_or_else(|| Problem::NoSelector(name.clone()))?;
    let pinned = leader_selector(&original, stable_lws);
    let mut desired = stable.clone();
    let record = (pinned != original).then(|| serde_json::to_string(&original).expect("map"));
    set_annotation(&mut desired.metadata, names::ORIGINAL_SELECTOR, record);
    desired.spec.get_or_insert_with(Default::default).selector = Some(pinned);
    Ok(patch(stable, &desired))
}

/// The patch giving the stable Service back the selector the user wrote, or `None` when
/// nothing of ours is on it. A selector the user rewrote during the release stays theirs.
pub fn unpin(stable: &Service) -> Option<Write> {
    recorded(stable)?;
    let mut desired = stable.clone();
    if let Some(original) = user_selector(stable) {
        desired.spec.get_or_insert_with(Default::default).selector = Some(original);
    }
    set_annotation(&mut desired.metadata, names::ORIGINAL_SELECTOR, None);
    patch(stable, &desired)
}

/// The canary Service: a copy of the stable one selecting the leaders of `canary_lws`, owned
/// by the Rollout. It is only ever a backend of the route or the canary Ingress, so it is a
/// `ClusterIP` Service: no node ports, no second cloud load balancer, nothing the stable
/// Service's cluster must allocate twice.
pub fn canary(
    stable: &Service,
    canary_lws: &Leaders,
    owner: &OwnerInfo,
) -> Result<Service, Problem> {
    let stable_name = stable.metadata.name.clone().unwrap_or_default();
    let name = names::canary_service(&stable_name);
    if name.len() > names::MAX_SERVICE_NAME {
        return Err(Problem::TooLarge {
            target: Target {
                kind: Kind::Service,
                name,
            },
            limit: format!(
                "a Service name is at most {} characters",
                names::MAX_SERVICE_NAME
            ),
        });
    }
    let original = user_selector(stable).ok_or_else(|| Problem::NoSelector(stable_name.clone()))?;
    let spec = stable.spec.clone().unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let ports = spec.ports.map(|ports| {
        ports
            .into_iter()
            .map(|mut p| {
                p.node_port = None;
                p
            })
            .collect()
    });
    let mut labels = copy_untracked(stable.metadata.labels.as_ref());
    labels.insert(names::CANARY_OF.into(), stable_name.clone());
    let mut annotations = copy_untracked(stable.metadata.annotations.as_ref());
    annotations.remove(names::ORIGINAL_SELECTOR);
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: stable.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner.owner_reference()]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            // A headless Service stays headless: "None" is a choice, not an allocated address.
            cluster_ip: headless.then(|| "None".into()),
            cluster_ips: headless.then(|| vec!["None".into()]),
            selector: Some(leader_selector(&original, canary_lws)),
            ports,
            session_affinity: spec.session_affinity,
            session_affinity_config: spec.session_affinity_config,
            publish_not_ready_addresses: spec.publish_not_ready_addresses,
            internal_traffic_policy: spec.internal_traffic_policy,
            traffic_distribution: spec.traffic_distribution,
            ..Default::default()
        }),
        status: None,
    })
}

/// The write bringing the observed canary Service to `desired`, or `None` when it holds it.
pub fn apply_canary(observed: Option<&Service>, desired: Service) -> Option<Write> {
    if observed.is_some_and(|o| json::holds(o, &desired)) {
        return None;
    }
    Some(Write::Apply {
        object: Owned::Service(Box::new(desired)),
        field_manager: field_managers::TRAFFIC,
    })
}

/// Whether `current` is `original` plus (only) our leader keys.
fn is_pin_of(current: &Selector, original: &Selector) -> bool {
    let ours = |k: &str| {
        k == names::LWS_NAME
            || k == names::WORKER_INDEX
            || k == names::REVISION
            || k == names::SET_NAME
            || k == names::SET_REVISION
    };
    (current.contains_key(names::LWS_NAME) || current.contains_key(names::SET_NAME))
        && original
            .iter()
            .all(|(k, v)| ours(k) || current.get(k) == Some(v))
        && current.keys().all(|k| ours(k) || original.contains_key(k))
}

fn selector(service: &Service) -> Option<Selector> {
    service
        .spec
        .as_ref()?
        .selector
        .clone()
        .filter(|s| !s.is_empty())
}

fn recorded(service: &Service) -> Option<Selector> {
    let text = service
        .metadata
        .annotations
        .as_ref()?
        .get(names::ORIGINAL_SELECTOR)?;
    serde_json::from_str(text).ok()
}

pub(super) fn set_annotation(meta: &mut ObjectMeta, key: &str, value: Option<String>) {
    let map = meta.annotations.get_or_insert_with(Default::default);
    match value {
        Some(v) => {
            map.insert(key.into(), v);
        }
        None => {
            map.remove(key);
        }
    }
    if map.is_empty() {
        meta.annotations = None;
    }
}

pub(super) fn copy_untracked(map: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    map.into_iter()
        .flatten()
        .filter(|(k, _)| !names::is_tracking_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn patch(observed: &Service, desired: &Service) -> Option<Write> {
    json::patch_between(observed, desired).map(|patch| Write::Patch {
        target: Target {
            kind: Kind::Service,
            name: observed.metadata.name.clone().unwrap_or_default(),
        },
        patch,
        field_manager: field_managers::TRAFFIC,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::fixtures::*;
    use serde_json::json;

    fn patch_json(w: Option<Write>) -> serde_json::Value {
        match w.expect("a write") {
            Write::Patch { patch, .. } => serde_json::to_value(patch).unwrap(),
            other => panic!("expected a patch, got {other:?}"),
        }
    }

    fn pinned(svc: &Service) -> Service {
        let mut obs = crate::traffic::observe::TrafficObserved {
            stable_service: Some(svc.clone()),
            ..Default::default()
        };
        execute(&mut obs, &[pin(svc, &"vllm".into()).unwrap().unwrap()]);
        obs.stable_service.unwrap()
    }

    #[test]
    fn pin_adds_lws_name_and_leader_index_and_records_the_user_selector_in_one_guarded_patch() {
        let svc = service(json!({"app": "vllm"}));
        assert_eq!(
            patch_json(pin(&svc, &"vllm".into()).unwrap()),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "10"},
                {"op": "add", "path": "/metadata/annotations/lws-rollout.x-k8s.io~1original-selector",
                 "value": "{\"app\":\"vllm\"}"},
                {"op": "add", "path": "/spec/selector/leaderworkerset.sigs.k8s.io~1name", "value": "vllm"},
                {"op": "add", "path": "/spec/selector/leaderworkerset.sigs.k8s.io~1worker-index", "value": "0"}
            ])
        );
    }

    /// Partition style: both sides are one LWS, told apart by the template revision; the pin
    /// moves between "one revision" and "every revision" and the restore is still exact.
    #[test]
    fn a_revision_pin_narrows_to_one_template_and_unpins_exactly() {
        let svc = service(json!({"app": "vllm"}));
        let selector = |s: &Service| s.spec.as_ref().unwrap().selector.clone().unwrap();
        let mut obs = crate::traffic::observe::TrafficObserved {
            stable_service: Some(svc.clone()),
            ..Default::default()
        };
        execute(
            &mut obs,
            &[pin(&svc, &Leaders::at("vllm", "rev1")).unwrap().unwrap()],
        );
        let at_rev1 = obs.stable_service.clone().unwrap();
        assert_eq!(
            selector(&at_rev1).get(names::REVISION).map(String::as_str),
            Some("rev1")
        );
        // Every revision (a partition-style release succeeding): the revision key goes, the
        // recorded user selector stays the record.
        execute(&mut obs, &[pin(&at_rev1, &"vllm".into()).unwrap().unwrap()]);
        let any = obs.stable_service.clone().unwrap();
        assert!(!selector(&any).contains_key(names::REVISION));
        assert_eq!(
            selector(&any).get(names::LWS_NAME).map(String::as_str),
            Some("vllm")
        );
        execute(&mut obs, &[unpin(&any).unwrap()]);
        assert_eq!(
            selector(obs.stable_service.as_ref().unwrap()),
            BTreeMap::from([("app".to_string(), "vllm".to_string())])
        );
        let canary = canary(&svc, &Leaders::at("vllm", "rev2"), &owner()).unwrap();
        assert_eq!(
            selector(&canary).get(names::REVISION).map(String::as_str),
            Some("rev2")
        );
    }

    /// A DisaggregatedSet's pair: the user's Service selects the set's prefill role; the sides
    /// are the set's leaders told apart by the set's revision label, and the restore is exact.
    #[test]
    fn a_set_pin_selects_the_sets_leaders_of_one_revision_and_unpins_exactly() {
        let users = json!({"disaggregatedset.x-k8s.io/name": "pd",
            "disaggregatedset.x-k8s.io/role": "prefill"});
        let svc = service(users.clone());
        let selector = |s: &Service| s.spec.as_ref().unwrap().selector.clone().unwrap();
        let mut obs = crate::traffic::observe::TrafficObserved {
            stable_service: Some(svc.clone()),
            ..Default::default()
        };
        let held = Leaders::of_set("pd", Some("h".into()));
        execute(&mut obs, &[pin(&svc, &held).unwrap().unwrap()]);
        let pinned = obs.stable_service.clone().unwrap();
        let want = |revision: Option<&str>| {
            let mut m: BTreeMap<String, String> = serde_json::from_value(users.clone()).unwrap();
            if let Some(r) = revision {
                m.insert(names::SET_REVISION.into(), r.into());
            }
            m.insert(names::WORKER_INDEX.into(), "0".into());
            m
        };
        assert_eq!(selector(&pinned), want(Some("h")));
        assert!(!selector(&pinned).contains_key(names::LWS_NAME));
        let canary = canary(&svc, &Leaders::of_set("pd", Some("c".into())), &owner()).unwrap();
        assert_eq!(selector(&canary), want(Some("c")));
        // Every revision (the release succeeding while the set rolls), then restored.
        execute(
            &mut obs,
            &[pin(&pinned, &Leaders::of_set("pd", None)).unwrap().unwrap()],
        );
        assert_eq!(selector(obs.stable_service.as_ref().unwrap()), want(None));
        let any = obs.stable_service.clone().unwrap();
        execute(&mut obs, &[unpin(&any).unwrap()]);
        assert_eq!(
            selector(obs.stable_service.as_ref().unwrap()),
            serde_json::from_value::<BTreeMap<String, String>>(users).unwrap()
        );
    }

    #[test]
    fn pin_is_idempotent_and_keeps_a_users_own_worker_index() {
        let svc = service(json!({"app": "vllm", "leaderworkerset.sigs.k8s.io/worker-index": "0"}));
        let after = pinned(&svc);
        assert_eq!(
            after.spec.as_ref().unwrap().selector.as_ref().unwrap(),
            &BTreeMap::from([
                ("app".to_string(), "vllm".to_string()),
                (names::LWS_NAME.to_string(), "vllm".to_string()),
                (names::WORKER_INDEX.to_string(), "0".to_string()),
            ])
        );
        assert_eq!(
            pin(&after, &"vllm".into()).unwrap(),
            None,
            "second pin writes nothing"
        );
        // A selector that already is the pin needs neither a write nor a record.
        let already =
            service(json!({"app": "vllm", names::LWS_NAME: "vllm", names::WORKER_INDEX: "0"}));
        assert_eq!(pin(&already, &"vllm".into()).unwrap(), None);
        assert_eq!(unpin(&already), None);
    }

    #[test]
    fn unpin_restores_the_exact_service() {
        let svc = service(json!({"app": "vllm", names::LWS_NAME: "old-name"}));
        let after = pinned(&svc);
        assert_eq!(
            after.spec.as_ref().unwrap().selector.as_ref().unwrap()[names::LWS_NAME],
            "vllm"
        );
        let mut obs = crate::traffic::observe::TrafficObserved {
            stable_service: Some(after.clone()),
            ..Default::default()
        };
        execute(&mut obs, &[unpin(&after).unwrap()]);
        let restored = obs.stable_service.unwrap();
        assert_eq!(content(&restored), content(&svc));
        assert_eq!(unpin(&restored), None, "nothing of ours left");
    }

    #[test]
    fn a_selector_the_user_rewrites_during_the_release_is_theirs() {
        let after = pinned(&service(json!({"app": "vllm"})));
        // Argo CD syncs a new selector over our pin; the record is now stale.
        let mut synced = after.clone();
        synced.spec.as_mut().unwrap().selector =
            Some(BTreeMap::from([("app".into(), "vllm-v2".into())]));
        assert_eq!(user_selector(&synced).unwrap()["app"], "vllm-v2");
        let repin = patch_json(pin(&synced, &"vllm".into()).unwrap());
        assert!(
            repin.to_string().contains(r#"{\"app\":\"vllm-v2\"}"#),
            "{repin}"
        );
        // Restoring now keeps their selector and only drops our record.
        let mut obs = crate::traffic::observe::TrafficObserved {
            stable_service: Some(synced.clone()),
            ..Default::default()
        };
        execute(&mut obs, &[unpin(&synced).unwrap()]);
        let s = obs.stable_service.unwrap();
        assert_eq!(s.spec.unwrap().selector.unwrap()["app"], "vllm-v2");
        assert!(
            !s.metadata
                .annotations
                .unwrap()
                .contains_key(names::ORIGINAL_SELECTOR)
        );
    }

    #[test]
    fn a_service_without_selector_cannot_be_pinned() {
        let mut svc = service(json!({}));
        assert_eq!(
            pin(&svc, &"vllm".into()),
            Err(Problem::NoSelector("svc".into()))
        );
        svc.spec.as_mut().unwrap().selector = None;
        assert_eq!(
            canary(&svc, &"c".into(), &owner()).unwrap_err(),
            Problem::NoSelector("svc".into())
        );
    }

    #[test]
    fn canary_is_a_cluster_ip_copy_selecting_canary_leaders_owned_by_the_rollout() {
        // Copied from a pinned Service: the record must not leak into the copy.
        let stable = pinned(&load_balancer_service());
        let c = json_of(&canary(&stable, &"vllm-canary-abc".into(), &owner()).unwrap());
        assert_eq!(
            c,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "svc-canary", "namespace": "ns",
                    "labels": {"app": "vllm", names::CANARY_OF: "svc"},
                    "annotations": {"team": "inference"},
                    "ownerReferences": [{"apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
                        "name": "r", "uid": "rollout-uid", "controller": true, "blockOwnerDeletion": true}]
                },
                "spec": {
                    "type": "ClusterIP",
                    "selector": {"app": "vllm", names::LWS_NAME: "vllm-canary-abc", names::WORKER_INDEX: "0"},
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8000}],
                    "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"
                }
            })
        );
    }

    #[test]
    fn a_headless_service_gets_a_headless_canary() {
        let mut svc = service(json!({"app": "vllm"}));
        let spec = svc.spec.as_mut().unwrap();
        spec.cluster_ip = Some("None".into());
        spec.cluster_ips = Some(vec!["None".into()]);
        let c = canary(&svc, &"c".into(), &owner()).unwrap().spec.unwrap();
        assert_eq!(c.cluster_ip.as_deref(), Some("None"));
        assert_eq!(c.cluster_ips, Some(vec!["None".to_string()]));
    }

    #[test]
    fn a_canary_name_longer_than_a_service_name_may_be_is_a_problem() {
        let mut svc = service(json!({"app": "vllm"}));
        svc.metadata.name = Some("s".repeat(60));
        assert!(matches!(
            canary(&svc, &"c".into(), &owner()),
            Err(Problem::TooLarge { target, .. }) if target.name.len() == 67
        ));
    }

    #[test]
    fn applied_canary_with_server_fields_is_in_place_and_a_new_canary_lws_is_not() {
        let stable = service(json!({"app": "vllm"}));
        let desired = canary(&stable, &"vllm-canary-abc".into(), &owner()).unwrap();
        assert!(apply_canary(None, desired.clone()).is_some());
        let mut obs = crate::traffic::observe::TrafficObserved::default();
        execute(&mut obs, &[apply_canary(None, desired.clone()).unwrap()]);
        let stored = obs.canary_service.unwrap();
        assert!(stored.spec.as_ref().unwrap().cluster_ip.is_some());
        assert_eq!(apply_canary(Some(&stored), desired), None);
        let other = canary(&stable, &"vllm-canary-def".into(), &owner()).unwrap();
        assert!(apply_canary(Some(&stored), other).is_some());
    }
}
