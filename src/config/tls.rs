//! TLS settings: towards clients (the pooler as TLS server) and towards PostgreSQL (the
//! pooler as TLS client). Files are PEM; they are re-read when they change on disk.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What the pooler does with a client's SSLRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ClientTlsMode {
    /// Always answer `N`.
    Disable,
    /// Answer `S` when a certificate and key are configured; plaintext is accepted too.
    #[default]
    Allow,
    /// As `allow`, and a plaintext startup is refused.
    Require,
}

/// libpq's `sslmode`, for server connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    #[default]
    Disable,
    /// TLS if the server offers it, unverified; plaintext otherwise.
    Prefer,
    /// TLS or fail, unverified.
    Require,
    /// TLS, certificate chain checked against `ca_file`.
    VerifyCa,
    /// As `verify-ca`, and the certificate must name `server.host`.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    pub client: ClientTlsConfig,
    pub server: ServerTlsConfig,
}

/// Client-facing TLS.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTlsConfig {
    pub mode: ClientTlsMode,
    /// Certificate chain presented to clients (e.g. `tls.crt` of a cert-manager Secret).
    pub cert_file: Option<PathBuf>,
    /// Its private key (`tls.key`).
    pub key_file: Option<PathBuf>,
}

/// TLS towards PostgreSQL.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ServerTlsConfig {
    pub sslmode: SslMode,
    /// CA certificates that sign the server's certificate (`verify-ca`, `verify-full`).
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key for mutual TLS (both or neither).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Refuses combinations that cannot work, saying why.
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.client;
        if c.cert_file.is_some() != c.key_file.is_some() {
            return Err("tls.client.cert_file and tls.client.key_file go together".into());
        }
        if c.mode == ClientTlsMode::Require && c.cert_file.is_none() {
            return Err("tls.client.mode require needs tls.client.cert_file and key_file".into());
        }
        let s = &self.server;
        if s.cert_file.is_some() != s.key_file.is_some() {
            return Err("tls.server.cert_file and tls.server.key_file go together".into());
        }
        if matches!(s.sslmode, SslMode::VerifyCa | SslMode::VerifyFull) && s.ca_file.is_none() {
            return Err(format!(
                "tls.server.sslmode {} needs tls.server.ca_file",
                s.sslmode.as_str()
            ));
        }
        Ok(())
    }

    /// Every file this section names, for change detection.
    pub fn files(&self) -> Vec<PathBuf> {
        let c = &self.client;
        let s = &self.server;
        [
            &c.cert_file,
            &c.key_file,
            &s.ca_file,
            &s.cert_file,
            &s.key_file,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }
}
