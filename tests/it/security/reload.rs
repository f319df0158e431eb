//! A reload cannot weaken security: the new file is checked against the address the process
//! really listens on (which changes only at restart), not the one the file names.

use std::time::{Duration, Instant};

use super::{refused, userlist_line, write};
use crate::support::metrics::metric_or_zero;
use crate::support::{self, Pooler, DB};

/// A pooler on 0.0.0.0 with SCRAM; its file is rewritten to `listen.addr: 127.0.0.1` and
/// `auth.method: trust` and reloaded with SIGHUP. Validated against its own address the file
/// would pass, but the listener is still 0.0.0.0: the reload is refused, and a client without
/// a password still gets 28P01.
#[tokio::test]
async fn reload_cannot_turn_on_trust_for_a_network_listener() {
    let dir = tempfile::tempdir().unwrap();
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let users = write(
        dir.path(),
        "userlist.txt",
        &userlist_line("scram_user", &verifier),
    );
    let yaml = format!(
        "listen:\n  addr: 0.0.0.0\nauth:\n  method: scram-sha-256\n  users_file: {users}\n\
         server:\n  password: scram_pass\n"
    );
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let weakened = format!(
        "listen:\n  addr: 127.0.0.1\nauth:\n  method: trust\n  users_file: {users}\n\
         server:\n  password: scram_pass\n"
    );
    std::fs::write(pooler.config_path().expect("config file"), weakened).unwrap();
    pooler.signal("HUP");
    let rejected = || {
        metric_or_zero(
            &pooler.admin_get("/metrics").1,
            "droidpool_config_reloads_total",
            &[("result", "rejected")],
        )
    };
    let until = Instant::now() + Duration::from_secs(10);
    while rejected() < 1.0 {
        assert!(
            Instant::now() < until,
            "the weakened file was not refused:\n{}",
            pooler.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        pooler.stderr().contains("running listen address 0.0.0.0"),
        "the log says why:\n{}",
        pooler.stderr()
    );
    let err = refused(
        &pooler.conn_string("scram_user", DB),
        "no password must still be refused",
    )
    .await;
    // Asked for a password (SCRAM), which this client does not have.
    assert!(format!("{err:?}").contains("password missing"), "{err:?}");
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    client.query_one("select 1", &[]).await.expect("select 1");
}

/// A rotated server password reaches pools that already exist: the role's password is
/// changed on PostgreSQL and in `server.password_file`, the pooler gets SIGHUP, the pool's one
/// server is terminated, and the next query's new server login uses the new password (the
/// old one would get 28P01). A second rotation without SIGHUP is picked up from the file
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_server_password_reaches_existing_pools() {
    let pg = support::shared();
    let role = "rotate_user";
    pg.psql(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'old_pw' IN ROLE {}",
        crate::support::pg::SCRAM_GROUP
    ));
    pg.psql(&format!("GRANT ALL ON DATABASE {DB} TO {role}"));
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "password", "old_pw\n");
    let yaml = format!("server:\n  user: {role}\n  password_file: {file}\npool:\n  size: 1\n");
    let pooler = tokio::task::block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let client = pooler.connect("droid", DB).await;
    let pid = |rows: Vec<tokio_postgres::SimpleQueryMessage>| -> String {
        rows.into_iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .expect("a row")
    };
    let first = pid(client
        .simple_query("select pg_backend_pid()")
        .await
        .unwrap());
    for (round, password) in ["new_pw", "newer_pw"].into_iter().enumerate() {
        pg.psql(&format!("ALTER ROLE {role} PASSWORD '{password}'"));
        std::fs::write(&file, format!("{password}\n")).unwrap();
        if round == 0 {
            pooler.signal("HUP");
        }
        // The reload is applied within the file watch's second.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        pg.psql(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
        ));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut answer = client.simple_query("select pg_backend_pid()").await;
        if answer.is_err() {
            // The terminated server's error reached this query: the next gets a new login.
            answer = client.simple_query("select pg_backend_pid()").await;
        }
        let now = pid(answer.unwrap_or_else(|e| {
            panic!(
                "round {round}: the new login failed: {e}\n{}",
                pooler.stderr()
            )
        }));
        assert_ne!(now, first, "round {round}: a new server login");
    }
    drop(client);
    drop(pooler);
    pg.psql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
    ));
    pg.psql(&format!(
        "REVOKE ALL ON DATABASE {DB} FROM {role}; DROP ROLE {role}"
    ));
}
