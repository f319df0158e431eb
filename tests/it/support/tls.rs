//! A test certificate authority (rcgen) and a raw TLS client for the pooler, so tests can see
//! which certificate was served and keep one TLS client connected across a rotation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::BytesMut;
use droid_pool::protocol::{backend, frame, frontend, Frame};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A CA whose certificate is written to `ca.crt` in the test's directory.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    pub ca_file: PathBuf,
}

impl TestCa {
    pub fn new(dir: &Path) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "droid-pool test CA");
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("self-signed CA");
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, cert.pem()).expect("write ca.crt");
        TestCa { cert, key, ca_file }
    }

    /// Issues a certificate for `localhost` and 127.0.0.1 with common name `cn`, writing
    /// `cert` and `key` (PEM). Overwrites in place, as cert-manager does.
    pub fn issue(&self, cn: &str, cert: &Path, key: &Path) {
        let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let leaf_key = KeyPair::generate().expect("leaf key");
        let leaf = params
            .signed_by(&leaf_key, &self.cert, &self.key)
            .expect("sign leaf");
        std::fs::write(key, leaf_key.serialize_pem()).expect("write key");
        std::fs::write(cert, leaf.pem()).expect("write cert");
    }

    /// A rustls client configuration trusting this CA only.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).expect("add CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(cfg)
    }
}

/// SSLRequest, `S`, and a handshake verifying `localhost` against the CA.
pub async fn handshake(port: u16, ca: &TestCa) -> TlsStream<TcpStream> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .expect("SSLRequest");
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.expect("SSL answer");
    assert_eq!(answer[0], b'S', "the pooler must offer TLS");
    let name = ServerName::try_from("localhost").expect("name");
    tokio_rustls::TlsConnector::from(ca.client_config())
        .connect(name, tcp)
        .await
        .expect("TLS handshake with the pooler")
}

/// A logged-in TLS client speaking raw protocol.
pub struct TlsRaw {
    stream: TlsStream<TcpStream>,
    buf: BytesMut,
}

impl TlsRaw {
    /// SSLRequest, handshake verifying `localhost` against the CA, then a trust login.
    pub async fn connect(port: u16, ca: &TestCa, user: &str, db: &str) -> TlsRaw {
        let stream = handshake(port, ca).await;
        let mut raw = TlsRaw {
            stream,
            buf: BytesMut::new(),
        };
        let mut b = BytesMut::new();
        frontend::startup_message(&mut b, &[("user", user), ("database", db)]);
        raw.stream.write_all(&b).await.expect("startup");
        raw.until_ready().await;
        raw
    }

    /// The common name of the certificate the pooler presented.
    pub fn peer_cn(&self) -> String {
        let certs = self
            .stream
            .get_ref()
            .1
            .peer_certificates()
            .expect("peer certs");
        common_name(&certs[0])
    }

    /// Runs `select <n>` and returns the value read back.
    pub async fn select(&mut self, n: i32) -> String {
        let mut b = BytesMut::new();
        frontend::query(&mut b, &format!("select {n}"));
        self.stream.write_all(&b).await.expect("query");
        let frames = self.until_ready().await;
        let row = frames
            .iter()
            .find(|f| f.tag == backend::DATA_ROW_TAG)
            .expect("a row");
        crate::support::raw::first_col(row).expect("a value")
    }

    async fn until_ready(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        loop {
            if let Some(f) = frame::cut(&mut self.buf, 1 << 20).expect("frame") {
                let done = f.tag == backend::READY_FOR_QUERY_TAG;
                assert_ne!(f.tag, backend::ERROR_RESPONSE_TAG, "error from the pooler");
                out.push(f);
                if done {
                    return out;
                }
                continue;
            }
            let n = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                self.stream.read_buf(&mut self.buf),
            )
            .await
            .expect("reply in time")
            .expect("read");
            assert!(n > 0, "the pooler closed the TLS connection");
        }
    }
}

/// The CN of a DER certificate, found by its OID (2.5.4.3) followed by a string.
fn common_name(cert: &CertificateDer<'_>) -> String {
    let der = cert.as_ref();
    let oid = [0x06, 0x03, 0x55, 0x04, 0x03];
    // The last match is the subject's (the issuer comes first).
    let at = der
        .windows(oid.len())
        .rposition(|w| w == oid)
        .expect("a common name");
    let len = der[at + oid.len() + 1] as usize;
    let start = at + oid.len() + 2;
    String::from_utf8_lossy(&der[start..start + len]).into_owned()
}

/// Turns TLS on in a (dedicated) server: `server.crt`/`server.key` for localhost and
/// 127.0.0.1 signed by `ca`, the CA as `ssl_ca_file` (client certificates are checked where
/// pg_hba says `cert`), and `hba_first` lines ahead of the harness's pg_hba rules; restarts.
pub fn enable_server_tls(pg: &crate::support::pg::PgServer, ca: &TestCa, hba_first: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let data = pg.data_dir();
    ca.issue(
        "postgres",
        &data.join("server.crt"),
        &data.join("server.key"),
    );
    std::fs::copy(&ca.ca_file, data.join("root.crt")).expect("copy CA");
    std::fs::set_permissions(
        data.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod key");
    let is_root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if is_root {
        let status = std::process::Command::new("chown")
            .arg("postgres:")
            .args(["server.crt", "server.key", "root.crt"].map(|f| data.join(f)))
            .status()
            .expect("chown");
        assert!(status.success(), "chown TLS files to postgres");
    }
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .expect("open postgresql.conf");
    conf.write_all(b"ssl = on\nssl_ca_file = 'root.crt'\n")
        .expect("enable ssl");
    let hba = data.join("pg_hba.conf");
    let old = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    // Truncating keeps the owner.
    std::fs::write(&hba, format!("{hba_first}{old}")).expect("write pg_hba.conf");
    pg.restart();
}
