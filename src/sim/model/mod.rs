//! A model PostgreSQL backend: one server session after login, in memory and deterministic,
//! speaking protocol 3.0 at the message level by PostgreSQL's rules (protocol docs, "Message
//! Flow": Simple Query, Extended Query, Pipelining, COPY Operations, Asynchronous Operations,
//! Error and notice handling).
//!
//! A session consumes frontend bytes split anywhere ([`ModelServer::feed`]) and appends the
//! backend bytes PostgreSQL would have sent by then, keeping back what PostgreSQL keeps in its
//! send buffer (see [`wire`]). Sessions of one database share a [`ModelDb`] passed to every
//! call. The SQL it understands is the program generator's vocabulary ([`sql`]); anything else
//! is a syntax error.

mod copy;
mod db;
mod decode;
mod error;
mod exec;
mod extended;
mod ready;
mod simple;
mod sql;
mod tx;
mod utility;
mod value;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use bytes::BytesMut;

use crate::protocol::frame;
use crate::protocol::frontend as f;

pub use db::{ModelDb, Notification, Table};
pub use error::PgError;

use copy::CopyIn;
use error::{ADMIN_SHUTDOWN, PROTOCOL_VIOLATION, QUERY_CANCELED};
use extended::{Portal, Prepared};
use simple::QueryRun;
use tx::{Block, Settings, Tx};
use wire::Io;

/// The largest message the model accepts: PostgreSQL's `PQ_LARGE_MESSAGE_LIMIT` plus header.
const MAX_MESSAGE: usize = f::LARGE_MESSAGE_LIMIT + frame::HEADER_LEN;

/// What the session does with the next frontend message.
#[derive(Debug)]
enum State {
    Ready,
    /// After an error in an extended-protocol message: everything up to Sync is skipped
    /// (`ignore_till_sync` in `postgres.c`).
    SkipToSync,
    /// COPY FROM STDIN: messages go to the copy.
    CopyIn(CopyIn),
    /// After Terminate or a FATAL error.
    Closed,
}

/// A command that waits for an advisory lock, to run again when polled.
#[derive(Debug)]
enum Work {
    Query(QueryRun),
    Execute { portal: String, max_rows: i32 },
}

/// One model server session.
#[derive(Debug)]
pub struct ModelServer {
    pid: i32,
    inbuf: BytesMut,
    /// Output PostgreSQL still holds in its send buffer.
    kept: BytesMut,
    state: State,
    /// A simple Query in progress (its remaining statements), or a command waiting for a lock.
    work: Option<Work>,
    /// Whether `work` waits for an advisory lock.
    blocked: bool,
    block: Block,
    tx: Tx,
    settings: Settings,
    /// The value of each reported setting the client last saw in a ParameterStatus.
    reported: Vec<(&'static str, String)>,
    /// A setting may have changed since the last ReadyForQuery.
    settings_changed: bool,
    /// Prepared statements by name; `""` is the unnamed statement.
    statements: BTreeMap<String, Prepared>,
    portals: BTreeMap<String, Portal>,
    temps: BTreeMap<String, Table>,
    /// `pg_terminate_backend(pg_backend_pid())` ran: FATAL after the current row.
    dying: bool,
    /// The pooler's pin check is told nothing is left, whatever is ([`ModelServer::blind`]).
    blind: bool,
}

impl ModelServer {
    /// A session with process id `pid` (BackendKeyData, NotificationResponse) and default
    /// settings, as after a login that set none.
    pub fn new(pid: i32) -> ModelServer {
        ModelServer::with_startup(pid, &[])
    }

    /// A session whose startup packet set these parameters (`application_name`, ...): they
    /// are its defaults, as RESET sees them.
    pub fn with_startup(pid: i32, params: &[(String, String)]) -> ModelServer {
        let settings = Settings::new(params);
        let reported = settings
            .reported()
            .map(|(k, v)| (k, v.to_owned()))
            .collect();
        ModelServer {
            pid,
            inbuf: BytesMut::new(),
            kept: BytesMut::new(),
            state: State::Ready,
            work: None,
            blocked: false,
            block: Block::Idle,
            tx: Tx::default(),
            settings,
            reported,
            settings_changed: false,
            statements: BTreeMap::new(),
            portals: BTreeMap::new(),
            temps: BTreeMap::new(),
            dying: false,
            blind: false,
        }
    }

