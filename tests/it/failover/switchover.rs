//! A switchover under load: clients write through the pooler (hosts: the primary and its
//! standby, `read-write`) while the primary is stopped (fast) and, a second later, the
//! standby promoted. Writes resume within 1 s of the promotion; with `failover.hold_timeout`
//! no client sees an error. Afterwards the old primary is rebuilt as the new one's standby.
//!
//! PostgreSQL itself aborts a transaction that is running on the primary when it stops
//! (57P01, with or without any pooler): the writers are between transactions when it stops
//! (a gate each write holds), so what they see is the pooler's doing alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::RwLock;
use tokio::task::{block_in_place, JoinHandle};

use super::{hosts_yaml, USER};
use crate::support::{shared_pair, Pair, Pooler, DB};

const WRITERS: usize = 4;

/// One write's outcome: which writer, when it ended, and the SQLSTATE if it failed.
#[derive(Debug, Clone)]
struct Outcome {
    writer: usize,
    at: Instant,
    error: Option<String>,
}

struct Writers {
    stop: Arc<AtomicBool>,
    gate: Arc<RwLock<()>>,
    log: Arc<Mutex<Vec<Outcome>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Writers {
    /// `WRITERS` clients inserting through `pooler` in a loop, a short pause after each.
    async fn start(pooler: &Pooler) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let gate = Arc::new(RwLock::new(()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for writer in 0..WRITERS {
            let c = pooler.connect(USER, DB).await;
            let (stop, gate, log) = (stop.clone(), gate.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = {
                        let _between = gate.read().await;
                        c.batch_execute("insert into failover_writes(writer) values (1)")
                            .await
                    };
                    let error = r.err().map(|e| {
                        e.code()
                            .map_or_else(|| format!("no code: {e}"), |c| c.code().to_owned())
                    });
                    let pause = if error.is_some() { 20 } else { 10 };
                    log.lock().unwrap().push(Outcome {
                        writer,
                        at: Instant::now(),
                        error,
                    });
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            }));
        }
        Writers {
            stop,
            gate,
            log,
            tasks,
        }
    }

