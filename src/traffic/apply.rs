//! Carries a traffic plan's writes out, in order, stopping at the first failure (later writes
//! rely on earlier ones). No decisions: the plan said what to write and how.

use crate::k8s::field_managers;
use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{core::v1::Service, networking::v1::Ingress};
use kube::Client;

use super::write::{Kind, Owned, Write};
use crate::k8s::apply::{ApiError, Applier, Propagation};

/// Executes `writes` in `namespace`.
pub async fn apply(client: &Client, namespace: &str, writes: &[Write]) -> Result<(), ApiError> {
    for write in writes {
        match write {
            Write::Apply {
                object,
                field_manager,
            } => {
                let applier = Applier::new(client.clone(), field_manager);
                match object {
                    Owned::Service(svc) => applier.apply(svc.as_ref()).await.map(|_| ())?,
                    Owned::Ingress(ing) => applier.apply(ing.as_ref()).await.map(|_| ())?,
                }
            }
            Write::Patch {
                target,
                patch,
                field_manager,
            } => {
                let applier = Applier::new(client.clone(), field_manager);
                let patch = patch.clone();
                match target.kind {
                    Kind::Service => {
                        applier
                            .json_patch::<Service>(namespace, &target.name, patch)
                            .await?
                    }
                    Kind::HttpRoute => {
                        applier
                            .json_patch::<HttpRoute>(namespace, &target.name, patch)
                            .await?
                    }
                    Kind::Ingress => {
                        applier
                            .json_patch::<Ingress>(namespace, &target.name, patch)
                            .await?
                    }
                }
            }
            Write::Delete { target, uid } => {
                let applier = Applier::new(client.clone(), field_managers::TRAFFIC);
                let uid = Some(uid.as_str());
                match target.kind {
                    Kind::Service => {
                        applier
                            .delete::<Service>(namespace, &target.name, uid, Propagation::Default)
                            .await?
                    }
                    Kind::HttpRoute => {
                        applier
                            .delete::<HttpRoute>(namespace, &target.name, uid, Propagation::Default)
                            .await?
                    }
                    Kind::Ingress => {
                        applier
                            .delete::<Ingress>(namespace, &target.name, uid, Propagation::Default)
                            .await?
                    }
                };
            }
        }
    }
    Ok(())
}
