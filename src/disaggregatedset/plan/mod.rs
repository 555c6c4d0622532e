//! Plan: everything the DisaggregatedSet controller decides, as a pure function of the set and
//! what the caches show. Upstream v0.10.0's reconcile: the LWSs and Services of slices at or
//! above `spec.slices` go; each External role has its DisaggregatedSetRoleScaler (created,
//! seeded with the role's groups, its status written), whose `spec.replicas` is the role's
//! replicas; then each slice, on its own, step for step:
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
//! event say so); a v0.9 child (`<set>-<revision>-<role>`, no slice label) is slice 0's, adopted
//! in place while the set has one slice, and — when slices rise above 1 — rolled over to slice
//! 0's slice-aware LWSs like an old revision (upstream deletes and recreates it, a restart),
//! the other slices created once it is gone (its Service would select their pods).

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
    apimachinery::pkg::{
        apis::meta::v1::{Condition, ObjectMeta, Time},
        util::intstr::IntOrString,
    },
};
use kube::ResourceExt;

use self::steps::{RoleConfig, State};
use super::{hold, objects, revision, status};
use crate::{
    api::{
        disaggregatedset::{
            DisaggregatedRoleSpec, DisaggregatedSet, DisaggregatedSetStatus,
            INITIAL_REPLICAS_ANNOTATION, RELEASE_GROUPS_ANNOTATION, RELEASE_STYLE_ANNOTATION,
            RELEASE_STYLE_IN_PLACE, REVISION_LABEL, ROLE_LABEL, SET_NAME_LABEL,
        },
        disaggregatedset_role_scaler::{
            self as role_scaler, DisaggregatedSetRoleScaler, DisaggregatedSetRoleScalerSpec,
            DisaggregatedSetRoleScalerStatus,
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
    /// A role's DisaggregatedSetRoleScaler was created.
    pub const SCALER_CREATED: &str = "ScalerCreated";
    /// A role's DisaggregatedSetRoleScaler was deleted (the role is no longer External).
    pub const SCALER_DELETED: &str = "ScalerDeleted";
    /// A scaler with a role's scaler name belongs to someone else.
    pub const SCALER_CONFLICT: &str = "ScalerConflict";
    /// A role is External but the cluster does not serve the DisaggregatedSetRoleScaler kind
    /// (ours: upstream's manager does not start without it).
    pub const ROLE_SCALER_NOT_SERVED: &str = "RoleScalerNotServed";
    /// The release-groups annotation of a held set cannot be read (ours).
    pub const INVALID_RELEASE_GROUPS: &str = "InvalidReleaseGroups";
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
    /// DisaggregatedSetRoleScalers to create (each says so once created).
    pub create_scalers: Vec<DisaggregatedSetRoleScaler>,
    /// Scalers of roles no longer External.
    pub delete_scalers: Vec<Delete>,
    /// Scaler statuses to write, by scaler name.
    pub scaler_status: Vec<(String, DisaggregatedSetRoleScalerStatus)>,
    /// Events that belong to no write.
    pub events: Vec<EventSpec>,
    /// The status to write.
    pub status: DisaggregatedSetStatus,
    /// Look again after this long.
    pub requeue: Option<Duration>,
}

impl Plan {
    /// The LWSs this plan writes (creates, annotates, scales, deletes), by name.
    pub fn lws_written(&self) -> impl Iterator<Item = &str> {
        self.create
            .iter()
            .map(|c| c.lws.metadata.name.as_deref().unwrap_or_default())
            .chain(self.annotate.iter().map(|a| a.name.as_str()))
            .chain(self.scale.iter().map(|s| s.name.as_str()))
            .chain(self.delete.iter().map(|d| d.name.as_str()))
    }
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

/// A role's surge and unavailability as upstream reads them, percentages against `target`:
/// (1, 0) unless the role names a rolling-update configuration; then maxUnavailable (rounded
/// down) with maxSurge when it is not 0, else maxSurge (rounded up) alone.
pub fn role_config(role: &DisaggregatedRoleSpec, target: i32) -> RoleConfig {
    let mut config = RoleConfig::DEFAULT;
    let Some(rc) = role
        .spec
        .as_ref()
        .and_then(|s| s.rollout_strategy.as_ref())
        .and_then(|s| s.rolling_update_configuration.as_ref())
    else {
        return config;
    };
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
    /// The slice being planned.
    slice: i32,
    /// Replicas per slice of each role of the spec (a scaler's for an External role).
    targets: BTreeMap<String, i32>,
    plan: Plan,
    /// Why the set is Degraded (reason, message), first found first.
    conflicts: Vec<(&'static str, String)>,
    /// The release hold: the held revision, and the new revision's groups per role and slice
    /// the release asks for (see [`Release`]).
    release: Option<Release>,
}

/// A set held by a release (`rollouts.kruise.io/stable-revision`; docs/rollout-design.md):
/// the held revision runs at the roles' replicas, the template's revision only as far as the
/// release says, and the set's own rolling update waits for the hold to be lifted.
#[derive(Clone, Debug)]
struct Release {
    /// The held revision.
    held: String,
    /// Groups per slice of the template's revision, by role (a role not named: 0).
    groups: BTreeMap<String, i32>,
    /// Partition style: the held revision gives up, per role, the groups the template's
    /// revision runs (no second copy of the pair).
    in_place: bool,
    /// The release-groups annotation is on the set: the release may still route to a revision
    /// it ran, so no other revision is drained until the release removes it (after moving
    /// the traffic to the held revision).
    routing: bool,
}

/// The release-groups annotation read: groups by role, and what could not be read (a
/// malformed annotation is taken as no groups, and said so in the status).
pub fn release_groups(set: &DisaggregatedSet) -> (BTreeMap<String, i32>, Option<String>) {
    let Some(raw) = set.annotations().get(RELEASE_GROUPS_ANNOTATION) else {
        return (BTreeMap::new(), None);
    };
    let invalid = |why: String| {
        Some(format!(
            "annotation {RELEASE_GROUPS_ANNOTATION} {raw:?}: {why}; the release's new revision runs no groups until it is a JSON object of role to groups, e.g. {{\"prefill\":1,\"decode\":1}}"
        ))
    };
    let object = match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(o)) => o,
        Ok(_) => return (BTreeMap::new(), invalid("not a JSON object".into())),
        Err(err) => return (BTreeMap::new(), invalid(format!("not JSON ({err})"))),
    };
    let mut groups = BTreeMap::new();
    let mut bad = Vec::new();
    for (role, value) in object {
        match value.as_i64().and_then(|v| i32::try_from(v).ok()) {
            Some(n) if n >= 0 => {
                groups.insert(role, n);
            }
            _ => bad.push(format!("{role}: {value}")),
        }
    }
    let problem = (!bad.is_empty())
        .then(|| invalid(format!("not a number of groups ({})", bad.join(", "))))
        .flatten();
    (groups, problem)
}

impl Ctx<'_> {
    fn want(&self, role: &DisaggregatedRoleSpec) -> i32 {
        self.targets
            .get(&role.name)
            .copied()
            .unwrap_or_else(|| role.replicas())
    }

    /// Creates the role's LWS at `revision` unless its name is taken by someone else.
    fn create(&mut self, role: &DisaggregatedRoleSpec, replicas: i32) {
        let lws = objects::lws(self.set, self.slice, role, &self.revision, replicas);
        let name = lws.name_any();
        if self.observed.foreign.contains_key(&name) {
            self.conflicts.push((
                reasons::OBJECT_CONFLICT,
                format!(
                    "LeaderWorkerSet {name} already exists and is not controlled by this DisaggregatedSet; delete or rename it"
                ),
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
                    None,
                    &BTreeMap::new(),
                    &BTreeMap::new(),
                    Some((reasons::INVALID_SPEC, message.as_str())),
                    now,
                ),
                ..Default::default()
            };
        }
    };
    let slices = set.spec.slices();
    let mut ctx = Ctx {
        set,
        observed,
        revision: revision.clone(),
        slice: 0,
        targets: BTreeMap::new(),
        plan: Plan::default(),
        conflicts: Vec::new(),
        release: None,
    };
    if let Some(held) = hold::held(set) {
        let (groups, problem) = if held == revision {
            (BTreeMap::new(), None)
        } else {
            release_groups(set)
        };
        if let Some(message) = problem {
            ctx.conflicts
                .push((reasons::INVALID_RELEASE_GROUPS, message));
        }
        ctx.release = Some(Release {
            held: held.to_string(),
            groups,
            in_place: set
                .annotations()
                .get(RELEASE_STYLE_ANNOTATION)
                .map(String::as_str)
                == Some(RELEASE_STYLE_IN_PLACE),
            routing: set.annotations().contains_key(RELEASE_GROUPS_ANNOTATION),
        });
    }

    // Slices at or above spec.slices go (a v0.9 child is slice 0's and never goes here).
    let beyond =
        |labels: &BTreeMap<String, String>| objects::slice_of(labels).is_some_and(|s| s >= slices);
    for lws in observed.lws.iter().filter(|l| beyond(l.labels())) {
        ctx.plan.delete.push(Delete {
            name: lws.name_any(),
            uid: lws.metadata.uid.clone(),
        });
    }
    for svc in observed.services.iter().filter(|s| beyond(s.labels())) {
        ctx.plan.delete_services.push(Delete {
            name: svc.name_any(),
            uid: svc.metadata.uid.clone(),
        });
    }

    scalers(&mut ctx);

    // A v0.9 slice 0 at the current revision being rolled over to slice-aware names: the other
    // slices wait, as its Service (no slice label) would select their pods.
    let legacy_current = slices > 1
        && (observed.lws.iter().map(|l| l.labels()))
            .chain(observed.services.iter().map(|s| s.labels()))
            .any(|l| objects::is_legacy(l) && l.get(REVISION_LABEL) == Some(&revision));
    for slice in 0..slices {
        if slice > 0 && legacy_current {
            break;
        }
        ctx.slice = slice;
        plan_slice(&mut ctx);
    }

    let degraded = ctx.conflicts.first().cloned();
    let Ctx {
        mut plan,
        targets,
        release,
        ..
    } = ctx;
    let held = release
        .as_ref()
        .map(|r| r.held.as_str())
        .filter(|h| *h != revision);
    // Partition style: the held revision runs the roles' replicas less the release's groups.
    let given_up: BTreeMap<String, i32> = release
        .as_ref()
        .filter(|r| r.in_place)
        .map(|r| {
            set.spec
                .roles
                .iter()
                .map(|role| {
                    let want = targets
                        .get(&role.name)
                        .copied()
                        .unwrap_or_else(|| role.replicas());
                    (role.name.clone(), release_share(r, &role.name, want))
                })
                .collect()
        })
        .unwrap_or_default();
    plan.status = status::compute(
        set,
        observed,
        &revision,
        held,
        &given_up,
        &targets,
        degraded.as_ref().map(|(reason, m)| (*reason, m.as_str())),
        now,
    );
    plan
}

/// The key a child of slice 0 is grouped under: its revision, except a v0.9 child that is being
/// rolled over (slices above 1 at the current revision, or slice-aware LWSs of its revision
/// already there), which is an old revision of its own.
fn revision_key(
    labels: &BTreeMap<String, String>,
    current: &str,
    slices: i32,
    aware: &BTreeSet<String>,
) -> Option<String> {
    let rev = labels.get(REVISION_LABEL)?;
    if objects::is_legacy(labels) && ((rev == current && slices > 1) || aware.contains(rev)) {
        return Some(format!("{rev}{LEGACY_SUFFIX}"));
    }
    Some(rev.clone())
}

/// Marks a v0.9 child's revision key while it is rolled over to slice-aware names.
const LEGACY_SUFFIX: &str = "/v0.9";

/// The scalers of External roles, and each role's replicas per slice.
fn scalers(ctx: &mut Ctx<'_>) {
    let set = ctx.set;
    let observed = ctx.observed;
    let set_name = set.name_any();
    fn lws_of<'a>(
        observed: &'a Observed,
        role: &'a str,
    ) -> impl Iterator<Item = &'a Arc<LeaderWorkerSet>> + 'a {
        observed
            .lws
            .iter()
            .filter(move |l| l.labels().get(ROLE_LABEL).map(String::as_str) == Some(role))
    }
    for scaler in &observed.scalers {
        let role = scaler.labels().get(ROLE_LABEL).cloned().unwrap_or_default();
        if !set
            .spec
            .roles
            .iter()
            .any(|r| r.name == role && r.external())
        {
            ctx.plan.delete_scalers.push(Delete {
                name: scaler.name_any(),
                uid: scaler.metadata.uid.clone(),
            });
        }
    }
    for role in &set.spec.roles {
        if !role.external() {
            ctx.targets.insert(role.name.clone(), role.replicas());
            continue;
        }
        let name = role_scaler::name(&set_name, &role.name);
        if observed.scalers_unserved {
            // No scaler can be made: the role is scaled as a Static one (its spec.replicas, a
            // value that does not move with the groups a rolling update adds), and the set
            // says why no scaler drives it.
            let keep = role.replicas();
            let message = format!(
                "role {} has scaling.mode External, but the cluster does not serve DisaggregatedSetRoleScalers: apply crds/disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml and restart the manager; until then the role runs its spec.replicas ({keep}) as a Static role",
                role.name
            );
            if ctx.conflicts.is_empty() {
                ctx.plan.events.push(EventSpec::warning(
                    reasons::ROLE_SCALER_NOT_SERVED,
                    message.clone(),
                ));
            }
            ctx.conflicts
                .push((reasons::ROLE_SCALER_NOT_SERVED, message));
            ctx.targets.insert(role.name.clone(), keep);
            continue;
        }
        let mine = observed.scalers.iter().find(|s| {
            s.name_any() == name
                && s.labels().get(ROLE_LABEL).map(String::as_str) == Some(role.name.as_str())
        });
        // Seeded with the role's groups (a Static role turning External keeps them), 1 for a
        // role without any: an HPA reading 0 groups never scales up.
        let seed = if lws_of(observed, &role.name).next().is_some() {
            lws_of(observed, &role.name).map(|l| replicas(l)).sum()
        } else {
            1
        };
        let target = match mine {
            Some(scaler) => {
                let status = scaler_status(set, &role.name, scaler, lws_of(observed, &role.name));
                if scaler.status.as_ref() != Some(&status) {
                    ctx.plan.scaler_status.push((name.clone(), status));
                }
                scaler.spec.replicas
            }
            None if observed.foreign_scalers.contains(&name) => {
                ctx.conflicts.push((
                    reasons::OBJECT_CONFLICT,
                    format!(
                        "DisaggregatedSetRoleScaler {name} already exists and is not controlled by this DisaggregatedSet; delete or rename it"
                    ),
                ));
                ctx.plan.events.push(EventSpec::warning(
                    reasons::SCALER_CONFLICT,
                    format!("Scaler {name} exists but is not controlled by this DisaggregatedSet; not adopting"),
                ));
                seed
            }
            None => {
                ctx.plan.create_scalers.push(DisaggregatedSetRoleScaler {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: set.namespace(),
                        labels: Some(BTreeMap::from([
                            (SET_NAME_LABEL.to_string(), set_name.clone()),
                            (ROLE_LABEL.to_string(), role.name.clone()),
                        ])),
                        owner_references: Some(vec![objects::owner(set)]),
                        ..Default::default()
                    },
                    spec: DisaggregatedSetRoleScalerSpec { replicas: seed },
                    status: None,
                });
                seed
            }
        };
        ctx.targets.insert(role.name.clone(), target);
    }
}