    /// Answers the pooler's pin check ([`crate::relay::PIN_CHECK_SQL`]) with "nothing
    /// left", as if the check were not made: a check that the simulation finds the leak.
    pub fn blind(mut self, on: bool) -> ModelServer {
        self.blind = on;
        self
    }

    /// The settings it reports at login (ParameterStatus), as the pooler's server login
    /// reads them.
    pub fn reported_params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.reported.iter().map(|(k, v)| (*k, v.as_str()))
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Consumes frontend bytes (any split of the stream) and appends what the server sends
    /// in reply by then. After the session closed, input is ignored.
    pub fn feed(&mut self, db: &mut ModelDb, input: &[u8], out: &mut BytesMut) {
        if matches!(self.state, State::Closed) {
            return;
        }
        self.inbuf.extend_from_slice(input);
        let mut io = Io::start(db, out, &mut self.kept);
        self.pump(&mut io);
        io.end(&mut self.kept);
    }

    /// What the session does without input: a command waiting for a lock tries again, and an
    /// idle session sends the notifications committed for it (protocol docs, "Asynchronous
    /// Operations").
    pub fn poll_async(&mut self, db: &mut ModelDb, out: &mut BytesMut) {
        self.feed(db, &[], out);
    }

    /// A CancelRequest for this session: a command waiting for a lock fails with 57014; at
    /// any other time (the model runs everything else at once) it does nothing.
    pub fn cancel(&mut self, db: &mut ModelDb, out: &mut BytesMut) {
        if !self.blocked {
            return;
        }
        let mut io = Io::start(db, out, &mut self.kept);
        self.blocked = false;
        io.db.cancel_wait(self.pid);
        let e = PgError::new(QUERY_CANCELED, "canceling statement due to user request");
        match self.work.take() {
            Some(Work::Query(_)) => {
                self.fail(&mut io, e);
                self.ready(&mut io);
            }
            Some(Work::Execute { .. }) => self.fail_extended(&mut io, e),
            None => {}
        }
        self.pump(&mut io);
        io.end(&mut self.kept);
    }

    /// `pg_terminate_backend` from another session (or a server shutting down fast): FATAL
    /// 57P01 and the session ends. The model runs every command at once, so this always finds
    /// the session between commands (or waiting for a lock), where PostgreSQL acts at once.
    pub fn terminate(&mut self, db: &mut ModelDb, out: &mut BytesMut) {
        if matches!(self.state, State::Closed) {
            return;
        }
        let mut io = Io::start(db, out, &mut self.kept);
        self.fail(&mut io, ModelServer::terminated());
        io.end(&mut self.kept);
    }

    /// The client's connection is gone without Terminate (EOF): the session ends and what it
    /// held in the database (locks, LISTEN) is released; its transaction rolls back.
    pub fn disconnect(&mut self, db: &mut ModelDb) {
        if !matches!(self.state, State::Closed) {
            self.state = State::Closed;
            self.work = None;
            self.blocked = false;
            db.forget(self.pid);
        }
    }

    /// After Terminate, a FATAL error or [`ModelServer::disconnect`].
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// In COPY FROM STDIN: CopyData, CopyDone, CopyFail expected.
    pub fn in_copy_in(&self) -> bool {
        matches!(self.state, State::CopyIn(_))
    }

    /// Skipping messages until Sync after an extended-protocol error.
    pub fn skipping_to_sync(&self) -> bool {
        matches!(self.state, State::SkipToSync)
    }

    /// Waiting for the next query with nothing left of the last: no transaction, no COPY,
    /// no command waiting, no partial message buffered. A pooler should only pool a server
    /// in this state.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Ready)
            && self.work.is_none()
            && self.block == Block::Idle
            && self.inbuf.is_empty()
    }

    /// Bytes PostgreSQL would still hold in its send buffer, waiting for a Flush, Sync or a
    /// full buffer (a pooler that waits for them waits forever).
    pub fn unsent(&self) -> usize {
        self.kept.len()
    }

