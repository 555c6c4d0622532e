//! The leader StatefulSet: its partition and replicas for the next step of a rolling update
//! ([`crate::lws::rolling`], upstream's algorithm), and whether applying it would change
//! anything (an unchanged StatefulSet is not written).

use k8s_openapi::{api::apps::v1::StatefulSet, apimachinery::pkg::util::intstr::IntOrString};
use kube::ResourceExt;
use serde_json::Value;

use super::{How, OnRefusal, Write, reasons, revisions::Revisions};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::{
        apply::{already_applied, controller_uid},
        events::EventSpec,
        pod,
    },
    lws::{
        error::Failure,
        labels, objects,
        observe::Observed,
        remembered::{LeaderInSync, Version, version_of},
        rolling,
    },
};

/// The leader StatefulSet decision.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderPlan {
    /// The step the StatefulSet should be at.
    pub step: rolling::Step,
    /// The write, when the StatefulSet would change.
    pub write: Option<Write<StatefulSet>>,
    /// The observed StatefulSet is as desired, for the next reconcile to reuse.
    pub in_sync: Option<LeaderInSync>,
}

/// The leader StatefulSet as the rolling algorithm sees it.
pub fn current(sts: &StatefulSet) -> rolling::LeaderSts {
    let spec = sts.spec.as_ref();
    rolling::LeaderSts {
        replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
        partition: spec
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0),
        recorded_lws_replicas: sts
            .annotations()
            .get(labels::REPLICAS)
            .and_then(|v| v.parse().ok()),
    }
}

/// Ready/updated per leader ordinal `0..sts_replicas`: a group is ready only when its leader
/// and every worker are, and updated when both run revision `key`.
pub fn group_states(
    observed: &Observed,
    name: &str,
    size: i32,
    key: &str,
    sts_replicas: i32,
) -> Vec<rolling::GroupState> {
    let ready_workers = ready_workers(observed);
    (0..sts_replicas)
        .map(|i| {
            let pod_name = format!("{name}-{i}");
            let Some(leader) = observed.leaders.iter().find(|p| p.name_any() == pod_name) else {
                return rolling::GroupState::default();
            };
            let leader_updated = leader.labels().get(labels::REVISION) == Some(key);
            if size == 1 {
                return rolling::GroupState {
                    ready: pod::ready(leader),
                    updated: leader_updated,
                };
            }
            match observed.worker_sts.get(&pod_name) {
                None => rolling::GroupState::default(),
                Some(ws) => rolling::GroupState {
                    ready: pod::ready(leader) && workers_ready(ws, &ready_workers, size),
                    updated: leader_updated
                        && ws.labels().get(labels::REVISION).map(String::as_str) == Some(key),
                },
            }
        })
        .collect()
}

/// Ready worker pods (Running, Ready, not terminating) per worker StatefulSet uid.
pub type ReadyWorkers<'a> = std::collections::HashMap<&'a str, i32>;

/// Counts the ready worker pods of every worker StatefulSet in `observed`, from the pods
/// themselves: the StatefulSet's own `readyReplicas` is the StatefulSet controller's count of
/// the same pods, written seconds later under load (the LWS would be Available seconds after its last
/// pod was Ready, waiting for that write).
pub fn ready_workers(observed: &Observed) -> ReadyWorkers<'_> {
    let mut ready = ReadyWorkers::new();
    for p in &observed.pods {
        if pod::ready(p)
            && !pod::terminating(p)
            && p.labels().get(labels::WORKER_INDEX) != Some("0")
            && let Some(owner) = controller_uid(p.as_ref())
        {
            *ready.entry(owner).or_default() += 1;
        }
    }
    ready
}

/// Every worker of a group's StatefulSet is ready: as many ready pods of that StatefulSet
/// as the group has workers.
pub fn workers_ready(sts: &StatefulSet, ready: &ReadyWorkers<'_>, size: i32) -> bool {
    let want = size - 1;
    sts.spec.as_ref().and_then(|s| s.replicas) == Some(want)
        && sts
            .metadata
            .uid
            .as_deref()
            .and_then(|uid| ready.get(uid))
            .copied()
            .unwrap_or(0)
            == want
}

