//! `LISTEN` under `pool.session_state: track` against a real PostgreSQL: the pool's one
//! listening connection serves every listening client, so a listener holds no server (a
//! pool of one server keeps serving a busy client while three clients listen); a
//! notification reaches the clients listening on its channel and no other, none comes after
//! `UNLISTEN` or from a rolled-back `NOTIFY`, and its sender's process id is the key the
//! pooler gave the sending client. A listening connection terminated by PostgreSQL is opened
//! again, listens again, and its clients are warned that notifications may have been lost.

use std::time::Duration;

use tokio::task::block_in_place;

use crate::core::create_db;
use crate::support::raw::{self, tags, Raw};
use crate::support::{self, Pooler};
use droid_pool::protocol::frame::Frame;

const USER: &str = "droid";

fn start(db: &str) -> Pooler {
    start_sized(db, 1)
}

fn start_sized(db: &str, size: usize) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: {size}\n  mode: transaction\n  \
         session_state: track\n  query_wait_timeout: 5s\nauth:\n  user_methods:\n    \
         {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// A NotificationResponse's sender, channel and payload.
fn note(f: &Frame) -> (i32, String, String) {
    assert_eq!(f.tag, b'A', "a notification, not {:?}", f.tag as char);
    let (pid, channel, payload) =
        droid_pool::listen::parse_notification(f.body()).expect("a notification");
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (pid, s(channel), s(payload))
}

async fn ok(c: &mut Raw, sql: &str) {
    let f = c.query(sql).await;
    assert!(!tags(&f).contains('E'), "{sql}: {}", tags(&f));
}

/// The next message within a few seconds: a notification expected.
async fn next_note(c: &mut Raw) -> (i32, String, String) {
    note(&c.recv().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_hold_no_server_and_hear_only_their_channels() {
    let db = "ls_basic";
    let p = start(db);
    let (mut l1, k1) = Raw::connect_keyed(p.port(), USER, db).await;
    let mut l2 = Raw::connect(p.port(), USER, db).await;
    let mut l3 = Raw::connect(p.port(), USER, db).await;
    let (mut b, kb) = Raw::connect_keyed(p.port(), USER, db).await;

    // B holds the pool's only server in an open block while the others LISTEN: each is
    // answered at once (a LISTEN that needed a server would wait out query_wait_timeout).
    ok(&mut b, "begin; select 1").await;
    for (c, ch) in [(&mut l1, "ch"), (&mut l2, "\"ch\""), (&mut l3, "other")] {
        let f = tokio::time::timeout(Duration::from_secs(2), c.query(&format!("LISTEN {ch}")))
            .await
            .expect("LISTEN answered while the only server is held");
        assert_eq!(tags(&f), "CZ", "LISTEN {ch}");
    }
    ok(&mut b, "NOTIFY ch, 'in block'; commit").await;
    for l in [&mut l1, &mut l2] {
        assert_eq!(next_note(l).await, (kb.0, "ch".into(), "in block".into()));
    }
    assert!(
        l3.silent_for(Duration::from_millis(300)).await,
        "l3 listens on another channel"
    );

    // A rolled-back NOTIFY sends nothing; pg_notify does as NOTIFY does.
    ok(&mut b, "begin; notify ch, 'rolled back'; rollback").await;
    ok(&mut b, "select pg_notify('other', 'to l3')").await;
    assert_eq!(
        next_note(&mut l3).await,
        (kb.0, "other".into(), "to l3".into())
    );
    assert!(l1.silent_for(Duration::from_millis(300)).await);
    assert!(l2.silent_for(Duration::from_millis(100)).await);

    // After UNLISTEN, nothing more for l2; l1 still hears, its own NOTIFY too (with its own
    // key, as a direct session hears itself, before the NOTIFY's ReadyForQuery).
    let f = l2.query("UNLISTEN ch").await;
    assert_eq!(tags(&f), "CZ");
    let f = l1.query("NOTIFY ch, 'self'").await;
    assert_eq!(
        tags(&f),
        "CAZ",
        "its own notification before its ReadyForQuery"
    );
    assert_eq!(note(&f[1]), (k1.0, "ch".into(), "self".into()));
    assert!(l2.silent_for(Duration::from_millis(300)).await);

    // A listener that runs transactions gets notifications between them, and meanwhile the
    // busy client keeps the one server going.
    let mut got = Vec::new();
    for i in 0..20 {
        ok(&mut b, &format!("select pg_notify('ch', 'n{i}')")).await;
        let f = l1.query("select 1").await;
        // Between transactions: before l1's query's reply, or (as PostgreSQL 15 sends those
        // that arrived during a transaction) right before its ReadyForQuery; never amid it.
        let t = tags(&f);
        let amid = t
            .trim_start_matches('A')
            .strip_suffix('Z')
            .map(|r| r.trim_end_matches('A'));
        assert_eq!(amid, Some("TDC"), "{t}");
        got.extend(f.iter().filter(|f| f.tag == b'A').map(|f| note(f).2));
    }
    while got.len() < 20 {
        let f = l1.recv().await;
        if f.tag == b'A' {
            got.push(note(&f).2);
        }
    }
    assert_eq!(got, (0..20).map(|i| format!("n{i}")).collect::<Vec<_>>());

    // UNLISTEN * ends l3's subscriptions; DISCARD ALL ends l1's (a failed one does not).
    ok(&mut l3, "UNLISTEN *").await;
    ok(&mut b, "select pg_notify('other', 'late')").await;
    assert!(l3.silent_for(Duration::from_millis(300)).await);
    ok(&mut l1, "begin").await;
    let f = l1.query("DISCARD ALL").await;
    assert!(
        tags(&f).contains('E'),
        "DISCARD ALL refused in a block: {}",
        tags(&f)
    );
    ok(&mut l1, "rollback").await;
    ok(&mut b, "select pg_notify('ch', 'still')").await;
    assert_eq!(next_note(&mut l1).await.2, "still");
    ok(&mut l1, "DISCARD ALL").await;
    ok(&mut b, "select pg_notify('ch', 'discarded')").await;
    assert!(
        l1.silent_for(Duration::from_millis(300)).await,
        "DISCARD ALL unlistens"
    );
}

/// The listening connection is counted: one server for the clients' transactions and one
/// listening, however many clients listen; it closes when the last listener leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listening_connection_per_pool() {
    let db = "ls_count";
    let p = start(db);
    let pg = support::shared();
    let direct = pg.connect(USER, "postgres").await;
    let count = || async {
        let rows = direct
            .query(
                "select count(*)::int from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()",
                &[&db],
            )
            .await
            .unwrap();
        rows[0].get::<_, i32>(0)
    };
    let mut ls = Vec::new();
    for i in 0..5 {
        let mut l = Raw::connect(p.port(), USER, db).await;
        ok(&mut l, &format!("LISTEN c{i}")).await;
        ok(&mut l, "LISTEN shared").await;
        ls.push(l);
    }
    let mut b = Raw::connect(p.port(), USER, db).await;
    ok(&mut b, "select pg_notify('shared', 'all')").await;
    for l in &mut ls {
        assert_eq!(next_note(l).await.2, "all");
    }
    assert_eq!(
        count().await,
        2,
        "one server for transactions, one listening"
    );
    drop(ls);
    let mut closed = false;
    for _ in 0..50 {
        if count().await == 1 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed,
        "the listening connection closes with its last listener"
    );
}

/// PostgreSQL terminates the listening connection: its clients are warned (01000), and once
/// it is open again they hear their channels again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_connection_is_reopened_and_its_clients_warned() {
    let db = "ls_lost";
    let p = start(db);
    let pg = support::shared();
    let direct = pg.connect(USER, "postgres").await;
    let mut l = Raw::connect(p.port(), USER, db).await;
    ok(&mut l, "LISTEN ch").await;
    let rows = direct
        .query(
            "select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 \
             and query ilike 'listen%'",
            &[&db],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one listening backend");
    let warned = l.recv().await;
    assert_eq!(
        warned.tag, b'N',
        "a warning that notifications may have been lost"
    );
    assert_eq!(crate::support::raw::sqlstate(&warned), "01000");
    let mut b = Raw::connect(p.port(), USER, db).await;
    // Listening again takes a login: notify until one arrives.
    let mut heard = false;
    for i in 0..50 {
        ok(&mut b, &format!("select pg_notify('ch', 'again {i}')")).await;
        if let Ok(f) = tokio::time::timeout(Duration::from_millis(200), l.recv()).await {
            assert!(note(&f).2.starts_with("again"));
            heard = true;
            break;
        }
    }
    assert!(heard, "notifications flow again after the reopen");
}

/// A client's own `NOTIFY` on a channel it listens on: PostgreSQL delivers the notification
/// before the ReadyForQuery of the `NOTIFY` (libpq's `PQnotifies` right after `PQexec`
/// relies on it; psycopg's own test does). Through the pooler it must be the same, though
/// the notification comes through the pool's listening connection: each reply is compared
/// with direct, message by message, over several rounds (an ordering left to chance would
/// show). Another client's notification committed before it comes first, as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_own_notification_comes_before_the_ready_for_query() {
    let db = "ls_own";
    let p = start(db);
    let pg = support::shared();
    for port in [pg.port, p.port()] {
        let (mut c, key) = Raw::connect_keyed(port, USER, db).await;
        let mut other = Raw::connect(port, USER, db).await;
        ok(&mut c, "LISTEN foo").await;
        ok(&mut c, "LISTEN bar").await;
        for round in 0..20 {
            for (channel, payload) in [("foo", "1"), ("bar", "2"), ("foo", "3")] {
                let f = c.query(&format!("NOTIFY {channel}, '{payload}'")).await;
                assert_eq!(tags(&f), "CAZ", "port {port} round {round}");
                let (pid, ch, pl) = note(&f[1]);
                assert_eq!((ch.as_str(), pl.as_str()), (channel, payload));
                if port == p.port() {
                    assert_eq!(pid, key.0, "the key the pooler gave the client");
                }
            }
            // Another client's, committed before the client's own: both before its
            // ReadyForQuery, in commit order.
            ok(&mut other, "NOTIFY bar, 'other'").await;
            let f = c.query("select pg_notify('foo', 'mine')").await;
            let notes: Vec<_> = f.iter().filter(|f| f.tag == b'A').map(note).collect();
            let payloads: Vec<&str> = notes.iter().map(|n| n.2.as_str()).collect();
            assert_eq!(payloads, ["other", "mine"], "port {port} round {round}");
            assert_eq!(f.last().map(|f| f.tag), Some(b'Z'));
        }
    }
}

/// A client that sends `NOTIFY` and quits right after the answer: its listeners still see
/// the key the pooler gave it as the sender, not the server's process id (which no client
/// was told). The listener is in a transaction meanwhile, so the notification is rendered for
/// it only after the sender has gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_sender_is_still_named_by_its_key() {
    let db = "ls_gone";
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "pool:\n  size: 2\n  mode: transaction\n  session_state: track\nauth:\n  \
         user_methods:\n    {USER}: trust\n"
    );
    let p = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let mut l = Raw::connect(p.port(), USER, db).await;
    ok(&mut l, "LISTEN gone").await;
    for i in 0..5 {
        ok(&mut l, "BEGIN").await;
        let (mut s, ks) = Raw::connect_keyed(p.port(), USER, db).await;
        ok(&mut s, &format!("NOTIFY gone, '{i}'")).await;
        s.send(&[b'X', 0, 0, 0, 4]).await;
        assert!(s.until_eof(5).await.is_some(), "the sender's session ended");
        // Its slot is gone once the pooler has seen the Terminate: give it a moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let f = l.query("COMMIT").await;
        let mut notes: Vec<_> = f.iter().filter(|f| f.tag == b'A').map(note).collect();
        if notes.is_empty() {
            notes.push(next_note(&mut l).await);
        }
        assert_eq!(
            notes,
            [(ks.0, "gone".to_owned(), i.to_string())],
            "round {i}"
        );
    }
}

