//! What the Rollout plan looks at: plain data the observe step fills from reflector stores.
//! Nothing here talks to the API server; tests build these structs by hand.

use crate::api::batchrelease::{BatchReleaseSpec, BatchReleaseStatus};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::analysis::{AnalysisRun, AnalysisTemplateSpec, ClusterAnalysisTemplateSpec};
use crate::api::rollout::Rollout;
use crate::release::progress::CanaryCounts;
use crate::traffic::observe::{OwnerInfo, TrafficObserved};

/// Everything one Rollout reconcile decides from.
#[derive(Clone, Debug, Default)]
pub struct RolloutObserved {
    /// The Rollout as stored (metadata, spec, status).
    pub rollout: Rollout,
    /// The workload `spec.workloadRef` names, if it is a LeaderWorkerSet that exists.
    pub workload: Option<StableWorkload>,
    /// The BatchRelease this Rollout owns (same name), if it exists.
    pub batch_release: Option<BatchReleaseSummary>,
    /// Name of an older Rollout in the namespace with the same `workloadRef`: this one then
    /// must not act (one Rollout per workload). The observe step picks the oldest by
    /// creationTimestamp, then name, so exactly one Rollout wins.
    pub conflicting_rollout: Option<String>,
    /// The objects `trafficRoutings[0]` names, as `rollout::deref` read them (users' objects,
    /// not cached); `None` without trafficRoutings (or before the read).
    pub traffic: Option<TrafficObserved>,
    /// Analysis templates and this Rollout's runs.
    pub analysis: AnalysisObserved,
}

/// What an analysis of this Rollout's release reads: the templates it may name and the runs
/// it created.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnalysisObserved {
    /// The API server served Argo's analysis kinds when the manager started.
    pub served: bool,
    /// Their caches are filled.
    pub synced: bool,
    /// AnalysisTemplates of the Rollout's namespace, by name.
    pub templates: BTreeMap<String, AnalysisTemplateSpec>,
    /// ClusterAnalysisTemplates, by name.
    pub cluster_templates: BTreeMap<String, ClusterAnalysisTemplateSpec>,
    /// This Rollout's AnalysisRuns, by name.
    pub runs: BTreeMap<String, RunSummary>,
}

/// One AnalysisRun, reduced to what the plan reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunSummary {
    /// `status.phase` (empty before the analysis controller's first write).
    pub phase: String,
    /// `status.message`.
    pub message: Option<String>,
    /// When it was created: a run older than its step is a stale one from an earlier release.
    pub created: Option<Time>,
    /// Each metric's last measured value, for the Rollout's message.
    pub last_values: Vec<(String, String)>,
    /// `spec.terminate` is set.
    pub terminated: bool,
}

/// The stable LWS, reduced to what the plan needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StableWorkload {
    /// Name (same namespace as the Rollout).
    pub name: String,
    /// UID (owner references, events).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`: counts below are only trusted when it equals `generation`.
    pub observed_generation: Option<i64>,
    /// Revision key of the template its groups run when no release is under way (the oldest
    /// revision still in use; the held one during a release).
    pub current_revision: String,
    /// Revision key of `spec.leaderWorkerTemplate` as it is now.
    pub update_revision: String,
    /// `spec.replicas` (groups; a DisaggregatedSet's complete pairs, summed over its slices).
    pub replicas: i32,
    /// Slices the groups are spread over, a release's step taking its share of each on its
    /// own: a DisaggregatedSet's `spec.slices`, 1 for an LWS (0, as 1, in a default value).
    pub slices: i32,
    /// `status.readyReplicas` (groups with every pod ready).
    pub ready_replicas: i32,
    /// `status.updatedReplicas` (groups on `update_revision`).
    pub updated_replicas: i32,
    /// Value of the hold annotation `rollouts.kruise.io/stable-revision`, if set.
    pub hold: Option<String>,
    /// The release partition annotation of a partition-style release, if set.
    pub release_partition: Option<i32>,
    /// `rollouts.kruise.io/rollout-id`, from the label or else the annotation.
    pub rollout_id: Option<String>,
    /// What the workload is.
    pub kind: WorkloadKind,
    /// A DisaggregatedSet: every role of every slice runs `update_revision` at its replicas,
    /// all ready, and no other revision has a group left (`None` for an LWS, whose counts say
    /// the same).
    pub pair_rolled: Option<bool>,
    /// A DisaggregatedSet: the release-groups annotation is on it (lifted with the hold).
    pub release_groups: bool,
    /// A DisaggregatedSet: a revision other than the held one and the template's still asks
    /// for groups (the second revision of a release restarted on a third template, not yet
    /// drained).
    pub other_revision_groups: bool,
    /// A DisaggregatedSet: every role of every slice runs `update_revision` at its full
    /// replicas, all ready (whatever else runs): the new pair a blue-green switch may go to.
    pub pair_whole: bool,
    /// A DisaggregatedSet: its roles' names in spec order (empty for an LWS).
    pub roles: Vec<String>,
    /// A DisaggregatedSet: its roles with `scaling.mode: External`, in spec order (the pair
    /// release holds while there are any; the Rollout's message says so).
    pub external_roles: Vec<String>,
}

