//! Plan: everything the DisaggregatedSet controller decides, as a pure function of the set and
//! what the caches show. Upstream v0.9.0's reconcile, step for step:
//!
//! 1. the revision of the roles' templates ([`super::revision`]);
//! 2. old revisions whose every role's LWS is at 0 replicas are deleted together (coordinated
//!    cleanup: a half pair is never left);
//! 3. with old revisions still running, the rolling update: the first time, each old LWS
//!    records its replicas (`disaggregatedset.x-k8s.io/initial-replicas`) and the new
//!    revision's LWSs are created at 0; then, once every new LWS is ready, one step of
//!    [`steps::next_step`] — the new LWSs scale up, or the old ones scale down, newest revision
//!    first, a revision's roles going to 0 together; otherwise each role's LWS is created or
//!    scaled to the role's replicas;
//! 4. a headless Service per role of the new revision once every role has a ready group.
//!
//! Differences (docs/disaggregatedset.md): a Service exists only while every role of its
//! revision has a ready group (upstream never removes the new revision's Services, and leaves an
//! old revision's when the new one is not ready yet): traffic reaches only complete pairs; a new
//! revision's LWS deleted by hand mid-update is recreated (upstream waits forever); an LWS with
//! one of the set's names that the set does not control is never taken over (a condition and an
//! event say so); the status is written.

pub mod steps;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::{
    api::core::v1::Service,
    apimachinery::pkg::{apis::meta::v1::Time, util::intstr::IntOrString},
};
use kube::ResourceExt;

use self::steps::{RoleConfig, State};
use super::{objects, revision, status};
use crate::{
    api::{
        disaggregatedset::{
            DisaggregatedRoleSpec, DisaggregatedSet, DisaggregatedSetStatus,
            INITIAL_REPLICAS_ANNOTATION, REVISION_LABEL, ROLE_LABEL,
        },
        leaderworkerset::LeaderWorkerSet,
    },
    k8s::events::EventSpec,
    lws::rolling,
};

use super::observe::Observed;

/// Event reasons (upstream's, and ours for what upstream does not report).
pub mod reasons {
    /// A rolling update began.
    pub const ROLLING_UPDATE_STARTED: &str = "RollingUpdateStarted";
    /// The last old revision is gone.
    pub const ROLLING_UPDATE_COMPLETED: &str = "RollingUpdateCompleted";
    /// A new revision's LWS grew.
    pub const SCALING_UP: &str = "ScalingUp";
    /// An old revision's LWS shrank.
    pub const SCALING_DOWN: &str = "ScalingDown";
    /// A drained revision's LWS was deleted.
    pub const LWS_DELETED: &str = "LWSDeleted";
    /// An LWS was created (ours).
    pub const LWS_CREATED: &str = "LWSCreated";
    /// An object with one of the set's names belongs to someone else (ours).
    pub const OBJECT_CONFLICT: &str = "ObjectConflict";
    /// The roles cannot be hashed (ours).
    pub const INVALID_SPEC: &str = "InvalidSpec";
}

/// An LWS of the set to scale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scale {
    /// LWS name.
    pub name: String,
    /// The incarnation decided on.
    pub uid: Option<String>,
    /// `spec.replicas` as seen (the write is made only from this value: a cache that is a
    /// moment behind never scales twice).
    pub from: i32,
    /// `spec.replicas` to write.
    pub replicas: i32,
    /// Published once written.
    pub event: EventSpec,
}

/// An LWS to create, and what to say once it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Create {
    /// The LWS.
    pub lws: LeaderWorkerSet,
    /// Published once created (not when it was there already).
    pub event: EventSpec,
}

/// An old LWS's replicas when the update started, to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Annotate {
    /// LWS name.
    pub name: String,
    /// The incarnation decided on.
    pub uid: Option<String>,
    /// The value of the initial-replicas annotation.
    pub replicas: i32,
}

/// An object of the set to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// Name.
    pub name: String,
    /// The incarnation decided on.
    pub uid: Option<String>,
}