/// What a role's scaler reports: the role's groups over every revision and slice, the selector
/// of its leader pods, bound.
fn scaler_status<'a>(
    set: &DisaggregatedSet,
    role: &str,
    scaler: &DisaggregatedSetRoleScaler,
    lws: impl Iterator<Item = &'a Arc<LeaderWorkerSet>>,
) -> DisaggregatedSetRoleScalerStatus {
    let groups: i32 = lws
        .map(|l| l.status.as_ref().and_then(|s| s.replicas).unwrap_or(0))
        .sum();
    let previous = scaler
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == role_scaler::READY));
    let generation = scaler.metadata.generation;
    let ready = Condition {
        type_: role_scaler::READY.into(),
        status: "True".into(),
        reason: "Bound".into(),
        message: "Scaler bound to a live DisaggregatedSet role".into(),
        observed_generation: generation,
        last_transition_time: previous
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| {
                set.metadata
                    .creation_timestamp
                    .clone()
                    .unwrap_or(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
            }),
    };
    DisaggregatedSetRoleScalerStatus {
        replicas: Some(groups),
        selector: Some(format!(
            "{SET_NAME_LABEL}={},{ROLE_LABEL}={role},leaderworkerset.sigs.k8s.io/worker-index=0",
            set.name_any()
        )),
        observed_generation: generation,
        conditions: Some(vec![ready]),
    }
}

