//! Headless Services: one shared `<lws>` Service (Shared subdomain policy), or one `<lws>-<i>`
//! per group (UniquePerReplica).
//!
//! A per-group Service lives exactly as long as its group: it exists for every ordinal the
//! leader StatefulSet has (surge groups included) and goes only once the ordinal is scaled
//! away *and* the group's pods are gone. It is owned by the LWS, not by the leader pod as
//! upstream does: a leader-owned Service vanishes (garbage-collected) whenever its leader is
//! replaced — and, written from a cache a moment behind, it can name a leader incarnation that
//! is already gone and be collected the instant it is created — so group DNS names blinked
//! out mid-update.

use std::collections::BTreeSet;

use kube::ResourceExt;

use super::{Delete, How, OnRefusal, Plan, Write, reasons};
use crate::{
    api::leaderworkerset::{LeaderWorkerSet, SubdomainPolicy},
    k8s::{apply::controller_uid, events::EventSpec},
    lws::{deref::Dereferenced, error::Failure, labels, objects, observe::Observed},
};

/// Plans the Services of `lws`; `sts_replicas` is the leader StatefulSet's replicas after this
/// plan.
pub fn plan(
    lws: &LeaderWorkerSet,
    observed: &Observed,
    deref: &Dereferenced,
    sts_replicas: i32,
    plan: &mut Plan,
) {
    match objects::subdomain_policy(lws) {
        SubdomainPolicy::Shared => shared(lws, observed, deref, plan),
        SubdomainPolicy::UniquePerReplica => per_group(lws, observed, sts_replicas, plan),
    }
}

fn shared(lws: &LeaderWorkerSet, observed: &Observed, deref: &Dereferenced, plan: &mut Plan) {
    let name = lws.name_any();
    let existing = observed
        .services
        .iter()
        .find(|s| s.name_any() == name)
        .map(|s| s.as_ref())
        .or(deref.shared_service.as_deref());
    match existing {
        // Created a moment ago, not in the cache yet: nothing to create again (looked at again
        // within the patience if its watch event does not come).
        None if observed.shared_service_pending => {
            plan.requeue_within(Some(crate::k8s::expected::PATIENCE));
        }
        Some(svc) if controller_uid(svc) == lws.metadata.uid.as_deref() => {}
        Some(_) => {
            // A user's Service with our name: never taken over; the groups still come up,
            // only their DNS names do not resolve.
            let problem = format!(
                "Service {name} already exists and is not controlled by this LeaderWorkerSet, \
                 so group DNS names ({name}-<group>.{name}) do not resolve"
            );
            if !condition_says(lws, &problem) {
                plan.events.push(EventSpec::warning(
                    reasons::FAILED_CREATE,
                    format!("Failed to create headless service for error: {problem}"),
                ));
            }
            plan.failure = Some(Failure::blocked("ObjectConflict", problem));
        }
        None => plan.services.push(Write {
            object: objects::shared_headless_service(lws),
            how: if deref.verified {
                How::CreateIfAbsent
            } else {
                How::CreateUnseen
            },
            on_success: Vec::new(),
            on_failure: Vec::new(),
            on_refusal: Some(OnRefusal {
                reason: "ObjectConflict",
                what: format!("the API server refused headless Service {name}"),
                blocks: false,
            }),
        }),
    }
}

fn condition_says(lws: &LeaderWorkerSet, message: &str) -> bool {
    lws.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.message == message))
}

fn per_group(lws: &LeaderWorkerSet, observed: &Observed, sts_replicas: i32, plan: &mut Plan) {
    let name = lws.name_any();
    // Ordinals the StatefulSet has now or is about to have.
    let observed_replicas = observed
        .leader_sts
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.replicas)
        .unwrap_or(0);
    let wanted = sts_replicas.max(observed_replicas);
    // Groups that still have pods, whatever the StatefulSet says.
    let with_pods: BTreeSet<i32> = observed
        .pods
        .iter()
        .filter_map(|p| p.labels().get(labels::GROUP_INDEX)?.parse().ok())
        .collect();
    for index in 0..wanted {
        let svc_name = format!("{name}-{index}");
        // One made by an older controller (owned by a leader pod) stays until the garbage
        // collector takes it with that leader; ours replaces it then.
        if observed.services.iter().any(|s| s.name_any() == svc_name) {
            continue;
        }
        plan.services.push(Write {
            object: objects::group_headless_service(lws, index),
            how: How::CreateIfAbsent,
            on_success: Vec::new(),
            on_failure: Vec::new(),
            on_refusal: None,
        });
    }
    for svc in &observed.services {
        let Some(index) = group_of_service(&name, &svc.name_any()) else {
            continue;
        };
        if index >= wanted
            && !with_pods.contains(&index)
            && svc.metadata.deletion_timestamp.is_none()
        {
            plan.delete_services.push(Delete {
                name: svc.name_any(),
                uid: svc.metadata.uid.clone(),
            });
        }
    }
}

/// `<lws>-<i>` → `i`.
fn group_of_service(lws: &str, service: &str) -> Option<i32> {
    let suffix = service.strip_prefix(lws)?.strip_prefix('-')?;
    if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix.parse().ok()
}
