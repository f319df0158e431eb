//! Runs a program's clients at once against one port (PostgreSQL itself, or a pooler) and
//! records what each client receives, normalised where a pooler may differ by design.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use bytes::BytesMut;
use droid_pool::protocol::backend;
use droid_pool::protocol::frame::Frame;
use tokio::io::AsyncWriteExt;

use super::program::{ClientProgram, End, Msg, Program};
use crate::support::raw::Raw;

/// How long a direct run waits for more after a Flush-ended write before writing on.
const SETTLE: Duration = Duration::from_millis(60);
/// How long a run waits for a message it expects.
const EXPECT: Duration = Duration::from_secs(15);

/// What a client received, message by message, normalised: ErrorResponse and NoticeResponse
/// by severity, SQLSTATE and message (the pooler's own errors carry no file and line), large
/// bodies by length and hash.
pub type Transcript = Vec<String>;

/// Per client: the transcript, and after each Flush-ended write how many messages had come.
#[derive(Debug, Default, Clone)]
pub struct ClientRun {
    pub transcript: Transcript,
    pub after_flush: Vec<usize>,
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn normalise(f: &Frame) -> String {
    let tag = f.tag as char;
    match f.tag {
        backend::ERROR_RESPONSE_TAG | backend::NOTICE_RESPONSE_TAG => {
            match backend::parse_error(f.body()) {
                Ok(e) => format!("{tag} {} {} {}", e.severity, e.code, e.message),
                Err(_) => format!("{tag} <unparsable>"),
            }
        }
        backend::READY_FOR_QUERY_TAG => {
            format!("Z {}", f.body().first().copied().unwrap_or(0) as char)
        }
        _ if f.body().len() <= 200 => format!("{tag} {}", String::from_utf8_lossy(f.body())),
        _ => format!("{tag} <{} bytes #{:x}>", f.body().len(), hash(f.body())),
    }
}

/// The one documented difference (README, "Prepared statements"): in a failed transaction
/// block, a Bind of a tracked statement the server does not have needs a replayed Parse, which
/// PostgreSQL refuses with 25P02 before it could check the Bind. Directly, PostgreSQL checks
/// the Bind's parameter count before the transaction state. Both fail the same block.
fn replay_in_failed_block(direct: &str, pooled: &str, before: &[String]) -> bool {
    let failed_block = before.iter().rev().find(|m| m.starts_with("Z ")) == Some(&"Z E".into());
    failed_block
        && direct.starts_with("E ERROR 08P01 bind message supplies")
        && pooled.starts_with("E ERROR 25P02 ")
}

/// The same difference for a Describe: in a failed block PostgreSQL still describes a statement
/// that returns no rows (ParameterDescription, NoData), but the replayed Parse it would need on
/// the held server is refused with 25P02. The client's transaction then rolls back either way,
/// but the two transcripts do not line up again (directly the batch went on; pooled it skips to
/// Sync), so that client is compared only up to here.
fn describe_in_failed_block(direct: &str, pooled: &str, before: &[String]) -> bool {
    let failed_block = before.iter().rev().find(|m| m.starts_with("Z ")) == Some(&"Z E".into());
    failed_block && direct.starts_with("t ") && pooled.starts_with("E ERROR 25P02 ")
}

/// After a FATAL error the connection ends; whether the client's next write still goes out
/// before it sees the close (then it reads EOF) or fails is a race, directly and pooled.
fn both_ended(direct: &str, pooled: &str, before: &[String]) -> bool {
    before.last().is_some_and(|m| m.starts_with("E FATAL "))
        && direct.starts_with('<')
        && pooled.starts_with('<')
        && !direct.contains("timeout>")
        && !pooled.contains("timeout>")
}

/// A logged-in client connection.
pub struct Conn(Raw);

impl Conn {
    pub async fn login(port: u16, user: &str, db: &str) -> Conn {
        let raw = Raw::connect(port, user, db).await;
        let _ = raw.stream.set_nodelay(true);
        Conn(raw)
    }

    async fn recv(&mut self, wait: Duration) -> Option<Frame> {
        tokio::time::timeout(wait, self.0.try_recv())
            .await
            .ok()
            .flatten()
    }

