//! Memory is bounded by configuration, never by what a peer sends: a 200 MB row, a 50 MB bind
//! parameter and a client that pipelines hundreds of megabytes without reading each leave the
//! pooler's resident set (VmRSS, sampled from /proc every few milliseconds) within 16 MiB of
//! where it started, and back within 8 MiB afterwards.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::core::within;
use crate::support::raw::{self, Raw};
use crate::support::rss::{rss_kib, PeakRss};
use crate::support::skim::{tags, Skim};
use crate::support::{self, Pooler, DB};

const USER: &str = "droid";
const PEAK_MAX_KIB: u64 = 16 << 10;
const AFTER_MAX_KIB: u64 = 8 << 10;

/// A pooler, and its VmRSS after one client ran a first query (so the pool, its first
/// server and the runtime's threads exist).
async fn warm_pooler(args: &[&str]) -> (Pooler, u64) {
    let pg = support::shared();
    let pooler = Pooler::start(pg, args);
    let c = pooler.connect(USER, DB).await;
    c.simple_query("select 1").await.expect("select 1");
    drop(c);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base = rss_kib(pooler.pid());
    (pooler, base)
}

/// Checks the peak and, once things settle, the level after, against the start.
async fn assert_bounded(what: &str, pooler: &Pooler, base: u64, peak: u64) {
    eprintln!("{what}: VmRSS start {base} KiB, peak {peak} KiB");
    assert!(
        peak < base + PEAK_MAX_KIB,
        "{what}: VmRSS rose by {} KiB (start {base} KiB, peak {peak} KiB)",
        peak - base
    );
    // The allocator hands freed pages back within moments.
    let mut after = rss_kib(pooler.pid());
    for _ in 0..50 {
        if after < base + AFTER_MAX_KIB {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = rss_kib(pooler.pid());
    }
    assert!(
        after < base + AFTER_MAX_KIB,
        "{what}: VmRSS stayed {} KiB above its start (start {base} KiB, after {after} KiB)",
        after - base
    );
}

/// `select repeat('x', 200000000)`, read by a client that starts reading only a second
/// later: the row is passed on as it arrives, and while the client does not read, the
/// pooler stops reading PostgreSQL.
#[tokio::test]
async fn a_200_mb_row_passes_through_in_bounded_memory() {
    for mode in ["transaction", "session"] {
        let (pooler, base) = warm_pooler(&["--pool-size", "2", "--mode", mode]).await;
        let mut s = Raw::connect(pooler.port(), USER, DB).await.stream;
        let peak = PeakRss::start(pooler.pid());
        s.write_all(&raw::query("select repeat('x', 200000000)"))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut skim = Skim::default();
        let seen = within(
            120,
            "the 200 MB row",
            skim.until_ready(&mut s, Duration::from_secs(60)),
        )
        .await;
        assert_eq!(tags(&seen), "TDCZ", "{mode}");
        assert_eq!(
            seen[1].len,
            4 + 2 + 4 + 200_000_000,
            "{mode}: the row arrives whole"
        );
        let peak = peak.stop();
        assert_bounded(&format!("200 MB row, {mode} mode"), &pooler, base, peak).await;
        // The session goes on.
        s.write_all(&raw::query("select 1")).await.expect("send");
        let seen = skim.until_ready(&mut s, Duration::from_secs(10)).await;
        assert_eq!(tags(&seen), "TDCZ", "{mode}");
    }
}

/// A 50 MB parameter from tokio-postgres (Parse, then a 50 MB Bind), with statement
/// tracking on (the Bind is renamed in its first bytes) and off, and a 50 MB simple query.
#[tokio::test]
async fn a_50_mb_parameter_passes_through_in_bounded_memory() {
    let big = "x".repeat(50 << 20);
    for track in [true, false] {
        let mut args = vec!["--pool-size", "2", "--mode", "transaction"];
        if track {
            args.push("--track-prepared");
        }
        let (pooler, base) = warm_pooler(&args).await;
        let c = pooler.connect(USER, DB).await;
        let peak = PeakRss::start(pooler.pid());
        let row = within(
            60,
            "a 50 MB Bind",
            c.query_one("select length($1::text)", &[&big]),
        )
        .await
        .expect("select length($1)");
        let n: i32 = row.get(0);
        assert_eq!(n, 50 << 20, "track={track}");
        // The same statement again, now known to the server connection.
        let row = c
            .query_one("select length($1::text)", &[&big])
            .await
            .expect("again");
        assert_eq!(row.get::<_, i32>(0), 50 << 20);
        let sql = format!("select length('{big}')");
        let msgs = within(60, "a 50 MB query", c.simple_query(&sql))
            .await
            .expect("50 MB simple query");
        let value = msgs.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some("52428800"), "track={track}");
        drop(sql);
        let peak = peak.stop();
        assert_bounded(
            &format!("50 MB parameter, track={track}"),
            &pooler,
            base,
            peak,
        )
        .await;
    }
}

