//! An index of one cache by (namespace, value of one label): the LWS controller reads "every pod
//! of LWS x" on each reconcile, and a linear scan of the whole store made that the largest
//! cost of a reconcile once there are many LWSes (perf showed `observe`, with its label
//! compares and namespace clones, on top).
//!
//! The index holds the store's own `Arc`s (no second copy of an object), filed by the name
//! they carry (no copy of the name either). It is kept by the cache's driver, after the store
//! has applied a change and before subscribers hear of it, so a reconcile woken by a change
//! sees it in the index; the driver hands over the version the store held before, which says
//! where a relabelled object was filed. A full (re)list rebuilds it from the store once the
//! store has swapped in the new list.

use std::{
    borrow::Borrow,
    cmp::Ordering,
    collections::{BTreeSet, HashMap},
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
impl Labelled for k8s_openapi::api::scheduling::v1alpha2::PodGroup {}

/// How an index reads the label of an object ([`Labelled::label_value`]).
type ValueOf<K> = for<'a> fn(&'a K, &str) -> Option<&'a str>;

/// Objects by namespace, label value and name.
type Groups<K> = HashMap<String, HashMap<String, BTreeSet<ByName<K>>>>;

struct Inner<K> {
    groups: Groups<K>,
}

/// An object ordered by its name (unique within its namespace and so within a group), and
/// found by it (`Borrow<str>`).
struct ByName<K>(Arc<K>);

impl<K: Resource> ByName<K> {
    fn name(&self) -> &str {
        self.0.meta().name.as_deref().unwrap_or_default()
    }
}

impl<K: Resource> Borrow<str> for ByName<K> {
    fn borrow(&self) -> &str {
        self.name()
    }
}

impl<K: Resource> PartialEq for ByName<K> {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl<K: Resource> Eq for ByName<K> {}

impl<K: Resource> PartialOrd for ByName<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Resource> Ord for ByName<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
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
            .map(|by_name| by_name.iter().map(|o| o.0.clone()).collect())
            .unwrap_or_default()
    }

    /// Waits until the first full list has been indexed; `false` if the driver is gone.
    pub async fn wait_ready(&self) -> bool {
        let mut rx = self.ready_rx.clone();
        rx.wait_for(|ready| *ready).await.is_ok()
    }

    /// Files a new object.
    pub fn upsert(&self, obj: Arc<K>) {
        self.replace(None, obj);
    }

    /// Files `obj` (added or changed) under its current label value; `previous`, the version
    /// the index holds, if any, says where it was filed before.
    pub fn replace(&self, previous: Option<&K>, obj: Arc<K>) {
        let mut inner = self.write();
        if let Some(previous) = previous {
            let old = (self.value_of)(previous, self.label);
            if old.is_some() && old != (self.value_of)(&obj, self.label) {
                self.forget(&mut inner, previous);
            }
        }
        file(&mut inner, (self.label, self.value_of), obj);
    }

    /// Forgets a deleted object: `obj` as the index holds it (its value says where it is).
    pub fn remove(&self, obj: &K) {
        self.forget(&mut self.write(), obj);
    }

    fn forget(&self, inner: &mut Inner<K>, obj: &K) {
        let meta = obj.meta();
        if let (Some(namespace), Some(name), Some(value)) = (
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            (self.value_of)(obj, self.label),
        ) {
            remove_from(&mut inner.groups, namespace, value, name);
        }
    }

    /// Replaces the whole index with what `store` holds (after a full list) and marks it ready.
    /// Built aside and swapped in, so a reader never sees it half-filled.
    pub fn rebuild(&self, store: &Store<K>) {
        let mut fresh = Inner {
            groups: HashMap::new(),
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

/// Files `obj` under its label's value in its namespace (if it has the label), replacing the
/// version filed there before.
fn file<K: Resource>(inner: &mut Inner<K>, (label, value_of): (&str, ValueOf<K>), obj: Arc<K>) {
    // A second reference, to read the namespace and value from while `obj` moves in.
    let read = obj.clone();
    let meta = read.meta();
    let (Some(namespace), Some(_), Some(value)) = (
        meta.namespace.as_deref(),
        meta.name.as_deref(),
        value_of(&read, label),
    ) else {
        return;
    };
    // Looked up before inserting, so an event for a known group allocates nothing.
    if !inner.groups.contains_key(namespace) {
        inner.groups.insert(namespace.to_string(), HashMap::new());
    }
    let by_value = inner.groups.get_mut(namespace).expect("inserted above");
    if !by_value.contains_key(value) {
        by_value.insert(value.to_string(), BTreeSet::new());
    }
    let by_name = by_value.get_mut(value).expect("inserted above");
    by_name.replace(ByName(obj));
}

fn remove_from<K: Resource>(groups: &mut Groups<K>, namespace: &str, value: &str, name: &str) {
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
        let first = pod("a", "p1", Some("x"));
        index.upsert(first.clone());
        let mut changed = (*pod("a", "p1", Some("x"))).clone();
        changed.metadata.uid = Some("u2".into());
        let changed = Arc::new(changed);
        index.replace(Some(&first), changed.clone());
        let got = index.get("a", "x");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].metadata.uid.as_deref(), Some("u2"));
        let moved = pod("a", "p1", Some("y"));
        index.replace(Some(&changed), moved.clone());
        assert!(names(&index, "a", "x").is_empty());
        assert_eq!(names(&index, "a", "y"), ["p1"]);
        index.replace(Some(&moved), pod("a", "p1", None));
        assert!(names(&index, "a", "y").is_empty());
        assert!(index.read().groups.is_empty(), "empty groups are dropped");
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
