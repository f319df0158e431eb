//! auth_query under attack: made-up names cannot open server connections (the lookup pool
//! bounds them), an expired password is refused (CVE-2025-2291), and the database's owner
//! cannot stand in a `pg_shadow` of their own (the query is schema-qualified and the lookup's
//! search_path pinned). Checked against the harness PostgreSQL and `pg_stat_activity`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::refused;
use crate::core::code;
use crate::support::metrics::metric_or_zero;
use crate::support::{self, Pooler, DB};

/// The role the pooler looks users up as: a superuser (it reads `pg_shadow`), trusted.
const LOOKUP: &str = "authq_lookup";
/// The same, only for the test that counts its connections (others run at the same time).
const COUNTED: &str = "authq_counted";

fn setup_roles() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(create_roles);
}

fn create_roles() {
    let pg = support::shared();
    pg.psql_db(
        "postgres",
        &format!(
            "DO $$ BEGIN \
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{LOOKUP}') THEN \
                 CREATE ROLE {LOOKUP} LOGIN SUPERUSER; END IF; \
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{COUNTED}') THEN \
                 CREATE ROLE {COUNTED} LOGIN SUPERUSER; END IF; \
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'authq_expired') THEN \
                 CREATE ROLE authq_expired LOGIN; END IF; \
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'authq_owner') THEN \
                 CREATE ROLE authq_owner LOGIN; END IF; \
             END $$"
        ),
    );
    pg.psql_db(
        "postgres",
        "ALTER ROLE authq_expired PASSWORD 'exp_pass' VALID UNTIL '2000-01-01'",
    );
}

fn pooler(extra: &str) -> Pooler {
    pooler_as(LOOKUP, extra)
}

fn pooler_as(lookup: &str, extra: &str) -> Pooler {
    setup_roles();
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  auth_user: {lookup}\n{extra}\
         server:\n  password: scram_pass\n"
    );
    Pooler::start_with_config(support::shared(), &yaml, &[])
}

fn auth_results(pooler: &Pooler, result: &str) -> f64 {
    metric_or_zero(
        &pooler.admin_get("/metrics").1,
        "droidpool_client_auth_total",
        &[("method", "scram-sha-256"), ("result", result)],
    )
}

/// A SCRAM login with a made-up proof (no key derived: cheap for a test that makes
/// thousands): the SQLSTATE of the error that ends it.
async fn guess_scram(port: u16, user: &str, db: &str) -> String {
    use bytes::{BufMut, BytesMut};
    use droid_pool::protocol::backend::{self, AuthRequest};
    use droid_pool::protocol::frame::{self, begin, finish};
    use droid_pool::protocol::frontend;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut out = BytesMut::new();
    frontend::startup_message(&mut out, &[("user", user), ("database", db)]);
    s.write_all(&out).await.unwrap();
    let mut buf = BytesMut::new();
    loop {
        let f = loop {
            if let Some(f) = frame::cut(&mut buf, 1 << 20).expect("frame") {
                break f;
            }
            if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return "closed".into();
            }
        };
        if f.tag == backend::ERROR_RESPONSE_TAG {
            return backend::parse_error(f.body()).expect("error").code;
        }
        let mut m = BytesMut::new();
        let at = begin(&mut m, frontend::PASSWORD_TAG);
        match backend::parse_auth(f.body()).expect("auth request") {
            AuthRequest::Sasl { .. } => {
                let first = b"n,,n=,r=abcdefghijklmnopqrstuvwx";
                m.put_slice(b"SCRAM-SHA-256\0");
                m.put_i32(first.len() as i32);
                m.put_slice(first);
            }
            AuthRequest::SaslContinue { data } => {
                let text = String::from_utf8_lossy(data);
                let nonce = text
                    .split(',')
                    .find_map(|f| f.strip_prefix("r="))
                    .unwrap_or("");
                let proof =
                    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 32]);
                m.put_slice(format!("c=biws,r={nonce},p={proof}").as_bytes());
            }
            other => panic!("unexpected {other:?}"),
        }
        finish(&mut m, at);
        s.write_all(&m).await.unwrap();
    }
}