/// A pool of one server in `mode` with `track_prepared`, for the extended-protocol forms.
fn start_tracked(db: &str, mode: &str) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: 1\n  mode: {mode}\n  \
         session_state: track\n  track_prepared: true\n  query_wait_timeout: 5s\nauth:\n  \
         user_methods:\n    {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// The tags of a batch's answer, sent whole, within 2 s.
async fn batch_tags(c: &mut Raw, msgs: &[bytes::BytesMut]) -> String {
    c.send(&raw::batch(msgs)).await;
    let f = tokio::time::timeout(Duration::from_secs(2), c.until_ready())
        .await
        .expect("the batch answered while the only server is held");
    tags(&f)
}

/// `LISTEN`/`UNLISTEN` through the extended protocol, as JDBC sends it (one unnamed batch)
/// and as tokio-postgres does (a named statement made in one batch, run in the next), holds
/// no server either: answered while another client holds the pool's only server, with the
/// messages PostgreSQL sends. Run by a server (bound again inside a block beside other
/// statements), the statement pins the client, as any `LISTEN` a server runs does; alone in
/// a block, it is done by the listening connection (an `UNLISTEN` counts at `COMMIT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_listen_holds_no_server() {
    use crate::support::metrics::{metric_or_zero, scrape};
    use futures_util::StreamExt;
    use raw::{bind, describe, execute, parse, sync};

    let db = "ls_ext";
    let p = start_tracked(db, "transaction");
    let pg = support::shared();
    let jdbc = |sql: &str| {
        vec![
            parse("", sql),
            bind("", "", &[]),
            describe(b'P', ""),
            execute(""),
            sync(),
        ]
    };

    let described = vec![
        parse("", "listen \"Other\""),
        describe(b'S', ""),
        bind("", "", &[]),
        execute(""),
        sync(),
    ];

    // What PostgreSQL answers, directly.
    let mut d = Raw::connect(pg.port, USER, db).await;
    let direct = batch_tags(&mut d, &jdbc("LISTEN ch")).await;
    assert_eq!(direct, "12nCZ");
    let direct_described = batch_tags(&mut d, &described).await;
    assert_eq!(direct_described, "1tn2CZ");

    // tokio-postgres makes each statement (the one message that needs a server), then runs
    // it; its notifications come through its connection.
    let url = format!("host=127.0.0.1 port={} user={USER} dbname={db}", p.port());
    let (tp, mut conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut msgs = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = msgs.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    tp.execute("LISTEN ch", &[]).await.unwrap();
    let listen = tp.prepare("LISTEN ch").await.unwrap();
    let unlisten = tp.prepare("UNLISTEN ch").await.unwrap();

    // B holds the only server in an open block while the others listen.
    let (mut b, kb) = Raw::connect_keyed(p.port(), USER, db).await;
    ok(&mut b, "begin; select 1").await;
    let mut l1 = Raw::connect(p.port(), USER, db).await;
    assert_eq!(batch_tags(&mut l1, &jdbc("LISTEN ch")).await, direct);
    let mut l2 = Raw::connect(p.port(), USER, db).await;
    assert_eq!(batch_tags(&mut l2, &described).await, direct_described);
    // tokio-postgres runs its statement again: no Parse, no server.
    tokio::time::timeout(Duration::from_secs(2), tp.execute(&listen, &[]))
        .await
        .expect("answered while the only server is held")
        .unwrap();
    ok(&mut b, "NOTIFY ch, 'one'; NOTIFY \"Other\", 'two'; commit").await;
    assert_eq!(next_note(&mut l1).await, (kb.0, "ch".into(), "one".into()));
    assert_eq!(next_note(&mut l2).await.1, "Other");
    let got = tokio::time::timeout(Duration::from_secs(2), notes.recv()).await;
    assert_eq!(got.expect("tokio-postgres notified"), Some("one".into()));

    // UNLISTEN the same ways: nothing more comes.
    ok(&mut b, "begin").await;
    assert_eq!(batch_tags(&mut l1, &jdbc("UNLISTEN ch")).await, "12nCZ");
    tokio::time::timeout(Duration::from_secs(2), tp.execute(&unlisten, &[]))
        .await
        .expect("answered while the only server is held")
        .unwrap();
    ok(&mut b, "NOTIFY ch, 'late'; commit").await;
    assert!(l1.silent_for(Duration::from_millis(300)).await);
    let late = tokio::time::timeout(Duration::from_millis(300), notes.recv()).await;
    assert!(late.is_err(), "tokio-postgres unlistened: {late:?}");
    let pins = || {
        let m = scrape(&p);
        metric_or_zero(&m, "droidpool_session_pins_total", &[("reason", "listen")])
    };
    assert_eq!(pins(), 0.0, "no client pinned so far");

    // Run by a server, inside a block, the statement pins the client there: l2's unnamed
    // statement bound again (replayed first), and tokio-postgres's named one.
    // (A simple Query would drop the unnamed statement: the block opens with a named one.)
    let in_block = [
        parse("b", "begin"),
        bind("", "b", &[]),
        execute(""),
        bind("", "", &[]),
        execute(""),
        sync(),
    ];
    l2.send(&raw::batch(&in_block)).await;
    assert_eq!(tags(&l2.until_ready().await), "12C2CZ");
    ok(&mut l2, "commit").await;
    assert_eq!(pins(), 1.0);
    drop(l2);
    // tokio-postgres's own statement alone in a block is done by the listening connection:
    // no pin, and the busy client gets the one server once the block is over.
    tp.batch_execute("begin").await.unwrap();
    tp.execute(&listen, &[]).await.unwrap();
    tp.batch_execute("commit").await.unwrap();
    assert_eq!(pins(), 1.0);
    ok(&mut b, "NOTIFY ch, 'after commit'").await;
    let got = tokio::time::timeout(Duration::from_secs(2), notes.recv()).await;
    assert_eq!(
        got.expect("tokio-postgres notified"),
        Some("after commit".into())
    );
    // Its UNLISTEN in a block ends the subscription if the block commits, not if it rolls
    // back.
    for (end, payload) in [("rollback", "kept"), ("commit", "gone")] {
        tp.batch_execute("begin").await.unwrap();
        tp.execute(&unlisten, &[]).await.unwrap();
        tp.batch_execute(end).await.unwrap();
        ok(&mut b, &format!("NOTIFY ch, '{payload}'")).await;
        let got = tokio::time::timeout(Duration::from_millis(500), notes.recv()).await;
        match end {
            "rollback" => assert_eq!(got.expect("still listening"), Some("kept".into())),
            _ => assert!(got.is_err(), "unlistened at commit: {got:?}"),
        }
    }
    assert_eq!(pins(), 1.0);
}

/// The payloads `l` hears now: those that arrive within 500 ms, then those before the
/// ReadyForQuery of a query of its own. (One that comes later shows in the tags of the next
/// step's replies, which the comparison keeps.)
async fn heard(l: &mut Raw) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(Some(f)) = tokio::time::timeout(Duration::from_millis(500), l.try_recv()).await {
        got.push(note(&f).2);
    }
    let f = l.query("select 1").await;
    got.extend(f.iter().filter(|f| f.tag == b'A').map(|f| note(f).2));
    got
}