    /// Runs one client's program. `expect_after_flush`: for a pooled run, how many messages
    /// the direct run had seen after each Flush-ended write (none: a direct run, which
    /// waits for the server to go quiet instead).
    pub async fn run(
        &mut self,
        program: &ClientProgram,
        expect_after_flush: Option<&[usize]>,
    ) -> ClientRun {
        let mut run = ClientRun::default();
        let mut flushes = 0;
        for w in &program.writes {
            let mut bytes = BytesMut::new();
            for m in &w.msgs {
                m.encode(&mut bytes);
            }
            if w.end == End::Fence {
                Msg::Sync.encode(&mut bytes);
                Msg::Query(String::new()).encode(&mut bytes);
            }
            if self.0.stream.write_all(&bytes).await.is_err() {
                run.transcript.push("<write failed>".into());
                return run;
            }
            match w.end {
                End::Fence => {
                    let mut empty = false;
                    loop {
                        let Some(f) = self.recv(EXPECT).await else {
                            run.transcript.push("<nothing more: timeout or EOF>".into());
                            return run;
                        };
                        run.transcript.push(normalise(&f));
                        match f.tag {
                            backend::EMPTY_QUERY_RESPONSE_TAG => empty = true,
                            backend::READY_FOR_QUERY_TAG if empty => break,
                            _ => empty = false,
                        }
                    }
                }
                End::Flush => {
                    match expect_after_flush {
                        None => {
                            while let Some(f) = self.recv(SETTLE).await {
                                run.transcript.push(normalise(&f));
                            }
                        }
                        Some(counts) => {
                            let want = counts.get(flushes).copied().unwrap_or(0);
                            while run.transcript.len() < want {
                                match self.recv(EXPECT).await {
                                    Some(f) => run.transcript.push(normalise(&f)),
                                    None => {
                                        run.transcript.push("<nothing more: timeout>".into());
                                        return run;
                                    }
                                }
                            }
                        }
                    }
                    run.after_flush.push(run.transcript.len());
                    flushes += 1;
                }
            }
        }
        run
    }
}

/// Runs every client of `program` at once against `port`; returns the runs and the still
/// open, idle connections (so the caller can look at the pool before they leave).
pub async fn run_all(
    port: u16,
    user: &str,
    db: &str,
    program: &Program,
    expect: Option<&[ClientRun]>,
) -> (Vec<ClientRun>, Vec<Conn>) {
    let mut tasks = Vec::new();
    for (i, client) in program.clients.iter().enumerate() {
        let client = client.clone();
        let counts = expect.map(|runs| runs[i].after_flush.clone());
        let (user, db) = (user.to_owned(), db.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::login(port, &user, &db).await;
            let run = conn.run(&client, counts.as_deref()).await;
            (run, conn)
        }));
    }
    let mut runs = Vec::new();
    let mut conns = Vec::new();
    for t in tasks {
        let (run, conn) = t.await.expect("client task");
        runs.push(run);
        conns.push(conn);
    }
    (runs, conns)
}

/// The first difference between two transcripts, with some context, for a failure message.
pub fn first_difference(direct: &Transcript, pooled: &Transcript) -> Option<String> {
    let at = direct
        .iter()
        .zip(pooled)
        .enumerate()
        .position(|(i, (a, b))| {
            a != b && !replay_in_failed_block(a, b, &pooled[..i]) && !both_ended(a, b, &pooled[..i])
        })
        .or_else(|| (direct.len() != pooled.len()).then(|| direct.len().min(pooled.len())))?;
    if at < direct.len().min(pooled.len())
        && describe_in_failed_block(&direct[at], &pooled[at], &pooled[..at])
    {
        return None;
    }
    // DROID_DIFF_CONTEXT widens the window shown (the whole transcripts with a large value).
    let context = std::env::var("DROID_DIFF_CONTEXT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize);
    let from = at.saturating_sub(context);
    let show = |t: &Transcript| {
        t.iter()
            .enumerate()
            .skip(from)
            .take(2 * context + 2)
            .map(|(i, m)| format!("    {i}: {m}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Some(format!(
        "first difference at message {at}\n  PostgreSQL:\n{}\n  through the pooler:\n{}",
        show(direct),
        show(pooled)
    ))
}
