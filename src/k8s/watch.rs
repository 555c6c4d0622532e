//! Watches whose caches are shared: one watch per kind and filter feeds one reflector store
//! that every controller reads, and fans its changes out to every controller that subscribed.
//! So the Rollout and BatchRelease controllers read the LWS, pod and StatefulSet caches the
//! LWS controller already keeps instead of doubling the memory and the watch load.
//!
//! What kube lacks (kube 4.2.0, https://docs.rs/kube-runtime/4.2.0): a shared store whose fan-out
//! survives deletions; delete this when `store_shared` delivers every change to every subscriber.
//!
//! The fan-out is ours, not kube-runtime's `store_shared`/`ReflectHandle`: that one (kube 4.2)
//! drops a change whose object is no longer in the store by returning `Pending` without a
//! wake-up, so the first deleted pod stalled the subscriber for good, the broadcast buffer
//! filled, and every cache froze (seen in the e2e suite: no reconcile for minutes). Here every
//! change — deletions included, which matter to a controller — goes to every subscriber over
//! an unbounded channel, after the store has it, so a slow controller never blocks the watch.
//!
//! A [`SharedCache`] does nothing until its [`SharedCache::driver`] is polled: the manager runs
//! the drivers of all caches beside the controllers.

use std::{
    fmt::Debug,
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt, future::join_all};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store, store::Writer},
        watcher::{self, Config, Event},
    },
};
use prometheus_client::metrics::counter::Counter;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::{
    label_index::LabelIndex,
    log_gate::{GATE, cause},
    metrics::Metrics,
};

/// One watched kind: a store to read and changes to subscribe to.
pub struct SharedCache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    writer: Option<Writer<K>>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<K>>>,
    api: Api<K>,
    config: Config,
    trim: fn(&mut K),
    index: Option<LabelIndex<K>>,
    unchanged: Option<fn(&K, &mut K) -> bool>,
}

impl<K> SharedCache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A cache of the objects of `api` that `config` selects (label and field selectors).
    pub fn new(api: Api<K>, config: Config) -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer: Some(writer),
            subscribers: Vec::new(),
            api,
            config,
            trim: |_| {},
            index: None,
            unchanged: None,
        }
    }

    /// Drops from every object, before the store keeps it, the fields no reader needs (on
    /// top of managedFields, which are always dropped). The stores hold every cached object
    /// for the life of the process, so this is most of the manager's memory.
    pub fn with_trim(mut self, trim: fn(&mut K)) -> Self {
        self.trim = trim;
        self
    }

    /// Also keeps the objects grouped by (namespace, value of `label`); see [`LabelIndex`].
    pub fn with_index(mut self, label: &'static str) -> Self
    where
        K: super::label_index::Labelled,
    {
        self.index = Some(LabelIndex::new(label));
        self
    }

    /// Tells no subscriber of an update that changed nothing but the resourceVersion of the
    /// object as cached (after trimming: a pod's status conditions other than Ready, say, are
    /// not kept, so a change of only those is no change here). The store and the index still
    /// take the new version. Only for caches whose subscribers decide from the cached fields
    /// alone; a reconcile waiting for the watch event of its own write (`k8s::written`) must
    /// not subscribe to one, as a write that changed only trimmed fields would then go unseen.
    pub fn with_unchanged_skipped(mut self) -> Self
    where
        K: PartialEq,
    {
        self.unchanged = Some(same_but_version::<K>);
        self
    }

    /// The index made by [`Self::with_index`].
    pub fn index(&self) -> Option<LabelIndex<K>> {
        self.index.clone()
    }

    /// A read handle on the store (cheap to clone).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A stream of changed (and deleted) objects for one controller; subscribe before the
    /// driver starts.
    pub fn subscribe(&mut self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.subscribers.push(tx);
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// The future that runs the watch, fills the store and feeds the subscribers; it ends
    /// when the watch stream does (never, in practice: it retries with backoff). `metrics`
    /// counts its events.
    pub fn driver(&mut self, metrics: &Metrics) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let writer = self.writer.take().expect("driver() called once");
        let subscribers = std::mem::take(&mut self.subscribers);
        let store = self.store.clone();
        let index = self.index.clone();
        let trim = self.trim;
        let unchanged = self.unchanged;
        let kind = K::kind(&());
        // managedFields are never read by our controllers and are often the largest part of
        // a pod or StatefulSet. Our client takes them out before decoding (`managed_fields`);
        // one on kube-rs's own stack (a proxy URL) does not, so the store drops them too.
        let events = retried(
            watcher::watcher(self.api.clone(), self.config.clone()).modify(move |obj| {
                obj.meta_mut().managed_fields = None;
                trim(obj);
            }),
        );
        let mut feed = Feed {
            writer,
            store,
            index,
            subscribers,
            unchanged,
            delivered: metrics.watch_events(&kind, "delivered"),
            skipped: metrics.watch_events(&kind, "unchanged"),
        };
        Box::pin(events.for_each(move |event| {
            // Failed requests are retried by `retried`; only events reach the store.
            if let Ok(event) = event {
                feed.take(event);
            }
            futures::future::ready(())
        }))
    }
}

