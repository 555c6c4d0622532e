//! What the DisaggregatedSet controller reads, from the shared caches only: the set's own
//! LeaderWorkerSets (labelled with its name and controlled by it), LeaderWorkerSets of other
//! owners that carry one of its names, and its Services.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::Service;
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use crate::{
    api::{
        disaggregatedset::{DisaggregatedSet, SET_NAME_LABEL},
        disaggregatedset_role_scaler::DisaggregatedSetRoleScaler,
        leaderworkerset::LeaderWorkerSet,
    },
    k8s::apply::controller_uid,
};

/// The stores the controller reads.
#[derive(Clone)]
pub struct Stores {
    /// DisaggregatedSets.
    pub sets: Store<DisaggregatedSet>,
    /// Every LeaderWorkerSet.
    pub lws: Store<LeaderWorkerSet>,
    /// Services labelled with a set's name.
    pub services: Store<Service>,
    /// DisaggregatedSetRoleScalers; `None` where the cluster does not serve the kind (its CRD
    /// is not installed: a watch of it would never list, and every reconcile would wait).
    pub scalers: Option<Store<DisaggregatedSetRoleScaler>>,
}

/// The world of one set.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// LWSs labelled with the set's name and controlled by it.
    pub lws: Vec<Arc<LeaderWorkerSet>>,
    /// LWSs named `<set>-…` that the set does not control, by name (a name the set wants may
    /// be taken).
    pub foreign: BTreeMap<String, Arc<LeaderWorkerSet>>,
    /// Services labelled with the set's name and controlled by it.
    pub services: Vec<Arc<Service>>,
    /// DisaggregatedSetRoleScalers labelled with the set's name and controlled by it.
    pub scalers: Vec<Arc<DisaggregatedSetRoleScaler>>,
    /// Names of DisaggregatedSetRoleScalers named `<set>-…` that the set does not control.
    pub foreign_scalers: std::collections::BTreeSet<String>,
    /// The cluster does not serve DisaggregatedSetRoleScalers (their CRD is not installed).
    pub scalers_unserved: bool,
}

/// Reads the caches for `set`.
pub fn observe(stores: &Stores, set: &DisaggregatedSet) -> Observed {
    let namespace = set.namespace();
    let name = set.name_any();
    let uid = set.metadata.uid.as_deref();
    let prefix = format!("{name}-");
    let mut observed = Observed::default();
    for lws in stores.lws.state() {
        if lws.namespace() != namespace {
            continue;
        }
        let ours =
            controller_uid(lws.as_ref()) == uid && lws.labels().get(SET_NAME_LABEL) == Some(&name);
        if ours {
            observed.lws.push(lws);
        } else if lws.name_any().starts_with(&prefix) {
            observed.foreign.insert(lws.name_any(), lws);
        }
    }
    observed.services = stores
        .services
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace() == namespace
                && s.labels().get(SET_NAME_LABEL) == Some(&name)
                && controller_uid(s.as_ref()) == uid
        })
        .collect();
    observed.scalers_unserved = stores.scalers.is_none();
    for scaler in stores.scalers.iter().flat_map(|s| s.state()) {
        if scaler.namespace() != namespace {
            continue;
        }
        if controller_uid(scaler.as_ref()) == uid
            && scaler.labels().get(SET_NAME_LABEL) == Some(&name)
        {
            observed.scalers.push(scaler);
        } else if scaler.name_any().starts_with(&prefix) {
            observed.foreign_scalers.insert(scaler.name_any());
        }
    }
    observed.scalers.sort_by_key(|s| s.name_any());
    observed.lws.sort_by_key(|l| l.name_any());
    observed.services.sort_by_key(|s| s.name_any());
    observed
}

/// The sets an LWS or Service wakes: its controller (a set) or, for an object of another owner
/// named like one of a set's, that set.
pub fn sets_of<K: kube::Resource>(
    sets: &Store<DisaggregatedSet>,
    obj: &K,
) -> Vec<ObjectRef<DisaggregatedSet>> {
    let namespace = obj.meta().namespace.clone();
    let owner = obj
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == "DisaggregatedSet")
        .map(|o| o.name.clone());
    let label = obj
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(SET_NAME_LABEL))
        .cloned();
    let name = obj.meta().name.clone().unwrap_or_default();
    sets.state()
        .iter()
        .filter(|s| s.metadata.namespace == namespace)
        .filter(|s| {
            let set = s.name_any();
            owner.as_ref() == Some(&set)
                || label.as_ref() == Some(&set)
                || name.starts_with(&format!("{set}-"))
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}
