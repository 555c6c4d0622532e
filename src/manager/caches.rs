//! The caches the controllers share: one watch per kind, created once per leadership term.
//! Which objects are cached is a choice of this manager (only what carries an LWS name label,
//! so unrelated pods never enter memory); the mechanics are in `k8s::watch`.

use std::{future::Future, pin::Pin};

use k8s_openapi::api::{
    apps::v1::{ControllerRevision, StatefulSet},
    core::v1::Service,
    scheduling::v1alpha2::PodGroup,
};
use kube::{Api, Client, runtime::watcher::Config};

use crate::api::volcano::VolcanoPodGroup;
use crate::{
    api::{
        BatchRelease, DisaggregatedSet, LeaderWorkerSet, Rollout,
        analysis::{
            AnalysisRun, AnalysisTemplate, ClusterAnalysisTemplate, INSTANCE_ID, INSTANCE_ID_LABEL,
        },
        disaggregatedset,
        kueue::{self, Workload},
    },
    k8s::{apply::controller_kind, metrics::Metrics, pod::CachedPod, watch::SharedCache},
    lws::labels,
};

/// Every shared cache.
pub struct Caches {
    /// All LeaderWorkerSets.
    pub lws: SharedCache<LeaderWorkerSet>,
    /// Pods that belong to an LWS, as much of them as a controller reads ([`CachedPod`]).
    pub pods: SharedCache<CachedPod>,
    /// StatefulSets that belong to an LWS.
    pub statefulsets: SharedCache<StatefulSet>,
    /// Services that belong to an LWS.
    pub services: SharedCache<Service>,
    /// ControllerRevisions that belong to an LWS.
    pub revisions: SharedCache<ControllerRevision>,
    /// PodGroups that belong to an LWS (native gang scheduling), when the API server serves
    /// `scheduling.k8s.io/v1alpha2`: most clusters do not, and a watch of them would fail for
    /// ever.
    pub pod_groups: Option<SharedCache<PodGroup>>,
    /// Volcano PodGroups that belong to an LWS, when the manager hands groups to Volcano and
    /// the API server serves them.
    pub volcano_pod_groups: Option<SharedCache<VolcanoPodGroup>>,
    /// All Rollouts.
    pub rollouts: SharedCache<Rollout>,
    /// All BatchReleases.
    pub batch_releases: SharedCache<BatchRelease>,
    /// Kueue Workloads made for a job-like object (an LWS group's among them), indexed by that
    /// object's uid; empty on a cluster without Kueue (docs/kueue.md).
    pub workloads: SharedCache<Workload>,
    /// MultiKueue's copies of Workloads on a worker cluster: Kueue ≥ v0.19 leaves the
    /// `job-uid` label off them, so [`Caches::workloads`] does not hold them (docs/kueue.md).
    pub multikueue_copies: SharedCache<Workload>,
    /// All DisaggregatedSets.
    pub disaggregated_sets: SharedCache<DisaggregatedSet>,
    /// Services that belong to a DisaggregatedSet.
    pub set_services: SharedCache<Service>,
    /// DisaggregatedSetRoleScalers, where the API server serves them: a cluster upgraded
    /// without the new CRD (Helm does not upgrade CRDs) would otherwise hold every
    /// DisaggregatedSet's reconcile waiting for a watch that never lists.
    pub role_scalers:
        Option<SharedCache<crate::api::disaggregatedset_role_scaler::DisaggregatedSetRoleScaler>>,
    /// Argo's analysis kinds, where the API server serves them.
    pub analysis: Option<AnalysisCaches>,
}

/// Which optional kinds the API server serves, asked once per leadership term.
#[derive(Clone, Copy, Debug, Default)]
pub struct Served {
    /// Argo's analysis kinds ([`serves_analysis`]).
    pub analysis: bool,
    /// PodGroups ([`serves_pod_groups`]).
    pub pod_groups: bool,
    /// DisaggregatedSetRoleScalers ([`serves_role_scalers`]).
    pub role_scalers: bool,
    /// Volcano's PodGroups, watched only with `--gang-scheduling-provider=volcano`
    /// ([`serves_volcano_pod_groups`]).
    pub volcano_pod_groups: bool,
}