/// Everything one reconcile of a set does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// LWSs to create (never updated: a new revision is a new LWS).
    pub create: Vec<Create>,
    /// Published once, when one of the creates took effect (e.g. a rolling update started).
    pub on_created: Vec<EventSpec>,
    /// Initial-replicas annotations to record.
    pub annotate: Vec<Annotate>,
    /// LWSs to scale.
    pub scale: Vec<Scale>,
    /// Drained LWSs to delete (each says so once deleted).
    pub delete: Vec<Delete>,
    /// Published once, when one of the deletes took effect (e.g. the update completed).
    pub on_deleted: Vec<EventSpec>,
    /// Services to create.
    pub services: Vec<Service>,
    /// Services of revisions that are not complete.
    pub delete_services: Vec<Delete>,
    /// Events that belong to no write.
    pub events: Vec<EventSpec>,
    /// The status to write.
    pub status: DisaggregatedSetStatus,
    /// Look again after this long.
    pub requeue: Option<Duration>,
}

/// How long to wait for a new revision's LWSs to become ready before looking again (their
/// status changes wake the set anyway; this is the safety net, as upstream's 1 s requeue).
pub const STABILITY_RECHECK: Duration = Duration::from_secs(5);

/// The LWSs of one revision, by role.
type Revision = BTreeMap<String, Arc<LeaderWorkerSet>>;

fn replicas(lws: &LeaderWorkerSet) -> i32 {
    lws.spec.replicas.unwrap_or(1)
}

fn initial_replicas(lws: &LeaderWorkerSet) -> i32 {
    lws.annotations()
        .get(INITIAL_REPLICAS_ANNOTATION)
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or_else(|| replicas(lws))
}

fn ready(lws: &LeaderWorkerSet) -> i32 {
    lws.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// Ready for the next step: the LWS controller has seen its spec, and every group is ready.
fn stable(lws: &LeaderWorkerSet) -> bool {
    lws.status
        .as_ref()
        .is_some_and(|s| s.observed_generation == lws.metadata.generation)
        && ready(lws) == replicas(lws)
}

/// A role's surge and unavailability as upstream reads them: (1, 0) unless the role names a
/// rolling-update configuration; then maxUnavailable (rounded down) with maxSurge when it is
/// not 0, else maxSurge (rounded up) alone.
pub fn role_config(role: &DisaggregatedRoleSpec) -> RoleConfig {
    let mut config = RoleConfig::DEFAULT;
    let Some(rc) = role
        .spec
        .as_ref()
        .and_then(|s| s.rollout_strategy.as_ref())
        .and_then(|s| s.rolling_update_configuration.as_ref())
    else {
        return config;
    };
    let target = role.replicas();
    let zero = IntOrString::Int(0);
    let surge = rolling::scaled(rc.max_surge.as_ref().unwrap_or(&zero), target, true).unwrap_or(0);
    let unavailable =
        rolling::scaled(rc.max_unavailable.as_ref().unwrap_or(&zero), target, false).unwrap_or(0);
    if unavailable > 0 {
        config.max_unavailable = unavailable;
        config.max_surge = surge;
    } else if surge > 0 {
        config.max_surge = surge;
    }
    config
}

struct Ctx<'a> {
    set: &'a DisaggregatedSet,
    observed: &'a Observed,
    revision: String,
    plan: Plan,
    conflicts: Vec<String>,
}

impl Ctx<'_> {
    /// Creates the role's LWS at `revision` unless its name is taken by someone else.
    fn create(&mut self, role: &DisaggregatedRoleSpec, replicas: i32) {
        let lws = objects::lws(self.set, role, &self.revision, replicas);
        let name = lws.name_any();
        if self.observed.foreign.contains_key(&name) {
            self.conflicts.push(format!(
                "LeaderWorkerSet {name} already exists and is not controlled by this DisaggregatedSet; delete or rename it"
            ));
            return;
        }
        self.plan.create.push(Create {
            event: EventSpec::normal(
                reasons::LWS_CREATED,
                format!("Created {} LWS {name} with {replicas} replicas", role.name),
            ),
            lws,
        });
    }
}