/// What a cache's driver does with each watch event: the store takes it, the index follows,
/// and every subscriber is told of the change unless it changed nothing they read.
struct Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    writer: Writer<K>,
    store: Store<K>,
    index: Option<LabelIndex<K>>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<K>>>,
    unchanged: Option<fn(&K, &mut K) -> bool>,
    delivered: Counter,
    skipped: Counter,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn take(&mut self, mut event: Event<K>) {
        let key = match &event {
            Event::Apply(obj) | Event::Delete(obj) => Some(ObjectRef::from_obj(obj)),
            _ => None,
        };
        // The version the store holds before it takes the new one: compared with the new one,
        // and where the index finds it.
        let previous = key.as_ref().and_then(|key| self.store.get(key));
        let skip = match (&mut event, &previous, self.unchanged) {
            (Event::Apply(obj), Some(old), Some(same)) => same(old, obj),
            _ => false,
        };
        self.writer.apply_watcher_event(&event);
        match self.indexed(event, key, previous) {
            Some(_) if skip => {
                self.skipped.inc();
            }
            Some(obj) => {
                self.delivered.inc();
                for subscriber in &self.subscribers {
                    // A controller that stopped has dropped its receiver: nothing to do.
                    let _ = subscriber.send(obj.clone());
                }
            }
            None => {}
        }
    }

    /// Brings the index up to the store after `event` (whose object's key is `key` when it is
    /// an `Apply` or a `Delete`; `previous`, the version the store held before) and returns the
    /// changed object, if the event is a change.
    fn indexed(
        &self,
        event: Event<K>,
        key: Option<ObjectRef<K>>,
        previous: Option<Arc<K>>,
    ) -> Option<Arc<K>> {
        match (event, key) {
            // Subscribers get the store's own Arc: no second copy of the object while the
            // change waits in their queues.
            (Event::Apply(obj), Some(key)) => {
                let stored = self.store.get(&key).unwrap_or_else(|| Arc::new(obj));
                if let Some(index) = &self.index {
                    index.replace(previous.as_deref(), stored.clone());
                }
                Some(stored)
            }
            (Event::Delete(obj), _) => {
                if let Some(index) = &self.index {
                    // Where the index filed it: by the version it holds, if it holds one.
                    index.remove(previous.as_deref().unwrap_or(&obj));
                }
                Some(Arc::new(obj))
            }
            // The store swaps in a full list only at InitDone; the index follows then.
            (Event::InitApply(obj), _) => Some(Arc::new(obj)),
            (Event::InitDone, _) => {
                if let Some(index) = &self.index {
                    index.rebuild(&self.store);
                }
                None
            }
            (Event::Init | Event::Apply(_), _) => None,
        }
    }
}

/// Whether `new` is `old` but for its resourceVersion. `new` is handed back as it came.
fn same_but_version<K: Resource + PartialEq>(old: &K, new: &mut K) -> bool {
    let version = std::mem::replace(
        &mut new.meta_mut().resource_version,
        old.meta().resource_version.clone(),
    );
    let same = old == new;
    new.meta_mut().resource_version = version;
    same
}

