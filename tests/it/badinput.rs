//! Bad input from clients, through the real binary: the pooler answers with the right SQLSTATE
//! or closes, never panics, never grows without bound, and a well-behaved client running
//! alongside keeps getting correct answers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_postgres::types::Type;

use crate::core::{code, error_codes, startup_bytes, vm_rss_kb, within};
use crate::support::raw;
use crate::support::raw::Raw;
use crate::support::{self, Pooler, DB};

/// A tokio-postgres client running simple and extended queries in a loop and checking every
/// answer, until told to stop.
pub(crate) struct Alongside {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    task: JoinHandle<Result<u64, String>>,
}

impl Alongside {
    async fn start(pooler: &Pooler) -> Alongside {
        Alongside::start_conn(&pooler.conn_string("droid", DB)).await
    }

    /// As [`Alongside::start`], logging in with `conn` (e.g. with a password).
    pub(crate) async fn start_conn(conn: &str) -> Alongside {
        let client = support::connect(conn).await;
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let task = {
            let stop = stop.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let mut i: i64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let sql = format!("select {i} + 1");
                    let msgs =
                        tokio::time::timeout(Duration::from_secs(10), client.simple_query(&sql))
                            .await
                            .map_err(|_| format!("`{sql}` took over 10 s"))?
                            .map_err(|e| format!("`{sql}`: {e} ({})", code(&e)))?;
                    let got = crate::core::rows(&msgs);
                    if got != vec![vec![Some((i + 1).to_string())]] {
                        return Err(format!("`{sql}` answered {got:?}"));
                    }
                    let rows = tokio::time::timeout(
                        Duration::from_secs(10),
                        client.query_typed("select $1::int8 * 2", &[(&i, Type::INT8)]),
                    )
                    .await
                    .map_err(|_| "extended query took over 10 s".to_owned())?
                    .map_err(|e| format!("extended {i}: {e} ({})", code(&e)))?;
                    let v: i64 = rows[0].get(0);
                    if v != i * 2 {
                        return Err(format!("extended {i} answered {v}"));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok(done.load(Ordering::Relaxed))
            })
        };
        // Running before the bad input starts.
        let t0 = Instant::now();
        while done.load(Ordering::Relaxed) < 3 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "alongside client never answered"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Alongside { stop, done, task }
    }

    /// Waits until the client has completed `n` more rounds (it still works now).
    pub(crate) async fn progresses(&self, n: u64) {
        let start = self.done.load(Ordering::Relaxed);
        let t0 = Instant::now();
        while self.done.load(Ordering::Relaxed) < start + n {
            if self.task.is_finished() {
                panic!("the well-behaved client stopped early");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the well-behaved client made no progress for 10 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub(crate) async fn finish(self) -> u64 {
        self.progresses(3).await;
        self.stop.store(true, Ordering::Relaxed);
        match within(15, "alongside client", self.task).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => panic!("the well-behaved client failed: {e}"),
            Err(e) => panic!("the well-behaved client panicked: {e}"),
        }
    }
}

fn start(extra: &[&str]) -> Pooler {
    let mut args = vec!["--mode", "transaction", "--pool-size", "2"];
    args.extend_from_slice(extra);
    Pooler::start(support::shared(), &args)
}

pub(crate) fn assert_alive(pooler: &Pooler) {
    assert!(
        !pooler.has_exited(),
        "the pooler exited: {}",
        pooler.stderr()
    );
    let stderr = pooler.stderr();
    assert!(
        !stderr.contains("panicked"),
        "the pooler panicked:\n{stderr}"
    );
}

/// Sends `bytes`, closes our side, and returns what came back before EOF.
async fn send_and_close(port: u16, bytes: &[u8]) -> Vec<droid_pool::protocol::frame::Frame> {
    let mut w = Raw::open(port).await;
    w.send_lossy(bytes).await;
    let _ = w.stream.shutdown().await;
    w.until_eof(10)
        .await
        .expect("the pooler must close the connection")
}

#[tokio::test]
async fn random_bytes_instead_of_startup() {
    let pooler = start(&[]);
    let bg = Alongside::start(&pooler).await;
    let port = pooler.port();

    // Fully random: a length of 16 MB or more (first byte non-zero) cannot be a startup
    // packet: closed at once without a reply, as PostgreSQL closes it.
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut junk: Vec<u8> = (0..rng.gen_range(8..2048)).map(|_| rng.gen()).collect();
        junk[0] = rng.gen_range(1..=255);
        let frames = send_and_close(port, &junk).await;
        assert_eq!(raw::tags(&frames), "", "seed {seed}");
    }
    // A plausible length with a random protocol code: 0A000 (unsupported protocol), as
    // PostgreSQL answers.
    for seed in 0..10u64 {
        let mut rng = StdRng::seed_from_u64(1000 + seed);
        let mut junk = BytesMut::new();
        junk.put_u32(64);
        junk.put_u16(rng.gen_range(4..u16::MAX)); // major: not 3, not the 1234 of requests
        junk.put_u16(rng.gen());
        junk.extend((0..56).map(|_| rng.gen::<u8>()));
        let frames = send_and_close(port, &junk).await;
        assert_eq!(error_codes(&frames), vec!["0A000"], "seed {seed}");
    }
    // Protocol 3.0 and random non-NUL parameter bytes: malformed, 08P01.
    for seed in 0..10u64 {
        let mut rng = StdRng::seed_from_u64(2000 + seed);
        let mut junk = BytesMut::new();
        junk.put_u32(100);
        junk.put_u32(196608);
        junk.extend((0..92).map(|_| rng.gen_range(1..=255u8)));
        let frames = send_and_close(port, &junk).await;
        assert_eq!(error_codes(&frames), vec!["08P01"], "seed {seed}");
    }
    // A length below the minimum (Terminate before the StartupMessage, as node-postgres's
    // connect-then-end sends), and a truncated startup then EOF: no reply.
    let frames = send_and_close(port, &[0, 0, 0, 4, 0, 3, 0, 0]).await;
    assert!(frames.is_empty(), "{}", raw::tags(&frames));
    let frames = send_and_close(port, &[b'X', 0, 0, 0, 4]).await;
    assert!(frames.is_empty(), "{}", raw::tags(&frames));
    let frames = send_and_close(port, &[0, 0]).await;
    assert!(frames.is_empty(), "{}", raw::tags(&frames));
    let mut partial = startup_bytes(0, &[("user", "droid"), ("database", DB)]);
    partial.truncate(partial.len() - 5);
    let frames = send_and_close(port, &partial).await;
    assert!(frames.is_empty(), "{}", raw::tags(&frames));
    // A startup length of 2^31.
    let frames = send_and_close(port, &[0x80, 0, 0, 0, 0, 3, 0, 0]).await;
    assert!(frames.is_empty(), "{}", raw::tags(&frames));
    let metrics = pooler.admin_get("/metrics").1;
    let closed = crate::support::metrics::metric_or_zero(
        &metrics,
        "droidpool_client_bad_startup_total",
        &[("reason", "bad_length")],
    );
    assert_eq!(closed, 23.0, "every bad length counted");

    bg.finish().await;
    assert_alive(&pooler);
    // Nothing of this became a client.
    let lines = pooler.lines();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with(" connected") && l.contains("client"))
            .count(),
        1,
        "{lines:?}"
    );
}

