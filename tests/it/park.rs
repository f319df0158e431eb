//! Idle clients parked without a task (`client::park`): they come back on their next bytes
//! with their session as it was, a drain and a KILL reach them, one that closes is gone, and
//! an idle client costs at most 1 KiB of the pooler's memory, read from `/proc`.

use std::time::{Duration, Instant};

use tokio::task::block_in_place;

use crate::admin::psql;
use crate::support::metrics::metric_or_zero;
use crate::support::raw::{query, sqlstate, tags, Raw};
use crate::support::rss::rss_kib;
use crate::support::{self, Pooler};

const USER: &str = "droid";
const DB: &str = "postgres";

fn start(yaml: &str) -> Pooler {
    start_env(yaml, &[])
}

fn start_env(yaml: &str, env: &[(&str, &str)]) -> Pooler {
    let pg = support::shared();
    let yaml = format!(
        "auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\npool:\n  size: 4\n  mode: transaction\n  track_prepared: true\n{yaml}"
    );
    block_in_place(|| Pooler::start_with_env(pg, &yaml, env))
}

fn parked(p: &Pooler) -> f64 {
    let (_, body) = block_in_place(|| p.admin_get("/metrics"));
    metric_or_zero(&body, "droidpool_clients_parked", &[])
}

/// Waits (at most `secs`) until `n` clients are parked.
async fn until_parked(p: &Pooler, n: usize, secs: u64) {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let now = parked(p);
        if now == n as f64 {
            return;
        }
        assert!(
            Instant::now() < until,
            "{now} clients parked after {secs} s, want {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Idle clients are parked within a few ticks; each comes back on its next query with what
/// its session held (its tracked prepared statement), and is parked again once idle. One
/// that closes while parked is gone, and the others stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_are_parked_and_come_back_as_they_were() {
    let p = start("");
    let mut clients = Vec::new();
    for i in 0..10i32 {
        let c = p.connect(USER, DB).await;
        let stmt = c
            .prepare(&format!("select $1::int4 + {i}"))
            .await
            .expect("prepare");
        let row = c.query_one(&stmt, &[&1i32]).await.expect("first run");
        assert_eq!(row.get::<_, i32>(0), 1 + i);
        clients.push((c, stmt, i));
    }
    until_parked(&p, 10, 5).await;
    for (c, stmt, i) in &clients {
        let row = c.query_one(stmt, &[&5i32]).await.expect("after parking");
        assert_eq!(row.get::<_, i32>(0), 5 + i, "client {i}'s statement");
    }
    until_parked(&p, 10, 5).await;
    let (c, _, _) = clients.remove(3);
    drop(c);
    until_parked(&p, 9, 5).await;
    for (c, stmt, i) in &clients {
        let row = c.query_one(stmt, &[&7i32]).await.expect("the others go on");
        assert_eq!(row.get::<_, i32>(0), 7 + i);
    }
}

/// A drain that closes idle clients reaches parked ones at once: 57P01, and the pooler ends
/// long before its deadline (it waits for parked clients as for tasks, so it does not end
/// before they are told).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_closes_parked_clients() {
    let p = start("drain:\n  mode: transaction-boundary\n  accept_window: 1s\n  timeout: 20s\n");
    let mut idle = Raw::connect(p.port(), USER, DB).await;
    let frames = idle.query("select 1").await;
    assert_eq!(frames.last().map(|f| f.tag), Some(b'Z'));
    until_parked(&p, 1, 5).await;
    let t0 = Instant::now();
    block_in_place(|| p.signal("TERM"));
    let f = idle.recv().await;
    assert_eq!(f.tag, b'E');
    assert_eq!(sqlstate(&f), "57P01");
    assert!(idle.closed_within(Duration::from_secs(2)).await);
    let exit = block_in_place(|| p.wait_exit(Duration::from_secs(10)));
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "a drained exit");
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "took {:?}; the deadline is 20 s",
        t0.elapsed()
    );
}

/// `KILL_CLIENT` reaches a parked client: FATAL 57P01 and the connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_reaches_a_parked_client() {
    let p = start("");
    let (mut idle, (id, _)) = Raw::connect_keyed(p.port(), USER, DB).await;
    idle.send(&query("select 1")).await;
    idle.until_ready().await;
    let (mut other, _) = Raw::connect_keyed(p.port(), USER, DB).await;
    other.send(&query("select 1")).await;
    other.until_ready().await;
    until_parked(&p, 2, 5).await;
    let (ok, out, err) =
        block_in_place(|| psql(&p, USER, "droidpool", &format!("KILL_CLIENT {id}")));
    assert!(ok && out.trim() == "KILL_CLIENT", "{out} {err}");
    let f = tokio::time::timeout(Duration::from_secs(3), idle.recv())
        .await
        .expect("the killed parked client is told within a tick or two");
    assert_eq!(f.tag, b'E');
    assert_eq!(sqlstate(&f), "57P01");
    assert!(idle.closed_within(Duration::from_secs(2)).await);
    // The other parked client is untouched.
    let frames = other.query("select 2").await;
    assert_eq!(frames.last().map(|f| f.tag), Some(b'Z'));
}