/// The kinds of workload a Rollout releases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkloadKind {
    /// A LeaderWorkerSet.
    #[default]
    LeaderWorkerSet,
    /// A DisaggregatedSet: its counts are in pairs (per slice, the fewest groups any role has).
    DisaggregatedSet,
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkloadKind::LeaderWorkerSet => "LeaderWorkerSet",
            WorkloadKind::DisaggregatedSet => "DisaggregatedSet",
        })
    }
}

impl StableWorkload {
    /// Status counts describe the current spec.
    pub fn status_current(&self) -> bool {
        self.observed_generation == Some(self.generation)
    }

    /// Every group runs the current template and is ready (the stable side finished rolling).
    pub fn fully_rolled(&self) -> bool {
        if let Some(rolled) = self.pair_rolled {
            return rolled && self.hold.is_none();
        }
        self.status_current()
            && self.current_revision == self.update_revision
            && self.updated_replicas >= self.replicas
            && self.ready_replicas >= self.replicas
    }
}

/// The BatchRelease the Rollout owns, as stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchReleaseSummary {
    /// `metadata.generation`.
    pub generation: i64,
    /// `metadata.resourceVersion` as cached (see `k8s::written`).
    pub resource_version: String,
    /// Its spec (compared with the desired one: a difference means "being updated").
    pub spec: BatchReleaseSpec,
    /// Its status.
    pub status: BatchReleaseStatus,
    /// Kruise's `rollouts.kruise.io/rollback-in-batch` annotation, as set on it.
    pub rollback_in_batch: Option<String>,
    /// Its canary LWS, when it exists: the LWS it controls named for the revision its status
    /// says it releases. The plan reads batch readiness off it directly,
    /// one watch hop before the BatchRelease's status says the same (`release::progress`).
    pub canary: Option<CanaryCounts>,
}

impl BatchReleaseSummary {
    /// Its status says Completed, for the spec it has now.
    pub fn completed(&self) -> bool {
        self.status.phase.as_deref() == Some(crate::release::names::batch_release_phase::COMPLETED)
            && self.status.observed_generation == Some(self.generation)
    }

    /// It already is what `desired` asks: the same spec and the same rollback-in-batch mark.
    pub fn is(&self, desired: &crate::api::batchrelease::BatchRelease) -> bool {
        self.spec == desired.spec
            && self.rollback_in_batch.as_ref()
                == desired
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(crate::release::names::ROLLBACK_IN_BATCH))
    }
}

/// The Rollout as owner of the canary Service and Ingress.
pub fn owner(rollout: &Rollout) -> OwnerInfo {
    use kube::ResourceExt;
    OwnerInfo {
        api_version: "rollouts.kruise.io/v1beta1".into(),
        kind: "Rollout".into(),
        name: rollout.name_any(),
        uid: rollout.metadata.uid.clone().unwrap_or_default(),
    }
}

/// The reflector stores the Rollout controller reads (shared with the other controllers).
#[derive(Clone)]
pub struct Stores {
    /// Rollouts.
    pub rollouts: kube::runtime::reflector::Store<Rollout>,
    /// BatchReleases.
    pub batch_releases: kube::runtime::reflector::Store<crate::api::batchrelease::BatchRelease>,
    /// LeaderWorkerSets.
    pub lws: kube::runtime::reflector::Store<crate::api::leaderworkerset::LeaderWorkerSet>,
    /// ControllerRevisions of LWSes (the revisions a stable LWS still runs).
    pub revisions: kube::runtime::reflector::Store<k8s_openapi::api::apps::v1::ControllerRevision>,
    /// Argo's analysis kinds; `None` where the API server does not serve them.
    pub analysis: Option<AnalysisStores>,
    /// DisaggregatedSets (a Rollout may release one).
    pub sets: kube::runtime::reflector::Store<crate::api::disaggregatedset::DisaggregatedSet>,
}

