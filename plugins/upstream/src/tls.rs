//! TLS to upstreams: rustls with Mozilla's root certificates
//! (`webpki-roots`), plus any roots a gateway adds for a private CA. The
//! connector offers HTTP/1.1 by ALPN, the only protocol the gateway's
//! client speaks.

use std::sync::Arc;

use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// A client configuration trusting the public roots and `extra_roots`
/// (DER-encoded certificates).
pub fn client_config(extra_roots: &[Vec<u8>]) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for der in extra_roots {
        roots
            .add(CertificateDer::from(der.clone()))
            .map_err(|e| format!("a root certificate the gateway was given is not one: {e}"))?;
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("no TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}
