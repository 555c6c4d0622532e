//! The webhook configurations (mutating: LWS pods, LWS objects and DisaggregatedSets; validating:
//! LWS objects, Rollouts and DisaggregatedSetRoleScalers), server-side applied with the current CA.

use crate::k8s::field_managers;
use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
        ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    api::rbac::v1::ClusterRole,
    apimachinery::pkg::apis::meta::v1::{
        LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
    },
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
};

use super::{Error, disaggregatedset, lws, pods, role_scaler, rollout};
use crate::lws::labels;

/// Where the API server reaches the webhook.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A URL, e.g. `https://127.0.0.1:9443` for a manager outside the cluster.
    Url(String),
    /// A Service in the cluster.
    Service {
        /// Service namespace.
        namespace: String,
        /// Service name.
        name: String,
        /// Service port.
        port: i32,
    },
}

fn client_config(endpoint: &Endpoint, path: &str, ca_pem: &str) -> WebhookClientConfig {
    let ca_bundle = Some(ByteString(ca_pem.as_bytes().to_vec()));
    match endpoint {
        Endpoint::Url(base) => WebhookClientConfig {
            url: Some(format!("{base}{path}")),
            ca_bundle,
            service: None,
        },
        Endpoint::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            ca_bundle,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.into()),
                port: Some(*port),
            }),
        },
    }
}

fn lws_rule() -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec!["leaderworkerset.x-k8s.io".into()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec!["leaderworkersets".into()]),
        scope: Some("Namespaced".into()),
    }
}

/// The desired mutating configuration: CREATE of pods carrying the LWS name label, CREATE and
/// UPDATE of LeaderWorkerSets, and UPDATE of DisaggregatedSets (the release hold), go to us.
/// Fail if we cannot answer, as upstream does: an LWS pod without its labels and variables is
/// broken, and a template change let through without its hold would roll every stable group.
pub fn configuration(
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
    owner: Option<&OwnerReference>,
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: metadata(name, owner),
        webhooks: Some(vec![
            MutatingWebhook {
                name: "mpod.lws-rollout.x-k8s.io".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: client_config(endpoint, pods::PATH, ca_pem),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                timeout_seconds: Some(10),
                reinvocation_policy: Some("Never".into()),
                object_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: labels::NAME.into(),
                        operator: "Exists".into(),
                        values: None,
                    }]),
                    ..Default::default()
                }),
                rules: Some(vec![RuleWithOperations {
                    api_groups: Some(vec!["".into()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into()]),
                    resources: Some(vec!["pods".into()]),
                    scope: Some("Namespaced".into()),
                }]),
                ..Default::default()
            },
            MutatingWebhook {
                name: "mleaderworkerset.lws-rollout.x-k8s.io".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: client_config(endpoint, lws::MUTATE_PATH, ca_pem),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                timeout_seconds: Some(10),
                reinvocation_policy: Some("Never".into()),
                rules: Some(vec![lws_rule()]),
                ..Default::default()
            },
            MutatingWebhook {
                name: "mdisaggregatedset.lws-rollout.x-k8s.io".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: client_config(endpoint, disaggregatedset::MUTATE_PATH, ca_pem),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                timeout_seconds: Some(10),
                reinvocation_policy: Some("Never".into()),
                rules: Some(vec![RuleWithOperations {
                    api_groups: Some(vec![crate::api::disaggregatedset::GROUP.into()]),
                    api_versions: Some(vec!["v1".into()]),
                    // A set is created with nothing to hold: only its updates are asked about.
                    operations: Some(vec!["UPDATE".into()]),
                    resources: Some(vec!["disaggregatedsets".into()]),
                    scope: Some("Namespaced".into()),
                }]),
                ..Default::default()
            },
        ]),
    }
}