/// Plans one reconcile of `set`.
pub fn plan(set: &DisaggregatedSet, observed: &Observed, now: &Time) -> Plan {
    let revision = match revision::revision(&set.spec.roles) {
        Ok(r) => r,
        Err(e) => {
            let message = format!("cannot compute the revision of the roles: {e}");
            return Plan {
                status: status::compute(
                    set,
                    observed,
                    "",
                    Some((reasons::INVALID_SPEC, message.as_str())),
                    now,
                ),
                ..Default::default()
            };
        }
    };
    let mut ctx = Ctx {
        set,
        observed,
        revision: revision.clone(),
        plan: Plan::default(),
        conflicts: Vec::new(),
    };

    // Group the set's LWSs by revision and role.
    let mut revisions: BTreeMap<String, Revision> = BTreeMap::new();
    for lws in &observed.lws {
        let (Some(rev), Some(role)) = (
            lws.labels().get(REVISION_LABEL),
            lws.labels().get(ROLE_LABEL),
        ) else {
            continue;
        };
        revisions
            .entry(rev.clone())
            .or_default()
            .insert(role.clone(), lws.clone());
    }

    // 2. Coordinated cleanup: an old revision goes once every role of it is at 0.
    let mut cleaned_any = false;
    revisions.retain(|rev, roles| {
        if *rev == revision || roles.values().any(|l| replicas(l) != 0) {
            return true;
        }
        for lws in roles.values() {
            ctx.plan.delete.push(Delete {
                name: lws.name_any(),
                uid: lws.metadata.uid.clone(),
            });
        }
        cleaned_any = true;
        false
    });
    let old: Vec<(&String, &Revision)> =
        revisions.iter().filter(|(r, _)| **r != revision).collect();
    if cleaned_any && old.is_empty() {
        ctx.plan.on_deleted.push(EventSpec::normal(
            reasons::ROLLING_UPDATE_COMPLETED,
            format!("Completed rolling update to revision {revision}"),
        ));
    }
    let target: Revision = revisions.get(&revision).cloned().unwrap_or_default();

    // 3. The rolling update, or the steady state.
    let old_replicas: i32 = old
        .iter()
        .flat_map(|(_, roles)| roles.values())
        .map(|l| replicas(l))
        .sum();
    if !old.is_empty() && old_replicas > 0 {
        rolling_update(&mut ctx, &old, &target);
    } else {
        for role in &set.spec.roles {
            let want = role.replicas();
            match target.get(&role.name) {
                None => ctx.create(role, want),
                Some(lws) if replicas(lws) != want => {
                    let (reason, verb) = if want > replicas(lws) {
                        (reasons::SCALING_UP, "up")
                    } else {
                        (reasons::SCALING_DOWN, "down")
                    };
                    ctx.plan.scale.push(Scale {
                        name: lws.name_any(),
                        uid: lws.metadata.uid.clone(),
                        from: replicas(lws),
                        replicas: want,
                        event: EventSpec::normal(
                            reason,
                            format!(
                                "Scaling {verb} {} LWS {} from {} to {want} replicas",
                                role.name,
                                lws.name_any(),
                                replicas(lws)
                            ),
                        ),
                    });
                }
                Some(_) => {}
            }
        }
    }

    // 4. Services: only complete revisions serve.
    services(&mut ctx, &revisions);

    let conflict = ctx.conflicts.first().cloned();
    let Ctx { mut plan, .. } = ctx;
    plan.status = status::compute(
        set,
        observed,
        &revision,
        conflict.as_deref().map(|m| (reasons::OBJECT_CONFLICT, m)),
        now,
    );
    plan
}