    /// A command waits for an advisory lock another session holds.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// The named prepared statements the session holds (Parse or SQL PREPARE), in order.
    pub fn prepared_names(&self) -> impl Iterator<Item = &str> {
        self.statements
            .keys()
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    pub fn has_prepared(&self, name: &str) -> bool {
        !name.is_empty() && self.statements.contains_key(name)
    }

    /// The session's current value of a setting (as SHOW reports it).
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.show(name).ok().map(|(_, v)| v)
    }

    /// Runs buffered messages until the input is used up, the session waits for a lock, or
    /// it closes; then, if idle, delivers notifications.
    fn pump(&mut self, io: &mut Io) {
        loop {
            if matches!(self.state, State::Closed) {
                return;
            }
            if self.blocked {
                self.resume(io);
                if self.blocked {
                    return;
                }
                continue;
            }
            match frame::cut(&mut self.inbuf, MAX_MESSAGE) {
                Ok(Some(msg)) => self.dispatch(io, msg),
                Ok(None) => break,
                // PostgreSQL treats an impossible length as a lost connection
                // (`pq_getmessage` logs it and returns EOF): it closes without a word.
                Err(_) => return self.close(io),
            }
        }
        self.deliver_if_idle(io);
    }

    fn resume(&mut self, io: &mut Io) {
        self.blocked = false;
        match self.work.take() {
            Some(Work::Query(q)) => {
                self.work = Some(Work::Query(q));
                self.run_query(io);
            }
            Some(Work::Execute { portal, max_rows }) => {
                if let Err(e) = self.execute_portal(io, &portal, max_rows) {
                    self.fail_extended(io, e);
                }
            }
            None => {}
        }
    }

    fn dispatch(&mut self, io: &mut Io, msg: frame::Frame) {
        if matches!(self.state, State::CopyIn(_)) {
            return self.on_copy_message(io, &msg);
        }
        if matches!(self.state, State::SkipToSync) {
            // Even Terminate is skipped (`postgres.c` checks `ignore_till_sync` first).
            if msg.tag != f::SYNC_TAG {
                return;
            }
            self.state = State::Ready;
        }
        let body = msg.body();
        let result = match msg.tag {
            f::QUERY_TAG => {
                self.on_query(io, body);
                Ok(())
            }
            f::PARSE_TAG => self.on_parse(io, body),
            f::BIND_TAG => self.on_bind(io, body),
            f::DESCRIBE_TAG => self.on_describe(io, body),
            f::EXECUTE_TAG => self.on_execute(io, body),
            f::CLOSE_TAG => self.on_close(io, body),
            f::SYNC_TAG => {
                self.finish_command(io.db);
                self.ready(io);
                Ok(())
            }
            f::FLUSH_TAG => {
                io.flush();
                Ok(())
            }
            f::TERMINATE_TAG => {
                // The process exits without flushing its send buffer.
                io.discard();
                self.close(io);
                Ok(())
            }
            // Left over from a COPY that failed: PostgreSQL ignores them.
            f::COPY_DATA_TAG | f::COPY_DONE_TAG | f::COPY_FAIL_TAG => Ok(()),
            tag => {
                let e = PgError::fatal(
                    PROTOCOL_VIOLATION,
                    format!("invalid frontend message type {tag}"),
                );
                self.fail(io, e);
                Ok(())
            }
        };
        if let Err(e) = result {
            self.fail_extended(io, e);
        }
    }

    /// An error in an extended-protocol message: reported, then everything up to Sync skipped.
    fn fail_extended(&mut self, io: &mut Io, e: PgError) {
        self.fail(io, e);
        if !self.is_closed() {
            self.state = State::SkipToSync;
        }
    }

    /// Sends an error and ends what it ends: the session for FATAL, else the command and the
    /// transaction it began (or the block it failed).
    fn fail(&mut self, io: &mut Io, e: PgError) {
        io.error(&e);
        if e.fatal {
            return self.close(io);
        }
        self.abort_on_error();
    }

    /// The session ends: what it held in the database is released.
    fn close(&mut self, io: &mut Io) {
        self.state = State::Closed;
        self.work = None;
        self.blocked = false;
        self.tx = Tx::default();
        io.db.forget(self.pid);
    }

    /// FATAL 57P01 after `pg_terminate_backend` on itself.
    fn terminated() -> PgError {
        PgError::fatal(
            ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        )
    }
}