/// What one more idle client costs the pooler, read from `/proc`: the growth of its
/// resident memory from 1,000 parked clients to 5,000, per client (measured from a first
/// batch on, not from a fresh process, so memory freed before cannot hide the cost; logins
/// opened a few at a time, so their passing memory stays small beside what is measured).
/// At most 1 KiB for a release build (`bench/run.sh` measures that binary beside PgBouncer);
/// the debug build this suite runs measures about 0.1 KiB more (1.04 against 0.92 KiB in the
/// same harness), so it is held to 1.2 KiB here. A task-resident idle client cost 1.3 to
/// 1.4 KiB in either: this fails if clients are not parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_costs_at_most_one_kib() {
    let bound = if cfg!(debug_assertions) { 1.2 } else { 1.0 };
    let per = idle_growth(&start(""), 1000, &[4000], None).await[0];
    assert!(per > 0.3, "{per:.3} KiB per client measured nothing");
    assert!(
        per <= bound,
        "{per:.3} KiB per idle client, want at most {bound}"
    );
}

/// A warm session keeps its buffers between transactions (up to 64 KiB each); parked, it
/// keeps none. Each client reads a 30 kB value first: parked with their buffers, they read
/// 17 KiB each; without, under 2. The purge delay is zero so the reading is what the pooler
/// holds, not the freed buffers the allocator keeps for a while. Even so, a batch can read
/// high (one CI run read 18 KiB per client; here, with parked sessions checked to hold no
/// buffer, single batches read −3.6 to 9): three batches are measured and the least growth
/// is held to the bound. Kept buffers are in every batch (with the fix reverted, the least
/// of three read 13.9 and 14.7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_worked_are_parked_without_their_buffers() {
    let p = start_env("", &[("MIMALLOC_PURGE_DELAY", "0")]);
    let per = idle_growth(&p, 100, &[400, 400, 400], Some("select repeat('x', 30000)")).await;
    let least = per.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        least <= 8.0,
        "{per:.3?} KiB per parked client, want at most 8 in one batch"
    );
}

/// Opens `first` clients (each runs `sql` once, if any), waits until they are parked, then
/// each batch of `then` in turn; returns the pooler's VmRSS growth per client of each batch.
async fn idle_growth(
    p: &Pooler,
    first: usize,
    then: &[usize],
    sql: Option<&'static str>,
) -> Vec<f64> {
    async fn open(port: u16, n: usize, sql: Option<&'static str>) -> Vec<Raw> {
        let mut out = Vec::with_capacity(n);
        for chunk in 0..n.div_ceil(20) {
            let batch = (chunk * 20..n.min((chunk + 1) * 20)).map(|_| {
                tokio::spawn(async move {
                    let mut c = Raw::connect(port, USER, DB).await;
                    if let Some(sql) = sql {
                        let frames = c.query(sql).await;
                        assert!(tags(&frames).ends_with('Z'), "{sql}: {}", tags(&frames));
                        assert!(!tags(&frames).contains('E'), "{sql}: {}", tags(&frames));
                    }
                    c
                })
            });
            for t in batch.collect::<Vec<_>>() {
                out.push(t.await.expect("login"));
            }
        }
        out
    }
    // The memory a parked client's task used goes back to the system when the allocator
    // purges it (lazily): read once the figure has held for a second.
    async fn settled(pid: u32) -> u64 {
        let mut last = rss_kib(pid);
        let mut held = 0;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = rss_kib(pid);
            held = if now == last { held + 1 } else { 0 };
            last = now;
            if held == 4 {
                break;
            }
        }
        last
    }
    let mut all = open(p.port(), first, sql).await;
    until_parked(p, first, 10).await;
    let mut before = settled(p.pid()).await;
    let mut out = Vec::with_capacity(then.len());
    for &n in then {
        all.extend(open(p.port(), n, sql).await);
        until_parked(p, all.len(), 15).await;
        let after = settled(p.pid()).await;
        let per = (after as f64 - before as f64) / n as f64;
        eprintln!(
            "idle clients (ran {sql:?}): VmRSS {before} -> {after} KiB, {per:.3} KiB per client"
        );
        out.push(per);
        before = after;
    }
    drop(all);
    out
}