fn rolling_update(ctx: &mut Ctx<'_>, old: &[(&String, &Revision)], target: &Revision) {
    let set = ctx.set;
    let spec_roles: Vec<&DisaggregatedRoleSpec> = set.spec.roles.iter().collect();
    let spec_names: BTreeSet<&str> = spec_roles.iter().map(|r| r.name.as_str()).collect();

    // The first time: record what the old revisions have, create the new one at 0.
    if target.is_empty() {
        ctx.plan.on_created.push(EventSpec::normal(
            reasons::ROLLING_UPDATE_STARTED,
            format!("Started rolling update to revision {}", ctx.revision),
        ));
        for (_, roles) in old {
            for lws in roles.values() {
                let current = lws
                    .annotations()
                    .get(INITIAL_REPLICAS_ANNOTATION)
                    .and_then(|v| v.parse::<i32>().ok());
                if current != Some(replicas(lws)) {
                    ctx.plan.annotate.push(Annotate {
                        name: lws.name_any(),
                        uid: lws.metadata.uid.clone(),
                        replicas: replicas(lws),
                    });
                }
            }
        }
        for role in &spec_roles {
            ctx.create(role, 0);
        }
        ctx.plan.requeue = Some(Duration::from_secs(1));
        return;
    }
    // A role's new LWS missing (deleted by hand, or a role added mid-update): back at 0.
    let mut created = false;
    for role in &spec_roles {
        if !target.contains_key(&role.name) {
            ctx.create(role, 0);
            created = true;
        }
    }
    if created {
        ctx.plan.requeue = Some(Duration::from_secs(1));
        return;
    }
    // Wait until every role's new LWS is ready at its replicas.
    if !spec_roles
        .iter()
        .all(|r| target.get(&r.name).is_some_and(|l| stable(l)))
    {
        ctx.plan.requeue = Some(STABILITY_RECHECK);
        return;
    }

    // Roles: the spec's, then those only old revisions have (drained with the rest).
    let mut names: Vec<String> = spec_roles.iter().map(|r| r.name.clone()).collect();
    let removed: BTreeSet<String> = old
        .iter()
        .flat_map(|(_, roles)| roles.keys())
        .filter(|r| !spec_names.contains(r.as_str()))
        .cloned()
        .collect();
    names.extend(removed);
    let per_role = |f: &dyn Fn(&str) -> i32| -> Vec<i32> { names.iter().map(|n| f(n)).collect() };
    let initial_old = per_role(&|n| {
        old.iter()
            .filter_map(|(_, roles)| roles.get(n))
            .map(|l| initial_replicas(l))
            .sum()
    });
    let current_old = per_role(&|n| {
        old.iter()
            .filter_map(|(_, roles)| roles.get(n))
            .map(|l| replicas(l))
            .sum()
    });
    let current_new = per_role(&|n| target.get(n).map_or(0, |l| replicas(l)));
    let role_of = |n: &str| spec_roles.iter().find(|r| r.name == n).copied();
    let target_replicas = per_role(&|n| role_of(n).map_or(0, |r| r.replicas()));
    let config: Vec<RoleConfig> = names
        .iter()
        .map(|n| role_of(n).map_or(RoleConfig::DEFAULT, role_config))
        .collect();
    let Some(step) = steps::next_step(&State {
        initial_old: &initial_old,
        current_old: &current_old,
        current_new: &current_new,
        target: &target_replicas,
        config: &config,
    }) else {
        return;
    };

    for (i, name) in names.iter().enumerate() {
        let Some(lws) = target.get(name) else {
            continue;
        };
        if current_new[i] < step.new[i] {
            ctx.plan.scale.push(Scale {
                name: lws.name_any(),
                uid: lws.metadata.uid.clone(),
                from: current_new[i],
                replicas: step.new[i],
                event: EventSpec::normal(
                    reasons::SCALING_UP,
                    format!(
                        "Scaling up {name} LWS {} from {} to {} replicas",
                        lws.name_any(),
                        current_new[i],
                        step.new[i]
                    ),
                ),
            });
        }
    }
    scale_down_old(ctx, old, &names, &current_old, &step.old);
}

