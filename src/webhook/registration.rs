//! The webhook configurations (mutating: LWS pods and LWS objects; validating: LWS objects and
//! Rollouts), server-side applied with the current CA.

use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
        ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};

use super::{Error, lws, pods, rollout};
use crate::lws::labels;

/// Field manager of the webhook configuration.
pub const FIELD_MANAGER: &str = "lws-rollout-webhook";

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

/// The desired mutating configuration: CREATE of pods carrying the LWS name label, and CREATE
/// and UPDATE of LeaderWorkerSets, go to us. Fail if we cannot answer, as upstream does: an LWS
/// pod without its labels and variables is broken.
pub fn configuration(
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
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
        ]),
    }
}

/// The desired validating configuration: CREATE and UPDATE of LeaderWorkerSets and of Rollouts
/// (Kruise's rules; `Fail` as Kruise's own, so a second Rollout of a workload cannot slip in
/// while we are down).
pub fn validating_configuration(
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
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
        ]),
    }
}

/// Applies the configuration (creating it or moving it to the new CA and endpoint).
pub async fn register(
    client: &Client,
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
) -> Result<(), Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            name,
            &pp,
            &Patch::Apply(configuration(name, endpoint, ca_pem)),
        )
        .await
        .map_err(Error::Register)?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            name,
            &pp,
            &Patch::Apply(validating_configuration(name, endpoint, ca_pem)),
        )
        .await
        .map_err(Error::Register)?;
    Ok(())
}