/// The statements of `sql` (split at `;`) as pgjdbc sends a multi-statement text through the
/// extended protocol: each an unnamed Parse, Bind, Describe of the portal and Execute; then
/// one Sync.
fn jdbc_batch(sql: &str) -> Vec<u8> {
    use raw::{bind, describe, execute, parse, sync};
    let mut msgs = Vec::new();
    for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        msgs.extend([
            parse("", stmt),
            bind("", "", &[]),
            describe(b'P', ""),
            execute(""),
        ]);
    }
    msgs.push(sync());
    raw::batch(&msgs)
}

/// Runs `steps` (a listener's queries, then a busy client's `NOTIFY` on each of `notify`'s
/// channels with the step's payload after its prefix; a query that begins with `ext:` is
/// sent as [`jdbc_batch`] sends the rest) directly against PostgreSQL and through
/// the pooler `p`, and returns, for each, every answer the listener got and what it heard
/// after each step. The busy client runs between the listener's steps: with a pool of one
/// server, a listener pinned there would make it wait out `query_wait_timeout` and fail.
async fn run_both_ways(
    p: &Pooler,
    db: &str,
    steps: &[(&[&str], &str)],
    notify: &[(&str, &str)],
) -> Vec<Vec<String>> {
    let pg = support::shared();
    let mut seen = Vec::new();
    for port in [pg.port, p.port()] {
        let mut l = Raw::connect(port, USER, db).await;
        let mut b = Raw::connect(port, USER, db).await;
        let mut log = Vec::new();
        for (sqls, payload) in steps {
            for sql in *sqls {
                let f = match sql.strip_prefix("ext:") {
                    Some(rest) => {
                        l.send(&jdbc_batch(rest)).await;
                        l.until_ready().await
                    }
                    None => l.query(sql).await,
                };
                log.push(format!("{sql}: {}", answer(&f)));
            }
            let sql: Vec<String> = notify
                .iter()
                .map(|(ch, prefix)| format!("notify {ch}, '{prefix}{payload}'"))
                .collect();
            ok(&mut b, &sql.join("; ")).await;
            log.push(format!("heard {:?}", heard(&mut l).await));
        }
        seen.push(log);
    }
    seen
}

