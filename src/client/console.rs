//! The SQL admin console: `psql -d droidpool` (or `pgbouncer`) as a configured console user.
//! Simple query protocol only; PgBouncer's column names where the concept is the same.

use std::sync::Arc;

use crate::net::ClientStream;
use bytes::{BufMut, BytesMut};

use super::command::Command;
use super::console_act as act;
use super::console_show as show;
use super::error::{error_fields, ClientError};
use super::io::read_some;
use crate::protocol::frame::{self, begin, finish};
use crate::protocol::{backend, frontend, sqlstate};
use crate::shared::Shared;

/// The database names that reach the console.
pub fn is_console_database(db: &str) -> bool {
    db == "droidpool" || db == "pgbouncer"
}

/// Serves a console session after a successful console login.
pub(super) async fn serve(
    stream: &mut ClientStream,
    shared: &Arc<Shared>,
    who: Caller,
    mut buf: BytesMut,
    mut out: BytesMut,
) -> Result<(), ClientError> {
    backend::auth_ok(&mut out);
    for (k, v) in [
        (
            "server_version",
            concat!("15.0 (droid-pool ", env!("CARGO_PKG_VERSION"), ")"),
        ),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        backend::parameter_status(&mut out, k, v);
    }
    backend::backend_key_data(&mut out, 0, 0);
    backend::ready_for_query(&mut out, backend::TX_IDLE);
    stream.send(&out).await?;
    loop {
        let Some(f) =
            frame::cut(&mut buf, 1 << 20).map_err(|e| ClientError::Protocol(e.to_string()))?
        else {
            if read_some(stream, &mut buf).await? == 0 {
                return Ok(());
            }
            continue;
        };
        let mut out = BytesMut::new();
        match f.tag {
            frontend::TERMINATE_TAG => return Ok(()),
            frontend::QUERY_TAG => {
                let sql = frontend::query_text(&f.bytes).unwrap_or_default();
                let sql = String::from_utf8_lossy(sql);
                // A command that waits (PAUSE, KILL, WAIT_CLOSE) waits no longer than its
                // client: one that leaves ends the wait.
                {
                    let work = run(shared, &sql, &who, &mut out);
                    tokio::pin!(work);
                    loop {
                        tokio::select! {
                            () = &mut work => break,
                            r = read_some(stream, &mut buf), if buf.len() < 1 << 20 => {
                                if r? == 0 {
                                    return Ok(());
                                }
                            }
                        }
                    }
                }
                backend::ready_for_query(&mut out, backend::TX_IDLE);
            }
            frontend::SYNC_TAG => backend::ready_for_query(&mut out, backend::TX_IDLE),
            _ => {
                let e = error_fields(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "the admin console speaks the simple query protocol only".into(),
                );
                backend::error_response(&mut out, &e);
            }
        }
        stream.send(&out).await?;
    }
}

async fn run(shared: &Arc<Shared>, sql: &str, who: &Caller, out: &mut BytesMut) {
    match execute(shared, sql, who).await {
        Answer::Table(cols, rows) => {
            table(out, cols, &rows);
            complete(out, "SHOW");
        }
        Answer::Done(tag) => complete(out, tag),
        Answer::Error(code, message) => {
            backend::error_response(out, &error_fields(code, message));
        }
    }
}