/// The stores of Argo's analysis kinds.
#[derive(Clone)]
pub struct AnalysisStores {
    /// AnalysisTemplates.
    pub templates: kube::runtime::reflector::Store<crate::api::analysis::AnalysisTemplate>,
    /// ClusterAnalysisTemplates.
    pub cluster_templates:
        kube::runtime::reflector::Store<crate::api::analysis::ClusterAnalysisTemplate>,
    /// AnalysisRuns.
    pub runs: kube::runtime::reflector::Store<AnalysisRun>,
}

/// Fills everything but the traffic objects (a fresh read: see `rollout::deref`).
pub fn observe(stores: &Stores, rollout: &Rollout) -> RolloutObserved {
    use kube::{ResourceExt, runtime::reflector::ObjectRef};
    let ns = rollout.namespace().unwrap_or_default();
    let target = &rollout.spec.workload_ref;
    let workload = if target.is_disaggregated_set() {
        stores
            .sets
            .get(&ObjectRef::new(&target.name).within(&ns))
            .map(|set| {
                let lws = stores.lws.state();
                pair_workload(
                    &set,
                    lws.iter()
                        .filter(|l| l.namespace().as_deref() == Some(ns.as_str()))
                        .map(AsRef::as_ref),
                )
            })
    } else {
        (target.kind == crate::rollout::names::LWS_KIND
            && target.api_version == crate::rollout::names::LWS_API_VERSION)
            .then(|| stores.lws.get(&ObjectRef::new(&target.name).within(&ns)))
            .flatten()
            .map(|lws| stable_workload(stores, &lws))
    };
    let batch_release = stores
        .batch_releases
        .get(&ObjectRef::new(&rollout.name_any()).within(&ns))
        .filter(|br| {
            br.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == rollout.metadata.uid.as_ref())
        })
        .map(|br| BatchReleaseSummary {
            generation: br.metadata.generation.unwrap_or_default(),
            resource_version: br.resource_version().unwrap_or_default(),
            spec: br.spec.clone(),
            status: br.status.clone().unwrap_or_default(),
            rollback_in_batch: br
                .annotations()
                .get(crate::release::names::ROLLBACK_IN_BATCH)
                .cloned(),
            // A pair's batch is read off the BatchRelease's status: it has no canary LWS.
            canary: (!target.is_disaggregated_set())
                .then(|| canary_of(stores, &br, &target.name))
                .flatten(),
        });
    RolloutObserved {
        rollout: rollout.clone(),
        workload,
        batch_release,
        conflicting_rollout: owner_of_workload(stores, rollout),
        traffic: None,
        analysis: stores
            .analysis
            .as_ref()
            .map(|a| analysis_of(a, rollout))
            .unwrap_or_default(),
    }
}

/// The templates of the Rollout's namespace and the runs it owns. Only read when the Rollout
/// asks for analysis: the plan reads nothing else from here.
fn analysis_of(stores: &AnalysisStores, rollout: &Rollout) -> AnalysisObserved {
    use kube::ResourceExt;
    let wants = rollout
        .annotations()
        .contains_key(crate::rollout::names::STEP_ANALYSIS)
        || rollout
            .annotations()
            .contains_key(crate::rollout::names::BACKGROUND_ANALYSIS);
    use futures::FutureExt;
    let synced = [
        stores.templates.wait_until_ready().now_or_never(),
        stores.cluster_templates.wait_until_ready().now_or_never(),
        stores.runs.wait_until_ready().now_or_never(),
    ]
    .iter()
    .all(|r| matches!(r, Some(Ok(()))));
    if !wants {
        return AnalysisObserved {
            served: true,
            synced,
            ..AnalysisObserved::default()
        };
    }
    let ns = rollout.namespace().unwrap_or_default();
    let uid = rollout.metadata.uid.clone().unwrap_or_default();
    AnalysisObserved {
        served: true,
        synced,
        templates: stores
            .templates
            .state()
            .iter()
            .filter(|t| t.namespace().as_deref() == Some(ns.as_str()))
            .map(|t| (t.name_any(), t.spec.clone()))
            .collect(),
        cluster_templates: stores
            .cluster_templates
            .state()
            .iter()
            .map(|t| (t.name_any(), t.spec.clone()))
            .collect(),
        runs: stores
            .runs
            .state()
            .iter()
            .filter(|r| {
                r.namespace().as_deref() == Some(ns.as_str())
                    && r.owner_references().iter().any(|o| o.uid == uid)
            })
            .map(|r| (r.name_any(), run_summary(r)))
            .collect(),
    }
}

