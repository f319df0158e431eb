//! The admin console's commands that act on clients and servers (`KILL`, `KILL_CLIENT`,
//! `RECONNECT`, `WAIT_CLOSE`) through psql and `POST /console`, against a real PostgreSQL:
//! what the clients see, and what is left in `pg_stat_activity` (each test has its own
//! database).

use std::time::{Duration, Instant};

use tokio::task::{block_in_place, spawn_blocking};

use crate::admin::{http_post_body, psql, psql_at};
use crate::core::create_db;
use crate::server_check::backends;
use crate::support::metrics::servers_closed;
use crate::support::raw::{first_col, query, sqlstate, tags, Raw};
use crate::support::{self, Pooler};
use crate::timeouts::until_active;

const USER: &str = "droid";

fn start(dbs: &[&str], size: usize) -> Pooler {
    let pg = support::shared();
    for db in dbs {
        create_db(pg, db);
    }
    let yaml =
        format!("auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\npool:\n  size: {size}\n  mode: transaction\n");
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// Runs a console command through psql; returns its output, panicking if it failed.
fn console(p: &Pooler, sql: &str) -> String {
    let (ok, out, err) = block_in_place(|| psql(p, USER, "droidpool", sql));
    assert!(ok, "{sql}: {err}");
    out.trim().to_owned()
}

/// `POST /console`: status and body.
fn http(p: &Pooler, sql: &str) -> (u16, String) {
    let (code, body) = block_in_place(|| http_post_body(p.admin_port(), "/console", sql));
    (code, body.trim().to_owned())
}

/// The client is told PostgreSQL's `pg_terminate_backend` answer, then closed.
async fn assert_terminated(c: &mut Raw) {
    let f = c.recv().await;
    assert_eq!(f.tag, b'E');
    assert_eq!(sqlstate(&f), "57P01");
    let text = String::from_utf8_lossy(f.body()).into_owned();
    assert!(text.contains("FATAL"), "{text}");
    assert!(
        text.contains("terminating connection due to administrator command"),
        "{text}"
    );
    assert!(c.closed_within(Duration::from_secs(2)).await);
}

/// Waits until `db`'s backends satisfy `ok`.
async fn until_backends(db: &str, ok: impl Fn(&[(i32, String)]) -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let now = backends(support::shared(), db).await;
        if ok(&now) {
            return;
        }
        assert!(Instant::now() < until, "{db}: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(c: &mut Raw, sql: &str) -> String {
    c.send(&query(sql)).await;
    tags(&c.until_ready().await)
}

/// `KILL db`: every client of the database gets FATAL 57P01 at once, whatever it is doing (in
/// a statement, which is cancelled; idle inside a transaction, which is rolled back; waiting
/// for a server; idle), and its servers are closed (idle ones too); other databases are
/// untouched. New clients of the killed database wait until `RESUME db`. Through psql and
/// `POST /console`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_closes_a_databases_clients_and_servers() {
    let p = start(&["kill_a", "kill_b"], 2);
    // Both servers of kill_a taken: one running a statement, one inside a transaction.
    let mut busy = Raw::connect(p.port(), USER, "kill_a").await;
    busy.send(&query("select pg_sleep(30)")).await;
    until_active("kill_a").await;
    let mut in_tx = Raw::connect(p.port(), USER, "kill_a").await;
    assert_eq!(run(&mut in_tx, "begin").await, "CZ");
    assert_eq!(run(&mut in_tx, "create table killed_t (a int)").await, "CZ");
    // One waiting for a server, one idle.
    let mut waiting = Raw::connect(p.port(), USER, "kill_a").await;
    waiting.send(&query("select 1")).await;
    assert!(waiting.silent_for(Duration::from_millis(300)).await);
    let mut idle = Raw::connect(p.port(), USER, "kill_a").await;
    let mut other = Raw::connect(p.port(), USER, "kill_b").await;
    assert_eq!(run(&mut other, "select 1").await, "TDCZ");

    let t0 = Instant::now();
    assert_eq!(console(&p, "KILL kill_a"), "KILL");
    for c in [&mut busy, &mut in_tx, &mut waiting, &mut idle] {
        assert_terminated(c).await;
    }
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // Both servers closed: the running statement not left to run on, the transaction rolled
    // back.
    until_backends("kill_a", |b| b.is_empty()).await;
    assert_eq!(servers_closed(&p, "killed"), 2.0);
    assert_eq!(run(&mut other, "select 2").await, "TDCZ");

    // A new client of the killed database logs in and waits until RESUME.
    let mut late = Raw::connect(p.port(), USER, "kill_a").await;
    late.send(&query("select * from killed_t")).await;
    assert!(late.silent_for(Duration::from_millis(500)).await);
    let dbs = console(&p, "SHOW DATABASES");
    assert!(
        dbs.lines()
            .any(|l| l.starts_with("kill_a|") && l.ends_with("|1|0")),
        "{dbs}"
    );
    assert_eq!(http(&p, "RESUME kill_a"), (200, "RESUME".into()));
    let frames = late.until_ready().await;
    assert_eq!(
        tags(&frames),
        "EZ",
        "the killed transaction was rolled back"
    );
    assert_eq!(sqlstate(&frames[0]), "42P01");

    // Over HTTP: KILL kill_b, whose one server is idle in the pool.
    assert_eq!(http(&p, "KILL kill_b"), (200, "KILL".into()));
    assert_terminated(&mut other).await;
    until_backends("kill_b", |b| b.is_empty()).await;
    assert_eq!(servers_closed(&p, "killed"), 3.0);
    assert_eq!(http(&p, "RESUME kill_b").0, 200);
    // No server leaked: kill_a has the late client's server, idle.
    until_backends("kill_a", |b| b.len() == 1 && b[0].1 == "idle").await;
}

/// `KILL_CLIENT id` (the id of SHOW CLIENTS, which is the client's cancel key): that client
/// gets FATAL 57P01 and the server it holds is closed (a running statement cancelled); other
/// clients of the same database go on, and no database is paused. An unknown id is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_closes_one_client_and_its_server() {
    let db = "kill_client";
    let p = start(&[db], 2);
    let (mut busy, (busy_id, _)) = Raw::connect_keyed(p.port(), USER, db).await;
    let (mut idle, (idle_id, _)) = Raw::connect_keyed(p.port(), USER, db).await;
    // Two servers: one busy, one idle in the pool.
    busy.send(&query("select pg_sleep(30)")).await;
    until_active(db).await;
    assert_eq!(run(&mut idle, "select 1").await, "TDCZ");
    let clients = console(&p, "SHOW CLIENTS");
    assert!(
        clients
            .lines()
            .any(|l| l.starts_with(&format!("C|{busy_id}|{db}|{USER}|active|"))),
        "{clients}"
    );

    assert_eq!(
        console(&p, &format!("KILL_CLIENT {busy_id}")),
        "KILL_CLIENT"
    );
    assert_terminated(&mut busy).await;
    // Its server is closed (the statement cancelled); the pool's idle one stays.
    until_backends(db, |b| b.len() == 1 && b[0].1 == "idle").await;
    assert_eq!(servers_closed(&p, "killed"), 1.0);
    assert_eq!(run(&mut idle, "select 2").await, "TDCZ");
    let (code, body) = http(&p, &format!("KILL_CLIENT {busy_id}"));
    assert_eq!(code, 400, "{body}");
    assert!(body.starts_with("ERROR 42704"), "{body}");

    // Over HTTP: the idle client (it holds no server, so none is closed).
    assert_eq!(
        http(&p, &format!("KILL_CLIENT {idle_id}")),
        (200, "KILL_CLIENT".into())
    );
    assert_terminated(&mut idle).await;
    assert_eq!(servers_closed(&p, "killed"), 1.0);
    let mut next = Raw::connect(p.port(), USER, db).await;
    assert_eq!(run(&mut next, "select 3").await, "TDCZ");
    until_backends(db, |b| b.len() == 1 && b[0].1 == "idle").await;
}