/// `events` of a watcher, retried after errors as [`Retry`] says: every watch of the manager
/// goes through this instead of kube's `default_backoff`.
pub fn retried<K, S>(events: S) -> impl Stream<Item = S::Item> + Send
where
    K: Resource<DynamicType = ()> + Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let kind = K::kind(&()).to_string();
    let mut retry = Retry::default();
    // The watcher is not polled again until the wait is over: this paces its requests.
    events.then(move |event| {
        let wait = retry.after(&event, &kind);
        async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            event
        }
    })
}

/// When a watch tries again after an error. A failed request (the API server unreachable,
/// refusing, timing out) backs off from [`RETRY_FIRST`] doubling to [`RETRY_MAX`], each wait
/// drawn from the upper half of its step so the manager's watches do not retry in step; the
/// next event that arrives resets it. "Too old resource version" (410 Gone: a restarted API
/// server's watch cache begins after the version the watch resumed from) is not a failure of
/// anything: the watcher lists afresh at once, as client-go's reflector does.
///
/// Why not kube's default (0.8 s doubling to 30 s): a watch is how the manager learns that
/// the API server is back, and a wait drawn at 3–6 s in the fifth second of an outage was most
/// of the seconds a release stood still after it. A
/// manager has a dozen watches, so [`RETRY_MAX`] costs an API server that is down a few
/// requests a second at most.
#[derive(Default)]
struct Retry {
    failures: u32,
}

/// The first wait after a failed watch request.
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two attempts of one watch.
const RETRY_MAX: Duration = Duration::from_secs(4);

impl Retry {
    /// How long to wait before the watch of `kind` goes on after `event`; logs a failure once
    /// per failing dependency and backoff step (`log_gate`).
    fn after<K>(
        &mut self,
        event: &Result<Event<K>, watcher::Error>,
        kind: &str,
    ) -> Option<Duration> {
        let err = match event {
            Ok(_) => {
                self.failures = 0;
                return None;
            }
            Err(err) => err,
        };
        if relists_at_once(err) {
            tracing::debug!(kind, error = %err, "watch expired; listing again");
            return None;
        }
        self.failures = self.failures.saturating_add(1);
        let wait = jittered(step(self.failures));
        let text = err.to_string();
        match GATE.admit(cause(&text), wait, Instant::now()) {
            Some(folded) => tracing::warn!(
                kind,
                error = %err,
                retry_in = ?wait,
                same_error_since_last_line = folded,
                "watch failed"
            ),
            None => tracing::debug!(kind, error = %err, retry_in = ?wait, "watch failed"),
        }
        Some(wait)
    }
}

/// The backoff step after `failures` consecutive failures (1 = the first).
fn step(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// A wait in the upper half of `step`: [step/2, step).
fn jittered(step: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    let half = step / 2;
    half + half.mul_f64((h.finish() % 1_000) as f64 / 1_000.0)
}

/// The watch must start over from a list, and nothing failed: its resource version expired.
fn relists_at_once(err: &watcher::Error) -> bool {
    matches!(err, watcher::Error::WatchError(status) if status.code == 410)
}

/// One cache's first full list, as a future (from [`store_ready`] or [`index_ready`]).
pub type CacheReady<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

/// Waits until every store has seen its first full list, at most `timeout`. Controllers call
/// it before deciding anything, so a restart never acts on half-filled caches. `false` when
/// the time ran out (e.g. a shutdown stopped the watches).
pub async fn ready<'a>(waits: impl IntoIterator<Item = CacheReady<'a>>, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, join_all(waits))
        .await
        .is_ok_and(|all| all.into_iter().all(|ok| ok))
}

/// One store's readiness, for [`ready`].
pub fn store_ready<'a, K>(store: &'a Store<K>) -> CacheReady<'a>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    Box::pin(async move { store.wait_until_ready().await.is_ok() })
}