/// Asserts the pooler's run (`seen[1]`) answered and delivered as PostgreSQL's (`seen[0]`),
/// and that what was heard after each step is `want`.
fn assert_heard(seen: &[Vec<String>], want: &[&str]) {
    assert_eq!(
        seen[1], seen[0],
        "through the pooler (left) vs directly (right)"
    );
    let heard: Vec<&str> = seen[0]
        .iter()
        .filter(|l| l.starts_with("heard"))
        .map(String::as_str)
        .collect();
    assert_eq!(heard, want, "{:?}", seen[0]);
}

/// Asserts no client of `p` was pinned for a `LISTEN`.
fn assert_no_listen_pin(p: &Pooler) {
    use crate::support::metrics::{metric_or_zero, scrape};
    let m = scrape(p);
    let pins = metric_or_zero(&m, "droidpool_session_pins_total", &[("reason", "listen")]);
    assert_eq!(pins, 0.0, "no listener pinned");
}

/// An `UNLISTEN` a server runs for a client that listens through the pool's connection (in
/// a block, beside another statement) ends that subscription when it commits, as
/// PostgreSQL's does: not when it is rolled back or fails. Every step is run directly too,
/// and the notifications heard compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisten_in_a_transaction_ends_the_subscription_at_commit() {
    let db = "ls_unlisten";
    let p = start(db);
    let steps: &[(&[&str], &str)] = &[
        (&["LISTEN ch", "LISTEN other"], "a"),
        (&["begin; unlisten ch; rollback"], "b"),
        (&["begin", "unlisten ch", "rollback"], "c"),
        (&["begin; unlisten ch; select 1/0", "rollback"], "d"),
        (
            &[
                "begin",
                "savepoint s",
                "unlisten ch",
                "rollback to s",
                "commit",
            ],
            "e",
        ),
        (&["unlisten ch; select 1"], "f"),
        (&["LISTEN ch"], "g"),
        (&["begin", "unlisten ch", "commit"], "h"),
        (&["LISTEN ch"], "i"),
        (&["begin", "unlisten *", "commit"], "j"),
    ];
    let notify = [("ch", ""), ("other", "o")];
    let seen = run_both_ways(&p, db, steps, &notify).await;
    assert_eq!(
        seen[1], seen[0],
        "through the pooler (left) vs directly (right)"
    );
    assert!(
        seen[0].iter().any(|l| l == "heard [\"oh\"]"),
        "{:?}",
        seen[0]
    );
}