/// The leader StatefulSet's `maxUnavailable`: the rolling update's `maxUnavailable` plus its
/// `maxSurge` (at most `replicas`), both scaled to `replicas`. Its failure (a percentage that
/// cannot be scaled) is the only one of [`plan`] besides what every plan checks first, so the
/// worker StatefulSets planned without [`plan`] check it too.
pub fn sts_max_unavailable(lws: &LeaderWorkerSet) -> Result<i32, Failure> {
    let replicas = objects::replicas(lws);
    let (max_surge, max_unavailable) = surge_and_unavailable(lws);
    let invalid = |e: rolling::InvalidIntOrPercent| Failure::spec("InvalidSpec", e.0);
    Ok(
        rolling::scaled(&max_unavailable, replicas, false).map_err(invalid)?
            + rolling::scaled(&max_surge, replicas, true)
                .map_err(invalid)?
                .min(replicas),
    )
}

/// The rolling update's `maxSurge` and `maxUnavailable`, defaulted (0 and 1) as upstream's.
fn surge_and_unavailable(lws: &LeaderWorkerSet) -> (IntOrString, IntOrString) {
    let ruc = objects::rolling_update(lws);
    (
        ruc.and_then(|r| r.max_surge.clone())
            .unwrap_or(IntOrString::Int(0)),
        ruc.and_then(|r| r.max_unavailable.clone())
            .unwrap_or(IntOrString::Int(1)),
    )
}

/// Plans the leader StatefulSet.
pub fn plan(
    lws: &LeaderWorkerSet,
    observed: &Observed,
    observed_sts: Option<&StatefulSet>,
    revisions: &Revisions,
) -> Result<LeaderPlan, Failure> {
    let name = lws.name_any();
    let size = objects::size(lws);
    let replicas = objects::replicas(lws);
    let (max_surge, max_unavailable) = surge_and_unavailable(lws);
    let leader_sts = observed_sts.map(current);
    let groups = group_states(
        observed,
        &name,
        size,
        &revisions.key,
        leader_sts.map_or(0, |s| s.replicas),
    );
    let invalid = |e: rolling::InvalidIntOrPercent| Failure::spec("InvalidSpec", e.0);
    let step = rolling::next_step(&rolling::Input {
        replicas,
        max_surge: &max_surge,
        max_unavailable: &max_unavailable,
        // A partition-style release keeps the groups below its partition back, on top of
        // the user's own partition (which it never lowers).
        user_partition: objects::user_partition(lws)
            .max(super::revisions::release_partition(lws).unwrap_or(0)),
        leader_sts,
        template_changed: revisions.template_changed,
        groups: &groups,
    })
    .map_err(invalid)?;
    let sts_max_unavailable = sts_max_unavailable(lws)?;
    // The comparison below encodes both StatefulSets whole; it is reused while nothing it
    // was made of has a new version (most reconciles follow a pod event and change nothing).
    let comparison = observed_sts.and_then(|sts| {
        Some(LeaderInSync {
            lws: version_of(&lws.metadata)?,
            held_revision: held_revision(observed, revisions),
            sts: version_of(&sts.metadata)?,
            key: revisions.key.clone(),
            partition: step.partition,
            replicas: step.replicas,
            max_unavailable: sts_max_unavailable,
        })
    });
    if comparison.is_some() && comparison == observed.remembered.leader_in_sync {
        return Ok(LeaderPlan {
            step,
            write: None,
            in_sync: comparison,
        });
    }
    let desired = objects::leader_statefulset(
        lws,
        &revisions.key,
        step.partition,
        step.replicas,
        sts_max_unavailable,
    );
    if observed_sts.is_some_and(|sts| as_desired(&desired, sts)) {
        return Ok(LeaderPlan {
            step,
            write: None,
            in_sync: comparison,
        });
    }
    let on_success = match leader_sts {
        None => vec![EventSpec::normal(
            reasons::GROUPS_PROGRESSING,
            format!("Created leader statefulset {name}"),
        )],
        Some(old) => {
            let mut events = Vec::new();
            // v0.9's texts: the groups the partition move releases, inclusive.
            if !revisions.template_changed && old.partition != step.partition {
                let note = if old.partition - 1 == step.partition {
                    format!("Updating replica {}", step.partition)
                } else {
                    format!(
                        "Updating replicas {} to {} (inclusive)",
                        step.partition,
                        old.partition - 1
                    )
                };
                events.push(EventSpec::normal(reasons::GROUPS_UPDATING, note));
            }
            if step.replicas < old.replicas {
                let note = if step.replicas == old.replicas - 1 {
                    format!("deleting surge replica {name}-{}", step.replicas)
                } else {
                    format!(
                        "deleting surge replicas from {name}-{} to {name}-{}",
                        step.replicas,
                        old.replicas - 1
                    )
                };
                events.push(EventSpec::normal(reasons::GROUPS_PROGRESSING, note));
            }
            events
        }
    };
    let on_failure = match leader_sts {
        None => vec![EventSpec::warning(
            reasons::FAILED_CREATE,
            format!("Failed to create leader statefulset {name}"),
        )],
        Some(_) => Vec::new(),
    };
    Ok(LeaderPlan {
        step,
        in_sync: None,
        write: Some(Write {
            object: desired,
            how: How::Apply,
            on_success,
            on_failure,
            on_refusal: Some(OnRefusal {
                reason: reasons::FAILED_CREATE,
                what: format!("the API server refused leader StatefulSet {name}"),
                blocks: true,
            }),
        }),
    })
}

