//! Bad input aimed at authentication and TLS, over real sockets: malformed SCRAM messages, a
//! client that stalls mid-SASL or mid-handshake, SSLRequest repeated or followed by injected
//! bytes, and a CancelRequest flood. The pooler answers 08P01/28P01 or closes, stays up, keeps
//! serving a well-behaved client, and its memory returns to baseline.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use droid_pool::protocol::{backend, frame::Frame, frontend};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{userlist_line, write};
use crate::badinput::{assert_alive, Alongside};
use crate::core::{error_codes, startup_bytes, vm_rss_kb};
use crate::support::raw::Raw;
use crate::support::tls::{handshake, TestCa};
use crate::support::{self, Pooler, DB};

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A SCRAM pooler with TLS offered and a 1 s login timeout.
fn pooler(dir: &std::path::Path) -> (TestCa, Pooler) {
    let ca = TestCa::new(dir);
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    ca.issue("pooler", &cert, &key);
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let users = write(dir, "userlist.txt", &userlist_line("scram_user", &verifier));
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\nserver:\n  password: scram_pass\n\
         client:\n  login_timeout: 1s\ntls:\n  client:\n    cert_file: {}\n    key_file: {}\n",
        cert.display(),
        key.display()
    );
    (ca, Pooler::start_with_config(support::shared(), &yaml, &[]))
}

async fn alongside(p: &Pooler) -> Alongside {
    Alongside::start_conn(&p.conn_string_pw("scram_user", "scram_pass", DB)).await
}

/// Opens a connection, sends the startup for scram_user, and reads AuthenticationSASL.
async fn sasl_started(port: u16) -> Raw {
    let mut w = Raw::open(port).await;
    w.send(&startup_bytes(
        0,
        &[("user", "scram_user"), ("database", DB)],
    ))
    .await;
    let f = w.recv().await;
    assert_eq!(auth_code(&f), 10, "AuthenticationSASL expected");
    w
}

fn auth_code(f: &Frame) -> i32 {
    assert_eq!(
        f.tag,
        backend::AUTHENTICATION_TAG,
        "an authentication request"
    );
    let b = f.body();
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Sends `bytes` and returns the SQLSTATEs received before the pooler closed.
async fn answer(w: &mut Raw, bytes: &[u8]) -> Vec<String> {
    w.send_lossy(bytes).await;
    let frames = w.until_eof(5).await.expect("the pooler must close");
    error_codes(&frames)
}

fn initial(mechanism: &str, data: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    frontend::sasl_initial_response(&mut b, mechanism, data);
    b.to_vec()
}

fn response(data: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    frontend::sasl_response(&mut b, data);
    b.to_vec()
}

/// Runs client-first with a real SCRAM client; returns the wire and the honest client-final.
async fn at_client_final(port: u16, password: &[u8]) -> (Raw, String) {
    let mut w = sasl_started(port).await;
    let mut client = ScramSha256::new(password, ChannelBinding::unsupported());
    w.send(&initial("SCRAM-SHA-256", client.message())).await;
    let f = w.recv().await;
    assert_eq!(auth_code(&f), 11, "SASLContinue expected");
    client.update(&f.body()[4..]).expect("server-first parses");
    (w, String::from_utf8(client.message().to_vec()).unwrap())
}

#[tokio::test]
async fn malformed_scram_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (_ca, p) = pooler(dir.path());
    let bg = alongside(&p).await;
    let port = p.port();
    let mut negative = initial("SCRAM-SHA-256", b"");
    negative[5 + 14..5 + 18].copy_from_slice(&(-1i32).to_be_bytes());
    let mut overlong = initial("SCRAM-SHA-256", b"n,,n=,r=abc");
    overlong[5 + 14..5 + 18].copy_from_slice(&1000i32.to_be_bytes());
    let mut huge = vec![b'p'];
    huge.extend_from_slice(&100_000i32.to_be_bytes());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("other mechanism", initial("SCRAM-SHA-1", b"n,,n=,r=abc")),
        ("garbage client-first", initial("SCRAM-SHA-256", b"hello")),
        (
            "channel binding required",
            initial("SCRAM-SHA-256", b"p=tls-unique,,n=,r=a"),
        ),
        ("no initial response", negative),
        ("length past the end", overlong),
        ("a query instead", {
            let mut b = BytesMut::new();
            frontend::query(&mut b, "select 1");
            b.to_vec()
        }),
        ("oversized message", huge),
    ];
    for (what, bytes) in cases {
        let mut w = sasl_started(port).await;
        assert_eq!(answer(&mut w, &bytes).await, ["08P01"], "{what}");
    }
    let (mut w, fin) = at_client_final(port, b"scram_pass").await;
    let other_nonce = fin.replacen("r=", "r=X", 1);
    assert_eq!(
        answer(&mut w, &response(other_nonce.as_bytes())).await,
        ["08P01"]
    );
    let (mut w, fin) = at_client_final(port, b"scram_pass").await;
    let bad_proof = format!("{}=*notbase64*", &fin[..fin.rfind("p=").unwrap() + 1]);
    assert_eq!(
        answer(&mut w, &response(bad_proof.as_bytes())).await,
        ["08P01"]
    );
    let (mut w, fin) = at_client_final(port, b"wrong_pass").await;
    assert_eq!(answer(&mut w, &response(fin.as_bytes())).await, ["28P01"]);
    // Random SASL payloads at both steps: an error and a close, never a hang or a panic.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..100 {
        let len = rng.gen_range(0..300);
        let junk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let codes = if i % 2 == 0 {
            let mut w = sasl_started(port).await;
            answer(&mut w, &initial("SCRAM-SHA-256", &junk)).await
        } else {
            let (mut w, _) = at_client_final(port, b"scram_pass").await;
            answer(&mut w, &response(&junk)).await
        };
        assert!(
            codes == ["08P01"] || codes == ["28P01"],
            "case {i}: {codes:?}"
        );
    }
    bg.finish().await;
    assert_alive(&p);
}