/// asyncpg's reset (run when a pool takes a connection back) ends the session's
/// subscriptions with a `DO` block: `UNLISTEN *` if `pg_listening_channels()` lists one. On
/// a pooled server that function lists nothing, so the pooler takes such a block for
/// `UNLISTEN *`: after it the client hears nothing more, as directly, and a rolled-back one
/// ends nothing. Every step is run directly too, and what is heard compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpgs_reset_ends_the_subscriptions() {
    let db = "ls_reset";
    let p = start(db);
    let unlisten_if_listening =
        "DO $$\nBEGIN\n    PERFORM * FROM pg_listening_channels() LIMIT 1;\n    \
         IF FOUND THEN\n        UNLISTEN *;\n    END IF;\nEND;\n$$;";
    let reset = format!(
        "SELECT pg_advisory_unlock_all();\nCLOSE ALL;\n{unlisten_if_listening}\nRESET ALL;"
    );
    let steps: &[(&[&str], &str)] = &[
        (&["LISTEN ch", "LISTEN other"], "a"),
        (&[&reset], "b"),
        (&["LISTEN ch"], "c"),
        (&["begin", unlisten_if_listening, "rollback"], "d"),
        (&[unlisten_if_listening], "e"),
        (&[unlisten_if_listening], "f"),
    ];
    let notify = [("ch", ""), ("other", "o")];
    let seen = run_both_ways(&p, db, steps, &notify).await;
    let want = [
        "heard [\"a\", \"oa\"]",
        "heard []",
        "heard [\"c\"]",
        "heard [\"d\"]",
        "heard []",
        "heard []",
    ];
    assert_heard(&seen, &want);
}