/// One label index's readiness (its first full list), for [`ready`].
pub fn index_ready<'a, K>(index: &'a super::label_index::LabelIndex<K>) -> CacheReady<'a>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    Box::pin(index.wait_ready())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::Status;

    use super::*;

    fn gone() -> Result<Event<Pod>, watcher::Error> {
        Err(watcher::Error::WatchError(
            Status::failure("too old resource version: 10 (20)", "Expired")
                .with_code(410)
                .boxed(),
        ))
    }

    fn refused() -> Result<Event<Pod>, watcher::Error> {
        Err(watcher::Error::WatchError(
            Status::failure("unavailable", "ServiceUnavailable")
                .with_code(503)
                .boxed(),
        ))
    }

    fn pod(version: &str, ready: bool) -> crate::k8s::pod::CachedPod {
        let mut pod = crate::k8s::pod::CachedPod::from(crate::k8s::pod::PodRecord {
            ready_condition: ready,
            ..Default::default()
        });
        pod.metadata.name = Some("p".into());
        pod.metadata.resource_version = Some(version.into());
        pod
    }

    #[test]
    fn an_update_of_only_the_resource_version_is_unchanged_and_keeps_its_version() {
        let old = pod("1", false);
        let mut new = pod("2", false);
        assert!(same_but_version(&old, &mut new));
        assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));

        let mut ready = pod("3", true);
        assert!(!same_but_version(&old, &mut ready), "Ready changed");
        assert_eq!(ready.metadata.resource_version.as_deref(), Some("3"));
    }

    #[test]
    fn the_feed_stores_every_update_but_tells_subscribers_only_of_changes() {
        let (store, writer) = reflector::store();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut feed = Feed {
            writer,
            store: store.clone(),
            index: None,
            subscribers: vec![tx],
            unchanged: Some(same_but_version::<crate::k8s::pod::CachedPod>),
            delivered: Counter::default(),
            skipped: Counter::default(),
        };
        let mut told = || std::iter::from_fn(|| rx.try_recv().ok()).collect::<Vec<_>>();
        let version = |pod: &crate::k8s::pod::CachedPod| pod.metadata.resource_version.clone();

        feed.take(Event::Apply(pod("1", false)));
        assert_eq!(told().len(), 1, "a new pod");
        feed.take(Event::Apply(pod("2", false)));
        assert!(told().is_empty(), "only its resourceVersion changed");
        let stored = store.state();
        assert_eq!(
            version(&stored[0]).as_deref(),
            Some("2"),
            "the store has it"
        );
        feed.take(Event::Apply(pod("3", true)));
        let ready = told();
        assert_eq!(ready.len(), 1, "Ready changed");
        assert_eq!(version(&ready[0]).as_deref(), Some("3"));
        feed.take(Event::Delete(pod("4", true)));
        assert_eq!(told().len(), 1, "a deletion is always told");
        assert!(store.state().is_empty());
        assert_eq!((feed.delivered.get(), feed.skipped.get()), (3, 1));
    }

    #[test]
    fn an_expired_watch_lists_again_at_once_however_long_the_outage_was() {
        let mut retry = Retry::default();
        let waits: Vec<_> = (0..4).map(|_| retry.after(&refused(), "Pod")).collect();
        assert!(
            waits.iter().all(Option::is_some),
            "failures back off: {waits:?}"
        );
        assert_eq!(retry.after(&gone(), "Pod"), None);
    }

    #[test]
    fn failures_back_off_doubling_to_the_cap_until_an_event_arrives() {
        let mut retry = Retry::default();
        let steps_ms = [500, 1_000, 2_000, 4_000, 4_000, 4_000];
        for (n, step_ms) in steps_ms.into_iter().enumerate() {
            let wait = retry.after(&refused(), "Pod").expect("a wait");
            let step = Duration::from_millis(step_ms);
            assert!(
                wait >= step / 2 && wait < step,
                "failure {}: {wait:?} not in the upper half of {step:?}",
                n + 1
            );
        }
        assert_eq!(retry.after(&Ok(Event::<Pod>::InitDone), "Pod"), None);
        let after_reset = retry.after(&refused(), "Pod").expect("a wait");
        assert!(after_reset < RETRY_FIRST, "reset: {after_reset:?}");
    }
}