/// One slice: coordinated cleanup, the rolling update or the steady state, its Services.
fn plan_slice(ctx: &mut Ctx<'_>) {
    let set = ctx.set;
    let observed = ctx.observed;
    let slice = ctx.slice;
    let revision = ctx.revision.clone();
    let slices = set.spec.slices();
    let in_slice = |labels: &BTreeMap<String, String>| objects::slice_of(labels) == Some(slice);
    // Revisions that have slice-aware LWSs in this slice (a v0.9 child of one is rolled over).
    let aware: BTreeSet<String> = observed
        .lws
        .iter()
        .filter(|l| in_slice(l.labels()) && !objects::is_legacy(l.labels()))
        .filter_map(|l| l.labels().get(REVISION_LABEL).cloned())
        .collect();
    let key = |labels: &BTreeMap<String, String>| revision_key(labels, &revision, slices, &aware);

    // Group the slice's LWSs by revision and role.
    let mut revisions: BTreeMap<String, Revision> = BTreeMap::new();
    for lws in observed.lws.iter().filter(|l| in_slice(l.labels())) {
        let (Some(rev), Some(role)) = (key(lws.labels()), lws.labels().get(ROLE_LABEL)) else {
            continue;
        };
        revisions
            .entry(rev)
            .or_default()
            .insert(role.clone(), lws.clone());
    }

    // 2. Coordinated cleanup: an old revision goes once every role of it is at 0.
    let mut cleaned_any = false;
    let held = ctx.release.as_ref().map(|r| r.held.clone());
    revisions.retain(|rev, roles| {
        if *rev == revision
            || Some(rev) == held.as_ref()
            || roles.values().any(|l| replicas(l) != 0)
        {
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
            format!("Completed rolling update of slice {slice} to revision {revision}"),
        ));
    }
    let target: Revision = revisions.get(&revision).cloned().unwrap_or_default();

    // 3. Held by a release: the release's shape instead of the set's own rolling update. A
    // hold naming a revision this slice does not run (a hand-written value, or a slice added
    // while held) holds nothing here: taking the template's LWSs to the release's groups would
    // leave the slice with no groups at all.
    if let Some(release) = ctx
        .release
        .clone()
        .filter(|r| r.held == revision || revisions.contains_key(&r.held))
    {
        held_slice(ctx, &release, &revisions);
        services(ctx, &revisions, &key);
        return;
    }

    // 3. The rolling update, or the steady state.
    let old_replicas: i32 = old
        .iter()
        .flat_map(|(_, roles)| roles.values())
        .map(|l| replicas(l))
        .sum();
    if !old.is_empty() && old_replicas > 0 {
        rolling_update(ctx, &old, &target);
    } else {
        for role in &set.spec.roles {
            let want = ctx.want(role);
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
    services(ctx, &revisions, &key);
}

impl Ctx<'_> {
    /// Scales `lws` (of `role`) to `want` when it is not there.
    fn scale_to(&mut self, role: &str, lws: &LeaderWorkerSet, want: i32) {
        let from = replicas(lws);
        if from == want {
            return;
        }
        let (reason, verb) = if want > from {
            (reasons::SCALING_UP, "up")
        } else {
            (reasons::SCALING_DOWN, "down")
        };
        self.plan.scale.push(Scale {
            name: lws.name_any(),
            uid: lws.metadata.uid.clone(),
            from,
            replicas: want,
            event: EventSpec::normal(
                reason,
                format!(
                    "Scaling {verb} {role} LWS {} from {from} to {want} replicas",
                    lws.name_any()
                ),
            ),
        });
    }
}

/// One slice of a held set. The held revision `H` keeps the roles' replicas (canary style runs
/// beside stable, never in place of it) or, in partition style, the roles' replicas less the
/// release's groups (the new pair takes the held pair's place group for group: every role's
/// total stays at its replicas); the template's revision `C`, when it differs, runs
/// each role at the release's groups (capped at the role's replicas), all roles in this one
/// plan, an LWS created only for groups above 0; any other revision drains, all its roles
/// together, once `H` is ready at its replicas (no capacity lost to a drain) and the release
/// has removed its release-groups (its traffic is on `H` then: a rollback, or a restart on a
/// third template). `H == C` (the
/// template reverted) is the same with no release: `C` at the roles' replicas, the rest
/// drained. No rolling-update step is taken: lifting the hold hands the slice back to
/// [`rolling_update`], which continues from the sizes left here.
fn held_slice(ctx: &mut Ctx<'_>, release: &Release, revisions: &BTreeMap<String, Revision>) {
    let set = ctx.set;
    let empty = Revision::new();
    let held = revisions.get(&release.held).unwrap_or(&empty);
    let reverted = release.held == ctx.revision;
    let in_place = release.in_place && !reverted;
    let keeps: Vec<i32> = set
        .spec
        .roles
        .iter()
        .map(|role| {
            let want = ctx.want(role);
            if in_place {
                want - release_share(release, &role.name, want)
            } else {
                want
            }
        })
        .collect();
    // Never half a held pair: a role moved whole takes the held pair's other roles with it.
    let whole = in_place && keeps.contains(&0);
    let mut held_ready = true;
    for (role, keep) in set.spec.roles.iter().zip(keeps) {
        let want = ctx.want(role);
        let keep = if whole { 0 } else { keep };
        match held.get(&role.name) {
            Some(lws) => {
                ctx.scale_to(&role.name, lws, keep);
                held_ready &= replicas(lws) == keep && stable(lws);
                // What the set's own rolling update starts from once the hold is lifted: the
                // replicas the held revision runs, not a value left by an earlier update.
                let recorded = lws
                    .annotations()
                    .get(INITIAL_REPLICAS_ANNOTATION)
                    .and_then(|v| v.parse::<i32>().ok());
                if !reverted && recorded != Some(want) {
                    ctx.plan.annotate.push(Annotate {
                        name: lws.name_any(),
                        uid: lws.metadata.uid.clone(),
                        replicas: want,
                    });
                }
            }
            None if reverted => {
                ctx.create(role, want);
                held_ready = false;
            }
            // A role the held revision does not have (the new template added it), or whose
            // LWS is gone: its template is not in the spec any more, so nothing can be made
            // for it; the release side runs it.
            None => {}
        }
    }
    if !reverted {
        let current = revisions.get(&ctx.revision).unwrap_or(&empty);
        for role in &set.spec.roles {
            let groups = release_share(release, &role.name, ctx.want(role));
            match current.get(&role.name) {
                Some(lws) => ctx.scale_to(&role.name, lws, groups),
                None if groups > 0 => ctx.create(role, groups),
                None => {}
            }
        }
    }
    let current = ctx.revision.clone();
    let others = revisions
        .iter()
        .filter(|(r, _)| **r != release.held && **r != current);
    for (_, roles) in others {
        if release.routing {
            break;
        }
        if !held_ready {
            ctx.plan.requeue = Some(STABILITY_RECHECK);
            break;
        }
        for (role, lws) in roles {
            ctx.scale_to(role, lws, 0);
        }
    }
}

/// The template's revision's groups of `role` the release asks for, capped at the role's
/// replicas `want`.
fn release_share(release: &Release, role: &str, want: i32) -> i32 {
    release
        .groups
        .get(role)
        .copied()
        .unwrap_or(0)
        .clamp(0, want.max(0))
}

fn rolling_update(ctx: &mut Ctx<'_>, old: &[(&String, &Revision)], target: &Revision) {
    let set = ctx.set;
    let spec_roles: Vec<&DisaggregatedRoleSpec> = set.spec.roles.iter().collect();
    let spec_names: BTreeSet<&str> = spec_roles.iter().map(|r| r.name.as_str()).collect();

    // The first time: record what the old revisions have, create the new one at 0.
    if target.is_empty() {
        ctx.plan.on_created.push(EventSpec::normal(
            reasons::ROLLING_UPDATE_STARTED,
            format!(
                "Started rolling update of slice {} to revision {}",
                ctx.slice, ctx.revision
            ),
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
    // Upstream v0.10's no-shrink guard (an External role's new revision keeps its groups when
    // an autoscaler writes fewer mid-update) holds by construction: a rolling-update step only
    // scales new LWSs up, and a new revision already at or above its target lets the old one
    // drain, whichever of the two values the target is.
    let target_replicas = per_role(&|n| role_of(n).map_or(0, |r| ctx.want(r)));
    let config: Vec<RoleConfig> = names
        .iter()
        .map(|n| role_of(n).map_or(RoleConfig::DEFAULT, |r| role_config(r, ctx.want(r))))
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

fn services(
    ctx: &mut Ctx<'_>,
    revisions: &BTreeMap<String, Revision>,
    key: &dyn Fn(&BTreeMap<String, String>) -> Option<String>,
) {
    let set = ctx.set;
    let complete_revisions: BTreeSet<&String> = revisions
        .iter()
        .filter(|(r, roles)| complete(set, r, &ctx.revision, roles))
        .map(|(r, _)| r)
        .collect();
    if complete_revisions.contains(&ctx.revision) {
        let target = revisions.get(&ctx.revision);
        for role in &set.spec.roles {
            // Named after the role's LWS, as upstream: a v0.9 child adopted in place keeps a
            // v0.9 Service (no slice in its name or selector), which selects its pods.
            let svc = match target.and_then(|t| t.get(&role.name)) {
                Some(lws) if objects::is_legacy(lws.labels()) => {
                    objects::legacy_service(set, &role.name, &ctx.revision)
                }
                _ => objects::service(set, ctx.slice, &role.name, &ctx.revision),
            };
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
        if objects::slice_of(svc.labels()) != Some(ctx.slice) {
            continue;
        }
        let keep = key(svc.labels()).is_some_and(|r| complete_revisions.contains(&r));
        if !keep {
            ctx.plan.delete_services.push(Delete {
                name: svc.name_any(),
                uid: svc.metadata.uid.clone(),
            });
        }
    }
}