#[tokio::test]
async fn huge_length_after_login() {
    let pooler = start(&[]);
    let bg = Alongside::start(&pooler).await;
    let rss_before = vm_rss_kb(pooler.pid());
    for (tag, len) in [
        (b'Q', 0x8000_0000u32),
        (b'Q', 0xffff_ffff),
        (b'Q', 0x7fff_ffff),
        // Above PostgreSQL's own limit for a message that may carry data (1 GB - 2 bytes).
        (b'P', 0x4000_0003),
        (b'Q', 3),
        (b'd', 0x7fff_fff0),
    ] {
        let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
        let mut m = vec![tag];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(b"select 1");
        w.send_lossy(&m).await;
        let frames = w
            .until_eof(5)
            .await
            .unwrap_or_else(|| panic!("length {len:#x}: still open after 5 s"));
        assert_eq!(raw::tags(&frames), "E", "length {len:#x}");
        assert_eq!(error_codes(&frames), vec!["08P01"], "length {len:#x}");
        let f = droid_pool::protocol::backend::parse_error(frames[0].body()).unwrap();
        assert_eq!(f.severity, "FATAL");
    }
    // The same while holding a server (inside a transaction): the server is not leaked.
    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let f = w.query("BEGIN").await;
    assert_eq!(f.last().unwrap().body(), b"T");
    w.send_lossy(&[b'Q', 0x80, 0, 0, 0]).await;
    let frames = w.until_eof(5).await.expect("closed");
    assert_eq!(error_codes(&frames), vec!["08P01"]);
    let rss_after = vm_rss_kb(pooler.pid());
    assert!(
        rss_after < rss_before + 20 * 1024,
        "RSS grew from {rss_before} kB to {rss_after} kB"
    );
    bg.finish().await;
    assert_alive(&pooler);
}