fn run_summary(run: &AnalysisRun) -> RunSummary {
    let status = run.status.clone().unwrap_or_default();
    RunSummary {
        phase: status.phase.unwrap_or_default(),
        message: status.message,
        created: run.metadata.creation_timestamp.clone(),
        terminated: run.spec.terminate == Some(true),
        last_values: status
            .metric_results
            .iter()
            .filter_map(|m| {
                let last = m.measurements.last()?;
                let shown = last
                    .value
                    .clone()
                    .or_else(|| last.message.clone())
                    .unwrap_or_default();
                Some((m.name.clone(), shown))
            })
            .collect(),
    }
}

/// The canary LWS `br` controls for the revision its status says it releases, as counts.
fn canary_of(
    stores: &Stores,
    br: &crate::api::batchrelease::BatchRelease,
    stable: &str,
) -> Option<CanaryCounts> {
    use kube::{ResourceExt, runtime::reflector::ObjectRef};
    let revision = br.status.as_ref()?.update_revision.as_deref()?;
    let name = crate::release::names::canary_name(stable, revision);
    let lws = stores
        .lws
        .get(&ObjectRef::new(&name).within(&br.namespace()?))?;
    lws.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == br.metadata.uid.as_ref())
        .then(|| CanaryCounts::of(&lws))
}

/// The oldest Rollout (creationTimestamp, then name) naming the same workload, when it is
/// not `rollout`: one Rollout per workload, and exactly one wins.
fn owner_of_workload(stores: &Stores, rollout: &Rollout) -> Option<String> {
    let rollouts = stores.rollouts.state();
    owner_among(rollouts.iter().map(AsRef::as_ref), rollout)
}

/// [`owner_of_workload`] over a list. A Rollout being deleted still owns its workload while our
/// finalizer is on it: it is finishing its release, and the next Rollout in line must not start
/// one on the same workload until it is gone.
pub fn owner_among<'a>(
    rollouts: impl IntoIterator<Item = &'a Rollout>,
    rollout: &Rollout,
) -> Option<String> {
    use kube::ResourceExt;
    let key = |r: &Rollout| (r.metadata.creation_timestamp.clone(), r.name_any());
    rollouts
        .into_iter()
        .filter(|r| {
            r.namespace() == rollout.namespace()
                && r.spec.workload_ref == rollout.spec.workload_ref
                && (r.metadata.deletion_timestamp.is_none()
                    || r.finalizers()
                        .iter()
                        .any(|f| f == crate::rollout::names::FINALIZER))
        })
        .min_by_key(|r| key(r))
        .map(|r| r.name_any())
        .filter(|oldest| *oldest != rollout.name_any())
}

fn stable_workload(
    stores: &Stores,
    lws: &crate::api::leaderworkerset::LeaderWorkerSet,
) -> StableWorkload {
    use crate::{lws::labels, release};
    use kube::ResourceExt;
    let hold = lws
        .annotations()
        .get(labels::HELD_REVISION)
        .filter(|v| !v.is_empty())
        .cloned();
    let recorded = release::revision::recorded(&stores.revisions, lws);
    let update_revision = release::revision::template_key(lws, &recorded);
    // The revision the groups run when no hold says so: the oldest recorded revision still
    // there (the LWS controller truncates the others once an update is done).
    let oldest = recorded
        .iter()
        .min_by_key(|r| r.revision)
        .and_then(|r| r.labels().get(labels::REVISION).cloned());
    let status = lws.status.clone().unwrap_or_default();
    StableWorkload {
        name: lws.name_any(),
        uid: lws.metadata.uid.clone().unwrap_or_default(),
        generation: lws.metadata.generation.unwrap_or_default(),
        observed_generation: status.observed_generation,
        current_revision: hold
            .clone()
            .or(oldest)
            .unwrap_or_else(|| update_revision.clone()),
        update_revision,
        replicas: lws.spec.replicas.unwrap_or(1),
        slices: 1,
        ready_replicas: status.ready_replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        hold,
        release_partition: crate::lws::plan::revisions::release_partition(lws),
        rollout_id: lws
            .labels()
            .get(crate::rollout::names::ROLLOUT_ID)
            .or_else(|| lws.annotations().get(crate::rollout::names::ROLLOUT_ID))
            .cloned(),
        kind: WorkloadKind::LeaderWorkerSet,
        pair_rolled: None,
        release_groups: false,
        other_revision_groups: false,
        pair_whole: false,
        roles: Vec::new(),
        external_roles: Vec::new(),
    }
}

