//! The LWS reconciler: observe (reflector stores) → plan (pure functions in this module's
//! siblings) → apply (server-side apply with field manager `lws`, status patch, events).
//!
//! Watches LeaderWorkerSets, and — filtered by the `leaderworkerset.sigs.k8s.io/name` label, so
//! unrelated pods never enter memory — pods, StatefulSets, Services and ControllerRevisions.
//! Every event maps to its LWS, and one reconcile per LWS handles what upstream splits over an
//! LWS reconciler and a per-pod reconciler: the leader StatefulSet, the revisions, one worker
//! StatefulSet per leader pod, Services, group restarts and status. Nothing is kept in memory
//! between reconciles; a restart recomputes everything from the cluster.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::{
    api::{
        apps::v1::{ControllerRevision, StatefulSet},
        core::v1::{Node, Pod, Service},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy},
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, ObjectRef, Store},
        watcher::{self, Config as WatchConfig},
    },
};
use serde_json::json;
use thiserror::Error;
use tracing::{debug, info, instrument, warn};

use crate::k8s::apply_body::{ApplyBodyError, apply_body};

use super::{admission, applied, gojson, labels, objects, revision, rolling, status};
use crate::api::leaderworkerset::{LeaderWorkerSet, RestartPolicy, StartupPolicy, SubdomainPolicy};

/// Why a reconcile failed.
#[derive(Debug, Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What we were doing.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The spec cannot be hashed the way upstream hashes it.
    #[error("cannot compute the template revision: {0}")]
    Revision(#[from] gojson::GoJsonError),
    /// An object could not be written as an apply body.
    #[error(transparent)]
    ApplyBody(#[from] ApplyBodyError),
    /// A revision's data is not what we stored.
    #[error("malformed ControllerRevision data: {0}")]
    RevisionData(#[from] serde_json::Error),
    /// An int-or-percent field is unusable.
    #[error("{0}")]
    Strategy(#[from] rolling::InvalidIntOrPercent),
    /// The API server refused an object as invalid: retrying cannot help until the spec changes.
    #[error("{object}: {message}")]
    Refused {
        /// Which object.
        object: String,
        /// The API server's reason.
        message: String,
    },
    /// Exclusive placement needs a node label the leader's node lacks.
    #[error("node {node} of leader pod {pod} has no label {key} (exclusive-topology)")]
    TopologyLabelMissing {
        /// Node name.
        node: String,
        /// Leader pod.
        pod: String,
        /// Topology key.
        key: String,
    },
}

fn has_code(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// A write the API server refused for the object's content (400/422) rather than for a
/// transient reason.
fn refused(err: &kube::Error) -> Option<String> {
    match err {
        kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
            Some(status.message.clone())
        }
        _ => None,
    }
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Api { action, source }
}

/// Reflector stores of what the controller owns.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    statefulsets: Store<StatefulSet>,
    services: Store<Service>,
    revisions: Store<ControllerRevision>,
}

/// Shared state of the reconciler.
pub struct Context {
    client: Client,
    stores: Stores,
    recorder: Recorder,
}

/// Quiet time after the last event of an LWS before it is reconciled.
const RECONCILE_DEBOUNCE: Duration = Duration::from_millis(100);

/// Runs the controller until `shutdown` completes.
pub async fn run(
    client: Client,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let owned = WatchConfig::default().labels(labels::NAME);
    let (pods, pod_writer) = reflector::store();
    let (statefulsets, sts_writer) = reflector::store();
    let (services, svc_writer) = reflector::store();
    let (revisions, rev_writer) = reflector::store();
    let pod_stream = watcher(Api::<Pod>::all(client.clone()), owned.clone(), pod_writer);
    let sts_stream = watcher(
        Api::<StatefulSet>::all(client.clone()),
        owned.clone(),
        sts_writer,
    );
    let svc_stream = watcher(
        Api::<Service>::all(client.clone()),
        owned.clone(),
        svc_writer,
    );
    let rev_stream = watcher(
        Api::<ControllerRevision>::all(client.clone()),
        owned,
        rev_writer,
    );

    let ctx = Arc::new(Context {
        client: client.clone(),
        stores: Stores {
            pods,
            statefulsets,
            services,
            revisions,
        },
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "lws-rollout".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
    });
    let lws_api = Api::<LeaderWorkerSet>::all(client);
    Controller::new(lws_api, WatchConfig::default())
        // A group coming up is a burst of pod and StatefulSet events; one reconcile after the
        // burst settles does the work of dozens (the benchmark's CPU figure), and 100 ms stays
        // far below what a user or a rollout step would notice.
        .with_config(ControllerConfig::default().debounce(RECONCILE_DEBOUNCE))
        .watches_stream(pod_stream, to_lws)
        .watches_stream(sts_stream, to_lws)
        .watches_stream(svc_stream, to_lws)
        .watches_stream(rev_stream, to_lws)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                warn!(error = %err, "LWS reconcile failed");
            }
        })
        .await;
}

