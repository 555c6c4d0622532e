//! The revision a release is about, read as the LWS controller reads it: a stable LWS whose
//! template matches a revision recorded under another key (by another controller or version)
//! is on that revision, so both release controllers see no template change where there is none
//! and agree on the key of the one there is.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::{ResourceExt, runtime::reflector::Store};

use crate::api::leaderworkerset::LeaderWorkerSet;
use crate::lws::{labels, upstream::revision};

/// The ControllerRevisions `lws` controls, from the shared cache.
pub fn recorded(
    revisions: &Store<ControllerRevision>,
    lws: &LeaderWorkerSet,
) -> Vec<Arc<ControllerRevision>> {
    revisions
        .state()
        .into_iter()
        .filter(|r| {
            r.namespace() == lws.namespace()
                && r.labels().get(labels::NAME) == lws.metadata.name.as_ref()
                && r.owner_references()
                    .iter()
                    .any(|o| Some(&o.uid) == lws.metadata.uid.as_ref())
        })
        .collect()
}

/// The revision key of `lws`'s template as it is now ([`revision::template_key`] over
/// `recorded`); empty when the spec cannot be hashed (the LWS controller reports that).
pub fn template_key(lws: &LeaderWorkerSet, recorded: &[Arc<ControllerRevision>]) -> String {
    let pairs = recorded.iter().filter_map(|r| {
        Some((
            r.metadata.labels.as_ref()?.get(labels::REVISION)?.as_str(),
            &r.data.as_ref()?.0,
        ))
    });
    revision::template_key(&lws.spec, pairs).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector::store::Writer, watcher::Event};
    use serde_json::json;

    fn lws(image: &str) -> LeaderWorkerSet {
        serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "m", "namespace": "ns", "uid": "lws-uid"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}
        }))
        .unwrap()
    }

    /// The revision of `lws`'s template as another controller recorded it: under `key`, with
    /// `"creationTimestamp": null` in the pod template; `owner` is the controlling LWS's uid.
    fn foreign_revision(lws: &LeaderWorkerSet, key: &str, owner: &str) -> ControllerRevision {
        let data = revision::revision_data(&serde_json::to_value(&lws.spec).unwrap()).unwrap();
        let mut older: serde_json::Value = serde_json::from_str(&data).unwrap();
        older["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] =
            json!({"creationTimestamp": null});
        let mut rev =
            crate::lws::objects::controller_revision(lws, key, 1, &older.to_string()).unwrap();
        for o in rev.metadata.owner_references.iter_mut().flatten() {
            o.uid = owner.into();
        }
        rev
    }

    fn store(revs: Vec<ControllerRevision>) -> Store<ControllerRevision> {
        let mut writer = Writer::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&Event::Init);
        for r in revs {
            writer.apply_watcher_event(&Event::InitApply(r));
        }
        writer.apply_watcher_event(&Event::InitDone);
        store
    }

    #[test]
    fn an_adopted_revision_of_the_template_is_the_release_revision() {
        let stable = lws("img:1");
        let own = revision::spec_key(&stable.spec).unwrap();
        let revisions = store(vec![
            foreign_revision(&stable, "olderkey", "lws-uid"),
            // Another LWS's revision of the same template is not this one's.
            foreign_revision(&stable, "notours", "other-uid"),
        ]);
        let recorded = recorded(&revisions, &stable);
        assert_eq!(recorded.len(), 1);
        assert_eq!(template_key(&stable, &recorded), "olderkey");
        // A new template has no recorded revision yet: its own key.
        let moved = lws("img:2");
        assert_eq!(
            template_key(&moved, &recorded),
            revision::spec_key(&moved.spec).unwrap()
        );
        assert_ne!(own, "olderkey");
    }
}
