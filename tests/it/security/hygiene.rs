//! The small leaks: cancel keys that cannot be guessed from the client's number, event lines a
//! client-supplied name cannot forge or grow, and failed logins logged with the peer's address
//! and at a bounded rate (more in `security::logs`).

use std::collections::HashSet;
use std::time::Duration;

use super::{refused, userlist_line, write};
use crate::support::raw::{self, Raw};
use crate::support::{self, Pooler, DB};

/// The BackendKeyData of a fresh trust login: (process id, secret).
async fn key_of(port: u16) -> (i32, i32) {
    let login = Raw::connect_frames(port, "droid", DB).await;
    let key = login
        .iter()
        .find(|f| f.tag == b'K')
        .expect("BackendKeyData at login");
    let b = key.body();
    let pid = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let secret = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    (pid, secret)
}

#[tokio::test]
async fn cancel_keys_are_random() {
    let pooler = Pooler::start(support::shared(), &[]);
    let mut pids = Vec::new();
    let mut secrets = HashSet::new();
    for _ in 0..20 {
        let (pid, secret) = key_of(pooler.port()).await;
        assert!(pid > 0, "a positive process id, as PostgreSQL's");
        pids.push(pid);
        secrets.insert(secret);
    }
    let sequential = pids.windows(2).filter(|w| w[1] == w[0] + 1).count();
    assert!(
        sequential < 3,
        "process ids follow the client count: {pids:?}"
    );
    assert!(
        pids.iter().all(|&p| p > 1000),
        "small, guessable ids: {pids:?}"
    );
    assert_eq!(secrets.len(), 20);
}

#[tokio::test]
async fn client_names_cannot_forge_event_lines() {
    let pooler = Pooler::start(
        support::shared(),
        &["--mode", "transaction", "--track-prepared"],
    );
    let mut c = Raw::connect(pooler.port(), "droid", DB).await;
    let forged = "x\n[POOL] client 999 connected";
    let long = "n".repeat(5000);
    for name in [forged, long.as_str()] {
        c.send(&raw::batch(&[raw::parse(name, "select 1"), raw::sync()]))
            .await;
        let r = c.until_ready().await;
        assert_eq!(raw::tags(&r), "1Z");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lines = pooler.lines();
    assert!(
        !lines.iter().any(|l| l == "[POOL] client 999 connected"),
        "a forged line: {lines:?}"
    );
    let prepares: Vec<&String> = lines.iter().filter(|l| l.contains(" prepares ")).collect();
    assert_eq!(prepares.len(), 2, "{lines:?}");
    assert!(
        prepares[0].contains("x\\n[POOL] client 999 connected"),
        "{}",
        prepares[0]
    );
    assert!(
        prepares[1].len() < 200,
        "a name of 5,000 bytes printed whole"
    );
}

/// Failed logins are logged with the peer's address, at most a burst of 20 lines and ten a
/// second after it; the line after a burst, or a summary, says how many were not logged.
#[tokio::test]
async fn failed_logins_are_logged_with_the_peer_at_a_bounded_rate() {
    let dir = tempfile::tempdir().unwrap();
    // md5: cheap for the client, so the 40 failures come in a burst.
    let stored = droid_pool::auth::md5_stored("md5_user", "md5_pass");
    let users = write(
        dir.path(),
        "userlist.txt",
        &userlist_line("md5_user", &stored),
    );
    let yaml = format!("auth:\n  method: md5\n  users_file: {users}\n");
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let wrong = pooler.conn_string_pw("md5_user", "wrong", DB);
    let started = std::time::Instant::now();
    let mut burst = Vec::new();
    for _ in 0..40 {
        let wrong = wrong.clone();
        burst.push(tokio::spawn(async move {
            refused(&wrong, "a wrong password").await;
        }));
    }
    for b in burst {
        b.await.expect("a failed login");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    refused(&wrong, "a wrong password").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stderr = pooler.stderr();
    let logged: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("client login refused") && l.contains("code=28P01"))
        .collect();
    assert!(
        logged.iter().all(|l| l.contains("127.0.0.1")),
        "the peer's address: {logged:?}"
    );
    let secs = started.elapsed().as_secs_f64().ceil() as usize;
    assert!(
        logged.len() <= 20 + 10 * secs,
        "41 failures in {secs} s logged {} times",
        logged.len()
    );
    // On the next line logged, or in the summary within a second (exact counts: `logs.rs`).
    let counted = logged.iter().any(|l| !l.contains("earlier_not_logged=0"))
        || stderr.contains("held back by their rate limit");
    assert!(counted, "the suppressed ones are counted:\n{stderr}");
}
