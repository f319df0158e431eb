//! Cancel requests across pooler replicas: two poolers configured as peers (by reload, as the
//! operator's ConfigMap update reaches them); a CancelRequest for a client of pooler A sent
//! to pooler B cancels the client's query through A, within a second; a forged key or an
//! unknown peer number cancels nothing.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use droid_pool::protocol::{backend, frontend};
use tokio::io::AsyncWriteExt;

use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::raw::{query, sqlstate, Raw};
use crate::support::{self, Pooler, DB};

/// Sends a CancelRequest for `key` to the pooler on `port`.
async fn send_cancel(port: u16, key: (i32, i32)) {
    let mut b = BytesMut::new();
    frontend::cancel_request(&mut b, key.0, key.1);
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect for a cancel");
    s.write_all(&b).await.expect("send the cancel");
}

fn cancels(p: &Pooler, result: &str) -> f64 {
    metric_or_zero(
        &scrape(p),
        "droidpool_cancel_requests_total",
        &[("result", result)],
    )
}

/// Rewrites both poolers' configuration with the peer list and reloads them.
fn configure_peers(poolers: [&Pooler; 2]) {
    let list: String = poolers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("  - id: {}\n    address: 127.0.0.1:{}\n", i + 1, p.port()))
        .collect();
    for (i, p) in poolers.iter().enumerate() {
        let yaml = format!("peer_id: {}\npeers:\n{list}", i + 1);
        p.reload_with(&yaml);
    }
    let end = Instant::now() + Duration::from_secs(5);
    for p in poolers {
        while p.status()["config_generation"] != 2 || p.status()["peer_id"] == 0 {
            assert!(Instant::now() < end, "the peers reload did not apply");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_sent_to_another_peer_reaches_its_client() {
    let pg = support::shared();
    let a = Pooler::start_with_config(pg, "peer_id: 1\n", &[]);
    let b = Pooler::start_with_config(pg, "peer_id: 2\n", &[]);
    configure_peers([&a, &b]);
    let mut client = Raw::connect(a.port(), "droid", DB).await;
    let key = client.key.expect("BackendKeyData");
    assert_eq!(
        key.0 >> 16,
        1,
        "the key carries pooler A's number: {:#x}",
        key.0
    );
    client.send(&query("select pg_sleep(30)")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A forged key (A's number, a wrong secret), and one of a peer nobody knows: nothing is
    // cancelled.
    send_cancel(b.port(), (key.0, key.1 ^ 0x5a5a)).await;
    send_cancel(b.port(), ((9 << 16) | (key.0 & 0xffff), key.1)).await;
    let quiet = tokio::time::timeout(Duration::from_millis(1500), async {
        loop {
            let f = client.recv().await;
            assert_ne!(
                f.tag,
                backend::ERROR_RESPONSE_TAG,
                "a forged key cancelled the query"
            );
        }
    });
    assert!(quiet.await.is_err(), "the query ended");

    // The client's own key, sent to B: B forwards it to A, which cancels the query.
    let sent = Instant::now();
    send_cancel(b.port(), key).await;
    let f = loop {
        let f = client.recv().await;
        if f.tag == backend::ERROR_RESPONSE_TAG || f.tag == backend::READY_FOR_QUERY_TAG {
            break f;
        }
    };
    let took = sent.elapsed();
    assert_eq!(f.tag, backend::ERROR_RESPONSE_TAG);
    assert_eq!(sqlstate(&f), "57014");
    assert!(took < Duration::from_secs(1), "cancelled after {took:?}");
    client.until_ready().await;
    client.send(&query("select 1")).await;
    assert!(client.until_ready().await.len() >= 3, "the session goes on");

    // A counts its cancel once PostgreSQL has closed the cancel connection, which may come
    // a moment after the client's 57014: wait for the counts, briefly.
    let settled = Instant::now() + Duration::from_secs(3);
    while Instant::now() < settled && (cancels(&a, "local") < 1.0 || cancels(&b, "forwarded") < 2.0)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        cancels(&b, "forwarded"),
        2.0,
        "the forged key and the real one"
    );
    assert_eq!(cancels(&b, "unknown"), 1.0, "peer 9 is nobody");
    assert_eq!(cancels(&a, "local"), 1.0, "the real key is A's client");
    assert_eq!(cancels(&a, "unknown"), 1.0, "the forged key is nobody's");
    assert_eq!(
        cancels(&a, "forwarded"),
        0.0,
        "a forwarded request is never passed on"
    );
}