/// The messages of an answer as the test compares them: each tag, with a CommandComplete's
/// tag and a ReadyForQuery's status.
fn answer(f: &[Frame]) -> String {
    f.iter()
        .map(|f| match f.tag {
            b'C' | b'Z' => format!("{}({})", f.tag as char, String::from_utf8_lossy(f.body())),
            t => (t as char).to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A lone `LISTEN` or `UNLISTEN` inside a block (as psycopg and psycopg2 send one outside
/// autocommit) is done by the pool's listening connection, not a server: the client is not
/// pinned, so a busy client keeps the pool's one server between the listener's blocks. A
/// rollback ends the `LISTEN`; an `UNLISTEN` counts when its block commits. What is heard
/// after every step is compared with PostgreSQL's own behaviour: rollbacks, a failed block,
/// its COMMIT, a rollback to a savepoint, an UNLISTEN in the same block, a statement
/// between, the client's own NOTIFY in the block of its LISTEN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_in_a_block_follows_its_transaction_and_pins_nothing() {
    let db = "ls_block";
    let p = start(db);
    let steps: &[(&[&str], &str)] = &[
        (&["begin", "listen ch", "commit"], "a"),
        (&["begin", "listen other", "rollback"], "b"),
        (&["begin", "listen other", "select 1/0", "rollback"], "c"),
        (&["begin", "listen other", "select 1/0", "commit"], "d"),
        (
            &[
                "begin",
                "savepoint s",
                "listen other",
                "rollback to s",
                "commit",
            ],
            "e",
        ),
        (&["begin", "listen other", "unlisten other", "commit"], "f"),
        (&["begin", "unlisten ch", "listen ch", "commit"], "g"),
        (
            &["begin", "listen \"Q\"", "select 1", "listen other", "end"],
            "h",
        ),
        (&["begin", "unlisten *", "commit"], "i"),
        (&["start transaction", "listen ch", "commit"], "j"),
        (&["begin", "unlisten *", "rollback"], "k"),
        // Its own NOTIFY in the block of its LISTEN: heard before the COMMIT's
        // ReadyForQuery, as directly; rolled back, neither.
        (&["begin", "listen s", "notify s, 'own'", "commit"], "l"),
        (&["begin", "listen s2", "notify s2, 'own'", "rollback"], "m"),
        (&["unlisten s"], "n"),
    ];
    let notify = [("ch", ""), ("other", "o"), ("\"Q\"", "q")];
    let seen = run_both_ways(&p, db, steps, &notify).await;
    assert_eq!(
        seen[1], seen[0],
        "through the pooler (left) vs directly (right)"
    );
    for want in [
        "heard [\"a\"]",
        "heard [\"h\", \"oh\", \"qh\"]",
        "heard []",
        "commit: C(COMMIT\0) A Z(I)",
    ] {
        assert!(seen[0].iter().any(|l| l == want), "{want}: {:?}", seen[0]);
    }
    assert_no_listen_pin(&p);
}

/// A `LISTEN` inside a block by a client that listened on nothing starts, as PostgreSQL's
/// does, at the commit: what another session notifies while the block is open is not
/// delivered after the commit (psycopg outside autocommit listens this way). A client that
/// listens already gets those of a channel it adds in a block, as PostgreSQL's, which reads
/// its queue only after the commit, does. Every step is run directly too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_listen_in_a_block_starts_at_its_commit() {
    let db = "ls_fresh";
    // Two servers: the notifier runs while the listener's block holds one.
    let p = start_sized(db, 2);
    let steps: &[(&[&str], &str)] = &[
        (&["begin", "listen ch"], "a"),
        (&["select 1"], "b"),
        (&["commit"], "c"),
        (&["begin", "listen ch2"], "d"),
        (&["commit"], "e"),
        (&["unlisten *"], "f"),
        (&["begin", "listen ch", "listen ch2"], "g"),
        (&["commit"], "h"),
    ];
    let notify = [("ch", ""), ("ch2", "2")];
    let seen = run_both_ways(&p, db, steps, &notify).await;
    let want = [
        "heard []",
        "heard []",
        "heard [\"c\"]",
        "heard []",
        "heard [\"e\", \"2e\"]",
        "heard []",
        "heard []",
        "heard [\"h\", \"2h\"]",
    ];
    assert_heard(&seen, &want);
    // The first listener's commit brings nothing notified during its block; the second
    // block's (a listener already) brings both of its channels' notifications.
    let commits: Vec<&String> = seen[0].iter().filter(|l| l.starts_with("commit")).collect();
    assert_eq!(
        commits,
        [
            "commit: C(COMMIT\0) Z(I)",
            "commit: C(COMMIT\0) A A Z(I)",
            "commit: C(COMMIT\0) Z(I)"
        ]
    );
    assert_no_listen_pin(&p);
}

/// A Query made only of `LISTEN`s and `UNLISTEN`s (Graphile Worker listens with `LISTEN
/// "jobs:insert"; LISTEN "worker:migrate";`) holds no server either: outside a block its
/// statements count by their sum, as one implicit transaction; in a block each counts as a
/// lone one does (a rollback ends them). Every step is run directly too, and what is heard
/// compared; the pool's one server keeps serving the busy client between steps, and no
/// client is pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_listens_pins_nothing() {
    let db = "ls_multi";
    let p = start(db);
    let steps: &[(&[&str], &str)] = &[
        (&[r#"LISTEN "jobs:insert"; LISTEN "worker:migrate";"#], "a"),
        (
            &[r#"UNLISTEN "jobs:insert"; LISTEN other; listen other"#],
            "b",
        ),
        (&[r#"LISTEN x; UNLISTEN *; LISTEN "jobs:insert""#], "c"),
        (
            &[
                "begin",
                r#"LISTEN other; UNLISTEN "jobs:insert""#,
                "rollback",
            ],
            "d",
        ),
        (
            &["begin", r#"LISTEN other; UNLISTEN "jobs:insert""#, "commit"],
            "e",
        ),
        (&["UNLISTEN other; LISTEN other"], "f"),
        (&["UNLISTEN *; UNLISTEN *"], "g"),
        (&["LISTEN a; LISTEN b; UNLISTEN a; UNLISTEN b"], "h"),
    ];
    let notify = [
        ("\"jobs:insert\"", "j"),
        ("\"worker:migrate\"", "w"),
        ("other", "o"),
    ];
    let seen = run_both_ways(&p, db, steps, &notify).await;
    let want = [
        "heard [\"ja\", \"wa\"]",
        "heard [\"wb\", \"ob\"]",
        "heard [\"jc\"]",
        "heard [\"jd\"]",
        "heard [\"oe\"]",
        "heard [\"of\"]",
        "heard []",
        "heard []",
    ];
    assert_heard(&seen, &want);
    assert_no_listen_pin(&p);
}

/// pgjdbc sends `LISTEN a; LISTEN b` as one extended batch of two statements (as it sends
/// any multi-statement text): served by the listening connection as the simple Query of
/// them is, answered message by message as PostgreSQL answers (a ParseComplete, BindComplete
/// and NoData before each CommandComplete), their sum counting outside a block and each
/// statement alone inside one. Every step is run directly too; the pool's one server keeps
/// serving the busy client between steps, and no client is pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_listens_pins_nothing() {
    let db = "ls_ext_multi";
    let p = start_tracked(db, "transaction");
    let steps: &[(&[&str], &str)] = &[
        (&[r#"ext:LISTEN a; LISTEN "B""#], "1"),
        (&["ext:UNLISTEN a; LISTEN c; listen c"], "2"),
        (&["ext:LISTEN a; UNLISTEN *; LISTEN d"], "3"),
        (&["begin", "ext:LISTEN a; UNLISTEN d", "rollback"], "4"),
        (&["begin", "ext:LISTEN a; UNLISTEN d", "commit"], "5"),
        (&["ext:UNLISTEN *; UNLISTEN *"], "6"),
    ];
    let notify = [("a", "a"), ("\"B\"", "B"), ("c", "c"), ("d", "d")];
    let seen = run_both_ways(&p, db, steps, &notify).await;
    let want = [
        "heard [\"a1\", \"B1\"]",
        "heard [\"B2\", \"c2\"]",
        "heard [\"d3\"]",
        "heard [\"d4\"]",
        "heard [\"a5\"]",
        "heard []",
    ];
    assert_heard(&seen, &want);
    assert_eq!(
        seen[0][0], "ext:LISTEN a; LISTEN \"B\": 1 2 n C(LISTEN\0) 1 2 n C(LISTEN\0) Z(I)",
        "each statement answered"
    );
    assert_no_listen_pin(&p);
}

/// A Query of `LISTEN`s whose listening connection cannot be opened (the database's
/// connection limit is full) is answered with that error at its first statement, as a lone
/// one is, and changes nothing: the client hears nothing of those channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_of_listens_that_cannot_listen_changes_nothing() {
    let db = "ls_multi_full";
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: 1\n  mode: transaction\n  \
         session_state: track\n  query_wait_timeout: 1s\n  max_db_connections: 1\n\
         auth:\n  user_methods:\n    {USER}: trust\n"
    );
    let p = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let mut busy = Raw::connect(p.port(), USER, db).await;
    ok(&mut busy, "begin").await;
    let mut l = Raw::connect(p.port(), USER, db).await;
    let got = l.query("LISTEN a; LISTEN b").await;
    assert_eq!(tags(&got), "EZ", "{got:?}");
    assert_eq!(raw::sqlstate(&got[0]), "53300");
    // The same as pgjdbc's batch: the error answers its first statement, after what comes
    // before that statement's CommandComplete.
    l.send(&jdbc_batch("LISTEN a; LISTEN b")).await;
    let got = l.until_ready().await;
    assert_eq!(tags(&got), "12nEZ", "{got:?}");
    assert_eq!(raw::sqlstate(&got[3]), "53300");
    ok(&mut busy, "commit").await;
    let mut n = Raw::connect(pg.port, USER, db).await;
    ok(&mut n, "notify a, '1'; notify b, '2'").await;
    assert_eq!(heard(&mut l).await, Vec::<String>::new());
    // The busy client's server was never the listener's: it serves either.
    ok(&mut busy, "select 1").await;
}

/// A `LISTEN` in a block that the listening connection cannot make (the database's
/// connection limit is full: the client's own server is its one connection) fails the
/// block, as a statement failing directly does: the error with status `E`, `25P02` for what
/// follows, and the `COMMIT` rolls back, so the block's insert is not kept. The same for
/// pgjdbc's batch of two, answered up to its first statement's NoData before the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_that_cannot_be_made_fails_its_block() {
    let db = "ls_block_full";
    let pg = support::shared();
    create_db(pg, db);
    block_in_place(|| pg.psql_db(db, "create table kept (x int)"));
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: 1\n  mode: transaction\n  \
         session_state: track\n  track_prepared: true\n  query_wait_timeout: 1s\n  \
         max_db_connections: 1\nauth:\n  user_methods:\n    {USER}: trust\n"
    );
    let p = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let mut l = Raw::connect(p.port(), USER, db).await;
    let status = |f: &[Frame]| f.last().map(|z| z.body()[0] as char);
    for (listen, tags_seen) in [(None, "EZ"), (Some("LISTEN a; LISTEN b"), "12nEZ")] {
        ok(&mut l, "begin; insert into kept values (1)").await;
        let got = match listen {
            None => l.query("LISTEN a").await,
            Some(sql) => {
                l.send(&jdbc_batch(sql)).await;
                l.until_ready().await
            }
        };
        assert_eq!(tags(&got), tags_seen, "{got:?}");
        let error = got.iter().find(|f| f.tag == b'E').expect("an error");
        assert_eq!(raw::sqlstate(error), "53300");
        assert_eq!(status(&got), Some('E'), "the block failed");
        let got = l.query("select 1").await;
        assert_eq!(raw::sqlstate(&got[0]), "25P02");
        let got = l.query("commit").await;
        let done = got.iter().find(|f| f.tag == b'C').expect("CommandComplete");
        assert_eq!(done.body(), b"ROLLBACK\0");
        assert_eq!(status(&got), Some('I'));
    }
    let rows = block_in_place(|| pg.psql_db(db, "select count(*) from kept"));
    assert_eq!(
        rows.trim(),
        "0",
        "the failed blocks' inserts were rolled back"
    );
}

/// The channels one client listens on through the pool's listening connection are bounded
/// (`listen::MAX_CHANNELS`), so that its list, and the pool's subscriptions for it, are not
/// sized by what it sends: one more `LISTEN` is refused with `54000` and changes nothing,
/// a channel it listens on already is not refused, and an `UNLISTEN` makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_channels_are_bounded() {
    let db = "ls_many";
    let p = start(db);
    let mut l = Raw::connect(p.port(), USER, db).await;
    let all: Vec<usize> = (0..droid_pool::listen::MAX_CHANNELS).collect();
    for chunk in all.chunks(64) {
        let sql: Vec<String> = chunk.iter().map(|i| format!("LISTEN c{i}")).collect();
        ok(&mut l, &sql.join("; ")).await;
    }
    // The error answers the statement that listens on one more channel, as PostgreSQL's
    // would: after the CommandComplete of one before it.
    for (sql, tags_seen) in [
        ("LISTEN one_more", "EZ"),
        ("LISTEN c0; LISTEN one_more", "CEZ"),
    ] {
        let got = l.query(sql).await;
        let error = got.iter().find(|f| f.tag == b'E').expect("an error");
        assert_eq!(
            (tags(&got), raw::sqlstate(error)),
            (tags_seen.into(), "54000".into()),
            "{sql}"
        );
    }
    ok(&mut l, "LISTEN c0").await;
    ok(&mut l, "UNLISTEN c0; LISTEN one_more").await;
    let mut n = Raw::connect(support::shared().port, USER, db).await;
    ok(
        &mut n,
        "notify c0, 'x'; notify one_more, 'y'; notify c9999, 'z'",
    )
    .await;
    assert_eq!(heard(&mut l).await, ["y", "z"]);
}

/// Statement mode refuses `LISTEN` (0A000) whichever way it comes, as it refuses the other
/// statements that make session state: a named statement of one too, also where the batch
/// already holds a server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refuses_an_extended_listen() {
    use raw::{batch, bind, execute, parse, sqlstate, sync};
    let db = "ls_stmt";
    let p = start_tracked(db, "statement");
    let mut a = Raw::connect(p.port(), USER, db).await;
    for sql in [
        "LISTEN ch",
        "LISTEN ch; LISTEN other",
        "UNLISTEN a; LISTEN ch",
    ] {
        let got = a.query(sql).await;
        assert_eq!(
            (tags(&got), sqlstate(&got[0])),
            ("EZ".into(), "0A000".into()),
            "{sql}"
        );
    }
    for msgs in [
        vec![
            parse("", "LISTEN ch"),
            bind("", "", &[]),
            execute(""),
            sync(),
        ],
        vec![parse("s", "LISTEN ch"), sync()],
        // The statement before the Parse takes the server.
        vec![
            parse("", "select 1"),
            bind("", "", &[]),
            execute(""),
            parse("s", "LISTEN ch"),
            sync(),
        ],
    ] {
        a.send(&batch(&msgs)).await;
        let got = a.until_ready().await;
        let t = tags(&got);
        assert!(t.ends_with("EZ"), "{t}");
        assert_eq!(sqlstate(&got[got.len() - 2]), "0A000", "{t}");
    }
    // Nothing was made: the name is free.
    a.send(&batch(&[bind("", "s", &[]), execute(""), sync()]))
        .await;
    let got = a.until_ready().await;
    assert_eq!(
        (tags(&got), sqlstate(&got[0])),
        ("EZ".into(), "26000".into())
    );
}
