//! What clients put in the logs: names with CR/LF in refused and successful logins cannot forge
//! or break a line (text and JSON formats, stderr and the `[POOL]` lines alike), and a flood of
//! refused logins writes a bounded number of lines, every one held back counted.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use super::{userlist_line, write};
use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::raw::{self, Raw};
use crate::support::{self, Pooler, DB};

const FORGED: &str = "\r\n[POOL] forged";
/// How [`FORGED`] reads in a line once escaped.
const ESCAPED: &str = "\\r\\n[POOL] forged";

/// A pooler that asks md5 of every user; `md5_user` / `md5_pass` is the one that passes.
fn md5_pooler(dir: &std::path::Path, format: &str) -> Pooler {
    let stored = droid_pool::auth::md5_stored("md5_user", "md5_pass");
    let users = write(dir, "userlist.txt", &userlist_line("md5_user", &stored));
    let yaml = format!(
        "auth:\n  method: md5\n  users_file: {users}\nserver:\n  password: md5_pass\n\
         log:\n  format: {format}\n  events: all\n"
    );
    Pooler::start_with_config(support::shared(), &yaml, &[])
}

/// A login with names no connection string can carry.
fn log_in(
    port: u16,
    user: &str,
    password: &str,
    db: &str,
    app: &str,
) -> impl std::future::Future<Output = Result<tokio_postgres::Client, tokio_postgres::Error>>
       + Send
       + 'static {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(port)
        .user(user)
        .password(password)
        .dbname(db)
        .application_name(app)
        .connect_timeout(Duration::from_secs(10));
    async move {
        let (client, conn) = cfg.connect(NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }
}

/// The refusals a hostile client can choose the names of: a made-up database (the server
/// refuses the pool's login), a made-up user, a wrong password.
async fn refused_with_forged_names(port: u16) {
    let user = format!("x{FORGED}");
    let cases = [
        ("md5_user", "md5_pass", format!("nope{FORGED}"), "3D000"),
        (user.as_str(), "md5_pass", format!("y{FORGED}"), "28P01"),
        ("md5_user", "wrong", DB.to_owned(), "28P01"),
    ];
    for (user, password, db, code) in &cases {
        let app = format!("app{FORGED}");
        let e = log_in(port, user, password, db, &app)
            .await
            .err()
            .unwrap_or_else(|| panic!("{user:?} on {db:?} was let in"));
        let got = e.as_db_error().map(|d| d.code().code().to_owned());
        assert_eq!(got.as_deref(), Some(*code), "{e}");
    }
}