/// Whether the API server serves DisaggregatedSetRoleScalers (upstream v0.10.0's kind: a
/// cluster upgraded from v0.9 without applying the new CRD has DisaggregatedSets without it).
/// A failed answer counts as served: the watch then retries as any other.
pub async fn serves_role_scalers(client: &Client) -> bool {
    let group_version = format!("{}/v1", disaggregatedset::GROUP);
    match client.list_api_group_resources(&group_version).await {
        Ok(list) => {
            let served = list
                .resources
                .iter()
                .any(|r| r.name == "disaggregatedsetrolescalers");
            if !served {
                tracing::warn!(
                    "DisaggregatedSetRoleScalers ({group_version}) are not served: roles with \
                     scaling.mode External keep their replicas and their set says so; apply \
                     crds/ and restart to enable them"
                );
            }
            served
        }
        Err(err) => {
            tracing::debug!(%err, "cannot list {group_version}'s resources; watching DisaggregatedSetRoleScalers anyway");
            true
        }
    }
}

/// The caches of Argo's analysis kinds.
pub struct AnalysisCaches {
    /// All AnalysisTemplates.
    pub templates: SharedCache<AnalysisTemplate>,
    /// All ClusterAnalysisTemplates.
    pub cluster_templates: SharedCache<ClusterAnalysisTemplate>,
    /// AnalysisRuns of ours (our instance id): a default Argo Rollouts' runs never enter
    /// memory.
    pub runs: SharedCache<AnalysisRun>,
}

impl Caches {
    /// Caches for `client` (nothing is watched until the drivers run); `analysis`: the API
    /// server serves Argo's analysis kinds ([`serves_analysis`]); PodGroups only when
    /// `pod_groups_served`.
    pub fn new(client: &Client, served: Served) -> Self {
        let Served {
            analysis,
            pod_groups: pod_groups_served,
            role_scalers,
            volcano_pod_groups: volcano,
        } = served;
        let owned = Config::default().labels(labels::NAME);
        Self {
            lws: SharedCache::new(Api::all(client.clone()), Config::default()),
            // Pods and StatefulSets change most, often in fields no controller reads (a pod's
            // other conditions, a worker StatefulSet's template); no one waits on its own write
            // to them through a watch event.
            pods: SharedCache::new(Api::all(client.clone()), owned.clone())
                .with_index(labels::NAME)
                .with_unchanged_skipped(),
            statefulsets: SharedCache::new(Api::all(client.clone()), owned.clone())
                .with_trim(trim_statefulset)
                .with_index(labels::NAME)
                .with_unchanged_skipped(),
            services: SharedCache::new(Api::all(client.clone()), owned.clone())
                .with_index(labels::NAME),
            revisions: SharedCache::new(
                Api::all(client.clone()),
                Config::default().labels(&lws_revisions_selector()),
            )
            .with_trim(trim_revision)
            .with_index(labels::NAME),
            pod_groups: pod_groups_served.then(|| {
                SharedCache::new(Api::all(client.clone()), owned.clone()).with_index(labels::NAME)
            }),
            volcano_pod_groups: volcano.then(|| {
                SharedCache::new(Api::all(client.clone()), owned.clone()).with_index(labels::NAME)
            }),
            rollouts: SharedCache::new(Api::all(client.clone()), Config::default()),
            batch_releases: SharedCache::new(Api::all(client.clone()), Config::default()),
            workloads: SharedCache::new(
                Api::all(client.clone()),
                Config::default().labels(kueue::JOB_UID_LABEL),
            )
            .with_index(kueue::JOB_UID_LABEL),
            multikueue_copies: SharedCache::new(
                Api::all(client.clone()),
                Config::default().labels(kueue::MULTIKUEUE_ORIGIN_LABEL),
            ),
            disaggregated_sets: SharedCache::new(Api::all(client.clone()), Config::default()),
            set_services: SharedCache::new(
                Api::all(client.clone()),
                Config::default().labels(disaggregatedset::SET_NAME_LABEL),
            ),
            role_scalers: role_scalers
                .then(|| SharedCache::new(Api::all(client.clone()), Config::default())),
            analysis: analysis.then(|| AnalysisCaches {
                templates: SharedCache::new(Api::all(client.clone()), Config::default()),
                cluster_templates: SharedCache::new(Api::all(client.clone()), Config::default()),
                runs: SharedCache::new(
                    Api::all(client.clone()),
                    Config::default().labels(&format!("{INSTANCE_ID_LABEL}={INSTANCE_ID}")),
                ),
            }),
        }
    }

