//! Client authentication: SCRAM and md5 against the users file and the passwords directory,
//! wrong passwords (28P01 and no server connection), unknown users, reload of the files, and
//! trust refused on a network address.

use std::time::Duration;

use super::{refused, refused_at_startup, status, userlist_line, write};
use crate::core::code;
use crate::support::metrics::metric_or_zero;
use crate::support::{self, Pooler, DB};

/// A pooler requiring SCRAM, knowing `scram_user` by a SCRAM verifier from the users file and
/// logging in to PostgreSQL with the same password.
fn scram_pooler(dir: &std::path::Path) -> Pooler {
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let users = write(dir, "userlist.txt", &userlist_line("scram_user", &verifier));
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\nserver:\n  password: scram_pass\n"
    );
    Pooler::start_with_config(support::shared(), &yaml, &[])
}

#[tokio::test]
async fn scram_login_and_wrong_password() {
    let dir = tempfile::tempdir().unwrap();
    let pooler = scram_pooler(dir.path());
    // Wrong password first, while no pool exists: 28P01 and nothing opened.
    let err = refused(
        &pooler.conn_string_pw("scram_user", "nope", DB),
        "a wrong password must fail",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    let st = status(&pooler);
    assert_eq!(
        st["pools"],
        serde_json::json!([]),
        "no pool may exist: {st}"
    );
    // An unknown user: the same answer.
    let err = refused(
        &pooler.conn_string_pw("nobody", "x", DB),
        "unknown user must fail",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    assert_eq!(status(&pooler)["pools"], serde_json::json!([]));
    // The right password works, through to PostgreSQL.
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    let row = client
        .query_one("select current_user::text", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "scram_user");
    let auth = |result| {
        metric(
            &pooler,
            "droidpool_client_auth_total",
            &[("method", "scram-sha-256"), ("result", result)],
        )
    };
    assert_eq!(auth("failed"), 2.0, "failures counted");
    assert_eq!(auth("ok"), 1.0);
}

#[tokio::test]
async fn md5_login_from_users_file() {
    let dir = tempfile::tempdir().unwrap();
    let hash = droid_pool::auth::md5_stored("md5_user", "md5_pass");
    let users = write(
        dir.path(),
        "userlist.txt",
        &userlist_line("md5_user", &hash),
    );
    let yaml =
        format!("auth:\n  method: md5\n  users_file: {users}\nserver:\n  password: md5_pass\n");
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let client = support::connect(&pooler.conn_string_pw("md5_user", "md5_pass", DB)).await;
    let row = client
        .query_one("select current_user::text", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "md5_user");
    let err = refused(
        &pooler.conn_string_pw("md5_user", "md5_nope", DB),
        "wrong md5 password must fail",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
}

/// A passwords directory laid out as Kubernetes mounts a Secret; a changed password applies
/// without a restart while a connected client stays connected.
#[tokio::test]
async fn passwords_dir_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    let gen1 = dir.path().join("..gen1");
    std::fs::create_dir_all(&gen1).unwrap();
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(gen1.join("clear_user"), "clear_pass\n").unwrap();
    std::os::unix::fs::symlink(&gen1, secret.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/clear_user", secret.join("clear_user")).unwrap();
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  passwords_dir: {}\nserver:\n  password: clear_pass\n  \
         allow_cleartext_password: true\n",
        secret.display()
    );
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let held = support::connect(&pooler.conn_string_pw("clear_user", "clear_pass", DB)).await;
    // Rotate as the kubelet does: a new generation, then swap the `..data` link.
    let gen2 = dir.path().join("..gen2");
    std::fs::create_dir_all(&gen2).unwrap();
    std::fs::write(gen2.join("clear_user"), "rotated_pass\n").unwrap();
    let tmp = secret.join("..data_tmp");
    std::os::unix::fs::symlink(&gen2, &tmp).unwrap();
    std::fs::rename(&tmp, secret.join("..data")).unwrap();
    let conn_new = pooler.conn_string_pw("clear_user", "rotated_pass", DB);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if support::try_connect(&conn_new).await.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "new password never accepted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = refused(
        &pooler.conn_string_pw("clear_user", "clear_pass", DB),
        "the old password must stop working",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    let n: i32 = held.query_one("select 7", &[]).await.unwrap().get(0);
    assert_eq!(n, 7, "the connected client stays");
}

/// Explicit trust on a network address is refused at startup, saying why and what allows it.
#[tokio::test]
async fn trust_on_network_refused_at_startup() {
    let stderr = refused_at_startup("auth:\n  method: trust\n", &["--listen-addr", "0.0.0.0"]);
    assert!(
        stderr.contains("trust") && stderr.contains("allow_trust_on_network"),
        "{stderr}"
    );
}

/// Unset, the method on a network address is scram-sha-256: with no credential source the
/// pooler refuses to start and names the settings that would give one.
#[tokio::test]
async fn network_default_is_scram_and_needs_credentials() {
    let stderr = refused_at_startup("", &["--listen-addr", "0.0.0.0"]);
    assert!(
        stderr.contains("scram-sha-256") && stderr.contains("auth.users_file"),
        "{stderr}"
    );
}

/// With scram-sha-256 (the default there) a network address is fine; the contract's
/// loopback command line still runs with trust (the other suites use it throughout).
#[tokio::test]
async fn scram_allowed_on_network() {
    let dir = tempfile::tempdir().unwrap();
    let users = write(
        dir.path(),
        "u.txt",
        &userlist_line("scram_user", "scram_pass"),
    );
    // No method set: scram-sha-256 is the default off loopback.
    let yaml = format!("auth:\n  users_file: {users}\nserver:\n  password: scram_pass\n");
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &["--listen-addr", "0.0.0.0"]);
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    let n: i32 = client.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
}

/// The sum of `name`'s samples with `labels` (0 if none), read straight from /metrics.
fn metric(pooler: &Pooler, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_or_zero(&pooler.admin_get("/metrics").1, name, labels)
}

/// auth_query: users missing from the files are looked up as the auth user with the name
/// bound as `$1`; a name built to break out of a quoted string is just an unknown user;
/// answers are cached.
#[tokio::test]
async fn auth_query_lookup() {
    let yaml = "auth:\n  method: scram-sha-256\n  auth_user: postgres\n  auth_cache_ttl: 60s\n\
                server:\n  password: scram_pass\n";
    let pooler = Pooler::start_with_config(support::shared(), yaml, &[]);
    let good = pooler.conn_string_pw("scram_user", "scram_pass", DB);
    let client = support::connect(&good).await;
    let who: String = client
        .query_one("select current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "scram_user");
    let err = refused(
        &pooler.conn_string_pw("scram_user", "bad", DB),
        "wrong password",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    let err = refused(&pooler.conn_string_pw("ghost", "x", DB), "unknown user").await;
    assert_eq!(code(&err), "28P01", "{err}");
    // tokio-postgres quotes the user in its connection string with single quotes.
    let evil = format!(
        "host=127.0.0.1 port={} user='x\\' OR usename = \\'scram_user' password=scram_pass dbname={DB}",
        pooler.port()
    );
    let err = refused(&evil, "an injected user name").await;
    assert_eq!(code(&err), "28P01", "{err}");
    let lookups = |result| {
        metric(
            &pooler,
            "droidpool_auth_query_lookups_total",
            &[("result", result)],
        )
    };
    assert_eq!(lookups("found"), 1.0, "scram_user once");
    assert_eq!(lookups("cached"), 1.0, "then from the cache");
    assert_eq!(lookups("missing"), 2.0);
}

/// `auth.user_methods` overrides the method per user: `bob` is asked for md5 and `carol` is
/// trusted while everyone else must pass SCRAM. All log in to PostgreSQL as `droid`.
#[tokio::test]
async fn per_user_methods_override_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let verifier = postgres_protocol::password::scram_sha_256(b"alice_pw");
    let lines = [
        userlist_line("alice", &verifier),
        userlist_line("bob", &droid_pool::auth::md5_stored("bob", "bob_pw")),
        userlist_line("carol", "carol_pw"),
    ]
    .concat();
    let users = write(dir.path(), "userlist.txt", &lines);
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\n  user_methods:\n    bob: md5\n    \
         carol: trust\nserver:\n  user: droid\n"
    );
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let one = |c: tokio_postgres::Client| async move {
        let n: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
        assert_eq!(n, 1);
    };
    one(support::connect(&pooler.conn_string_pw("alice", "alice_pw", DB)).await).await;
    one(support::connect(&pooler.conn_string_pw("bob", "bob_pw", DB)).await).await;
    // Trusted: any password (or none) is accepted for carol only.
    one(support::connect(&pooler.conn_string_pw("carol", "not-hers", DB)).await).await;
    let err = refused(
        &pooler.conn_string_pw("alice", "not-hers", DB),
        "alice still needs her password",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    let ok = |m| {
        metric(
            &pooler,
            "droidpool_client_auth_total",
            &[("method", m), ("result", "ok")],
        )
    };
    assert_eq!(
        (ok("scram-sha-256"), ok("md5")),
        (1.0, 1.0),
        "bob went through md5, alice through SCRAM"
    );
}