/// A DisaggregatedSet as the Rollout plan reads a workload, from the set and its LWSs among
/// `lws`. Counts are in pairs: per slice, the fewest groups any role has, summed over slices;
/// the set's own status has no generation of its own to trust them by, so they are read off
/// its LWSs, each trusted only when its status describes its spec.
pub fn pair_workload<'a>(
    set: &crate::api::disaggregatedset::DisaggregatedSet,
    lws: impl IntoIterator<Item = &'a crate::api::leaderworkerset::LeaderWorkerSet>,
) -> StableWorkload {
    use crate::api::disaggregatedset as ds;
    use kube::ResourceExt;
    let name = set.name_any();
    let update_revision =
        crate::disaggregatedset::revision::revision(&set.spec.roles).unwrap_or_default();
    let hold = set
        .annotations()
        .get(ds::HELD_REVISION_ANNOTATION)
        .filter(|v| !v.is_empty())
        .cloned();
    let children: Vec<_> = lws
        .into_iter()
        .filter(|l| l.labels().get(ds::SET_NAME_LABEL) == Some(&name))
        .collect();
    let label = |l: &crate::api::leaderworkerset::LeaderWorkerSet, key: &str| {
        l.labels().get(key).cloned().unwrap_or_default()
    };
    let caught_up = |l: &crate::api::leaderworkerset::LeaderWorkerSet| {
        l.status.as_ref().and_then(|s| s.observed_generation) == l.metadata.generation
    };
    let slices = set.spec.slices().max(1);
    let (mut replicas, mut updated, mut ready) = (0, 0, 0);
    let mut rolled = children.iter().all(|l| caught_up(l));
    let mut whole = true;
    for slice in 0..slices {
        let (mut want, mut up, mut ok) = (i32::MAX, i32::MAX, i32::MAX);
        for role in &set.spec.roles {
            let new = children.iter().find(|l| {
                label(l, ds::ROLE_LABEL) == role.name
                    && label(l, ds::REVISION_LABEL) == update_revision
                    && label(l, ds::SLICE_LABEL).parse().unwrap_or(0) == slice
            });
            let status = new.and_then(|l| l.status.clone()).unwrap_or_default();
            want = want.min(role.replicas());
            up = up.min(status.replicas.unwrap_or(0));
            ok = ok.min(status.ready_replicas.unwrap_or(0));
            let full = status.ready_replicas.unwrap_or(0) >= role.replicas()
                && status.replicas.unwrap_or(0) >= role.replicas();
            rolled &= full;
            whole &= full && new.is_some_and(|l| caught_up(l));
        }
        if !set.spec.roles.is_empty() {
            replicas += want;
            updated += up;
            ready += ok;
        }
    }
    // The revision still serving beside the new one: the hold, or a revision whose groups the
    // set's rolling update has not drained yet.
    let older = children
        .iter()
        .filter(|l| label(l, ds::REVISION_LABEL) != update_revision)
        .find(|l| {
            l.spec.replicas.unwrap_or(1) > 0
                || l.status.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0
        })
        .map(|l| label(l, ds::REVISION_LABEL));
    rolled &= older.is_none();
    let other_revision_groups = children.iter().any(|l| {
        let revision = label(l, ds::REVISION_LABEL);
        revision != update_revision
            && Some(&revision) != hold.as_ref()
            && l.spec.replicas.unwrap_or(1) > 0
    });
    let generation = set.metadata.generation.unwrap_or_default();
    StableWorkload {
        name,
        uid: set.metadata.uid.clone().unwrap_or_default(),
        generation,
        observed_generation: Some(generation),
        current_revision: hold
            .clone()
            .or(older)
            .unwrap_or_else(|| update_revision.clone()),
        update_revision,
        replicas,
        slices,
        ready_replicas: ready,
        updated_replicas: updated,
        release_groups: set
            .annotations()
            .contains_key(ds::RELEASE_GROUPS_ANNOTATION),
        other_revision_groups,
        hold,
        release_partition: None,
        rollout_id: set
            .labels()
            .get(crate::rollout::names::ROLLOUT_ID)
            .or_else(|| set.annotations().get(crate::rollout::names::ROLLOUT_ID))
            .cloned(),
        kind: WorkloadKind::DisaggregatedSet,
        pair_rolled: Some(rolled),
        pair_whole: whole && !set.spec.roles.is_empty(),
        roles: set.spec.roles.iter().map(|r| r.name.clone()).collect(),
        external_roles: set.spec.external_roles(),
    }
}