/// The version of the ControllerRevision whose template the groups run while a Rollout holds
/// the LWS ([`super::revisions::effective`] builds the LWS from it then).
fn held_revision(observed: &Observed, revisions: &Revisions) -> Option<Version> {
    (revisions.key != revisions.spec_key)
        .then(|| super::revisions::with_key(observed, &revisions.key))
        .flatten()
        .and_then(|rev| version_of(&rev.metadata))
}

/// Whether applying `desired` to `observed` would change nothing. A field the API server drops
/// is not a difference: `rollingUpdate.maxUnavailable` needs the MaxUnavailableStatefulSet
/// feature, and a v1.36.3 API server with default feature gates drops it (measured), which
/// would otherwise make every reconcile write.
pub fn as_desired(desired: &StatefulSet, observed: &StatefulSet) -> bool {
    let (Ok(mut want), Ok(have)) = (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) else {
        return false;
    };
    let dropped = have
        .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
        .is_none();
    if dropped
        && let Some(rolling) = want
            .pointer_mut("/spec/updateStrategy/rollingUpdate")
            .and_then(Value::as_object_mut)
    {
        rolling.remove("maxUnavailable");
    }
    already_applied(&want, &have)
}

#[cfg(test)]
mod tests {
    use super::as_desired;
    use serde_json::json;

    #[test]
    fn a_dropped_max_unavailable_is_no_difference_but_a_partition_is() {
        let sts = |partition: i32,
                   max_unavailable: Option<i32>|
         -> k8s_openapi::api::apps::v1::StatefulSet {
            let mut rolling = json!({"partition": partition});
            if let Some(m) = max_unavailable {
                rolling["maxUnavailable"] = json!(m);
            }
            serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {
                "selector": {}, "serviceName": "x", "template": {},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}}))
            .unwrap()
        };
        assert!(as_desired(&sts(2, Some(1)), &sts(2, None)));
        assert!(as_desired(&sts(2, Some(1)), &sts(2, Some(1))));
        assert!(!as_desired(&sts(2, Some(1)), &sts(2, Some(2))));
        assert!(!as_desired(&sts(1, Some(1)), &sts(2, None)));
    }
}