    /// The futures that run the watches; call once every controller has subscribed. The
    /// Workloads' watch starts once Kueue serves them ([`once_kueue_serves`]).
    pub fn drivers(
        &mut self,
        client: &Client,
        metrics: &Metrics,
    ) -> Vec<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let workloads = self.workloads.driver(metrics);
        let multikueue_copies = self.multikueue_copies.driver(metrics);
        let mut drivers = vec![
            self.lws.driver(metrics),
            self.pods.driver(metrics),
            self.statefulsets.driver(metrics),
            self.services.driver(metrics),
            self.revisions.driver(metrics),
            self.rollouts.driver(metrics),
            self.batch_releases.driver(metrics),
            // Both Workload watches start together, after one check (and one log line).
            once_kueue_serves(
                client.clone(),
                Box::pin(async move {
                    futures::future::join(workloads, multikueue_copies).await;
                }),
            ),
            self.disaggregated_sets.driver(metrics),
            self.set_services.driver(metrics),
        ];
        if let Some(scalers) = self.role_scalers.as_mut() {
            drivers.push(scalers.driver(metrics));
        }
        if let Some(a) = self.analysis.as_mut() {
            drivers.push(a.templates.driver(metrics));
            drivers.push(a.cluster_templates.driver(metrics));
            drivers.push(a.runs.driver(metrics));
        }
        if let Some(pod_groups) = &mut self.volcano_pod_groups {
            drivers.push(pod_groups.driver(metrics));
        }
        if let Some(pod_groups) = &mut self.pod_groups {
            drivers.push(pod_groups.driver(metrics));
        }
        drivers
    }
}

// Kueue's Workloads keep their labels in their metadata, like the built-in kinds.
impl crate::k8s::label_index::Labelled for Workload {}
impl crate::k8s::label_index::Labelled for VolcanoPodGroup {}

/// The label that `k8s.io/kubernetes/pkg/controller/history` puts on every ControllerRevision
/// it makes: the StatefulSet controller's revisions carry it, an LWS's never do (neither ours
/// nor upstream's v0.8/v0.9, which label theirs by hand).
const HISTORY_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// The ControllerRevisions an LWS controller reads: those labelled with an LWS name, less the
/// StatefulSets' own, which copy our template labels with the whole pod template as `data` —
/// one per StatefulSet, i.e. per group, never read. The API server leaves them out, so they
/// are neither sent, decoded nor cached.
fn lws_revisions_selector() -> String {
    format!("{},!{HISTORY_HASH_LABEL}", labels::NAME)
}