    fn outcomes(&self) -> Vec<Outcome> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until every writer has written successfully after `since`.
    async fn wait_all_ok_after(&self, since: Instant, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self
                .outcomes()
                .iter()
                .filter(|o| o.at > since && o.error.is_none())
                .fold([false; WRITERS], |mut seen, o| {
                    seen[o.writer] = true;
                    seen
                });
            if ok.iter().all(|x| *x) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not every writer wrote again: {ok:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let log = self.log.lock().unwrap().clone();
        log
    }
}

/// Stops the primary with no write in flight, promotes the standby `gap` later; returns
/// when the primary stopped, when the promotion started and when it completed.
async fn switch(pair: &mut Pair, writers: &Writers, gap: Duration) -> (Instant, Instant, Instant) {
    let stopped = {
        let _no_write_in_flight = writers.gate.write().await;
        block_in_place(|| pair.stop_primary());
        Instant::now()
    };
    tokio::time::sleep(gap).await;
    let promoting = Instant::now();
    let promoted = block_in_place(|| pair.promote_standby());
    (stopped, promoting, promoted)
}

/// What one switchover run saw.
struct Run {
    outcomes: Vec<Outcome>,
    stopped: Instant,
    promoting: Instant,
    promoted: Instant,
    pooler: Pooler,
    /// The pooler's logins at the standby (the new primary) from the stop until every writer
    /// wrote again and a second more, from its `log_connections` lines.
    standby_logins: usize,
}

/// Runs one switchover with `extra` pooler settings.
async fn run_switchover(extra: &str) -> Run {
    let mut pair = shared_pair().lock().await;
    block_in_place(|| {
        pair.primary()
            .psql("create table if not exists failover_writes(writer int)");
        let standby = pair.standby();
        standby.psql("alter system set log_connections = on");
        standby.psql("select pg_reload_conf()");
    });
    let (p, s) = (pair.primary().port, pair.standby().port);
    let yaml = hosts_yaml(
        &[p, s],
        &format!("  target_session_attrs: read-write\n{extra}"),
    );
    let pooler = block_in_place(|| Pooler::start_with_hosts(&yaml));
    let writers = Writers::start(&pooler).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = pair.standby().log_path();
    let from = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    let (stopped, promoting, promoted) = switch(&mut pair, &writers, Duration::from_secs(1)).await;
    writers
        .wait_all_ok_after(promoted, Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let outcomes = writers.finish().await;
    let text = std::fs::read(&log).expect("the standby's log");
    let login = format!("connection authorized: user={USER} ");
    let standby_logins = String::from_utf8_lossy(&text[from.min(text.len())..])
        .lines()
        .filter(|l| l.contains(&login))
        .count();
    block_in_place(|| pair.rebuild_standby());
    Run {
        outcomes,
        stopped,
        promoting,
        promoted,
        pooler,
        standby_logins,
    }
}

/// The first write that succeeded after the stop: never before the promotion began (one
/// writer at a time), and within 1 s of its completion.
fn check_resumed(outcomes: &[Outcome], stopped: Instant, promoting: Instant, promoted: Instant) {
    let first = outcomes
        .iter()
        .filter(|o| o.at > stopped && o.error.is_none())
        .map(|o| o.at)
        .min()
        .expect("writes resumed");
    assert!(first > promoting, "a write succeeded with no primary");
    let after = first.saturating_duration_since(promoted);
    eprintln!(
        "promotion took {:?}; first write {:?} after it; {} writes failed",
        promoted - promoting,
        after,
        outcomes.iter().filter(|o| o.error.is_some()).count()
    );
    assert!(
        after <= Duration::from_secs(1),
        "first write {after:?} after the promotion"
    );
    let before = outcomes
        .iter()
        .filter(|o| o.at < stopped && o.error.is_none())
        .count();
    assert!(
        before >= WRITERS,
        "the writers were writing before the stop: {before}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_without_hold_writes_resume_within_a_second() {
    let r = run_switchover("").await;
    check_resumed(&r.outcomes, r.stopped, r.promoting, r.promoted);
    let errors: Vec<&String> = r.outcomes.iter().filter_map(|o| o.error.as_ref()).collect();
    // Between the stop and the promotion there is no primary: the pooler says so, 57P03.
    assert!(!errors.is_empty(), "no primary for a second, yet no error");
    let other: Vec<&&String> = errors.iter().filter(|c| **c != "57P03").take(10).collect();
    assert!(other.is_empty(), "errors other than 57P03: {other:?}");
    let new_primary = "[POOL] host 127.0.0.1:";
    assert!(
        r.pooler
            .lines()
            .iter()
            .any(|l| l.starts_with(new_primary) && l.ends_with("is primary (was standby)")),
        "{:?}",
        r.pooler.lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_with_hold_no_client_sees_an_error() {
    let r = run_switchover(&format!(
        "pool:\n  size: {WRITERS}\nfailover:\n  hold_timeout: 10s\n"
    ))
    .await;
    check_resumed(&r.outcomes, r.stopped, r.promoting, r.promoted);
    eprintln!("{} logins at the standby", r.standby_logins);
    // The held logins keep the standby they reach and ask it again until it is promoted, so
    // the new primary sees no more logins than the pool has servers (a login per recheck
    // would be several per second of the gap).
    assert!(
        r.standby_logins <= WRITERS,
        "{} logins at the standby for a pool of {WRITERS}",
        r.standby_logins
    );
    let errors: Vec<(usize, &String)> = r
        .outcomes
        .iter()
        .filter_map(|o| Some((o.writer, o.error.as_ref()?)))
        .collect();
    assert!(
        errors.is_empty(),
        "{} errors, the first: {:?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
}