fn watcher<K>(
    api: Api<K>,
    config: WatchConfig,
    writer: reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    // managedFields are never read here and are often the largest part of a pod or
    // StatefulSet: dropped before the store keeps the object.
    let objects = watcher::watcher(api, config).modify(|obj| {
        obj.meta_mut().managed_fields = None;
    });
    reflector::reflector(writer, objects)
        .default_backoff()
        .touched_objects()
}

/// Every owned object names its LWS in the `name` label.
fn to_lws<K: Resource>(obj: K) -> Option<ObjectRef<LeaderWorkerSet>> {
    let name = obj.labels().get(labels::NAME)?;
    Some(ObjectRef::new(name).within(&obj.namespace()?))
}

fn error_policy(_lws: Arc<LeaderWorkerSet>, err: &Error, _ctx: Arc<Context>) -> Action {
    warn!(error = %err, "requeueing LWS");
    Action::requeue(Duration::from_secs(5))
}

fn same_lws<K: Resource>(obj: &K, namespace: &str, name: &str) -> bool {
    obj.namespace().as_deref() == Some(namespace)
        && obj.labels().get(labels::NAME).map(String::as_str) == Some(name)
}

fn pod_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn workers_ready(sts: &StatefulSet, size: i32) -> bool {
    let want = size - 1;
    let Some(status) = &sts.status else {
        return false;
    };
    sts.spec.as_ref().and_then(|s| s.replicas) == Some(want)
        && status.replicas == want
        && status.ready_replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
}

/// The restart-policy trigger: a container restarted in a live pod, or the pod is going away.
fn pod_restarted_or_deleted(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let Some(status) = &pod.status else {
        return false;
    };
    matches!(status.phase.as_deref(), Some("Running") | Some("Pending"))
        && status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .any(|c| c.restart_count > 0)
}

struct Observed {
    leader_sts: Option<Arc<StatefulSet>>,
    worker_sts: BTreeMap<String, Arc<StatefulSet>>,
    leaders: Vec<Arc<Pod>>,
    pods: Vec<Arc<Pod>>,
    revisions: Vec<Arc<ControllerRevision>>,
    services: Vec<Arc<Service>>,
}

fn observe(ctx: &Context, ns: &str, name: &str) -> Observed {
    let mut leader_sts = None;
    let mut worker_sts = BTreeMap::new();
    for sts in ctx
        .stores
        .statefulsets
        .state()
        .into_iter()
        .filter(|s| same_lws(s.as_ref(), ns, name))
    {
        if sts.name_any() == name {
            leader_sts = Some(sts);
        } else {
            worker_sts.insert(sts.name_any(), sts);
        }
    }
    let pods: Vec<_> = ctx
        .stores
        .pods
        .state()
        .into_iter()
        .filter(|p| same_lws(p.as_ref(), ns, name))
        .collect();
    let leaders = pods
        .iter()
        .filter(|p| p.labels().get(labels::WORKER_INDEX).map(String::as_str) == Some("0"))
        .cloned()
        .collect();
    // StatefulSets make ControllerRevisions of their own that copy our template labels: only
    // those an LWS controls are ours.
    let revisions = ctx
        .stores
        .revisions
        .state()
        .into_iter()
        .filter(|r| same_lws(r.as_ref(), ns, name))
        .filter(|r| {
            r.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.kind == "LeaderWorkerSet")
        })
        .collect();
    let services = ctx
        .stores
        .services
        .state()
        .into_iter()
        .filter(|s| same_lws(s.as_ref(), ns, name))
        .collect();
    Observed {
        leader_sts,
        worker_sts,
        leaders,
        pods,
        revisions,
        services,
    }
}

