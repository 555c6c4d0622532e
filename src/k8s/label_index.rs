//! An index of one cache by (namespace, value of one label): the LWS controller reads "every pod
//! of LWS x" on each reconcile, and a linear scan of the whole store made that the largest
//! cost of a reconcile once there are many LWSes (perf showed `observe`, with its label
//! compares and namespace clones, on top; docs/performance.md).
//!
//! The index holds the store's own `Arc`s (no second copy of an object). It is kept by the
//! cache's driver, after the store has applied a change and before subscribers hear of it, so
//! a reconcile woken by a change sees it in the index. A full (re)list rebuilds it from the
//! store once the store has swapped in the new list.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, RwLock},
};

use kube::{Resource, runtime::reflector::Store};
use tokio::sync::watch;

/// An object an index can file: where it keeps the label's value. Most kinds keep labels in
/// their metadata (the provided method); a cached pod keeps them packed (`pod::CachedPod`),
/// so a kind is indexed only once it says which.
pub trait Labelled: Resource {
    /// The value of label `key`.
    fn label_value(&self, key: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(key).map(String::as_str)
    }
}

impl Labelled for k8s_openapi::api::apps::v1::StatefulSet {}
impl Labelled for k8s_openapi::api::apps::v1::ControllerRevision {}
impl Labelled for k8s_openapi::api::core::v1::Service {}
impl Labelled for k8s_openapi::api::core::v1::Pod {}

/// How an index reads the label of an object ([`Labelled::label_value`]).
type ValueOf<K> = for<'a> fn(&'a K, &str) -> Option<&'a str>;

/// Objects by namespace, label value and name.
type Groups<K> = HashMap<String, HashMap<String, BTreeMap<String, Arc<K>>>>;

struct Inner<K> {
    groups: Groups<K>,
    /// (namespace, name) → the label value the object is filed under, so a relabelled object
    /// leaves its old group.
    filed: HashMap<(String, String), String>,
}

/// A shared, cheaply cloned index of a cache by (namespace, `label`).
pub struct LabelIndex<K> {
    label: &'static str,
    value_of: ValueOf<K>,
    inner: Arc<RwLock<Inner<K>>>,
    ready_tx: Arc<watch::Sender<bool>>,
    ready_rx: watch::Receiver<bool>,
}

impl<K> Clone for LabelIndex<K> {
    fn clone(&self) -> Self {
        Self {
            label: self.label,
            value_of: self.value_of,
            inner: self.inner.clone(),
            ready_tx: self.ready_tx.clone(),
            ready_rx: self.ready_rx.clone(),
        }
    }
}