/// 2,000 logins of made-up users to made-up databases, 200 at a time: the lookups never
/// hold more server connections than the lookup pool's size (2), sampled from
/// `pg_stat_activity` throughout; every one gets 28P01; a real user still logs in.
#[tokio::test]
async fn made_up_logins_open_at_most_the_lookup_pool() {
    let pooler = pooler_as(COUNTED, "");
    let direct = support::shared().connect("postgres", "postgres").await;
    let peak = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n: i64 = direct
                    .query_one(
                        "select count(*) from pg_stat_activity where usename = $1",
                        &[&COUNTED],
                    )
                    .await
                    .expect("count")
                    .get(0);
                peak.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let port = pooler.port();
    for wave in 0..10 {
        let mut tries = Vec::new();
        for i in 0..200 {
            let (user, db) = (format!("ghost_{wave}_{i}"), format!("db_{i}"));
            tries.push(tokio::spawn(
                async move { guess_scram(port, &user, &db).await },
            ));
        }
        for t in tries {
            assert_eq!(t.await.expect("task"), "28P01");
        }
    }
    stop.store(true, Ordering::Relaxed);
    sampler.await.expect("sampler");
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= 2,
        "{peak} lookup connections at once (the pool has 2)"
    );
    assert!(peak >= 1, "the sampler saw no lookup at all");
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    client
        .query_one("select 1", &[])
        .await
        .expect("a real user");
}

/// A password past its VALID UNTIL is not returned by the default auth_query, so the pooler
/// refuses the login itself (as PostgreSQL would), before any server login.
#[tokio::test]
async fn expired_password_is_refused() {
    let pooler = pooler("");
    let err = refused(
        &pooler.conn_string_pw("authq_expired", "exp_pass", DB),
        "an expired password must not log in",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    assert_eq!(
        auth_results(&pooler, "failed"),
        1.0,
        "refused by the pooler"
    );
    assert_eq!(auth_results(&pooler, "ok"), 0.0);
}

/// The auth database's owner puts a schema of their own first on its search_path, holding
/// a `pg_shadow` that gives `scram_user` a password they chose. The lookup ignores it.
#[tokio::test]
async fn database_owner_cannot_shadow_pg_shadow() {
    setup_roles();
    let pg = support::shared();
    pg.psql_db("postgres", "DROP DATABASE IF EXISTS authq_evil");
    pg.psql_db("postgres", "CREATE DATABASE authq_evil OWNER authq_owner");
    let verifier = postgres_protocol::password::scram_sha_256(b"attacker_pw");
    let owner = format!(
        "host=127.0.0.1 port={} user=authq_owner dbname=authq_evil",
        pg.port
    );
    let c = support::connect(&owner).await;
    c.batch_execute(&format!(
        "CREATE SCHEMA evil; \
         CREATE VIEW evil.pg_shadow AS SELECT 'scram_user'::name AS usename, \
           '{verifier}'::text AS passwd, NULL::timestamptz AS valuntil; \
         ALTER DATABASE authq_evil SET search_path = evil, pg_catalog;"
    ))
    .await
    .expect("the owner's own schema");
    drop(c);
    let pooler = pooler("  auth_database: authq_evil\n");
    let err = refused(
        &pooler.conn_string_pw("scram_user", "attacker_pw", DB),
        "the owner's pg_shadow must not be read",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    // The real password still works (from the real pg_shadow).
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    client.query_one("select 1", &[]).await.expect("select 1");
}

/// No latency signal from the cache: found and missing names are kept for the same time. A
/// prober who looks up a real name and a made-up one, waits past what the missing answer's
/// old TTL was (5 s), and looks both up again finds both answered from the cache (neither
/// triggers a lookup), so the second probe's timing tells them apart no more than the first.
#[tokio::test]
async fn found_and_missing_names_are_cached_alike() {
    let pooler = pooler("");
    let lookups = |result: &str| {
        metric_or_zero(
            &pooler.admin_get("/metrics").1,
            "droidpool_auth_query_lookups_total",
            &[("result", result)],
        )
    };
    assert_eq!(guess_scram(pooler.port(), "scram_user", DB).await, "28P01");
    assert_eq!(
        guess_scram(pooler.port(), "no_such_role_x", DB).await,
        "28P01"
    );
    assert_eq!((lookups("found"), lookups("missing")), (1.0, 1.0));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(guess_scram(pooler.port(), "scram_user", DB).await, "28P01");
    assert_eq!(
        guess_scram(pooler.port(), "no_such_role_x", DB).await,
        "28P01"
    );
    assert_eq!(lookups("cached"), 2.0, "both answered from the cache");
    assert_eq!(
        (lookups("found"), lookups("missing")),
        (1.0, 1.0),
        "no new lookup"
    );
}
