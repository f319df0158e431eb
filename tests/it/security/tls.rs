//! Client-side TLS: psql with sslmode=require and verify-full against the harness CA, a
//! plaintext startup refused under `require`, and a certificate rotated on disk while a TLS
//! client stays connected.

use std::process::Command;
use std::time::{Duration, Instant};

use super::refused;
use crate::support::tls::{TestCa, TlsRaw};
use crate::support::{self, pg, Pooler, DB};

/// A CA, a certificate `gen1` for localhost, and a pooler serving it with `mode`.
fn tls_pooler(dir: &std::path::Path, mode: &str) -> (TestCa, Pooler) {
    let ca = TestCa::new(dir);
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    ca.issue("gen1", &cert, &key);
    let yaml = format!(
        "tls:\n  client:\n    mode: {mode}\n    cert_file: {}\n    key_file: {}\n",
        cert.display(),
        key.display()
    );
    (ca, Pooler::start_with_config(support::shared(), &yaml, &[]))
}

/// Runs psql with `conninfo`, returning (success, stdout + stderr).
fn psql(conninfo: &str, sql: &str) -> (bool, String) {
    let out = Command::new(pg::bin("psql"))
        .args(["-X", "-At", "-d", conninfo, "-c", sql])
        .env_remove("PGSSLMODE")
        .output()
        .expect("run psql");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn psql_require_and_verify_full() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, pooler) = tls_pooler(dir.path(), "allow");
    let port = pooler.port();
    let base = format!("hostaddr=127.0.0.1 port={port} user=droid dbname={DB}");
    let (ok, out) = psql(
        &format!("{base} host=127.0.0.1 sslmode=require"),
        "\\conninfo",
    );
    assert!(ok && out.contains("SSL connection"), "{out}");
    let full = format!(
        "{base} host=localhost sslmode=verify-full sslrootcert={}",
        ca.ca_file.display()
    );
    let (ok, out) = psql(&full, "select 40 + 2");
    assert!(ok && out.trim() == "42", "{out}");
    // Large both ways: many TLS records, partial records, rustls buffers flushed.
    let big = "y".repeat(100_000);
    let sql = format!("select length('{big}'), repeat('x', 2000000)");
    let (ok, out) = psql(&full, &sql);
    assert!(
        ok && out.trim() == format!("100000|{}", "x".repeat(2_000_000)),
        "len {}",
        out.len()
    );
    // Another CA's client must refuse the certificate.
    let other = tempfile::tempdir().unwrap();
    let stranger = TestCa::new(other.path());
    let wrong = format!(
        "{base} host=localhost sslmode=verify-full sslrootcert={}",
        stranger.ca_file.display()
    );
    let (ok, out) = psql(&wrong, "select 1");
    assert!(!ok && out.contains("SSL"), "{out}");
    // `allow` still serves plaintext clients.
    let client = pooler.connect("droid", DB).await;
    assert_eq!(
        client
            .query_one("select 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        1
    );
}

#[tokio::test]
async fn require_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let (_ca, pooler) = tls_pooler(dir.path(), "require");
    let err = refused(&pooler.conn_string("droid", DB), "plaintext under require").await;
    assert_eq!(crate::core::code(&err), "28000", "{err}");
    let msg = err.as_db_error().map(|e| e.message().to_owned());
    assert!(msg.as_deref().unwrap_or("").contains("TLS"), "{msg:?}");
    let (ok, out) = psql(
        &format!(
            "host=127.0.0.1 port={} user=droid dbname={DB} sslmode=require",
            pooler.port()
        ),
        "select 1",
    );
    assert!(ok && out.trim() == "1", "{out}");
}

/// cert-manager rewrites the Secret's files in place: new handshakes get the new certificate,
/// the client connected before keeps working.
#[tokio::test]
async fn rotation_keeps_connected_clients() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, pooler) = tls_pooler(dir.path(), "require");
    let mut held = TlsRaw::connect(pooler.port(), &ca, "droid", DB).await;
    assert_eq!(held.peer_cn(), "gen1");
    assert_eq!(held.select(1).await, "1");
    ca.issue(
        "gen2",
        &dir.path().join("tls.crt"),
        &dir.path().join("tls.key"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = TlsRaw::connect(pooler.port(), &ca, "droid", DB).await;
        if fresh.peer_cn() == "gen2" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(held.select(2).await, "2", "the connected client stays");
    assert_eq!(held.peer_cn(), "gen1");
}

/// A certificate file that cannot be read stops the start with a message naming it.
#[tokio::test]
async fn missing_certificate_refused_at_startup() {
    let yaml = "tls:\n  client:\n    cert_file: /nonexistent/tls.crt\n    key_file: /nonexistent/tls.key\n";
    let stderr = super::refused_at_startup(yaml, &[]);
    assert!(stderr.contains("/nonexistent/tls.crt"), "{stderr}");
}

/// libpq over TLS with SCRAM: it sends the `y` channel-binding flag (it supports binding, we
/// do not offer `-PLUS`), which must be accepted; a wrong password still gets 28P01.
#[tokio::test]
async fn psql_scram_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    ca.issue("gen1", &cert, &key);
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let users = super::write(
        dir.path(),
        "u.txt",
        &super::userlist_line("scram_user", &verifier),
    );
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\nserver:\n  password: scram_pass\n\
         tls:\n  client:\n    mode: require\n    cert_file: {}\n    key_file: {}\n",
        cert.display(),
        key.display()
    );
    let p = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let conn = |pw: &str| {
        format!(
            "host=localhost hostaddr=127.0.0.1 port={} user=scram_user password={pw} dbname={DB} \
             sslmode=verify-full sslrootcert={}",
            p.port(),
            ca.ca_file.display()
        )
    };
    let (ok, out) = psql(&conn("scram_pass"), "select current_user");
    assert!(ok && out.trim() == "scram_user", "{out}");
    let (ok, out) = psql(&conn("nope"), "select 1");
    assert!(
        !ok && out.contains("password authentication failed"),
        "{out}"
    );
}
