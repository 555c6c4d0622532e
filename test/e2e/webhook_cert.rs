//! The webhook certificate lives in one Secret that every manager replica shares: the suite's
//! manager serves it and registers its CA; concurrent replicas agree on one certificate; a due
//! certificate is renewed under the same CA, so the API server's trust never breaks.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        core::v1::Secret,
    },
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};
use lws_rollout::webhook::{certs, secret};

use crate::harness::with_ns;

#[tokio::test]
async fn the_suite_managers_certificate_is_in_the_shared_secret_and_trusted() -> anyhow::Result<()>
{
    with_ns("cert-suite", |ns| async move {
        let stored = Api::<Secret>::namespaced(ns.client.clone(), "default")
            .get("lws-rollout-webhook-cert")
            .await?;
        let bundle = secret::from_secret(&stored).expect("a complete certificate bundle");
        assert_eq!(bundle.hosts, vec!["127.0.0.1".to_string()]);
        let ca = bundle.ca_cert_pem.as_bytes().to_vec();
        let mutating = ns
            .api_all::<MutatingWebhookConfiguration>()
            .get("lws-rollout")
            .await?;
        let validating = ns
            .api_all::<ValidatingWebhookConfiguration>()
            .get("lws-rollout")
            .await?;
        let mut bundles: Vec<Vec<u8>> = mutating
            .webhooks
            .iter()
            .flatten()
            .map(|w| {
                w.client_config
                    .ca_bundle
                    .clone()
                    .map(|b| b.0)
                    .unwrap_or_default()
            })
            .collect();
        bundles.extend(validating.webhooks.iter().flatten().map(|w| {
            w.client_config
                .ca_bundle
                .clone()
                .map(|b| b.0)
                .unwrap_or_default()
        }));
        assert_eq!(
            bundles.len(),
            6,
            "pod, LWS defaulting, LWS validating, DisaggregatedSet hold, Rollout validating and \
             RoleScaler validating webhooks"
        );
        assert!(
            bundles.iter().all(|b| *b == ca),
            "every webhook trusts the shared CA"
        );

        // A second replica for the same hosts gets the same certificate and writes nothing.
        let again = secret::load_or_issue(
            &ns.client,
            "default",
            "lws-rollout-webhook-cert",
            &bundle.hosts,
            None,
        )
        .await?;
        assert_eq!(again, bundle);
        let after = Api::<Secret>::namespaced(ns.client.clone(), "default")
            .get("lws-rollout-webhook-cert")
            .await?;
        assert_eq!(
            after.metadata.resource_version,
            stored.metadata.resource_version
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn replicas_starting_together_agree_on_one_certificate() -> anyhow::Result<()> {
    with_ns("cert-race", |ns| async move {
        let hosts = vec!["lws-rollout-webhook.lws-system.svc".to_string()];
        let replicas = (0..4).map(|_| {
            let (client, name, hosts) = (ns.client.clone(), ns.name.clone(), hosts.clone());
            tokio::spawn(async move {
                secret::load_or_issue(&client, &name, "shared-cert", &hosts, None).await
            })
        });
        let mut bundles = Vec::new();
        for replica in replicas {
            bundles.push(replica.await??);
        }
        assert!(
            bundles.windows(2).all(|w| w[0] == w[1]),
            "one winner, read by all"
        );
        let stored = ns.api::<Secret>().get("shared-cert").await?;
        assert_eq!(secret::from_secret(&stored).as_ref(), Some(&bundles[0]));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_due_certificate_is_renewed_under_the_same_ca() -> anyhow::Result<()> {
    with_ns("cert-renew", |ns| async move {
        let hosts = vec!["127.0.0.1".to_string()];
        // Issued 340 days ago: 25 days left, inside the 30-day renewal window.
        let old = certs::issue(
            &hosts,
            Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(24 * 340),
        )?;
        ns.api::<Secret>()
            .create(
                &PostParams::default(),
                &secret::to_secret(&ns.name, "due", &old, None),
            )
            .await?;
        let renewed = secret::load_or_issue(&ns.client, &ns.name, "due", &hosts, None).await?;
        assert_eq!(
            renewed.ca_cert_pem, old.ca_cert_pem,
            "same CA: the caBundle stays valid"
        );
        assert_ne!(renewed.cert_pem, old.cert_pem);
        assert!(
            renewed.not_after
                > Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(24 * 300)
        );
        let stored = ns.api::<Secret>().get("due").await?;
        assert_eq!(secret::from_secret(&stored), Some(renewed));

        // A Secret someone emptied is re-issued rather than served half.
        let mut emptied = stored.clone();
        emptied.data = Some(BTreeMap::new());
        ns.api::<Secret>()
            .replace("due", &PostParams::default(), &emptied)
            .await?;
        let reissued = secret::load_or_issue(&ns.client, &ns.name, "due", &hosts, None).await?;
        assert!(reissued.fits(&hosts, Timestamp::now()));
        Ok(())
    })
    .await
}