/// Waits until stderr holds `n` lines containing `needle`; returns stderr.
async fn stderr_with(pooler: &Pooler, needle: &str, n: usize) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let stderr = pooler.stderr();
        if stderr.lines().filter(|l| l.contains(needle)).count() >= n || Instant::now() > until {
            return stderr;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// No line on stdout or stderr starts with the forged text; every `[POOL]` line is one.
fn assert_no_forged_line(pooler: &Pooler, stderr: &str) {
    let stdout = pooler.all_lines();
    for line in stderr.lines().chain(stdout.iter().map(String::as_str)) {
        assert!(
            !line.starts_with("[POOL] forged") && !line.contains('\r'),
            "a forged or broken line: {line:?}\nstderr:\n{stderr}"
        );
    }
    assert!(
        stdout.iter().all(|l| l.starts_with("[POOL] ")),
        "{stdout:?}"
    );
}

/// A pooler logging in `format` that refused the logins of [`refused_with_forged_names`] and
/// a first packet that is no startup packet (closed without a reply); its stderr, in which no
/// line is forged.
async fn forged_refusals(format: &str) -> (tempfile::TempDir, Pooler, String) {
    let dir = tempfile::tempdir().unwrap();
    let pooler = md5_pooler(dir.path(), format);
    refused_with_forged_names(pooler.port()).await;
    let mut http = Raw::open(pooler.port()).await;
    http.send(b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(http.closed_within(Duration::from_secs(5)).await);
    let stderr = stderr_with(&pooler, "client login refused", 4).await;
    assert_no_forged_line(&pooler, &stderr);
    (dir, pooler, stderr)
}

#[tokio::test]
async fn a_refused_login_cannot_forge_a_text_log_line() {
    let (_dir, _pooler, stderr) = forged_refusals("text").await;
    let refused: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("client login refused"))
        .collect();
    assert_eq!(refused.len(), 4, "one line per refusal:\n{stderr}");
    assert!(
        refused[3].contains("code=none") && refused[3].contains("invalid length"),
        "{}",
        refused[3]
    );
    assert!(
        refused[0].contains(&format!("database=nope{ESCAPED} "))
            && refused[0].contains(&format!("application_name=app{ESCAPED} "))
            && refused[0].contains("code=3D000")
            && refused[0].contains("peer=127.0.0.1:"),
        "{}",
        refused[0]
    );
    assert!(
        refused[1].contains(&format!("user=x{ESCAPED} "))
            && refused[1].contains(&format!("database=y{ESCAPED} "))
            && refused[1].contains(&format!(
                "password authentication failed for user \"x{ESCAPED}\""
            ))
            && refused[1].contains("code=28P01"),
        "{}",
        refused[1]
    );
    // The pool's own line of the server's refusal quotes the database too.
    let pool_line = stderr
        .lines()
        .find(|l| l.contains("server login refused"))
        .unwrap_or_else(|| panic!("no server login refused line:\n{stderr}"));
    assert!(
        pool_line.contains(&format!("pool=nope{ESCAPED}/md5_user"))
            && pool_line.contains(&format!("database \"nope{ESCAPED}\" does not exist")),
        "{pool_line}"
    );
}

#[tokio::test]
async fn a_refused_login_cannot_forge_a_json_log_line() {
    let (_dir, _pooler, stderr) = forged_refusals("json").await;
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l:?}")))
        .collect();
    let refused: Vec<&serde_json::Value> = events
        .iter()
        .map(|e| &e["fields"])
        .filter(|f| f["message"] == "client login refused")
        .collect();
    assert_eq!(refused.len(), 4, "{stderr}");
    assert_eq!(refused[0]["database"], format!("nope{ESCAPED}"));
    assert_eq!(refused[1]["user"], format!("x{ESCAPED}"));
    assert_eq!(refused[2]["application_name"], format!("app{ESCAPED}"));
}

#[tokio::test]
async fn a_logged_in_clients_names_cannot_forge_an_event_line() {
    let pooler = Pooler::start_with_config(
        support::shared(),
        "log:\n  events: all\n",
        &["--mode", "transaction", "--track-prepared"],
    );
    let app = format!("app{FORGED}");
    let mut c = Raw::connect_with(
        pooler.port(),
        &[
            ("user", "droid"),
            ("database", DB),
            ("application_name", &app),
        ],
    )
    .await;
    let statement = format!("s{FORGED}");
    c.send(&raw::batch(&[
        raw::parse(&statement, "select 1"),
        raw::sync(),
    ]))
    .await;
    assert_eq!(raw::tags(&c.until_ready().await), "1Z");
    let shown = c.query("show application_name").await;
    assert_eq!(raw::tags(&shown), "TDCZ", "the login and its settings held");
    drop(c);
    let prepares = pooler
        .wait_for_prefix("[POOL] client 1 prepares", Duration::from_secs(5))
        .expect("a prepares line");
    assert_eq!(
        prepares,
        format!("[POOL] client 1 prepares s{ESCAPED} on server 1")
    );
    assert!(pooler.wait_for_line("[POOL] client 1 disconnected", Duration::from_secs(5)));
    assert_no_forged_line(&pooler, &pooler.stderr());
}

/// Sums the `key=N` fields of `lines`.
fn sum_of(lines: &[&str], key: &str) -> u64 {
    lines
        .iter()
        .filter_map(|l| l.split(' ').find_map(|w| w.strip_prefix(key)))
        .map(|n| n.parse::<u64>().expect("a count"))
        .sum()
}

