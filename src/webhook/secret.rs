//! The webhook certificate shared by every manager replica through one Secret: the first replica
//! issues it, the others read it, and whoever finds it due renews it (optimistic concurrency on
//! `resourceVersion` picks one writer; the rest read the winner's).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{Api, Client, api::PostParams};
use tracing::info;

use super::certs::{self, Bundle, CertError};

const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
/// Annotation: the hosts the serving certificate is for, comma-separated.
pub const HOSTS: &str = "lws-rollout.x-k8s.io/serving-hosts";
/// Annotation: when the serving certificate expires (RFC 3339).
pub const NOT_AFTER: &str = "lws-rollout.x-k8s.io/serving-not-after";

/// Why the shared certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Reading or writing the Secret failed.
    #[error("webhook certificate Secret {namespace}/{name}: {source}")]
    Api {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Making a certificate failed.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// Other replicas kept winning the race.
    #[error("webhook certificate Secret {0}: too many concurrent writers")]
    Contended(String),
}

/// The Secret holding `bundle`, owned by `owner` when given (`--webhook-owner`: the chart's
/// ClusterRole, so that `helm uninstall` takes the Secret with the webhook configurations).
pub fn to_secret(
    namespace: &str,
    name: &str,
    bundle: &Bundle,
    owner: Option<&OwnerReference>,
) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            annotations: Some(BTreeMap::from([
                (HOSTS.to_string(), bundle.hosts.join(",")),
                (NOT_AFTER.to_string(), bundle.not_after.to_string()),
            ])),
            owner_references: owner.map(|o| vec![o.clone()]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (CA_CRT.to_string(), bytes(&bundle.ca_cert_pem)),
            (CA_KEY.to_string(), bytes(&bundle.ca_key_pem)),
            (TLS_CRT.to_string(), bytes(&bundle.cert_pem)),
            (TLS_KEY.to_string(), bytes(&bundle.key_pem)),
        ])),
        ..Default::default()
    }
}

/// The bundle in a Secret, if it holds a complete one.
pub fn from_secret(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    let annotations = secret.metadata.annotations.as_ref()?;
    Some(Bundle {
        ca_cert_pem: text(CA_CRT)?,
        ca_key_pem: text(CA_KEY)?,
        cert_pem: text(TLS_CRT)?,
        key_pem: text(TLS_KEY)?,
        hosts: annotations
            .get(HOSTS)?
            .split(',')
            .filter(|h| !h.is_empty())
            .map(String::from)
            .collect(),
        not_after: annotations.get(NOT_AFTER)?.parse().ok()?,
    })
}

/// The certificate to serve for `hosts`: the stored one when it fits, else a renewed or new one
/// written back, owned by `owner` when given (on a lost race, the winner's).
pub async fn load_or_issue(
    client: &Client,
    namespace: &str,
    name: &str,
    hosts: &[String],
    owner: Option<&OwnerReference>,
) -> Result<Bundle, SecretError> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let api_err = |source| SecretError::Api {
        namespace: namespace.into(),
        name: name.into(),
        source,
    };
    for _ in 0..5 {
        let now = Timestamp::now();
        let stored = api.get_opt(name).await.map_err(api_err)?;
        let current = stored.as_ref().and_then(from_secret);
        let owned = owner.is_none_or(|o| {
            stored
                .as_ref()
                .and_then(|s| s.metadata.owner_references.as_ref())
                .is_some_and(|refs| refs.iter().any(|r| r.uid == o.uid))
        });
        let next = match &current {
            Some(bundle) if bundle.fits(hosts, now) && owned => return Ok(bundle.clone()),
            // A Secret written before the manager had an owner (an earlier version): the same
            // certificate, now owned, so an uninstall takes it.
            Some(bundle) if bundle.fits(hosts, now) => bundle.clone(),
            // Same CA when we can: replicas still serving the old certificate stay trusted.
            Some(bundle) => bundle
                .renewed(hosts, now)
                .or_else(|_| certs::issue(hosts, now))?,
            None => certs::issue(hosts, now)?,
        };
        let mut secret = to_secret(namespace, name, &next, owner);
        let written = match stored {
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version;
                api.replace(name, &PostParams::default(), &secret).await
            }
            None => api.create(&PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => {
                info!(secret = %name, not_after = %next.not_after, hosts = ?hosts, "issued the webhook serving certificate");
                return Ok(next);
            }
            // Another replica wrote first: read what it wrote.
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(source) => return Err(api_err(source)),
        }
    }
    Err(SecretError::Contended(format!("{namespace}/{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_round_trips_through_its_secret() {
        let bundle =
            certs::issue(&["127.0.0.1".into(), "a.b.svc".into()], Timestamp::now()).unwrap();
        let secret = to_secret("ns", "cert", &bundle, None);
        assert_eq!(from_secret(&secret), Some(bundle));
        let mut partial = secret;
        partial.data.as_mut().unwrap().remove(TLS_KEY);
        assert_eq!(from_secret(&partial), None, "incomplete: issue again");
    }
}
