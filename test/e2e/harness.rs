//! Shared e2e helpers: the client, temporary namespaces that dump their objects when a test
//! fails, and condition waits with timeouts (watch-based, no fixed sleeps).

use std::{fmt::Debug, future::Future, panic::AssertUnwindSafe, time::Duration};

use anyhow::{Context, anyhow, bail};
use futures::FutureExt;
use k8s_openapi::{
    NamespaceResourceScope,
    api::core::v1::{Namespace, ServiceAccount},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, PostParams},
    discovery::ApiResource,
    runtime::wait::{Condition, await_condition},
};
use serde::de::DeserializeOwned;

/// Environment variable naming the kubeconfig of the test cluster.
pub const KUBECONFIG_ENV: &str = "LWS_E2E_KUBECONFIG";

/// Environment variable naming a file each test appends its run time to (`test/run-tests.sh`
/// prints the slowest, so the suite's budget has names to it).
pub const TIMES_ENV: &str = "LWS_E2E_TIMES";

/// Appends "<seconds>\t<what>\t<test>\t<end, Unix seconds>" to the times file, if one is set
/// (the end lets whoever trims the suite lay the tests out on a timeline). The test's name is
/// its thread's, as libtest names each test's thread.
pub fn record_time(what: &str, started: std::time::Instant) {
    use std::io::Write;
    let Ok(path) = std::env::var(TIMES_ENV) else {
        return;
    };
    let thread = std::thread::current();
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let line = format!(
        "{:.1}\t{what}\t{}\t{}\n",
        started.elapsed().as_secs_f64(),
        thread.name().unwrap_or("?"),
        end.as_secs()
    );
    // One short write with O_APPEND: lines of concurrent tests never interleave.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Environment variable naming the manager binary the e2e tests start (`test/run-tests.sh`
/// sets it to the release build the image ships, `test/image/build-binary.sh`).
pub const MANAGER_BIN_ENV: &str = "LWS_E2E_MANAGER_BIN";

/// The manager binary to start: the shipped build when the suite runs from test/run-tests.sh;
/// cargo's own build of this checkout when a developer runs `cargo test --test e2e` by hand.
pub fn manager_bin() -> std::path::PathBuf {
    std::env::var_os(MANAGER_BIN_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_lws-rollout").into())
}

/// Path of the test cluster's kubeconfig, or a clear error.
pub fn kubeconfig_path() -> anyhow::Result<String> {
    std::env::var(KUBECONFIG_ENV).map_err(|_| {
        anyhow!("{KUBECONFIG_ENV} is not set: run the e2e tests with test/run-tests.sh, which starts the local cluster")
    })
}

/// A client for the test cluster.
pub async fn client() -> anyhow::Result<Client> {
    let path = kubeconfig_path()?;
    lws_rollout::k8s::client::from_kubeconfig(std::path::Path::new(&path))
        .await
        .with_context(|| format!("a client from {path}"))
}

/// A namespace that exists for one test.
#[derive(Clone)]
pub struct TestNs {
    /// The client.
    pub client: Client,
    /// Namespace name.
    pub name: String,
}

impl TestNs {
    /// A namespaced API in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl TestNs {
    /// A cluster-scoped API.
    pub fn api_all<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        Api::all(self.client.clone())
    }
}

/// Runs `test` in a fresh namespace `e2e-<prefix>-<random>`. On failure (error or panic) the
/// namespace's objects are printed before it is deleted, so CI logs show what went wrong.
pub async fn with_ns<F, Fut>(prefix: &str, test: F) -> anyhow::Result<()>
where
    F: FnOnce(TestNs) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let started = std::time::Instant::now();
    let client = client().await?;
    let name = format!("e2e-{prefix}-{:08x}", rand_u32());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.clone());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let ctx = TestNs {
        client: client.clone(),
        name: name.clone(),
    };

    // Pods are rejected until kube-controller-manager has made the default ServiceAccount.
    wait_for::<ServiceAccount, _>(
        &ctx.api(),
        "default",
        Duration::from_secs(60),
        |sa: Option<&ServiceAccount>| sa.is_some(),
    )
    .await
    .context("default ServiceAccount")?;

    let outcome = AssertUnwindSafe(test(ctx.clone())).catch_unwind().await;
    let failed = !matches!(outcome, Ok(Ok(())));
    if failed {
        // The reason first: CI shows only the head of a failed test's output, and the
        // namespace's objects run to hundreds of lines.
        if let Ok(Err(err)) = &outcome {
            eprintln!("==== {name} failed: {err:#}");
        }
        dump_namespace(&client, &name).await;
    }
    let _ = namespaces.delete(&name, &DeleteParams::background()).await;
    record_time("shared", started);
    match outcome {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Waits until `cond` holds for the named object (watch-based), or fails after `timeout`
/// saying what it waited for. A watch that fails is started again until the timeout: an
/// API server that has just restarted refuses a watch from an old resource version or drops
/// the connection, and the condition may still come true after it.
pub async fn wait_for<K, C>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    cond: C,
) -> anyhow::Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    C: Condition<K>,
{
    let mut watch_failed = None;
    let watched = tokio::time::timeout(timeout, async {
        loop {
            let cond = |obj: Option<&K>| cond.matches_object(obj);
            // On the heap: a watch's future is large, and a test's stack holds many waits.
            match Box::pin(await_condition(api.clone(), name, cond)).await {
                Ok(obj) => return obj,
                Err(err) => {
                    watch_failed = Some(err);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await;
    match watched {
        Ok(obj) => Ok(obj),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            let watch =
                watch_failed.map_or(String::new(), |e| format!("; the watch last failed: {e}"));
            bail!("timed out after {timeout:?} waiting on {name}{watch}; last seen: {now:#?}")
        }
    }
}

async fn dump_namespace(client: &Client, ns: &str) {
    // The release's own objects and the Events first, the long pod list last.
    let kinds = [
        ("rollouts.kruise.io", "v1beta1", "Rollout", "rollouts"),
        (
            "rollouts.kruise.io",
            "v1beta1",
            "BatchRelease",
            "batchreleases",
        ),
        ("", "v1", "Event", "events"),
        (
            "leaderworkerset.x-k8s.io",
            "v1",
            "LeaderWorkerSet",
            "leaderworkersets",
        ),
        ("", "v1", "Service", "services"),
        ("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes"),
        ("networking.k8s.io", "v1", "Ingress", "ingresses"),
        ("apps", "v1", "StatefulSet", "statefulsets"),
        ("", "v1", "Pod", "pods"),
    ];
    eprintln!("==== objects in namespace {ns} (test failed) ====");
    for (group, version, kind, plural) in kinds {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for obj in list.items {
                    let mut obj = obj;
                    obj.managed_fields_mut().clear();
                    eprintln!(
                        "--- {kind} {}\n{}",
                        obj.name_any(),
                        serde_yaml::to_string(&obj).unwrap_or_default()
                    );
                }
            }
            Err(err) => eprintln!("--- {kind}: cannot list: {err}"),
        }
    }
}

fn rand_u32() -> u32 {
    use std::{
        collections::hash_map::RandomState,
        hash::{BuildHasher, Hasher},
    };
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() as u32
}

/// Polls `check` (an API listing, a log) until it returns true, or fails after `timeout` with `what`
/// and the last value it saw.
pub async fn eventually<T: std::fmt::Debug, F, Fut>(
    timeout: Duration,
    what: &str,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(bool, T)>>,
{
    let start = std::time::Instant::now();
    loop {
        let (ok, seen) = check().await?;
        if ok {
            return Ok(seen);
        }
        if start.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}; last seen: {seen:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Parses a multi-document YAML file of the repository into JSON values.
pub fn yaml_documents(path: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).with_context(|| format!("reading {full}"))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// The namespace's Events (events.k8s.io) once `cond` holds for them, or an error after
/// `timeout`. The manager sends events from a queue, a moment after the change they describe,
/// so a test that saw the change waits for its event rather than reading the list once.
pub async fn events_when(
    ns: &TestNs,
    timeout: Duration,
    cond: impl Fn(&[std::sync::Arc<k8s_openapi::api::events::v1::Event>]) -> bool,
) -> anyhow::Result<Vec<std::sync::Arc<k8s_openapi::api::events::v1::Event>>> {
    wait_for_all(&ns.api(), "", timeout, cond).await
}

/// Waits until the objects matching `labels` satisfy `cond` (checked after every watch event),
/// and returns them.
pub async fn wait_for_all<K>(
    api: &Api<K>,
    labels: &str,
    timeout: Duration,
    cond: impl Fn(&[std::sync::Arc<K>]) -> bool,
) -> anyhow::Result<Vec<std::sync::Arc<K>>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api.clone(), watcher::Config::default().labels(labels)),
    )
    .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut listed = false;
    let waited = tokio::time::timeout(timeout, async {
        while let Some(event) = stream.next().await {
            // Judge only complete pictures: after the initial list, then after every change.
            match event? {
                watcher::Event::InitDone => listed = true,
                watcher::Event::Init | watcher::Event::InitApply(_) => continue,
                _ => {}
            }
            if listed && cond(&store.state()) {
                return Ok::<_, anyhow::Error>(store.state());
            }
        }
        bail!("the watch on {labels} ended")
    })
    .await;
    match waited {
        Ok(result) => result,
        Err(_) => bail!(
            "timed out after {timeout:?} waiting on objects labelled {labels}; last seen: {:#?}",
            store
                .state()
                .iter()
                .map(|o| o.meta().name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        ),
    }
}

/// `(status, reason, message)` of one condition.
pub type ConditionRead = (String, String, String);

/// A kind whose status carries conditions. A condition counts only when it was computed for
/// the object's current generation: a stale one says nothing about the spec a test just wrote.
pub trait WithConditions {
    /// The condition `type_`, if it is current.
    fn current_condition(&self, type_: &str) -> Option<ConditionRead>;
}

/// Conditions of the apimachinery shape, each carrying the generation it was computed for.
fn current_meta_condition(
    conditions: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
    generation: Option<i64>,
    type_: &str,
) -> Option<ConditionRead> {
    conditions?
        .iter()
        .find(|c| c.type_ == type_ && c.observed_generation == generation)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

impl WithConditions for lws_rollout::api::LeaderWorkerSet {
    fn current_condition(&self, type_: &str) -> Option<ConditionRead> {
        let conditions = self.status.as_ref()?.conditions.as_ref();
        current_meta_condition(conditions, self.metadata.generation, type_)
    }
}

impl WithConditions
    for k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition
{
    /// A CRD's conditions carry no generation: the API server sets them for the stored spec.
    fn current_condition(&self, type_: &str) -> Option<ConditionRead> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| {
                let text = |v: &Option<String>| v.clone().unwrap_or_default();
                (c.status.clone(), text(&c.reason), text(&c.message))
            })
    }
}

impl WithConditions for lws_rollout::api::DisaggregatedSet {
    fn current_condition(&self, type_: &str) -> Option<ConditionRead> {
        let conditions = self.status.as_ref()?.conditions.as_ref();
        current_meta_condition(conditions, self.metadata.generation, type_)
    }
}

impl WithConditions for lws_rollout::api::Rollout {
    /// Rollout conditions carry no generation of their own: the status as a whole does.
    fn current_condition(&self, type_: &str) -> Option<ConditionRead> {
        let status = self.status.as_ref()?;
        if status.observed_generation != self.metadata.generation {
            return None;
        }
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }
}

/// `(status, reason, message)` of the condition `type_` of `obj`, counted only when it was
/// computed for the current generation.
pub fn condition<K: WithConditions>(obj: &K, type_: &str) -> Option<ConditionRead> {
    obj.current_condition(type_)
}