impl<K> LabelIndex<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// An empty index by `label` (not ready until the first full list).
    pub fn new(label: &'static str) -> Self
    where
        K: Labelled,
    {
        let (ready_tx, ready_rx) = watch::channel(false);
        Self {
            label,
            value_of: K::label_value,
            inner: Arc::new(RwLock::new(Inner {
                groups: HashMap::new(),
                filed: HashMap::new(),
            })),
            ready_tx: Arc::new(ready_tx),
            ready_rx,
        }
    }

    /// Objects in `namespace` whose label has `value`, by name.
    pub fn get(&self, namespace: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.read();
        inner
            .groups
            .get(namespace)
            .and_then(|by_value| by_value.get(value))
            .map(|by_name| by_name.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until the first full list has been indexed; `false` if the driver is gone.
    pub async fn wait_ready(&self) -> bool {
        let mut rx = self.ready_rx.clone();
        rx.wait_for(|ready| *ready).await.is_ok()
    }

    /// Files `obj` (added or changed) under its current label value.
    pub fn upsert(&self, obj: Arc<K>) {
        file(&mut self.write(), (self.label, self.value_of), obj);
    }

    /// Forgets a deleted object.
    pub fn remove(&self, obj: &K) {
        let (Some(namespace), Some(name)) = (&obj.meta().namespace, &obj.meta().name) else {
            return;
        };
        let mut inner = self.write();
        if let Some(old) = inner.filed.remove(&(namespace.clone(), name.clone())) {
            remove_from(&mut inner.groups, namespace, &old, name);
        }
    }

    /// Replaces the whole index with what `store` holds (after a full list) and marks it ready.
    /// Built aside and swapped in, so a reader never sees it half-filled.
    pub fn rebuild(&self, store: &Store<K>) {
        let mut fresh = Inner {
            groups: HashMap::new(),
            filed: HashMap::new(),
        };
        for obj in store.state() {
            file(&mut fresh, (self.label, self.value_of), obj);
        }
        *self.write() = fresh;
        self.ready_tx.send_replace(true);
    }

    // A panic while holding the lock cannot leave the maps half-updated in a way that matters
    // more than losing the index, so a poisoned lock is simply taken over.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn file<K: Resource>(inner: &mut Inner<K>, (label, value_of): (&str, ValueOf<K>), obj: Arc<K>) {
    let (Some(namespace), Some(name)) = (obj.meta().namespace.clone(), obj.meta().name.clone())
    else {
        return;
    };
    let value = value_of(&obj, label).map(str::to_string);
    let key = (namespace, name);
    if let Some(old) = inner.filed.remove(&key)
        && Some(&old) != value.as_ref()
    {
        remove_from(&mut inner.groups, &key.0, &old, &key.1);
    }
    let Some(value) = value else {
        return;
    };
    inner
        .groups
        .entry(key.0.clone())
        .or_default()
        .entry(value.clone())
        .or_default()
        .insert(key.1.clone(), obj);
    inner.filed.insert(key, value);
}

fn remove_from<K>(groups: &mut Groups<K>, namespace: &str, value: &str, name: &str) {
    let Some(by_value) = groups.get_mut(namespace) else {
        return;
    };
    if let Some(by_name) = by_value.get_mut(value) {
        by_name.remove(name);
        if by_name.is_empty() {
            by_value.remove(value);
        }
    }
    if by_value.is_empty() {
        groups.remove(namespace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    const LABEL: &str = "example.com/owner";

    fn pod(ns: &str, name: &str, owner: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: owner.map(|o| [(LABEL.to_string(), o.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn names(index: &LabelIndex<Pod>, ns: &str, owner: &str) -> Vec<String> {
        index
            .get(ns, owner)
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn groups_by_namespace_and_label_value() {
        let index = LabelIndex::new(LABEL);
        index.upsert(pod("a", "p1", Some("x")));
        index.upsert(pod("a", "p2", Some("x")));
        index.upsert(pod("a", "p3", Some("y")));
        index.upsert(pod("b", "p4", Some("x")));
        index.upsert(pod("a", "p5", None));
        assert_eq!(names(&index, "a", "x"), ["p1", "p2"]);
        assert_eq!(names(&index, "a", "y"), ["p3"]);
        assert_eq!(names(&index, "b", "x"), ["p4"]);
        assert!(names(&index, "b", "y").is_empty());
    }

    #[test]
    fn a_changed_object_replaces_the_old_one_and_a_relabelled_one_moves() {
        let index = LabelIndex::new(LABEL);
        index.upsert(pod("a", "p1", Some("x")));
        let mut changed = (*pod("a", "p1", Some("x"))).clone();
        changed.metadata.uid = Some("u2".into());
        index.upsert(Arc::new(changed));
        let got = index.get("a", "x");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].metadata.uid.as_deref(), Some("u2"));
        index.upsert(pod("a", "p1", Some("y")));
        assert!(names(&index, "a", "x").is_empty());
        assert_eq!(names(&index, "a", "y"), ["p1"]);
        index.upsert(pod("a", "p1", None));
        assert!(names(&index, "a", "y").is_empty());
    }

    #[test]
    fn removal_forgets_and_rebuild_replaces_everything() {
        let index = LabelIndex::new(LABEL);
        index.upsert(pod("a", "p1", Some("x")));
        index.upsert(pod("a", "p2", Some("x")));
        index.remove(&pod("a", "p1", Some("x")));
        assert_eq!(names(&index, "a", "x"), ["p2"]);

        let (store, mut writer) = kube::runtime::reflector::store::<Pod>();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Init);
        writer.apply_watcher_event(&kube::runtime::watcher::Event::InitApply(
            (*pod("a", "p9", Some("x"))).clone(),
        ));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        assert!(!*index.ready_rx.borrow());
        index.rebuild(&store);
        assert_eq!(names(&index, "a", "x"), ["p9"]);
        assert!(*index.ready_rx.borrow());
    }
}
