//! TLS from the pooler to PostgreSQL: a dedicated server with `ssl = on` and a certificate
//! from the harness CA; verify-full succeeds and the session is encrypted, a foreign CA is
//! refused, require works unverified, and a client certificate logs in where pg_hba says
//! `cert` (mTLS).

use crate::support::pg::PgServer;
use crate::support::tls::{enable_server_tls, TestCa};
use crate::support::{Pooler, DB};

fn pooler(pg: &PgServer, server_tls: &str) -> Pooler {
    Pooler::start_with_config(pg, &format!("tls:\n  server:\n{server_tls}"), &[])
}

async fn ssl_in_use(client: &tokio_postgres::Client) -> bool {
    let row = client
        .query_one(
            "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("pg_stat_ssl");
    row.get(0)
}

#[tokio::test]
async fn server_tls_modes() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let pg = PgServer::start_new();
    enable_server_tls(&pg, &ca, "hostssl all cert_user 127.0.0.1/32 cert\n");
    // After the restart: an immediate stop may lose asynchronously committed work.
    pg.psql("create role cert_user login");
    let ca_file = ca.ca_file.display().to_string();

    let full = pooler(
        &pg,
        &format!("    sslmode: verify-full\n    ca_file: {ca_file}\n"),
    );
    let client = full.connect("droid", DB).await;
    assert!(ssl_in_use(&client).await, "verify-full must encrypt");
    // Large both ways over server TLS: many records written and flushed while reading.
    let big = "z".repeat(2_000_000);
    let row = client
        .query_one("select length($1::text), repeat('y', 3000000)", &[&big])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 2_000_000);
    assert_eq!(row.get::<_, String>(1).len(), 3_000_000);

    let plain = pooler(&pg, "    sslmode: disable\n");
    assert!(!ssl_in_use(&plain.connect("droid", DB).await).await);

    let unverified = pooler(&pg, "    sslmode: require\n");
    assert!(ssl_in_use(&unverified.connect("droid", DB).await).await);

    // A CA that did not sign the server's certificate: the login fails, clearly.
    let other = tempfile::tempdir().unwrap();
    let stranger = TestCa::new(other.path());
    let wrong = pooler(
        &pg,
        &format!(
            "    sslmode: verify-full\n    ca_file: {}\n",
            stranger.ca_file.display()
        ),
    );
    let err = wrong.try_connect("droid", DB).await.err();
    let err = err.expect("an unknown CA must be refused");
    let text = format!("{err:?}");
    assert!(
        text.contains("TLS") || text.contains("certificate"),
        "{text}"
    );

    // mTLS: cert_user may only log in with a certificate naming it.
    let (cert, key) = (dir.path().join("client.crt"), dir.path().join("client.key"));
    ca.issue("cert_user", &cert, &key);
    let mtls = pooler(
        &pg,
        &format!(
            "    sslmode: verify-full\n    ca_file: {ca_file}\n    cert_file: {}\n    key_file: {}\n",
            cert.display(),
            key.display()
        ),
    );
    let client = mtls.connect("cert_user", DB).await;
    let who: String = client
        .query_one("select current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "cert_user");
    assert!(
        full.try_connect("cert_user", DB).await.is_err(),
        "no certificate, no login"
    );
}