/// The desired validating configuration: CREATE and UPDATE of LeaderWorkerSets, of Rollouts
/// (Kruise's rules; `Fail` as Kruise's own, so a second Rollout of a workload cannot slip in
/// while we are down) and of DisaggregatedSetRoleScalers (bound to an External role).
pub fn validating_configuration(
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
    owner: Option<&OwnerReference>,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: metadata(name, owner),
        webhooks: Some(vec![
            ValidatingWebhook {
                name: "vleaderworkerset.lws-rollout.x-k8s.io".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: client_config(endpoint, lws::VALIDATE_PATH, ca_pem),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                timeout_seconds: Some(10),
                rules: Some(vec![lws_rule()]),
                ..Default::default()
            },
            ValidatingWebhook {
                name: "vrollout.lws-rollout.x-k8s.io".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: client_config(endpoint, rollout::VALIDATE_PATH, ca_pem),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                timeout_seconds: Some(10),
                rules: Some(vec![RuleWithOperations {
                    api_groups: Some(vec![crate::api::rollout::GROUP.into()]),
                    api_versions: Some(vec!["v1beta1".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    resources: Some(vec!["rollouts".into()]),
                    scope: Some("Namespaced".into()),
                }]),
                ..Default::default()
            },
            ValidatingWebhook {
                name: "vdisaggregatedsetrolescaler.lws-rollout.x-k8s.io".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: client_config(endpoint, role_scaler::VALIDATE_PATH, ca_pem),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                timeout_seconds: Some(10),
                rules: Some(vec![RuleWithOperations {
                    api_groups: Some(vec![crate::api::disaggregatedset::GROUP.into()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
                    resources: Some(vec!["disaggregatedsetrolescalers".into()]),
                    scope: Some("Namespaced".into()),
                }]),
                ..Default::default()
            },
        ]),
    }
}

/// Both configurations' metadata: their name and, when the manager was given one, the owner
/// whose deletion takes them away (see [`owner_reference`]).
fn metadata(name: &str, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..Default::default()
    }
}

/// The owner reference to the ClusterRole named `owner` (`--webhook-owner`; the Helm chart's
/// own ClusterRole). The configurations are written at run time, so Helm does not know them:
/// without an owner, `helm uninstall` would leave them behind with `failurePolicy: Fail` and
/// every LWS write and LWS pod would be refused with no one left to answer. Owned by an object
/// the chart deletes, the garbage collector removes them with the release. Not a controller
/// reference and no `blockOwnerDeletion`: nothing about the ClusterRole's deletion should wait.
pub fn owner_reference(role: &ClusterRole) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: ClusterRole::api_version(&()).into_owned(),
        kind: ClusterRole::kind(&()).into_owned(),
        name: role.metadata.name.clone()?,
        uid: role.metadata.uid.clone()?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// Reads the owner ClusterRole. Missing, it is an error rather than a configuration without
/// owner: the chart creates it before the manager runs, so its absence means the release is
/// being uninstalled, and writing the configurations again then would leave them behind.
pub async fn owner(client: &Client, name: &str) -> Result<OwnerReference, Error> {
    let role = Api::<ClusterRole>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(Error::Register)?
        .ok_or_else(|| Error::OwnerMissing(name.into()))?;
    owner_reference(&role).ok_or_else(|| Error::OwnerMissing(role.name_any()))
}

/// Applies the configuration (creating it or moving it to the new CA and endpoint).
pub async fn register(
    client: &Client,
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
    owner_name: Option<&str>,
) -> Result<(), Error> {
    let owner = match owner_name {
        Some(role) => Some(owner(client, role).await?),
        None => None,
    };
    let pp = PatchParams::apply(field_managers::WEBHOOK).force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            name,
            &pp,
            &Patch::Apply(configuration(name, endpoint, ca_pem, owner.as_ref())),
        )
        .await
        .map_err(Error::Register)?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            name,
            &pp,
            &Patch::Apply(validating_configuration(
                name,
                endpoint,
                ca_pem,
                owner.as_ref(),
            )),
        )
        .await
        .map_err(Error::Register)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(uid: Option<&str>) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some("lws-rollout".into()),
                uid: uid.map(str::to_string),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn both_configurations_are_owned_by_the_named_cluster_role() {
        let owner = owner_reference(&role(Some("u-1"))).expect("a reference");
        assert_eq!(owner.api_version, "rbac.authorization.k8s.io/v1");
        assert_eq!(owner.kind, "ClusterRole");
        assert_eq!(
            (owner.name.as_str(), owner.uid.as_str()),
            ("lws-rollout", "u-1")
        );
        assert_eq!(owner.block_owner_deletion, None);
        let endpoint = Endpoint::Url("https://127.0.0.1:9443".into());
        let mutating = configuration("w", &endpoint, "ca", Some(&owner));
        let validating = validating_configuration("w", &endpoint, "ca", Some(&owner));
        assert_eq!(
            mutating.metadata.owner_references,
            Some(vec![owner.clone()])
        );
        assert_eq!(validating.metadata.owner_references, Some(vec![owner]));
        assert_eq!(
            configuration("w", &endpoint, "ca", None)
                .metadata
                .owner_references,
            None,
            "no --webhook-owner: no owner"
        );
    }

    #[test]
    fn a_role_not_yet_stored_gives_no_reference() {
        assert_eq!(owner_reference(&role(None)), None);
    }
}
