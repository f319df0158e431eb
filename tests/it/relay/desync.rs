//! An error that reaches the pooler before the client's Sync (Parse of bad SQL, then Flush:
//! libpq's pipeline mode sends Flush on purpose) must leave the server exactly where
//! PostgreSQL is: it discards the client's messages up to Sync, answers the Sync, and the
//! server goes back to the pool at that ReadyForQuery.

use std::time::Duration;

use crate::core::{scalar, within};
use crate::support::raw::{self, Raw};
use crate::support::{self, Pooler, DB};

const USER: &str = "droid";

/// Parse of bad SQL + Flush, the error read, then Bind/Execute/Sync and a simple query: what
/// the client sees, as tags, and the client (left open and idle).
async fn error_then_sync(port: u16) -> ((String, String, String), Raw) {
    let mut c = Raw::connect(port, USER, DB).await;
    c.send(&raw::batch(&[raw::parse("", "selec 1"), raw::flush()]))
        .await;
    let err = c.recv().await;
    assert_eq!(err.tag, b'E', "the Parse's error arrives after the Flush");
    assert_eq!(raw::sqlstate(&err), "42601");
    c.send(&raw::batch(&[
        raw::bind("", "", &[]),
        raw::execute(""),
        raw::sync(),
    ]))
    .await;
    let after = raw::tags(&c.until_ready().await);
    c.send(&raw::query("select 1")).await;
    let query = raw::tags(&c.until_ready().await);
    (("E".into(), after, query), c)
}

#[tokio::test]
async fn error_before_sync_answers_like_postgres_and_frees_the_server() {
    let pg = support::shared();
    let (direct, _c) = error_then_sync(pg.port).await;
    assert_eq!(
        direct.1, "Z",
        "PostgreSQL skips Bind/Execute and answers the Sync"
    );
    assert_eq!(direct.2, "TDCZ");
    for mode in ["transaction", "statement", "session"] {
        let pooler = Pooler::start(pg, &["--pool-size", "2", "--mode", mode]);
        let (through, _idle) = within(10, mode, error_then_sync(pooler.port())).await;
        assert_eq!(
            through, direct,
            "{mode}: the client sees what PostgreSQL sends"
        );
        if mode != "session" {
            // Idle after ReadyForQuery `I`: the server is back in the pool.
            assert_eq!(pooler.servers_active(), 0, "{mode}: {}", pooler.status());
        }
    }
}

/// Two clients each leave an error before Sync behind them: with a pool of 2, a third
/// client is still served at once.
#[tokio::test]
async fn errors_before_sync_do_not_starve_a_small_pool() {
    let pg = support::shared();
    for mode in ["transaction", "statement"] {
        for track in [false, true] {
            let mut args = vec!["--pool-size", "2", "--mode", mode];
            if track {
                args.push("--track-prepared");
            }
            let pooler = Pooler::start(pg, &args);
            let mut idle = Vec::new();
            for _ in 0..2 {
                idle.push(within(10, mode, error_then_sync(pooler.port())).await.1);
            }
            let third = pooler.connect(USER, DB).await;
            let answer = within(2, "a third client while two sit idle", async {
                scalar(&third, "select 3").await
            })
            .await;
            assert_eq!(answer, "3", "{mode} track={track}");
            assert_eq!(pooler.servers_active(), 0, "{mode} track={track}");
        }
    }
}

/// The same error arriving between pieces of a longer pipeline, with tracked statements: a
/// named Parse after the error is skipped by the server, so the statement does not exist
/// afterwards (as directly), and a Close S in the skipped part is not answered.
#[tokio::test]
async fn skipped_messages_are_not_answered_or_kept() {
    let pg = support::shared();
    let run = |port: u16| async move {
        let mut c = Raw::connect(port, USER, DB).await;
        c.send(&raw::batch(&[raw::parse("ok", "select 1"), raw::sync()]))
            .await;
        let mut seen = raw::tags(&c.until_ready().await);
        c.send(&raw::batch(&[raw::parse("", "select 1/0"), raw::flush()]))
            .await;
        c.send(&raw::batch(&[
            raw::bind("", "", &[]),
            raw::execute(""),
            raw::flush(),
        ]))
        .await;
        loop {
            let f = c.recv().await;
            seen.push(f.tag as char);
            if f.tag == b'E' {
                seen += &raw::sqlstate(&f);
                break;
            }
        }
        // Sent after the error reached the client: all discarded up to the Sync.
        c.send(&raw::batch(&[
            raw::parse("later", "select 2"),
            raw::close(b'S', "ok"),
            raw::sync(),
        ]))
        .await;
        seen += &raw::tags(&c.until_ready().await);
        // "ok" still exists (its Close was skipped) and "later" does not.
        c.send(&raw::batch(&[
            raw::bind("", "ok", &[]),
            raw::execute(""),
            raw::sync(),
        ]))
        .await;
        seen += &raw::tags(&c.until_ready().await);
        c.send(&raw::batch(&[raw::bind("", "later", &[]), raw::sync()]))
            .await;
        let frames = c.until_ready().await;
        seen += &raw::tags(&frames);
        seen += &raw::sqlstate(&frames[0]);
        seen
    };
    let direct = run(pg.port).await;
    // 1/0 is folded when the statement is planned, at Bind.
    assert_eq!(direct, "1Z1E22012Z2DCZEZ26000");
    for (mode, track) in [
        ("transaction", true),
        ("statement", true),
        ("session", false),
    ] {
        let mut args = vec!["--pool-size", "1", "--mode", mode];
        if track {
            args.push("--track-prepared");
        }
        let pooler = Pooler::start(pg, &args);
        let through = within(10, mode, run(pooler.port())).await;
        assert_eq!(through, direct, "{mode}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        if mode != "session" {
            assert_eq!(pooler.servers_active(), 0, "{mode}: {}", pooler.status());
        }
    }
}