/// The lines of `what` (its message) and of its summaries: (lines, earlier_not_logged
/// counted on them, suppressed counted by the summaries).
fn rate_limited(stderr: &str, what: &str) -> (u64, u64, u64) {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(what) && !l.contains("held back"))
        .collect();
    let summaries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("held back") && l.contains(&format!("lines=\"{what}\"")))
        .collect();
    let logged = lines.len() as u64;
    (
        logged,
        sum_of(&lines, "earlier_not_logged="),
        sum_of(&summaries, "suppressed="),
    )
}

/// Stderr once the lines of each of `kinds` and their counts add up to `n`: the heartbeat's
/// summary comes within a second of the flood's end (5 s at most, for a loaded machine).
async fn counted_in_full(pooler: &Pooler, kinds: &[&str], n: u64) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let stderr = pooler.stderr();
        let full = kinds.iter().all(|what| {
            let (logged, earlier, summarized) = rate_limited(&stderr, what);
            logged + earlier + summarized >= n
        });
        if full || Instant::now() > until {
            return stderr;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `n` logins, `at_once` at a time, each of which must be refused.
async fn refused_flood<F, Fut>(n: usize, at_once: usize, login: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<tokio_postgres::Client, tokio_postgres::Error>>
        + Send
        + 'static,
{
    let mut running = tokio::task::JoinSet::new();
    for i in 0..n {
        if running.len() == at_once {
            running.join_next().await;
        }
        let login = login(i);
        running.spawn(async move { assert!(login.await.is_err(), "let in") });
    }
    while let Some(r) = running.join_next().await {
        r.expect("a refused login");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_logins_writes_a_bounded_count_of_lines() {
    let dir = tempfile::tempdir().unwrap();
    let pooler = md5_pooler(dir.path(), "text");
    let port = pooler.port();
    let started = Instant::now();
    refused_flood(500, 25, |_| log_in(port, "md5_user", "wrong", DB, "flood")).await;
    let flood = started.elapsed();
    let stderr = counted_in_full(&pooler, &["client login refused"], 500).await;
    let secs = started.elapsed().as_secs_f64().ceil() as u64;
    let (logged, earlier, summarized) = rate_limited(&stderr, "client login refused");
    eprintln!(
        "500 refusals in {flood:?}: {logged} lines, {earlier} counted on them, \
         {summarized} in summaries"
    );
    assert!(
        logged <= 20 + 10 * secs,
        "{logged} lines in {secs} s: more than a burst of 20 and 10 a second"
    );
    assert!(summarized > 0, "no summary line:\n{stderr}");
    assert_eq!(
        logged + earlier + summarized,
        500,
        "every refusal counted once"
    );
    let failed = metric_or_zero(
        &scrape(&pooler),
        "droidpool_client_auth_total",
        &[("method", "md5"), ("result", "failed")],
    );
    assert_eq!(failed, 500.0, "the metric counts every refusal");
}

#[tokio::test]
async fn a_flood_of_made_up_databases_writes_a_bounded_count_of_lines() {
    let pooler = Pooler::start(support::shared(), &[]);
    let port = pooler.port();
    let started = Instant::now();
    refused_flood(300, 20, |i| {
        log_in(port, "droid", "", &format!("made_up_{i}"), "flood")
    })
    .await;
    let kinds = ["client login refused", "server login refused"];
    let stderr = counted_in_full(&pooler, &kinds, 300).await;
    let secs = started.elapsed().as_secs_f64().ceil() as u64;
    for what in kinds {
        let (logged, earlier, summarized) = rate_limited(&stderr, what);
        eprintln!("{what}: {logged} lines, {earlier} + {summarized} held back");
        assert!(
            logged <= 20 + 10 * secs,
            "{what}: {logged} lines in {secs} s"
        );
        assert_eq!(
            logged + earlier + summarized,
            300,
            "{what}: each counted once"
        );
    }
}
