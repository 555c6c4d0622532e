//! The one write to a Workload: adding an owner reference ([`super::plan::needs_owner`]).

use crate::k8s::field_managers;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
};

use crate::api::kueue::Workload;

/// What became of an [`add_owner`].
#[derive(Debug)]
pub enum Added {
    /// Written.
    Done,
    /// The Workload changed or went away since it was read: its next change (or none, if it
    /// is gone) decides again.
    Stale,
    /// The write failed; retry.
    Failed(kube::Error),
}

/// Adds `owner` to `wl`'s owner references, on the version read: a merge patch replaces the
/// whole list, so the resourceVersion precondition keeps Kueue's own additions (the group's
/// pods) from being overwritten by a stale list.
pub async fn add_owner(client: &kube::Client, wl: &Workload, owner: OwnerReference) -> Added {
    let mut owners = wl.owner_references().to_vec();
    owners.push(owner);
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": wl.resource_version(),
        "ownerReferences": owners,
    }});
    let api: Api<Workload> = Api::namespaced(client.clone(), &wl.namespace().unwrap_or_default());
    match api
        .patch(
            &wl.name_any(),
            &PatchParams {
                field_manager: Some(field_managers::KUEUE.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Added::Done,
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Added::Stale,
        Err(e) => Added::Failed(e),
    }
}