#[tokio::test]
async fn truncated_message_then_eof() {
    // Pool of one: a server leaked by the truncated client would starve the good one.
    let pooler = Pooler::start(
        support::shared(),
        &["--mode", "transaction", "--pool-size", "1"],
    );
    let bg = Alongside::start(&pooler).await;

    // Truncated before any server is taken.
    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let mut q = raw::query("select 'never completed'").to_vec();
    q.truncate(q.len() - 6);
    w.send(&q).await;
    let _ = w.stream.shutdown().await;
    let frames = w.until_eof(5).await.expect("closed after EOF");
    assert!(frames.is_empty(), "{}", raw::tags(&frames));

    // Truncated while holding the server: Parse and Bind sent, Execute cut short.
    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let mut bytes = raw::batch(&[
        raw::parse("", "select pg_sleep(0.1)"),
        raw::bind("", "", &[]),
    ]);
    let exec = raw::execute("");
    bytes.extend_from_slice(&exec[..exec.len() - 3]);
    w.send(&bytes).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = w.stream.shutdown().await;
    let frames = w.until_eof(5).await.expect("closed after EOF");
    assert!(error_codes(&frames).is_empty(), "{}", raw::tags(&frames));

    // Inside a transaction, a truncated query then EOF.
    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    w.query("BEGIN").await;
    w.send(&q).await;
    let _ = w.stream.shutdown().await;
    w.until_eof(5).await.expect("closed after EOF");

    bg.progresses(10).await;
    bg.finish().await;
    assert_alive(&pooler);
}

#[tokio::test]
async fn unknown_message_type() {
    let pooler = Pooler::start(
        support::shared(),
        &["--mode", "transaction", "--pool-size", "1"],
    );
    let bg = Alongside::start(&pooler).await;
    for tag in [b'@', 0u8, b'p', b'z', 0xff] {
        let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
        w.send(&[tag, 0, 0, 0, 4]).await;
        let frames = w
            .until_eof(5)
            .await
            .unwrap_or_else(|| panic!("tag {tag:#x}: still open"));
        assert_eq!(raw::tags(&frames), "E", "tag {tag:#x}");
        assert_eq!(error_codes(&frames), vec!["08P01"], "tag {tag:#x}");
    }
    // While holding the server in a transaction: FATAL, and the server comes back (closed or
    // rolled back) for the client alongside.
    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let f = w.query("BEGIN").await;
    assert_eq!(f.last().unwrap().body(), b"T");
    w.send(&[b'@', 0, 0, 0, 4]).await;
    let frames = w.until_eof(5).await.expect("closed");
    assert_eq!(error_codes(&frames), vec!["08P01"]);
    bg.progresses(10).await;
    bg.finish().await;
    assert_alive(&pooler);
}