impl Context {
    /// Upstream's `FailedCreate` warning, for objects we could not write.
    async fn failed_create(&self, lws: &LeaderWorkerSet, note: String) {
        self.event(lws, EventType::Warning, "FailedCreate", note)
            .await;
    }

    async fn event(&self, lws: &LeaderWorkerSet, type_: EventType, reason: &str, note: String) {
        // The recorder folds events with the same (reason, action) into one series, keeping the
        // first note; upstream's messages differ per group and step, so each message is its own
        // action and only identical messages are counted together.
        let mut action = note.clone();
        let mut cut = action.len().min(128);
        while !action.is_char_boundary(cut) {
            cut -= 1;
        }
        action.truncate(cut);
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action,
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&ev, &lws.object_ref(&())).await {
            warn!(error = %err, "cannot publish event");
        }
    }
}

#[instrument(skip_all, fields(namespace = lws.namespace(), name = lws.name_any()))]
async fn reconcile(lws: Arc<LeaderWorkerSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    if lws.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Decisions need the full picture: never act on half-synced caches (e.g. right after a
    // restart). Bounded, because the stores stop filling once a shutdown has begun.
    let stores = &ctx.stores;
    let all_ready = async {
        stores.pods.wait_until_ready().await.is_ok()
            && stores.statefulsets.wait_until_ready().await.is_ok()
            && stores.services.wait_until_ready().await.is_ok()
            && stores.revisions.wait_until_ready().await.is_ok()
    };
    if !tokio::time::timeout(Duration::from_secs(2), all_ready)
        .await
        .unwrap_or(false)
    {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let ns = lws.namespace().unwrap_or_default();
    let name = lws.name_any();
    let observed = observe(&ctx, &ns, &name);
    if observed
        .leader_sts
        .as_ref()
        .is_some_and(|s| s.metadata.deletion_timestamp.is_some())
    {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let client = &ctx.client;
    let pp = PatchParams::apply(labels::FIELD_MANAGER).force();
    // Nothing is built for an LWS that cannot be built whole (the webhook refuses such names;
    // this catches the scale subresource and LWSs admitted without our webhook).
    if let Some(problem) = admission::name_too_long(&lws) {
        return report_blocked(&ctx, &lws, "NameTooLong", &problem).await;
    }
    let sts_api = Api::<StatefulSet>::namespaced(client.clone(), &ns);
    if observed.leader_sts.is_none()
        && let Some(existing) = sts_api
            .get_opt(&name)
            .await
            .map_err(api_err(format!("reading StatefulSet {name}")))?
        && controller_uid(&existing) != lws.metadata.uid.as_deref()
    {
        // SSA with force would silently take someone else's StatefulSet over.
        let problem = format!(
            "StatefulSet {name} already exists and is not controlled by this LeaderWorkerSet; \
             delete or rename it"
        );
        // We do not watch other people's StatefulSets: look again now and then.
        return report_blocked(&ctx, &lws, "ObjectConflict", &problem)
            .await
            .map(|_| Action::requeue(Duration::from_secs(10)));
    }

    // --- revisions ------------------------------------------------------------------------
    let spec = serde_json::to_value(&lws.spec)?;
    let data = revision::revision_data(&spec)?;
    let computed_key = revision::revision_key(&data);
    let sts_key = observed
        .leader_sts
        .as_ref()
        .and_then(|s| s.labels().get(labels::REVISION).cloned());
    let revision_with = |key: &str| {
        observed
            .revisions
            .iter()
            .find(|r| r.labels().get(labels::REVISION).map(String::as_str) == Some(key))
            .cloned()
    };
    let mut next_number = observed
        .revisions
        .iter()
        .map(|r| r.revision)
        .max()
        .unwrap_or(0)
        + 1;
    let rev_api = Api::<ControllerRevision>::namespaced(client.clone(), &ns);

    // The revision the leader StatefulSet runs: adopt an existing one, or record one for an
    // LWS we see for the first time (a StatefulSet labelled by an older controller keeps its key).
    let current_key = sts_key.clone().unwrap_or_else(|| computed_key.clone());
    let current_data = match revision_with(&current_key) {
        Some(rev) => gojson::marshal(&rev.data.as_ref().map(|d| d.0.clone()).unwrap_or_default()),
        None => {
            let rev = objects::controller_revision(&lws, &current_key, next_number, &data)?;
            create_if_absent(&rev_api, &rev).await?;
            next_number += 1;
            let how = if sts_key.is_some() {
                "Creating missing revision with key {} for existing LeaderWorkerSet"
            } else {
                "Creating revision with key {} for a newly created LeaderWorkerSet"
            };
            ctx.event(
                &lws,
                EventType::Normal,
                "CreatingRevision",
                how.replace("{}", &current_key),
            )
            .await;
            data.clone()
        }
    };
    let template_changed = observed.leader_sts.is_some() && current_data != data;
    let key = if template_changed {
        if revision_with(&computed_key).is_none() {
            let rev = objects::controller_revision(&lws, &computed_key, next_number, &data)?;
            create_if_absent(&rev_api, &rev).await?;
            ctx.event(
                &lws,
                EventType::Normal,
                "CreatingRevision",
                format!("Creating revision with key {computed_key} for updated LWS"),
            )
            .await;
        }
        computed_key.clone()
    } else {
        current_key.clone()
    };

    // --- rolling update -------------------------------------------------------------------
    let size = objects::size(&lws);
    let replicas = objects::replicas(&lws);
    let ruc = lws
        .spec
        .rollout_strategy
        .as_ref()
        .and_then(|s| s.rolling_update_configuration.clone())
        .unwrap_or_default();
    let max_surge = ruc
        .max_surge
        .clone()
        .unwrap_or(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0));
    let max_unavailable = ruc
        .max_unavailable
        .clone()
        .unwrap_or(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    let leader_sts = observed.leader_sts.as_ref().map(|s| rolling::LeaderSts {
        replicas: s.spec.as_ref().and_then(|sp| sp.replicas).unwrap_or(1),
        partition: s
            .spec
            .as_ref()
            .and_then(|sp| sp.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0),
        recorded_lws_replicas: s
            .annotations()
            .get(labels::REPLICAS)
            .and_then(|v| v.parse().ok()),
    });
    let groups = group_states(
        &observed,
        &name,
        size,
        &key,
        leader_sts.map_or(0, |s| s.replicas),
    );
    let step = rolling::next_step(&rolling::Input {
        replicas,
        max_surge: &max_surge,
        max_unavailable: &max_unavailable,
        user_partition: ruc.partition.unwrap_or(0),
        leader_sts,
        template_changed,
        groups: &groups,
    })?;
    let sts_max_unavailable = rolling::scaled(&max_unavailable, replicas, false)?
        + rolling::scaled(&max_surge, replicas, true)?.min(replicas);
    let desired = objects::leader_statefulset(
        &lws,
        &key,
        step.partition,
        step.replicas,
        sts_max_unavailable,
    );
    let unchanged = observed
        .leader_sts
        .as_ref()
        .is_some_and(|sts| applied::statefulset_as_desired(&desired, sts));
    if unchanged {
        debug!("leader StatefulSet already as desired: no write");
    }
    if !unchanged
        && let Err(source) = sts_api
            .patch(&name, &pp, &Patch::Apply(apply_body(&desired)?))
            .await
    {
        if observed.leader_sts.is_none() {
            ctx.failed_create(&lws, format!("Failed to create leader statefulset {name}"))
                .await;
        }
        if let Some(message) = refused(&source) {
            let problem = format!("the API server refused leader StatefulSet {name}: {message}");
            return report_blocked(&ctx, &lws, "FailedCreate", &problem).await;
        }
        return Err(Error::Api {
            action: format!("applying leader StatefulSet {name}"),
            source,
        });
    }
    match leader_sts {
        None => {
            ctx.event(
                &lws,
                EventType::Normal,
                "GroupsProgressing",
                format!("Created leader statefulset {name}"),
            )
            .await
        }
        Some(old) if !template_changed && old.partition != step.partition => {
            ctx.event(
                &lws,
                EventType::Normal,
                "GroupsUpdating",
                format!("Updating replicas {} to {}", old.partition, step.partition),
            )
            .await
        }
        _ => {}
    }

    // --- services -------------------------------------------------------------------------
    let svc_api = Api::<Service>::namespaced(client.clone(), &ns);
    // A failure here (typically a Service of that name the user owns, which we must not take
    // over) is reported, but does not hold back the groups or the status.
    let mut deferred: Option<Error> = None;
    let mut failure: Option<(&str, String)> = None;
    if objects::subdomain_policy(&lws) == SubdomainPolicy::Shared
        && !observed.services.iter().any(|s| s.name_any() == name)
    {
        let post = PostParams {
            field_manager: Some(labels::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let result = match svc_api
            .create(&post, &objects::shared_headless_service(&lws))
            .await
        {
            Err(err) if has_code(&err, 409) => match svc_api.get_opt(&name).await {
                Ok(Some(svc)) if controller_uid(&svc) != lws.metadata.uid.as_deref() => {
                    Err(format!(
                        "Service {name} already exists and is not controlled by this \
                         LeaderWorkerSet, so group DNS names ({name}-<group>.{name}) do not resolve"
                    ))
                }
                _ => Ok(()), // ours, the cache is just behind
            },
            Err(source) => {
                let message = source.to_string();
                if refused(&source).is_none() {
                    deferred = Some(Error::Api {
                        action: format!("creating headless Service {name}"),
                        source,
                    });
                }
                Err(message)
            }
            Ok(_) => Ok(()),
        };
        if let Err(problem) = result {
            if lws
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none_or(|c| !c.iter().any(|c| c.message == problem))
            {
                ctx.failed_create(
                    &lws,
                    format!("Failed to create headless service for error: {problem}"),
                )
                .await;
            }
            failure = Some(("ObjectConflict", problem));
        }
    }

    // --- groups: worker StatefulSets, per-group Services, restarts -------------------------
    let mut requeue = None;
    for leader in &observed.leaders {
        match reconcile_group(&ctx, &lws, &observed, leader).await {
            Ok(Some(wait)) => requeue = Some(requeue.map_or(wait, |w: Duration| w.min(wait))),
            Ok(None) => {}
            Err(err @ Error::Refused { .. }) => failure = Some(("FailedCreate", err.to_string())),
            Err(err) => return Err(err),
        }
    }
    if lws
        .spec
        .leader_worker_template
        .restart_policy
        .unwrap_or_default()
        == RestartPolicy::RecreateGroupOnPodRestart
    {
        recreate_restarted_groups(&ctx, &lws, &observed).await?;
    }

    // --- status ---------------------------------------------------------------------------
    let observed_groups: Vec<status::ObservedGroup> = observed
        .leaders
        .iter()
        .filter_map(|leader| {
            let index = objects::group_index(leader)?;
            let workers = observed.worker_sts.get(&leader.name_any()).map(|ws| {
                (
                    workers_ready(ws, size),
                    ws.labels().get(labels::REVISION).cloned(),
                )
            });
            Some(status::ObservedGroup {
                index,
                leader_ready: pod_ready(leader),
                leader_revision: leader.labels().get(labels::REVISION).cloned(),
                workers,
            })
        })
        .collect();
    let current = lws.status.clone().unwrap_or_default();
    let outcome = status::compute(
        &status::StatusInput {
            name: &name,
            generation: lws.metadata.generation,
            replicas,
            size,
            partition: ruc.partition.unwrap_or(0),
            revision: &key,
            sts_replicas: observed
                .leader_sts
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .map_or(0, |s| s.replicas),
            current: &current,
            now: Time(k8s_openapi::jiff::Timestamp::now()),
        },
        &observed_groups,
    );
    let mut outcome = outcome;
    let failure_set = {
        let conditions = outcome.status.conditions.get_or_insert_with(Vec::new);
        status::set_failure(
            conditions,
            failure.as_ref().map(|(r, m)| (*r, m.as_str())),
            lws.metadata.generation,
            &Time(k8s_openapi::jiff::Timestamp::now()),
        )
    };
    if failure_set && let Some((reason, problem)) = &failure {
        ctx.event(&lws, EventType::Warning, reason, problem.clone())
            .await;
    }
    if outcome.status != current {
        let lws_api = Api::<LeaderWorkerSet>::namespaced(client.clone(), &ns);
        lws_api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": outcome.status})),
            )
            .await
            .map_err(api_err("patching LWS status"))?;
    }
    if let Some((reason, note)) = outcome.event {
        ctx.event(&lws, EventType::Normal, &reason, note).await;
    }
    if outcome.update_done {
        for rev in observed
            .revisions
            .iter()
            .filter(|r| r.labels().get(labels::REVISION) != Some(&key))
        {
            match rev_api
                .delete(&rev.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(err) if has_code(&err, 404) => {}
                Err(source) => {
                    return Err(Error::Api {
                        action: "deleting old revision".into(),
                        source,
                    });
                }
            }
        }
    }
    if let Some(err) = deferred {
        return Err(err);
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The LWS cannot be built as written: say why in the `ReplicaFailure` condition and a Warning
/// event (once per distinct problem), leave existing groups as they are, and wait for the spec
/// to change.
async fn report_blocked(
    ctx: &Context,
    lws: &LeaderWorkerSet,
    reason: &str,
    problem: &str,
) -> Result<Action, Error> {
    let current = lws.status.clone().unwrap_or_default();
    let mut conditions = current.conditions.clone().unwrap_or_default();
    let changed = status::set_failure(
        &mut conditions,
        Some((reason, problem)),
        lws.metadata.generation,
        &Time(k8s_openapi::jiff::Timestamp::now()),
    );
    if changed {
        warn!(reason, problem, "LeaderWorkerSet cannot be realised");
        Api::<LeaderWorkerSet>::namespaced(
            ctx.client.clone(),
            &lws.namespace().unwrap_or_default(),
        )
        .patch_status(
            &lws.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .map_err(api_err("patching LWS status"))?;
        ctx.event(lws, EventType::Warning, reason, problem.to_string())
            .await;
    }
    Ok(Action::await_change())
}

/// Ready/updated per leader ordinal `0..sts_replicas`.
fn group_states(
    observed: &Observed,
    name: &str,
    size: i32,
    key: &str,
    sts_replicas: i32,
) -> Vec<rolling::GroupState> {
    (0..sts_replicas)
        .map(|i| {
            let pod_name = format!("{name}-{i}");
            let Some(leader) = observed.leaders.iter().find(|p| p.name_any() == pod_name) else {
                return rolling::GroupState::default();
            };
            let leader_updated =
                leader.labels().get(labels::REVISION).map(String::as_str) == Some(key);
            if size == 1 {
                return rolling::GroupState {
                    ready: pod_ready(leader),
                    updated: leader_updated,
                };
            }
            match observed.worker_sts.get(&pod_name) {
                None => rolling::GroupState::default(),
                Some(ws) => rolling::GroupState {
                    ready: pod_ready(leader) && workers_ready(ws, size),
                    updated: leader_updated
                        && ws.labels().get(labels::REVISION).map(String::as_str) == Some(key),
                },
            }
        })
        .collect()
}

/// Creates the group's worker StatefulSet (and per-group Service) once its leader allows it.
/// Returns a requeue delay when something it needs is not there yet.
async fn reconcile_group(
    ctx: &Context,
    lws: &LeaderWorkerSet,
    observed: &Observed,
    leader: &Pod,
) -> Result<Option<Duration>, Error> {
    if leader.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let ns = leader.namespace().unwrap_or_default();
    let leader_name = leader.name_any();
    let Some(index) = objects::group_index(leader) else {
        return Ok(None);
    };
    let pp = PatchParams::apply(labels::FIELD_MANAGER).force();

    if objects::subdomain_policy(lws) == SubdomainPolicy::UniquePerReplica
        && !observed
            .services
            .iter()
            .any(|s| s.name_any() == leader_name)
    {
        let svc = objects::group_headless_service(lws, leader, index);
        Api::<Service>::namespaced(ctx.client.clone(), &ns)
            .patch(&leader_name, &pp, &Patch::Apply(apply_body(&svc)?))
            .await
            .map_err(api_err(format!("applying Service {leader_name}")))?;
    }
    if objects::size(lws) == 1 || observed.worker_sts.contains_key(&leader_name) {
        return Ok(None);
    }
    if lws.spec.startup_policy.unwrap_or_default() == StartupPolicy::LeaderReady
        && !pod_ready(leader)
    {
        return Ok(None);
    }
    let Some(key) = leader.labels().get(labels::REVISION).cloned() else {
        return Ok(None);
    };
    let Some(rev) = observed
        .revisions
        .iter()
        .find(|r| r.labels().get(labels::REVISION) == Some(&key))
    else {
        // The revision the leader runs is not in our cache yet.
        return Ok(Some(Duration::from_secs(1)));
    };
    let node_selector = match lws.annotations().get(labels::EXCLUSIVE_TOPOLOGY) {
        None => None,
        Some(topology) => {
            let Some(node_name) = leader.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                return Ok(None); // not scheduled yet; its binding will trigger us again
            };
            let node = Api::<Node>::all(ctx.client.clone())
                .get(&node_name)
                .await
                .map_err(api_err(format!("reading node {node_name}")))?;
            let value = node.labels().get(topology).cloned().ok_or_else(|| {
                Error::TopologyLabelMissing {
                    node: node_name.clone(),
                    pod: leader_name.clone(),
                    key: topology.clone(),
                }
            })?;
            Some((topology.clone(), value))
        }
    };
    // The worker StatefulSet is owned by the leader pod's uid and runs the leader's revision:
    // both must be the live leader's. The pod and StatefulSet watches are separate streams, so
    // the cache can show a leader that was already replaced (same name, new uid) next to the
    // deletion of its worker StatefulSet; a StatefulSet made for it would be garbage-collected
    // at once and its workers with it.
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ns);
    match pods
        .get_opt(&leader_name)
        .await
        .map_err(api_err(format!("reading leader pod {leader_name}")))?
    {
        Some(live)
            if live.metadata.uid == leader.metadata.uid
                && live.metadata.deletion_timestamp.is_none() => {}
        // Its successor's own events bring us back.
        _ => return Ok(None),
    }
    let template = objects::revision_worker_template(rev)?;
    let sts = objects::worker_statefulset(lws, leader, index, &key, template, node_selector);
    // Created once, never updated: a group changes template only by being recreated.
    match Api::<StatefulSet>::namespaced(ctx.client.clone(), &ns)
        .create(
            &PostParams {
                field_manager: Some(labels::FIELD_MANAGER.into()),
                ..Default::default()
            },
            &sts,
        )
        .await
    {
        Ok(_) => {
            info!(group = index, "created worker StatefulSet");
            ctx.event(
                lws,
                EventType::Normal,
                "GroupsProgressing",
                format!("Created worker statefulset for leader pod {leader_name}"),
            )
            .await;
        }
        Err(err) if has_code(&err, 409) => {}
        Err(source) => {
            ctx.failed_create(
                lws,
                format!("Failed to create worker statefulset for leader pod {leader_name}"),
            )
            .await;
            if let Some(message) = refused(&source) {
                return Err(Error::Refused {
                    object: format!("the API server refused worker StatefulSet {leader_name}"),
                    message,
                });
            }
            return Err(Error::Api {
                action: format!("creating worker StatefulSet {leader_name}"),
                source,
            });
        }
    }
    Ok(None)
}

/// RecreateGroupOnPodRestart: a restarted or deleted pod takes its whole group down (foreground
/// delete of the leader); the StatefulSets bring it back whole. Once per incident: a leader
/// already being deleted is left alone, and a worker from another revision than its leader is
/// part of an update, not an incident.
async fn recreate_restarted_groups(
    ctx: &Context,
    lws: &LeaderWorkerSet,
    observed: &Observed,
) -> Result<(), Error> {
    let name = lws.name_any();
    let mut recreated = Vec::new();
    for pod in observed.pods.iter().filter(|p| pod_restarted_or_deleted(p)) {
        let is_leader = pod.labels().get(labels::WORKER_INDEX).map(String::as_str) == Some("0");
        let leader_name = if is_leader {
            pod.name_any()
        } else {
            match pod.annotations().get(labels::LEADER_NAME) {
                Some(l) => l.clone(),
                None => continue,
            }
        };
        let Some(leader) = observed
            .leaders
            .iter()
            .find(|l| l.name_any() == leader_name)
        else {
            continue;
        };
        if leader.metadata.deletion_timestamp.is_some() || recreated.contains(&leader_name) {
            continue;
        }
        if is_leader && pod.metadata.deletion_timestamp.is_some() {
            continue; // the leader itself is going away: nothing to add
        }
        if !is_leader && pod.labels().get(labels::REVISION) != leader.labels().get(labels::REVISION)
        {
            continue;
        }
        // A worker counts only if it belongs to this leader's current worker StatefulSet: a
        // straggler of the group's previous incarnation (same names, same labels) being
        // garbage-collected must not take the new group down again.
        if !is_leader && !worker_of_current_group(pod, leader, observed) {
            continue;
        }
        // Only the leader incarnation this decision was made on: with a cache a moment behind,
        // the pod of that name may already be its successor, which must not be taken down.
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: leader.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match Api::<Pod>::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default())
            .delete(&leader_name, &dp)
            .await
        {
            Ok(_) => {}
            // Gone, or replaced by a newer incarnation (uid precondition): nothing to recreate.
            Err(err) if has_code(&err, 404) || has_code(&err, 409) => continue,
            Err(source) => {
                return Err(Error::Api {
                    action: format!("deleting leader pod {leader_name}"),
                    source,
                });
            }
        }
        ctx.event(
            lws,
            EventType::Normal,
            "RecreateGroupOnPodRestart",
            format!(
                "Worker pod {} failed, deleted leader pod {leader_name} to recreate group {name}",
                pod.name_any()
            ),
        )
        .await;
        recreated.push(leader_name);
    }
    Ok(())
}

fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// worker pod → owned by the worker StatefulSet named after the leader → owned by that leader.
fn worker_of_current_group(worker: &Pod, leader: &Pod, observed: &Observed) -> bool {
    let Some(sts) = observed.worker_sts.get(&leader.name_any()) else {
        return false;
    };
    controller_uid(worker) == sts.metadata.uid.as_deref()
        && controller_uid(sts.as_ref()) == leader.metadata.uid.as_deref()
}

async fn create_if_absent(
    api: &Api<ControllerRevision>,
    rev: &ControllerRevision,
) -> Result<(), Error> {
    match api
        .create(
            &PostParams {
                field_manager: Some(labels::FIELD_MANAGER.into()),
                ..Default::default()
            },
            rev,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if has_code(&err, 409) => Ok(()),
        Err(source) => Err(Error::Api {
            action: format!("creating ControllerRevision {}", rev.name_any()),
            source,
        }),
    }
}