/// `KILL_CLIENT id` of a client waiting for a server (a pool of one, held by another
/// client): it leaves the queue at once with FATAL 57P01, while the holder goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_ends_a_wait_for_a_server() {
    let db = "kill_waiting";
    let p = start(&[db], 1);
    let (mut busy, _) = Raw::connect_keyed(p.port(), USER, db).await;
    let (mut waiting, (waiting_id, _)) = Raw::connect_keyed(p.port(), USER, db).await;
    busy.send(&query("select pg_sleep(2)")).await;
    until_active(db).await;
    waiting.send(&query("select 1")).await;
    let until = Instant::now() + Duration::from_secs(5);
    while !console(&p, "SHOW POOLS").contains(&format!("{db}|{USER}|1|1|")) {
        assert!(Instant::now() < until, "{}", console(&p, "SHOW POOLS"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = Instant::now();
    assert_eq!(
        console(&p, &format!("KILL_CLIENT {waiting_id}")),
        "KILL_CLIENT"
    );
    assert_terminated(&mut waiting).await;
    assert!(
        killed.elapsed() < Duration::from_secs(1),
        "{:?}",
        killed.elapsed()
    );
    // The holder's statement runs to its end, untouched.
    assert_eq!(tags(&busy.until_ready().await), "TDCZ");
    assert_eq!(servers_closed(&p, "killed"), 0.0);
}

fn backend_pid(frames: &[droid_pool::protocol::frame::Frame]) -> i32 {
    frames
        .iter()
        .find(|f| f.tag == b'D')
        .and_then(first_col)
        .expect("a row")
        .parse()
        .expect("a pid")
}

/// `RECONNECT db`: an idle server is closed at once, a busy one when its client releases it,
/// with `close_needed` 1 in SHOW SERVERS until then; `WAIT_CLOSE db` answers only once it is
/// closed (and at once when nothing is to close). The next transaction gets a new server.
/// RECONNECT through psql and WAIT_CLOSE over HTTP, then the other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_replaces_servers_and_wait_close_waits_for_it() {
    let db = "reconnect";
    let p = start(&[db], 3);
    let mut holder = Raw::connect(p.port(), USER, db).await;
    assert_eq!(run(&mut holder, "begin").await, "CZ");
    holder.send(&query("select pg_backend_pid()")).await;
    let held = backend_pid(&holder.until_ready().await);
    let mut other = Raw::connect(p.port(), USER, db).await;
    other.send(&query("select pg_backend_pid()")).await;
    let idle = backend_pid(&other.until_ready().await);

    assert_eq!(console(&p, "RECONNECT reconnect"), "RECONNECT");
    until_backends(db, |b| b.len() == 1 && b[0].0 == held).await;
    let servers = console(&p, "SHOW SERVERS");
    assert!(
        servers
            .lines()
            .any(|l| l.starts_with("S|") && l.contains(&format!("|{db}|{USER}|active|1|"))),
        "{servers}"
    );
    let admin = p.admin_port();
    let waiting = spawn_blocking(move || {
        let t0 = Instant::now();
        let r = http_post_body(admin, "/console", "WAIT_CLOSE reconnect");
        (r, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "WAIT_CLOSE answered while a server was still open"
    );
    assert_eq!(run(&mut holder, "commit").await, "CZ");
    let ((code, body), took) = waiting.await.unwrap();
    assert_eq!((code, body.trim()), (200, "WAIT_CLOSE"));
    assert!(took >= Duration::from_millis(400), "{took:?}");
    until_backends(db, |b| b.iter().all(|(pid, _)| *pid != held)).await;
    holder.send(&query("select pg_backend_pid()")).await;
    let fresh = backend_pid(&holder.until_ready().await);
    assert!(fresh != held && fresh != idle);
    assert_eq!(servers_closed(&p, "reconnect"), 2.0);

    // RECONNECT over HTTP, WAIT_CLOSE through psql.
    assert_eq!(run(&mut holder, "begin").await, "CZ");
    assert_eq!(http(&p, "RECONNECT reconnect"), (200, "RECONNECT".into()));
    let port = p.port();
    let waiting = spawn_blocking(move || psql_at(port, USER, "droidpool", "WAIT_CLOSE reconnect"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "WAIT_CLOSE answered while a server was still open"
    );
    assert_eq!(run(&mut holder, "commit").await, "CZ");
    let (ok, out, err) = waiting.await.unwrap();
    assert!(ok && out.trim() == "WAIT_CLOSE", "{out} {err}");
    assert_eq!(servers_closed(&p, "reconnect"), 3.0);
    // Nothing left to close: at once.
    let t0 = Instant::now();
    assert_eq!(console(&p, "WAIT_CLOSE"), "WAIT_CLOSE");
    assert!(t0.elapsed() < Duration::from_secs(1));
    // No server leaked: none of the old ones, and the rest idle.
    assert_eq!(run(&mut holder, "select 1").await, "TDCZ");
    until_backends(db, |b| {
        b.iter()
            .all(|(pid, s)| *pid != fresh && *pid != held && s == "idle")
    })
    .await;
}

/// Database names are the clients' choice: one holding a tab and a newline forges no row or
/// column of `SHOW POOLS` / `SHOW DATABASES`, over `POST /console` (text) nor through psql's
/// unaligned output of the SQL console (each value escaped as COPY's text format writes it);
/// `/status` (JSON) carries it escaped too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_database_name_forges_no_row() {
    let pooler = start(&[], 1);
    let forged = "evil\tforged_column\nforged_row\tx";
    // The login fails (no such database), but the name reached the pooler's pools.
    let _ = support::try_connect(&format!(
        "host=127.0.0.1 port={} user={USER} dbname='{}'",
        pooler.port(),
        forged.replace('\\', "\\\\").replace('\'', "\\'")
    ))
    .await;
    for cmd in ["SHOW POOLS", "SHOW DATABASES", "SHOW CLIENTS"] {
        let (code, text) = http(&pooler, cmd);
        assert_eq!(code, 200, "{text}");
        let width = text.lines().next().unwrap().split('\t').count();
        for line in text.lines() {
            assert!(
                !line.starts_with("forged_row"),
                "{cmd}: a forged row:\n{text}"
            );
            assert_eq!(
                line.split('\t').count(),
                width,
                "{cmd}: a forged column:\n{text}"
            );
        }
        if cmd == "SHOW POOLS" {
            assert!(
                text.contains("evil\\tforged_column\\nforged_row\\tx"),
                "{text}"
            );
        }
        // psql's unaligned output (-A): one line per row.
        let unaligned = console(&pooler, cmd);
        for line in unaligned.lines() {
            assert!(
                !line.starts_with("forged_row"),
                "{cmd} through psql:\n{unaligned}"
            );
        }
    }
    let status = block_in_place(|| pooler.admin_get("/status")).1;
    let parsed: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    let names: Vec<&str> = parsed["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["database"].as_str())
        .collect();
    assert!(names.contains(&forged), "{names:?}");
}
