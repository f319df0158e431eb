//! TLS material: PEM loading, the rustls configurations for both directions (ring provider),
//! the verifiers behind libpq's sslmodes, and a cell that swaps configurations when the files
//! change (new handshakes use the new ones; established sessions are untouched).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use thiserror::Error;

use crate::config::{SslMode, TlsConfig};

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Pem {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("TLS configuration rejected: {0}")]
    Rustls(#[from] rustls::Error),
    /// The server certificates' verifier cannot be built (no root certificate, say).
    #[error("TLS configuration rejected: unexpected error: {0}")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_error(path: &Path, source: rustls::pki_types::pem::Error) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        source,
    }
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The private key; the error never includes the file's content.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error(path, e))
}

/// The configuration for client connections, if a certificate is configured.
pub fn acceptor_config(cfg: &TlsConfig) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
    let c = &cfg.client;
    let (Some(cert), Some(key)) = (&c.cert_file, &c.key_file) else {
        return Ok(None);
    };
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(load_certs(cert)?, load_key(key)?)?;
    Ok(Some(Arc::new(config)))
}

/// The configuration for server connections, per `tls.server.sslmode` (none for disable).
pub fn connector_config(cfg: &TlsConfig) -> Result<Option<Arc<rustls::ClientConfig>>, TlsError> {
    let s = &cfg.server;
    let verifier: Arc<dyn ServerCertVerifier> = match s.sslmode {
        SslMode::Disable => return Ok(None),
        SslMode::Prefer | SslMode::Require => Arc::new(NoVerify(provider())),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let mut roots = RootCertStore::empty();
            if let Some(ca) = &s.ca_file {
                for cert in load_certs(ca)? {
                    roots.add(cert)?;
                }
            }
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build()?;
            if s.sslmode == SslMode::VerifyCa {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&s.cert_file, &s.key_file) {
        (Some(cert), Some(key)) => {
            builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Some(Arc::new(config)))
}

/// `sslmode=require`/`prefer`: encryption without authentication of the server, as libpq
/// does. Handshake signatures are still checked, so the session keys are the peer's.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the chain must lead to the CA; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The TLS configurations in force; replaced whole when the files or the config change.
#[derive(Debug, Default)]
pub struct TlsCell {
    inner: RwLock<TlsState>,
}

#[derive(Debug, Default, Clone)]
pub struct TlsState {
    /// For client connections; `None`: SSLRequest is answered `N`.
    pub acceptor: Option<Arc<rustls::ServerConfig>>,
    /// For server connections, with the sslmode it was built for.
    pub sslmode: SslMode,
    pub connector: Option<Arc<rustls::ClientConfig>>,
}

impl TlsCell {
    /// Builds both configurations from `cfg`; on error the old ones stay.
    pub fn load(&self, cfg: &TlsConfig) -> Result<(), TlsError> {
        let state = TlsState {
            acceptor: acceptor_config(cfg)?,
            sslmode: cfg.server.sslmode,
            connector: connector_config(cfg)?,
        };
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = state;
        Ok(())
    }

    pub fn current(&self) -> TlsState {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn acceptor(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .acceptor
            .clone()
    }
}
