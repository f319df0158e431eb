//! Running one console command: the audit line of a command that changes something, then
//! `SHOW` or the action it names.

use std::sync::Arc;

use super::act;
use super::answer::Answer;
use super::command::Command;
use super::show;
use crate::protocol::sqlstate;
use crate::shared::Shared;

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
