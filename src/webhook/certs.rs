//! The webhook's private CA and serving certificate. The CA lives ten years and signs a serving
//! certificate that lives one year and is renewed a month before it ends, by the same CA, so the
//! caBundle the API server trusts never changes under a replica still serving the previous
//! certificate. Pure: the Secret that shares them between replicas is in [`super::secret`].

use std::net::IpAddr;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

/// CA lifetime.
pub const CA_DAYS: i64 = 3650;
/// Serving certificate lifetime.
pub const SERVING_DAYS: i64 = 365;
/// Renew the serving certificate this long before it expires.
pub const RENEW_BEFORE_DAYS: i64 = 30;

/// Why a certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused.
    #[error(transparent)]
    Rcgen(#[from] rcgen::Error),
    /// A stored PEM does not parse.
    #[error("unreadable PEM: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    /// A time outside what X.509 can hold.
    #[error("certificate time out of range")]
    Time,
}

/// What the webhook serves and what the API server must trust, all PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The CA certificate (the webhook configurations' caBundle).
    pub ca_cert_pem: String,
    /// The CA key, to renew the serving certificate under the same CA.
    pub ca_key_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// Its key.
    pub key_pem: String,
    /// Names and addresses the serving certificate is valid for.
    pub hosts: Vec<String>,
    /// When the serving certificate expires.
    pub not_after: Timestamp,
}

/// The serving half, decoded for rustls.
pub struct ServingCert {
    /// The serving certificate.
    pub cert_der: CertificateDer<'static>,
    /// Its key.
    pub key_der: PrivateKeyDer<'static>,
}

fn x509_time(t: Timestamp) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(t.as_second()).map_err(|_| CertError::Time)
}

fn days(n: i64) -> SignedDuration {
    SignedDuration::from_hours(24 * n)
}

/// The CA's parameters; the same every time, so a stored CA key can sign again.
fn ca_params(now: Timestamp) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "lws-rollout-webhook-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = x509_time(now - SignedDuration::from_hours(1))?;
    params.not_after = x509_time(now + days(CA_DAYS))?;
    Ok(params)
}

fn serving(
    ca_key_pem: &str,
    hosts: &[String],
    now: Timestamp,
) -> Result<(String, String, Timestamp), CertError> {
    let issuer = Issuer::new(ca_params(now)?, KeyPair::from_pem(ca_key_pem)?);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "lws-rollout-webhook");
    for host in hosts {
        params.subject_alt_names.push(match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.clone().try_into()?),
        });
    }
    // Whole seconds, so the expiry stored beside the certificate is exactly the certificate's.
    let not_after = Timestamp::from_second((now + days(SERVING_DAYS)).as_second())
        .map_err(|_| CertError::Time)?;
    params.not_before = x509_time(now - SignedDuration::from_hours(1))?;
    params.not_after = x509_time(not_after)?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// A new CA and a serving certificate for `hosts` (IP addresses or DNS names).
pub fn issue(hosts: &[String], now: Timestamp) -> Result<Bundle, CertError> {
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params(now)?.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    let (cert_pem, key_pem, not_after) = serving(&ca_key_pem, hosts, now)?;
    Ok(Bundle {
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem,
        cert_pem,
        key_pem,
        hosts: hosts.to_vec(),
        not_after,
    })
}

impl Bundle {
    /// When the serving certificate should be replaced.
    pub fn renew_at(&self) -> Timestamp {
        self.not_after - days(RENEW_BEFORE_DAYS)
    }

    /// Whether this bundle can serve `hosts` at `now` without renewal.
    pub fn fits(&self, hosts: &[String], now: Timestamp) -> bool {
        self.hosts == hosts && now < self.renew_at()
    }

    /// A new serving certificate for `hosts` from the same CA.
    pub fn renewed(&self, hosts: &[String], now: Timestamp) -> Result<Bundle, CertError> {
        let (cert_pem, key_pem, not_after) = serving(&self.ca_key_pem, hosts, now)?;
        Ok(Bundle {
            cert_pem,
            key_pem,
            hosts: hosts.to_vec(),
            not_after,
            ..self.clone()
        })
    }

    /// The serving certificate and key, decoded.
    pub fn serving_cert(&self) -> Result<ServingCert, CertError> {
        Ok(ServingCert {
            cert_der: CertificateDer::from_pem_slice(self.cert_pem.as_bytes())?,
            key_der: PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Vec<String> {
        vec!["127.0.0.1".into(), "lws-rollout.lws-system.svc".into()]
    }

    #[test]
    fn issues_a_ca_and_a_serving_cert_for_ip_and_dns_names() {
        let now = Timestamp::now();
        let b = issue(&hosts(), now).unwrap();
        assert!(b.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(b.serving_cert().is_ok());
        assert!(b.fits(&hosts(), now));
        assert!(!b.fits(&["10.0.0.1".to_string()], now), "other hosts");
    }

    #[test]
    fn renewal_is_due_a_month_before_expiry_and_keeps_the_ca() {
        let now = Timestamp::now();
        let b = issue(&hosts(), now).unwrap();
        assert_eq!(b.not_after.as_second(), (now + days(365)).as_second());
        assert!(b.fits(&hosts(), now + days(334)));
        let late = now + days(336);
        assert!(!b.fits(&hosts(), late));
        let r = b.renewed(&hosts(), late).unwrap();
        assert_eq!(
            r.ca_cert_pem, b.ca_cert_pem,
            "the API server's trust is unchanged"
        );
        assert_ne!(r.cert_pem, b.cert_pem);
        assert!(r.fits(&hosts(), late));
    }

    #[test]
    fn a_renewed_certificate_verifies_against_the_original_ca() {
        // A TLS handshake through rustls: client trusting only the CA, server with the renewed
        // certificate.
        use rustls::client::danger::ServerCertVerifier;
        use std::sync::Arc;
        let now = Timestamp::now();
        let b = issue(&hosts(), now).unwrap();
        let r = b.renewed(&hosts(), now + days(340)).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(b.ca_cert_pem.as_bytes()).unwrap())
            .unwrap();
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let serving = r.serving_cert().unwrap();
        let name = rustls::pki_types::ServerName::try_from("lws-rollout.lws-system.svc").unwrap();
        let verify_at = rustls::pki_types::UnixTime::since_unix_epoch(
            std::time::Duration::from_secs((now + days(341)).as_second() as u64),
        );
        verifier
            .verify_server_cert(&serving.cert_der, &[], &name, &[], verify_at)
            .expect("renewed certificate chains to the original CA");
    }
}
