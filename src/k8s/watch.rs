//! Watches whose caches are shared: one watch per kind and filter feeds one reflector store
//! that every controller reads, and fans its changes out to every controller that subscribed.
//! So the Rollout and BatchRelease controllers read the LWS, pod and StatefulSet caches the
//! LWS controller already keeps instead of doubling the memory and the watch load.
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

use std::{fmt::Debug, future::Future, pin::Pin, sync::Arc, time::Duration};

use futures::{Stream, StreamExt, future::join_all};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store, store::Writer},
        watcher::{self, Config, Event},
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::label_index::LabelIndex;

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
    pub fn with_index(mut self, label: &'static str) -> Self {
        self.index = Some(LabelIndex::new(label));
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
    /// when the watch stream does (never, in practice: it retries with backoff).
    pub fn driver(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let writer = self.writer.take().expect("driver() called once");
        let subscribers = std::mem::take(&mut self.subscribers);
        let store = self.store.clone();
        let index = self.index.clone();
        let trim = self.trim;
        // managedFields are never read by our controllers and are often the largest part of
        // a pod or StatefulSet: dropped before the store keeps the object.
        let events = watcher::watcher(self.api.clone(), self.config.clone())
            .modify(move |obj| {
                obj.meta_mut().managed_fields = None;
                trim(obj);
            })
            .default_backoff()
            .reflect(writer);
        Box::pin(events.for_each(move |event| {
            let changed = match event {
                // Subscribers get the store's own Arc: no second copy of the object while
                // the change waits in their queues.
                Ok(Event::Apply(obj)) => {
                    let stored = store
                        .get(&ObjectRef::from_obj(&obj))
                        .unwrap_or_else(|| Arc::new(obj));
                    if let Some(index) = &index {
                        index.upsert(stored.clone());
                    }
                    Some(stored)
                }
                Ok(Event::Delete(obj)) => {
                    if let Some(index) = &index {
                        index.remove(&obj);
                    }
                    Some(Arc::new(obj))
                }
                // The store swaps in a full list only at InitDone; the index follows then.
                Ok(Event::InitApply(obj)) => Some(Arc::new(obj)),
                Ok(Event::InitDone) => {
                    if let Some(index) = &index {
                        index.rebuild(&store);
                    }
                    None
                }
                Ok(Event::Init) | Err(_) => None,
            };
            if let Some(obj) = changed {
                for subscriber in &subscribers {
                    // A controller that stopped has dropped its receiver: nothing to do.
                    let _ = subscriber.send(obj.clone());
                }
            }
            futures::future::ready(())
        }))
    }
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