/// Takes `current − next` groups of each role off the old revisions, newest revision first; a
/// revision one of whose roles reaches 0 has all its roles go to 0 (no half pair).
fn scale_down_old(
    ctx: &mut Ctx<'_>,
    old: &[(&String, &Revision)],
    names: &[String],
    current: &[i32],
    next: &[i32],
) {
    let mut budget: Vec<i32> = current.iter().zip(next).map(|(c, n)| c - n).collect();
    let newest = |roles: &Revision| {
        roles
            .values()
            .filter_map(|l| l.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .max()
    };
    let mut ordered: Vec<&(&String, &Revision)> = old.iter().collect();
    ordered.sort_by(|a, b| newest(b.1).cmp(&newest(a.1)).then_with(|| a.0.cmp(b.0)));
    for (_, roles) in ordered {
        if budget.iter().all(|b| *b <= 0) {
            break;
        }
        let mut drain = vec![0; names.len()];
        let mut next_replicas = vec![0; names.len()];
        let mut triggers = vec![false; names.len()];
        for (i, name) in names.iter().enumerate() {
            let Some(lws) = roles.get(name) else { continue };
            drain[i] = budget[i].min(replicas(lws));
            next_replicas[i] = replicas(lws) - drain[i];
            triggers[i] = next_replicas[i] == 0;
        }
        let any = triggers.iter().any(|t| *t);
        if any {
            for (i, name) in names.iter().enumerate() {
                if roles.contains_key(name) {
                    next_replicas[i] = 0;
                }
            }
        }
        for (i, name) in names.iter().enumerate() {
            let Some(lws) = roles.get(name) else { continue };
            if replicas(lws) <= next_replicas[i] {
                continue;
            }
            ctx.plan.scale.push(Scale {
                name: lws.name_any(),
                uid: lws.metadata.uid.clone(),
                from: replicas(lws),
                replicas: next_replicas[i],
                event: EventSpec::normal(
                    reasons::SCALING_DOWN,
                    format!(
                        "Scaling down {name} LWS {} from {} to {} replicas",
                        lws.name_any(),
                        replicas(lws),
                        next_replicas[i]
                    ),
                ),
            });
            if triggers[i] || !any {
                budget[i] -= drain[i];
            }
        }
    }
}

/// A revision is complete when each role it serves has a ready group: for the current
/// revision every role of the spec; for an old one, the spec's roles it has (a role added by the
/// update is not expected of it, a removed one no longer counts).
fn complete(set: &DisaggregatedSet, revision: &str, current: &str, roles: &Revision) -> bool {
    let mut expected = set
        .spec
        .roles
        .iter()
        .filter(|r| revision == current || roles.contains_key(&r.name))
        .peekable();
    expected.peek().is_some() && expected.all(|r| roles.get(&r.name).is_some_and(|l| ready(l) >= 1))
}

fn services(ctx: &mut Ctx<'_>, revisions: &BTreeMap<String, Revision>) {
    let set = ctx.set;
    let complete_revisions: BTreeSet<&String> = revisions
        .iter()
        .filter(|(r, roles)| complete(set, r, &ctx.revision, roles))
        .map(|(r, _)| r)
        .collect();
    if complete_revisions.contains(&ctx.revision) {
        for role in &set.spec.roles {
            let svc = objects::service(set, &role.name, &ctx.revision);
            if !ctx
                .observed
                .services
                .iter()
                .any(|s| s.name_any() == svc.name_any())
            {
                ctx.plan.services.push(svc);
            }
        }
    }
    for svc in &ctx.observed.services {
        let keep = svc
            .labels()
            .get(REVISION_LABEL)
            .is_some_and(|r| complete_revisions.contains(r));
        if !keep {
            ctx.plan.delete_services.push(Delete {
                name: svc.name_any(),
                uid: svc.metadata.uid.clone(),
            });
        }
    }
}
