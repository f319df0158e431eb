//! The admin console, shared by the SQL console (`psql -d droidpool`, or `pgbouncer`, as a
//! configured console user: the client login hands the session to [`session::serve`]) and
//! `POST /console` of the admin server: the command language (`command`), what each command
//! shows (`show`) or does (`act`), and its answers as rows or as text.

mod act;
pub mod command;
mod session;
mod show;

pub use session::{serve, ConsoleError};

use std::sync::Arc;

use crate::protocol::sqlstate;
use crate::shared::Shared;
use command::Command;

/// The database names that reach the console.
pub fn is_console_database(db: &str) -> bool {
    db == "droidpool" || db == "pgbouncer"
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
