//! A private CA and a serving certificate for the webhook, made at start.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// What the server and the webhook configuration need.
pub struct ServingCert {
    /// PEM of the CA, for the configuration's caBundle.
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_der: CertificateDer<'static>,
    /// Its key.
    pub key_der: PrivateKeyDer<'static>,
}

/// Issues a CA and a serving certificate valid for `hosts` (IP addresses or DNS names).
pub fn generate(hosts: &[String]) -> Result<ServingCert, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "lws-rollout-webhook-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

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
    let cert = params.signed_by(&key, &issuer)?;
    Ok(ServingCert {
        ca_pem: ca_cert.pem(),
        cert_der: cert.der().clone(),
        key_der: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn issues_a_ca_and_a_leaf_for_ip_and_dns_names() {
        let cert =
            super::generate(&["127.0.0.1".into(), "lws-rollout.lws-system.svc".into()]).unwrap();
        assert!(cert.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!cert.cert_der.is_empty());
    }
}
