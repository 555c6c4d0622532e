//! The MutatingWebhookConfiguration for LWS pods, server-side applied with the current CA.

use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
        WebhookClientConfig,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};

use super::{Error, pods};
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

/// The desired configuration: CREATE of pods carrying the LWS name label goes to us; Fail if we
/// cannot answer, because an LWS pod without its labels and variables is broken.
pub fn configuration(
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
) -> MutatingWebhookConfiguration {
    let client_config = match endpoint {
        Endpoint::Url(base) => WebhookClientConfig {
            url: Some(format!("{base}{}", pods::PATH)),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        },
        Endpoint::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(pods::PATH.into()),
                port: Some(*port),
            }),
        },
    };
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: "mpod.lws-rollout.x-k8s.io".into(),
            admission_review_versions: vec!["v1".into()],
            client_config,
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
        }]),
    }
}

/// Applies the configuration (creating it or moving it to the new CA and endpoint).
pub async fn register(
    client: &Client,
    name: &str,
    endpoint: &Endpoint,
    ca_pem: &str,
) -> Result<(), Error> {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(configuration(name, endpoint, ca_pem)),
    )
    .await
    .map_err(Error::Register)?;
    Ok(())
}
