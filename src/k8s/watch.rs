//! Watches whose caches are shared: one watch per kind and filter feeds one reflector store
//! that every controller reads, and fans its changes out to every controller that subscribed.
//! So the Rollout and BatchRelease controllers read the LWS, pod and StatefulSet caches the
//! LWS controller already keeps instead of doubling the memory and the watch load.
//!
//! A [`SharedCache`] does nothing until its [`SharedCache::driver`] is polled: the manager runs
//! the drivers of all caches beside the controllers.

use std::{fmt::Debug, future::Future, pin::Pin, sync::Arc, time::Duration};

use futures::{Stream, StreamExt, future::join_all, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store, store::Writer},
        watcher::{self, Config},
    },
};
use serde::de::DeserializeOwned;

/// How many changes may wait for the slowest subscriber before the watch pauses.
const FAN_OUT_BUFFER: usize = 1024;

/// One watched kind: a store to read and changes to subscribe to.
pub struct SharedCache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    writer: Option<Writer<K>>,
    api: Api<K>,
    config: Config,
}

impl<K> SharedCache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A cache of the objects of `api` that `config` selects (label and field selectors).
    pub fn new(api: Api<K>, config: Config) -> Self {
        let (store, writer) = reflector::store_shared(FAN_OUT_BUFFER);
        Self {
            store,
            writer: Some(writer),
            api,
            config,
        }
    }

    /// A read handle on the store (cheap to clone).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A stream of changed objects for one controller. Every subscriber must be consumed, or
    /// the watch stalls once the buffer is full: subscribe only for a controller that runs.
    pub fn subscribe(&mut self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.writer
            .as_ref()
            .and_then(Writer::subscribe)
            .expect("subscribe before the driver starts")
    }

    /// The future that runs the watch and fills the store; it ends when the watch stream
    /// does (never, in practice: it retries with backoff).
    pub fn driver(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let writer = self.writer.take().expect("driver() called once");
        // managedFields are never read by our controllers and are often the largest part of
        // a pod or StatefulSet: dropped before the store keeps the object.
        let stream: BoxStream<'static, _> = watcher::watcher(self.api.clone(), self.config.clone())
            .modify(|obj| {
                obj.meta_mut().managed_fields = None;
            })
            .default_backoff()
            .reflect_shared(writer)
            .boxed();
        Box::pin(stream.for_each(|_| async {}))
    }
}

/// Waits until every store has seen its first full list, at most `timeout`. Controllers call
/// it before deciding anything, so a restart never acts on half-filled caches. `false` when
/// the time ran out (e.g. a shutdown stopped the watches).
pub async fn ready<'a>(
    waits: impl IntoIterator<Item = Pin<Box<dyn Future<Output = bool> + Send + 'a>>>,
    timeout: Duration,
) -> bool {
    tokio::time::timeout(timeout, join_all(waits))
        .await
        .is_ok_and(|all| all.into_iter().all(|ok| ok))
}

/// One store's readiness, for [`ready`].
pub fn store_ready<'a, K>(store: &'a Store<K>) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    Box::pin(async move { store.wait_until_ready().await.is_ok() })
}