/// Slowloris at every step of the login: all closed by the 1 s login timeout.
#[tokio::test]
async fn stalled_logins_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, p) = pooler(dir.path());
    let bg = alongside(&p).await;
    let port = p.port();
    let t0 = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..20 {
        // After AuthenticationSASL, and after SASLContinue.
        stalled.push(sasl_started(port).await);
        stalled.push(at_client_final(port, b"scram_pass").await.0);
    }
    let mut after_s = Vec::new();
    let mut after_handshake = Vec::new();
    for _ in 0..20 {
        // After `S`, with no ClientHello.
        let mut w = Raw::open(port).await;
        w.send(&SSL_REQUEST).await;
        assert_eq!(w.read_byte().await, b'S');
        after_s.push(w);
        // After the handshake, with no startup packet.
        after_handshake.push(handshake(port, &ca).await);
    }
    for mut w in stalled.into_iter().chain(after_s) {
        assert!(
            w.until_eof(5).await.is_some(),
            "a stalled login stayed open"
        );
    }
    for mut tls in after_handshake {
        let mut sink = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut sink));
        assert!(read.await.is_ok(), "a stalled TLS client stayed open");
    }
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "closing took {:?}",
        t0.elapsed()
    );
    bg.finish().await;
    assert_alive(&p);
}

#[tokio::test]
async fn ssl_request_repeated_or_followed_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, p) = pooler(dir.path());
    let port = p.port();
    // Bytes pipelined behind the SSLRequest would bypass TLS (CVE-2021-23214): refused.
    let mut w = Raw::open(port).await;
    let mut bytes = SSL_REQUEST.to_vec();
    bytes.extend_from_slice(&startup_bytes(0, &[("user", "scram_user")]));
    assert_eq!(answer(&mut w, &bytes).await, ["08P01"]);
    // A second SSLRequest inside TLS: the session is closed.
    let mut tls = handshake(port, &ca).await;
    tls.write_all(&SSL_REQUEST).await.unwrap();
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut sink)).await;
    assert!(read.is_ok(), "the pooler must close");
    assert_eq!(sink.first(), Some(&b'E'), "an ErrorResponse first");
    // On a pooler without TLS: N, N, then refused.
    let plain = Pooler::start(support::shared(), &[]);
    let mut w = Raw::open(plain.port()).await;
    for _ in 0..2 {
        w.send(&SSL_REQUEST).await;
        assert_eq!(w.read_byte().await, b'N');
    }
    assert_eq!(answer(&mut w, &SSL_REQUEST).await, ["08P01"]);
    assert_alive(&p);
}

/// 10,000 CancelRequests for made-up keys in a few seconds.
#[tokio::test]
async fn cancel_request_flood() {
    let dir = tempfile::tempdir().unwrap();
    let (_ca, p) = pooler(dir.path());
    let bg = alongside(&p).await;
    let base = vm_rss_kb(p.pid());
    let port = p.port();
    let t0 = Instant::now();
    let tasks = (0..50).map(|t: i32| {
        tokio::spawn(async move {
            for i in 0..200 {
                let mut b = BytesMut::new();
                frontend::cancel_request(&mut b, t * 1000 + i, i);
                if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = s.write_all(&b).await;
                    let mut sink = [0u8; 16];
                    // The pooler closes after a cancel: wait for it, so sockets do not pile up.
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut sink)).await;
                }
            }
        })
    });
    for t in futures_util::future::join_all(tasks).await {
        t.expect("flood task");
    }
    let took = t0.elapsed();
    eprintln!("10,000 cancel requests in {took:?}");
    assert!(took < Duration::from_secs(30), "the flood took {took:?}");
    bg.progresses(5).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = vm_rss_kb(p.pid());
    eprintln!("VmRSS: base {base} kB, after the flood {after} kB");
    assert!(
        after < base + 20 * 1024,
        "RSS did not return: {base} kB -> {after} kB"
    );
    bg.finish().await;
    assert_alive(&p);
}