/// What a console command answers, for the console's protocol or the admin HTTP server.
pub enum Answer {
    Table(&'static [&'static str], Vec<Vec<String>>),
    Done(&'static str),
    Error(&'static str, String),
}

impl Answer {
    /// The answer as text: a header and tab-separated rows (each value escaped, so a name
    /// holding a tab or a newline cannot forge a column or a row), the tag, or `ERROR
    /// code: ...`.
    pub fn to_text(&self) -> String {
        match self {
            Answer::Table(cols, rows) => {
                let mut out = cols.join("\t") + "\n";
                for r in rows {
                    for (i, v) in r.iter().enumerate() {
                        if i > 0 {
                            out.push('\t');
                        }
                        out.push_str(&escape(v));
                    }
                    out.push('\n');
                }
                out
            }
            Answer::Done(tag) => format!("{tag}\n"),
            Answer::Error(code, m) => format!("ERROR {code}: {m}\n"),
        }
    }
}

/// A console value as COPY's text format writes it: backslash, tab, newline and carriage
/// return as `\\`, `\t`, `\n`, `\r`, other control characters as `\xNN`. Names are the
/// clients' choice; escaped, one cannot pass for a row or column of its own in the text
/// answer, nor in psql's unaligned output of the SQL console.
pub fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.chars().any(|c| c == '\\' || c.is_control()) {
        return std::borrow::Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Who ran a console command, for the audit line.
#[derive(Debug, Clone)]
pub struct Caller {
    /// `http` (`POST /console`) or `sql` (the SQL console).
    pub via: &'static str,
    pub peer: Option<std::net::SocketAddr>,
    /// The credential it proved itself with (`admin.token`, `user "ops" (scram-sha-256)`).
    pub credential: String,
}

/// Runs one console command (`who`: where it came from, for the audit line).
pub async fn execute(shared: &Arc<Shared>, sql: &str, who: &Caller) -> Answer {
    let Some(cmd) = Command::parse(sql) else {
        return Answer::Error(
            sqlstate::SYNTAX_ERROR,
            format!("unknown console command: {sql:?} ({USAGE})"),
        );
    };
    if !matches!(cmd, Command::Show(_)) {
        // Every command that changes something is audited.
        let peer = who.peer.map(|p| p.to_string()).unwrap_or_default();
        tracing::info!(
            command = ?sql.trim(),
            via = who.via,
            %peer,
            credential = %who.credential,
            "admin command"
        );
    }
    let l = &shared.lifecycle;
    match &cmd {
        Command::Show(what) => {
            return match show::table(shared, what) {
                Some((cols, rows)) => Answer::Table(cols, rows),
                None => Answer::Error(
                    sqlstate::SYNTAX_ERROR,
                    format!("unknown SHOW target {what:?}"),
                ),
            }
        }
        Command::Pause(db) => act::pause(shared, db.as_deref()).await,
        Command::Resume(Some(db)) => l.resume_db(db),
        Command::Resume(None) => {
            l.resume();
            shared.metrics.lifecycle.paused.set(0);
        }
        Command::Disable(db) => l.set_disabled(db, true),
        Command::Enable(db) => l.set_disabled(db, false),
        Command::Kill(db) => act::kill(shared, db.as_deref()).await,
        Command::KillClient(id) => {
            if !act::kill_client(shared, *id).await {
                return Answer::Error(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("no client with id {id} (see SHOW CLIENTS)"),
                );
            }
        }
        Command::Reconnect(db) => act::reconnect(shared, db.as_deref()),
        Command::WaitClose(db) => act::wait_close(shared, db.as_deref()).await,
        Command::Reload => shared.reload.notify_one(),
        Command::Shutdown => l.begin_drain(),
    }
    Answer::Done(cmd.tag())
}

/// What the console takes, for the error about an unknown command.
const USAGE: &str =
    "SHOW POOLS|STATS|CLIENTS|SERVERS|CONFIG|VERSION|DATABASES|USERS|LISTS|STATE|TOTALS, \
    PAUSE [db], RESUME [db], DISABLE db, ENABLE db, KILL [db], KILL_CLIENT id, RECONNECT [db], \
    WAIT_CLOSE [db], RELOAD, SHUTDOWN";

fn table(out: &mut BytesMut, cols: &[&str], rows: &[Vec<String>]) {
    let at = begin(out, backend::ROW_DESCRIPTION_TAG);
    out.put_i16(cols.len() as i16);
    for c in cols {
        out.put_slice(c.as_bytes());
        out.put_u8(0);
        out.put_i32(0); // table oid
        out.put_i16(0); // column number
        out.put_i32(25); // text
        out.put_i16(-1);
        out.put_i32(-1);
        out.put_i16(0); // text format
    }
    finish(out, at);
    for row in rows {
        let at = begin(out, backend::DATA_ROW_TAG);
        out.put_i16(row.len() as i16);
        for v in row {
            let v = escape(v);
            out.put_i32(v.len() as i32);
            out.put_slice(v.as_bytes());
        }
        finish(out, at);
    }
}

fn complete(out: &mut BytesMut, tag: &str) {
    let at = begin(out, backend::COMMAND_COMPLETE_TAG);
    out.put_slice(tag.as_bytes());
    out.put_u8(0);
    finish(out, at);
}