#[tokio::test]
async fn startup_without_user() {
    let pooler = start(&[]);
    let bg = Alongside::start(&pooler).await;
    for params in [
        vec![("database", DB)],
        vec![("user", ""), ("database", DB)],
        vec![],
    ] {
        let frames = send_and_close(pooler.port(), &startup_bytes(0, &params)).await;
        assert_eq!(raw::tags(&frames), "E", "{params:?}");
        assert_eq!(error_codes(&frames), vec!["28000"], "{params:?}");
    }
    bg.finish().await;
    assert_alive(&pooler);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_silent_connections() {
    let pooler = Pooler::start_with_config(
        support::shared(),
        "client:\n  login_timeout: 2s\npool:\n  size: 2\n",
        &["--mode", "transaction"],
    );
    let bg = Alongside::start(&pooler).await;
    let rss_base = vm_rss_kb(pooler.pid());
    let t0 = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..1000 {
        conns.push(
            TcpStream::connect(("127.0.0.1", pooler.port()))
                .await
                .expect("connect"),
        );
    }
    let opened = t0.elapsed();
    assert!(opened < Duration::from_secs(15), "opening took {opened:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_peak = vm_rss_kb(pooler.pid());
    bg.progresses(5).await;

    // Every one is closed by the pooler within a few seconds of the 2 s login timeout.
    let waits = conns.into_iter().map(|s| {
        tokio::spawn(async move {
            let mut w = Raw::from_stream(s);
            w.until_eof(8).await
        })
    });
    let results = futures_util::future::join_all(waits).await;
    let closed_after = t0.elapsed();
    let mut open = 0;
    for r in results {
        match r.expect("task") {
            None => open += 1,
            Some(frames) => {
                let codes = error_codes(&frames);
                // Closed at the login timeout, or refused at once by the pending-login caps
                // (client.max_pending_logins_per_ip: 512 from one address).
                assert!(
                    codes.is_empty() || codes == ["08P01"] || codes == ["53300"],
                    "a silent client got {codes:?}"
                );
            }
        }
    }
    assert_eq!(open, 0, "{open} silent connections still open after 8 s");
    assert!(
        closed_after < Duration::from_secs(8),
        "closing took {closed_after:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = vm_rss_kb(pooler.pid());
    eprintln!("VmRSS: base {rss_base} kB, 1000 silent {rss_peak} kB, after {rss_after} kB");
    assert!(
        rss_peak < 100 * 1024,
        "RSS {rss_peak} kB with 1000 silent connections"
    );
    assert!(
        rss_after < rss_base + 20 * 1024,
        "RSS did not come back: base {rss_base} kB, peak {rss_peak} kB, after {rss_after} kB"
    );
    bg.finish().await;
    assert_alive(&pooler);
    // None of them became a client.
    let lines = pooler.lines();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("[POOL] client ") && l.ends_with(" connected"))
            .count(),
        1
    );
}

#[tokio::test]
async fn random_garbage_after_login() {
    let pooler = start(&[]);
    let bg = Alongside::start(&pooler).await;
    for seed in 0..30u64 {
        let mut rng = StdRng::seed_from_u64(5000 + seed);
        let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
        let junk: Vec<u8> = (0..rng.gen_range(1..4096)).map(|_| rng.gen()).collect();
        w.send_lossy(&junk).await;
        let _ = w.stream.shutdown().await;
        let frames = w
            .until_eof(10)
            .await
            .unwrap_or_else(|| panic!("seed {seed}: still open after garbage and EOF"));
        for c in error_codes(&frames) {
            assert!(c.starts_with("08"), "seed {seed}: error {c}");
        }
    }
    // Garbage that looks like a known message: a Parse with a random body reaches PostgreSQL,
    // which answers with an error (and may close that server); the client is told, and is
    // either closed or still usable.
    for seed in 0..10u64 {
        let mut rng = StdRng::seed_from_u64(6000 + seed);
        let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
        let body: Vec<u8> = (0..rng.gen_range(1..200)).map(|_| rng.gen()).collect();
        let mut m = vec![b'P'];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(&body);
        m.extend_from_slice(&raw::sync());
        w.send_lossy(&m).await;
        let mut frames = Vec::new();
        let closed = within(10, "answer to a garbage Parse", async {
            loop {
                match w.try_recv().await {
                    None => return true,
                    Some(f) => {
                        let ready = f.tag == b'Z';
                        frames.push(f);
                        if ready {
                            return false;
                        }
                    }
                }
            }
        })
        .await;
        assert!(
            !error_codes(&frames).is_empty(),
            "seed {seed}: no error for a garbage Parse: {}",
            raw::tags(&frames)
        );
        if !closed {
            let f = w.query("select 'usable'").await;
            assert_eq!(
                raw::first_col(&f[1]).as_deref(),
                Some("usable"),
                "seed {seed}"
            );
        }
    }
    bg.progresses(10).await;
    bg.finish().await;
    assert_alive(&pooler);
}

/// Many startups naming databases that do not exist: each is refused with 3D000 and the good
/// client keeps working.
#[tokio::test]
async fn unknown_databases() {
    let pooler = start(&[]);
    let bg = Alongside::start(&pooler).await;
    for i in 0..20 {
        let db = format!("no_such_db_{i}");
        let frames = send_and_close(
            pooler.port(),
            &startup_bytes(0, &[("user", "droid"), ("database", &db)]),
        )
        .await;
        assert_eq!(error_codes(&frames), vec!["3D000"], "{db}");
    }
    bg.finish().await;
    assert_alive(&pooler);
}

/// client.max_message_size: a longer message is refused with 08P01 as soon as its header
/// arrives (before its body, so before any allocation for it); one just under the limit works.
/// A startup packet over the startup limit is refused the same way.
#[tokio::test]
async fn message_size_limits() {
    let pooler = Pooler::start_with_config(
        support::shared(),
        "client:\n  max_message_size: 4096\n",
        &["--mode", "transaction", "--pool-size", "2"],
    );
    let bg = Alongside::start(&pooler).await;

    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let sql = format!("select '{}'", "a".repeat(4000));
    let f = w.query(&sql).await;
    assert_eq!(raw::tags(&f), "TDCZ", "a message under the limit");

    // Header only: 5000 bytes announced, none sent.
    w.send(&[b'Q', 0, 0, 0x13, 0x88]).await;
    let frames = w.until_eof(5).await.expect("closed on the header alone");
    assert_eq!(error_codes(&frames), vec!["08P01"]);

    // Startup packet over max_startup_packet (default 10000): a length PostgreSQL refuses
    // too, closing without a reply.
    let long = "x".repeat(20_000);
    let frames = send_and_close(
        pooler.port(),
        &startup_bytes(
            0,
            &[
                ("user", "droid"),
                ("database", DB),
                ("application_name", &long),
            ],
        ),
    )
    .await;
    assert!(frames.is_empty(), "{}", raw::tags(&frames));
    bg.finish().await;
    assert_alive(&pooler);
}
