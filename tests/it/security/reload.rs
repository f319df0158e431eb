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