/// A client sends `select pg_sleep(N)` and then `total` bytes of queries (`each` bytes each)
/// without reading; while it is blocked, the pooler must push back through the socket, not
/// buffer. Then it reads every answer: nothing is lost.
async fn pipeline_without_reading(mode: &str, sleep_s: u64, each: usize, total: usize) {
    let (pooler, base) = warm_pooler(&["--pool-size", "2", "--mode", mode]).await;
    let s = Raw::connect(pooler.port(), USER, DB).await.stream;
    let (mut rd, mut wr) = s.into_split();
    let pad = each.saturating_sub(30);
    let q = raw::query(&format!("select length('{}')", "x".repeat(pad)));
    let n = total / q.len();
    let peak = PeakRss::start(pooler.pid());
    let writer = tokio::spawn(async move {
        wr.write_all(&raw::query(&format!("select pg_sleep({sleep_s})")))
            .await
            .expect("send sleep");
        for _ in 0..n {
            wr.write_all(&q).await.expect("send query");
        }
        wr
    });
    // Looked at while the server still sleeps (it reads nothing meanwhile): a writer that has
    // sent everything by then was taken in by the pooler. Afterwards PostgreSQL may run the
    // whole pipeline in a second or two, which says nothing about push-back. Kernel socket
    // buffers on loopback take tens of megabytes (tcp_rmem up to 32 MiB), so only a pipeline
    // far larger than that shows the push-back as a blocked writer.
    tokio::time::sleep(Duration::from_secs(sleep_s - 1)).await;
    assert!(
        total < 100 << 20 || !writer.is_finished(),
        "{mode}: {} MB were taken without the client reading: nothing pushed back",
        total >> 20
    );
    let mut skim = Skim::default();
    let mut ready = 0;
    while ready < n + 1 {
        let m = within(
            120,
            "the answers",
            skim.next(&mut rd, Duration::from_secs(30)),
        )
        .await
        .unwrap_or_else(|| panic!("{mode}: {ready} of {} answers, then nothing", n + 1));
        assert_ne!(m.tag, b'E', "{mode}: an error: {:?}", m.body);
        if m.tag == b'Z' {
            ready += 1;
        }
    }
    let _wr = within(30, "the writer", writer).await.expect("writer");
    let peak = peak.stop();
    let what = format!("{mode} mode, {} MB pipelined without reading", total >> 20);
    assert_bounded(&what, &pooler, base, peak).await;
}

#[tokio::test]
async fn statement_mode_pipeline_of_300_mb_without_reading() {
    pipeline_without_reading("statement", 3, 64 << 10, 300 << 20).await;
}

#[tokio::test]
async fn small_queries_pipelined_without_reading() {
    for mode in ["transaction", "session"] {
        pipeline_without_reading(mode, 2, 20, 8 << 20).await;
    }
}

/// 300 MB of large queries pipelined in transaction mode without reading.
#[tokio::test]
async fn transaction_mode_pipeline_of_300_mb_without_reading() {
    pipeline_without_reading("transaction", 3, 64 << 10, 300 << 20).await;
}
