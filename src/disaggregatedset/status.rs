//! The status of a DisaggregatedSet (ours: upstream v0.9.0's schema has these fields but its
//! controller writes none): per role, its groups, ready groups and groups on the current
//! revision; and the conditions upstream's schema names — `Available` (every role has its
//! replicas ready), `Progressing` (a rolling update or a scale under way), `Degraded` (the set
//! cannot be realised, or a role's LWS reports `ReplicaFailure`). Each condition states the
//! generation it was computed for. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::observe::Observed;
use crate::{
    api::disaggregatedset::{
        DisaggregatedSet, DisaggregatedSetStatus, REVISION_LABEL, ROLE_LABEL, RoleStatus,
    },
    k8s::conditions,
};

/// Condition type: every role has its replicas ready.
pub const AVAILABLE: &str = "Available";
/// Condition type: a rolling update or a scale is under way.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the set or one of its LWSs cannot be realised.
pub const DEGRADED: &str = "Degraded";
/// `Progressing` reason: a release holds the set on its stable revision, which runs every
/// role at its replicas (the set's own rolling update waits for the release).
pub const HELD_BY_ROLLOUT: &str = "HeldByRollout";

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    set: &DisaggregatedSet,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: set.metadata.generation,
    }
}

/// The status from what was observed; `failure` (reason, message) makes the set Degraded.
/// `held`: the revision a release holds the set on, when it is not the template's `revision`
/// (the set then counts as settled once the held revision runs every role at its replicas,
/// ready: the release's groups of `revision` are the Rollout's to report). `given_up`: per role,
/// the groups per slice the held revision gives up to the release's (partition style; empty
/// for a release beside it).
#[allow(clippy::too_many_arguments)]
pub fn compute(
    set: &DisaggregatedSet,
    observed: &Observed,
    revision: &str,
    held: Option<&str>,
    given_up: &std::collections::BTreeMap<String, i32>,
    targets: &std::collections::BTreeMap<String, i32>,
    failure: Option<(&str, &str)>,
    now: &Time,
) -> DisaggregatedSetStatus {
    let slices = set.spec.slices();
    fn of_role<'a>(
        observed: &'a Observed,
        role: &'a str,
    ) -> impl Iterator<Item = &'a std::sync::Arc<crate::api::LeaderWorkerSet>> + 'a {
        observed
            .lws
            .iter()
            .filter(move |l| l.labels().get(ROLE_LABEL).map(String::as_str) == Some(role))
    }

    let status_of = |l: &crate::api::LeaderWorkerSet| l.status.clone().unwrap_or_default();
    let mut roles = Vec::new();
    let mut summary = Vec::new();
    let (mut all_ready, mut settled) = (true, true);
    let mut lws_failure: Option<String> = None;
    for role in &set.spec.roles {
        // Every slice's groups: the role's replicas (its scaler's when External) per slice.
        let per_slice = targets
            .get(&role.name)
            .copied()
            .unwrap_or_else(|| role.replicas());
        let want = per_slice * slices;
        let replicas: i32 = of_role(observed, &role.name)
            .map(|l| status_of(l).replicas.unwrap_or(0))
            .sum();
        let ready: i32 = of_role(observed, &role.name)
            .map(|l| status_of(l).ready_replicas.unwrap_or(0))
            .sum();
        let of_revision = |r: &str| -> Vec<_> {
            of_role(observed, &role.name)
                .filter(|l| l.labels().get(REVISION_LABEL).map(String::as_str) == Some(r))
                .collect()
        };
        let current = of_revision(revision);
        let updated: i32 = current
            .iter()
            .map(|l| status_of(l).replicas.unwrap_or(0))
            .sum();
        let current_ready: i32 = current
            .iter()
            .map(|l| status_of(l).ready_replicas.unwrap_or(0))
            .sum();
        all_ready &= ready >= want;
        // What must run every role at its replicas: the held revision while a release holds
        // the set (the release's groups of the template's revision are beside it), else the
        // template's.
        let (serving, serving_groups, serving_ready, all_groups) = match held {
            Some(h) => {
                let lws = of_revision(h);
                let groups = lws.iter().map(|l| status_of(l).replicas.unwrap_or(0)).sum();
                let ready = lws
                    .iter()
                    .map(|l| status_of(l).ready_replicas.unwrap_or(0))
                    .sum();
                (lws, groups, ready, replicas - updated)
            }
            None => (current.clone(), updated, current_ready, replicas),
        };
        let gone = held
            .and_then(|_| given_up.get(&role.name))
            .copied()
            .unwrap_or(0);
        let (held_per_slice, held_want) = (per_slice - gone, want - gone * slices);
        settled &= serving.len() == slices as usize
            && serving.iter().all(|l| {
                l.spec.replicas.unwrap_or(1) == held_per_slice
                    && status_of(l).observed_generation == l.metadata.generation
            })
            && serving_groups == held_want
            && serving_ready == held_want
            && all_groups == held_want;
        if lws_failure.is_none() {
            lws_failure = of_role(observed, &role.name).find_map(|l| {
                status_of(l)
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
                    .map(|c| {
                        format!(
                            "role {}: LeaderWorkerSet {}: {}: {}",
                            role.name,
                            l.name_any(),
                            c.reason,
                            c.message
                        )
                    })
            });
        }
        summary.push(format!("{} {ready}/{want}", role.name));
        roles.push(RoleStatus {
            name: role.name.clone(),
            replicas: Some(replicas),
            ready_replicas: Some(ready),
            updated_replicas: Some(updated),
        });
    }
    let old: Vec<String> = {
        let mut revs: Vec<String> = observed
            .lws
            .iter()
            .filter_map(|l| l.labels().get(REVISION_LABEL).cloned())
            .filter(|r| r != revision && Some(r.as_str()) != held)
            .collect();
        revs.sort();
        revs.dedup();
        revs
    };
    let ready_text = format!("groups ready: {}", summary.join(", "));

    let mut conditions = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let available = condition(
        AVAILABLE,
        all_ready,
        if all_ready {
            "AllRolesReady"
        } else {
            "RolesNotReady"
        },
        ready_text.clone(),
        set,
        now,
    );
    let progressing = if let Some(h) = held {
        let release: Vec<String> = set
            .spec
            .roles
            .iter()
            .map(|role| {
                let groups: i32 = of_role(observed, &role.name)
                    .filter(|l| {
                        l.labels().get(REVISION_LABEL).map(String::as_str) == Some(revision)
                    })
                    .map(|l| status_of(l).ready_replicas.unwrap_or(0))
                    .sum();
                format!("{} {groups}", role.name)
            })
            .collect();
        let what = format!(
            "held by a Rollout on revision {h}; the release's revision {revision} has ready groups: {}; {ready_text}",
            release.join(", ")
        );
        if settled && old.is_empty() {
            // The set is where the release wants it: Argo CD reads it Healthy, the Rollout's
            // own health says where the release is.
            condition(PROGRESSING, false, HELD_BY_ROLLOUT, what, set, now)
        } else {
            let draining = if old.is_empty() {
                String::new()
            } else {
                format!("draining {}; ", old.join(", "))
            };
            condition(
                PROGRESSING,
                true,
                "RolesProgressing",
                format!("{draining}{what}"),
                set,
                now,
            )
        }
    } else if !old.is_empty() {
        condition(
            PROGRESSING,
            true,
            "RollingUpdate",
            format!(
                "rolling update to revision {revision} from {}; {ready_text}",
                old.join(", ")
            ),
            set,
            now,
        )
    } else if !settled {
        condition(
            PROGRESSING,
            true,
            "RolesProgressing",
            format!("revision {revision}: {ready_text}"),
            set,
            now,
        )
    } else {
        condition(
            PROGRESSING,
            false,
            "Complete",
            format!("revision {revision}: every role at its replicas and ready"),
            set,
            now,
        )
    };
    let degraded = match (failure, lws_failure) {
        (Some((reason, message)), _) => condition(DEGRADED, true, reason, message.into(), set, now),
        (None, Some(message)) => {
            condition(DEGRADED, true, "LeaderWorkerSetFailure", message, set, now)
        }
        (None, None) => condition(DEGRADED, false, "AsExpected", String::new(), set, now),
    };
    for c in [available, progressing, degraded] {
        conditions::upsert(&mut conditions, c);
    }
    DisaggregatedSetStatus {
        role_statuses: Some(roles),
        conditions: Some(conditions),
    }
}