/// How often a cluster without Kueue is asked again whether it serves Workloads now.
const KUEUE_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs `driver` (the Workloads' watch) once the API server serves `kueue.x-k8s.io/v1beta2`
/// Workloads. Without Kueue a watch of them fails with 404 on every retry, and kube logs each
/// failure as a warning ("Unsuccessful data error parse: 404 page not found"): a line every few
/// seconds for ever on most clusters, which reads like an outage. Instead the API groups are
/// listed (one GET, a 200 whether Kueue is there or not) every [`KUEUE_RECHECK`], one line says
/// Kueue is not installed, and a Kueue installed later is watched from then on, no restart.
fn once_kueue_serves(
    client: Client,
    driver: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(async move {
        let mut absent_said = false;
        loop {
            match client.list_api_groups().await {
                Ok(groups) if serves_workloads(&groups) => break,
                Ok(_) if !absent_said => {
                    tracing::info!(
                        "Kueue is not installed (no kueue.x-k8s.io/v1beta2): its Workloads are not \
                         watched; checking again every {}s",
                        KUEUE_RECHECK.as_secs()
                    );
                    absent_said = true;
                }
                Ok(_) => {}
                Err(err) => tracing::debug!(%err, "cannot list API groups; asking again"),
            }
            tokio::time::sleep(KUEUE_RECHECK).await;
        }
        if absent_said {
            tracing::info!("Kueue serves Workloads now: watching them");
        }
        driver.await
    })
}

/// Whether the API server serves Argo's analysis kinds (`argoproj.io/v1alpha1`): asked once
/// per leadership term; without them a Rollout that asks for analysis says so in its status.
pub async fn serves_analysis(client: &Client) -> bool {
    match client.list_api_groups().await {
        Ok(groups) => groups.groups.iter().any(|g| {
            g.name == crate::api::analysis::GROUP
                && g.versions.iter().any(|v| v.version == "v1alpha1")
        }),
        Err(err) => {
            tracing::warn!(%err, "cannot list API groups: analysis is off until the next leadership term");
            false
        }
    }
}

/// Whether the API server serves PodGroups (`scheduling.k8s.io/v1alpha2`, Kubernetes 1.36 with
/// workload-aware scheduling enabled: docs/lws.md, "Gang scheduling"). Asked once when the
/// controllers start; an LWS asking for gang scheduling on a cluster without them is told so
/// (`lws::plan::gangs::blocked`). A failed answer is asked again a few times, then taken as no.
pub async fn serves_pod_groups(client: &Client) -> bool {
    let mut wait = std::time::Duration::from_millis(200);
    for _ in 0..5 {
        match client.list_api_groups().await {
            Ok(groups) => {
                let served = groups.groups.iter().any(|g| {
                    g.name == crate::lws::gang::API_GROUP
                        && g.versions
                            .iter()
                            .any(|v| v.version == crate::lws::gang::API_VERSION)
                });
                tracing::info!(
                    served,
                    "PodGroups ({}/{}) for native gang scheduling",
                    crate::lws::gang::API_GROUP,
                    crate::lws::gang::API_VERSION
                );
                return served;
            }
            Err(err) => tracing::debug!(%err, "cannot list API groups; asking again"),
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
    tracing::warn!("cannot list API groups: taking PodGroups as not served");
    false
}

/// Whether the API server serves Volcano's PodGroups (`scheduling.volcano.sh/v1beta1`, with
/// the `podgroups` resource): asked once when the controllers start, when the manager hands
/// groups to Volcano. A failed answer is asked again a few times, then taken as no.
pub async fn serves_volcano_pod_groups(client: &Client) -> bool {
    use crate::api::volcano::{GROUP, VERSION};
    let mut wait = std::time::Duration::from_millis(200);
    for _ in 0..5 {
        match client
            .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
            .await
        {
            Ok(list) => return list.resources.iter().any(|r| r.name == "podgroups"),
            Err(kube::Error::Api(status)) if status.code == 404 => return false,
            Err(err) => tracing::debug!(%err, "cannot list Volcano's API resources; asking again"),
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
    tracing::warn!("cannot list Volcano's API resources: taking its PodGroups as not served");
    false
}

/// Whether the API groups include Kueue's at the version the Workload type reads.
fn serves_workloads(groups: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList) -> bool {
    groups
        .groups
        .iter()
        .any(|g| g.name == "kueue.x-k8s.io" && g.versions.iter().any(|v| v.version == "v1beta2"))
}

/// Worker StatefulSets (a leader pod controls each) are read for their labels, owner and
/// status only: the plan writes them whole when it creates them and never compares their
/// template or selector (a template change reaches a group through the LWS's
/// ControllerRevisions and replaces the leader). Their pod template and claim templates — a
/// copy of the LWS's worker template in each of the LWS's groups, ~2 KiB a group — and their
/// selector (four labels of the group's) are not kept. The leader StatefulSet keeps
/// everything: the plan compares it with its desired form.
pub fn trim_statefulset(sts: &mut StatefulSet) {
    let worker = controller_kind(sts) == Some("Pod");
    if let Some(spec) = sts.spec.as_mut().filter(|_| worker) {
        spec.template = Default::default();
        spec.volume_claim_templates = None;
        spec.selector = Default::default();
    }
}

/// Of a ControllerRevision no LWS controls — one that passes [`lws_revisions_selector`]
/// without being an LWS's, such as a StatefulSet revision made without the history label —
/// only the metadata is kept: only an LWS's own revisions are read (their `data` is a held
/// revision's template).
pub fn trim_revision(rev: &mut ControllerRevision) {
    if controller_kind(rev) != Some("LeaderWorkerSet") {
        rev.data = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn workloads_are_watched_only_where_kueue_serves_v1beta2() {
        let groups =
            |gv: &[(&str, &str)]| -> k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList {
                serde_json::from_value(
                    serde_json::json!({"groups": gv.iter().map(|(g, v)| serde_json::json!({
                "name": g, "versions": [{"groupVersion": format!("{g}/{v}"), "version": v}]
            })).collect::<Vec<_>>()}),
                )
                .unwrap()
            };
        assert!(!serves_workloads(&groups(&[("apps", "v1")])));
        assert!(!serves_workloads(&groups(&[("kueue.x-k8s.io", "v1beta1")])));
        assert!(serves_workloads(&groups(&[
            ("apps", "v1"),
            ("kueue.x-k8s.io", "v1beta2")
        ])));
    }

    /// Metadata naming a controller of `kind`.
    fn controlled_by(kind: &str) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                kind: kind.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn only_leader_statefulsets_keep_their_templates() {
        use k8s_openapi::api::{apps::v1::StatefulSetSpec, core::v1::PodTemplateSpec};
        let sts = |owner: &str| StatefulSet {
            metadata: controlled_by(owner),
            spec: Some(StatefulSetSpec {
                replicas: Some(3),
                selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                    match_labels: Some([("group".to_string(), "0".to_string())].into()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    spec: Some(Default::default()),
                    ..Default::default()
                },
                volume_claim_templates: Some(vec![Default::default()]),
                ..Default::default()
            }),
            status: None,
        };
        let mut leader = sts("LeaderWorkerSet");
        trim_statefulset(&mut leader);
        assert_eq!(leader, sts("LeaderWorkerSet"));
        let mut workers = sts("Pod");
        trim_statefulset(&mut workers);
        let spec = workers.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.template, PodTemplateSpec::default());
        assert_eq!(spec.volume_claim_templates, None);
        assert_eq!(spec.selector, Default::default());
    }

    #[test]
    fn only_revisions_an_lws_controls_keep_their_data() {
        let revision = |kind: &str| ControllerRevision {
            metadata: controlled_by(kind),
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                serde_json::json!({"spec": {}}),
            )),
            revision: 1,
        };
        let mut ours = revision("LeaderWorkerSet");
        trim_revision(&mut ours);
        assert!(ours.data.is_some());
        let mut statefulsets = revision("StatefulSet");
        trim_revision(&mut statefulsets);
        assert_eq!(statefulsets.data, None);
        assert_eq!(statefulsets.revision, 1);
    }
}
