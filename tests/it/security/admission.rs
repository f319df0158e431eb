//! Admission before login: connections that never finish their startup cannot take the slots
//! real clients need. `client.max_pending_logins` caps the logins in progress (the oldest is
//! ended with 53300 to make room), `client.max_pending_logins_per_ip` those from one address
//! (the oldest of that address is ended). Real sockets from several loopback addresses.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use super::{userlist_line, write};
use crate::support::metrics::metric_or_zero;
use crate::support::{self, Pooler, DB};

/// A connection from `from` to the pooler that sends nothing.
async fn silent(from: [u8; 4], port: u16) -> TcpStream {
    let sock = TcpSocket::new_v4().expect("socket");
    sock.bind(SocketAddr::new(IpAddr::from(from), 0))
        .expect("bind a loopback source address");
    sock.connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect")
}

/// A pooler requiring SCRAM for `scram_user` (password `scram_pass`), with `client` settings.
fn scram_pooler(dir: &std::path::Path, client: &str) -> Pooler {
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let users = write(dir, "userlist.txt", &userlist_line("scram_user", &verifier));
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\nserver:\n  password: scram_pass\n\
         client:\n  login_timeout: 60s\n{client}"
    );
    Pooler::start_with_config(support::shared(), &yaml, &[])
}

fn shed(pooler: &Pooler, reason: &str) -> f64 {
    metric_or_zero(
        &pooler.admin_get("/metrics").1,
        "droidpool_clients_shed_total",
        &[("reason", reason)],
    )
}

/// 1,000 sockets that never send a startup packet, from ten addresses, against a cap of 200
/// pending logins (and `max_connections: 500`): a real SCRAM client still logs in within 1 s,
/// and the pooler counts the logins it ended to make room.
#[tokio::test]
async fn silent_sockets_cannot_lock_out_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let pooler = scram_pooler(
        dir.path(),
        "  max_connections: 500\n  max_pending_logins: 200\n",
    );
    let mut held = Vec::new();
    for i in 0..1000u32 {
        held.push(silent([127, 0, 0, 2 + (i % 10) as u8], pooler.port()).await);
    }
    // Every one of them accepted (the oldest ended to make room).
    let until = Instant::now() + Duration::from_secs(10);
    while shed(&pooler, "pending_logins") < 800.0 {
        assert!(
            Instant::now() < until,
            "the pooler did not take the 1,000 connections: {} ended",
            shed(&pooler, "pending_logins")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t0 = Instant::now();
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    let row = client.query_one("select 1", &[]).await.expect("select 1");
    assert_eq!(row.get::<_, i32>(0), 1);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "the real client took {:?}",
        t0.elapsed()
    );
    // The ended ones were told why.
    let mut first = held.remove(0);
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), first.read_to_end(&mut buf)).await;
    assert_eq!(
        buf.first(),
        Some(&b'E'),
        "an ErrorResponse before the close"
    );
    assert!(
        String::from_utf8_lossy(&buf).contains("53300"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
}

/// Beyond `max_pending_logins_per_ip` from one address, the oldest pending login from there
/// is ended with `FATAL 53300` and the newcomer admitted; another address is not touched.
#[tokio::test]
async fn pending_logins_per_address_end_that_address_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let pooler = scram_pooler(dir.path(), "  max_pending_logins_per_ip: 10\n");
    let mut elsewhere = silent([127, 0, 0, 8], pooler.port()).await;
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(silent([127, 0, 0, 9], pooler.port()).await);
    }
    let mut extra = silent([127, 0, 0, 9], pooler.port()).await;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), held[0].read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the oldest from 127.0.0.9 was ended at once");
    let text = String::from_utf8_lossy(&buf);
    assert!(
        buf.first() == Some(&b'E') && text.contains("53300") && text.contains("FATAL"),
        "{text:?}"
    );
    assert_eq!(shed(&pooler, "pending_logins_per_ip"), 1.0);
    // The newcomer and the other address wait for their startup packets.
    let mut one = [0u8; 1];
    for s in [&mut extra, &mut elsewhere] {
        let r = tokio::time::timeout(Duration::from_millis(300), s.read(&mut one)).await;
        assert!(r.is_err(), "admitted: it waits for its startup packet");
    }
    // From 127.0.0.1: unaffected.
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    client.query_one("select 1", &[]).await.expect("select 1");
}

/// Every client of a sidecar comes from 127.0.0.1: 1,500 silent sockets from there, with the
/// default caps, and then a real client logs in within a second (the flood only evicts
/// itself).
#[tokio::test]
async fn a_flood_from_the_clients_own_address_evicts_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let pooler = scram_pooler(dir.path(), "");
    let mut held = Vec::new();
    for _ in 0..1500 {
        held.push(silent([127, 0, 0, 1], pooler.port()).await);
    }
    let until = Instant::now() + Duration::from_secs(10);
    while shed(&pooler, "pending_logins_per_ip") < 1500.0 - 512.0 {
        assert!(
            Instant::now() < until,
            "the pooler did not take the 1,500 connections"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t0 = Instant::now();
    let client = support::connect(&pooler.conn_string_pw("scram_user", "scram_pass", DB)).await;
    client.query_one("select 1", &[]).await.expect("select 1");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "the real client took {:?}",
        t0.elapsed()
    );
    drop(held);
}
