//! The relay as a pure state machine, in the manner of quinn-proto and rustls: it owns the
//! protocol state of one client session (its buffers, its prepared statements, the batch in
//! flight, skip-to-Sync, COPY, the plan-change retry, the release decision, the timeouts as
//! deadlines) and works on the protocol state of the server it holds ([`ServerState`]).
//! Bytes and the time go in; bytes for either side and what to do next come out ([`Next`],
//! [`Relay::poll`], [`Relay::deadline`]; the contract is in `contract`). No socket, no task, no await: the session
//! task (`client::session`) does the I/O and the checkout around it, and the deterministic
//! simulation (`sim`) drives it against a model PostgreSQL.
//!
//! Glossary: *client* is the application connection, *server* the connection to PostgreSQL
//! the client holds; a *batch* is what the client sends up to a Sync (or a simple Query); the
//! server *owes* a reply for each message it was sent (`server::Replies`).

mod check;
mod cleanup;
mod client;
mod contract;
mod direct;
mod error;
mod pass;
mod pin;
mod replies;
mod reset;
mod retry;
mod settle;
mod spare;
pub mod subscribe;
#[cfg(test)]
mod tests;
mod timeouts;
mod track;
mod tracking;

pub use check::Check;
pub use cleanup::{sync_query, synced};
pub use contract::{Event, Input, Stand};
pub use error::{ClientFault, RelayError, ServerFault};
pub use pin::{Pin, PinChange, PIN_CHECK_SQL};
pub use reset::Reset;

/// The policy the machine works under, made by the configuration and published by the pool.
pub use crate::config::policy::{Policy, StateRule};
pub use timeouts::{Kind, TimedOut};
pub use tracking::Departed;

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::events::Events;
use crate::metrics::Metrics;
use crate::params::ClientParams;
use crate::prepared::ClientStatements;
use crate::protocol::backend;
use crate::server::{Owed, ServerState};
use crate::session_state::lex::Scan;
use pass::Pass;
use retry::PlanRetry;

/// A buffer above this that has been emptied is given back rather than kept.
pub const SHRINK_ABOVE: usize = 64 * 1024;

/// What the machine asks of its driver during a call.
pub trait Io {
    /// The time now; read only where a duration is measured.
    fn now(&mut self) -> Instant;
    /// Whether bytes may go to the client straight from the server's read buffer (a plain
    /// socket: a TLS one copies anyway).
    fn direct(&self) -> bool;
    /// Offers bytes to the client without waiting; returns how many it took (the machine
    /// copies the rest into its client buffer).
    fn offer_client(&mut self, bytes: &[u8]) -> usize;
    /// The process id a notification sent by server process `server_pid` carries to the
    /// client: the cancel key of the client that ran on that server (the only process ids a
    /// client was ever told), or `server_pid` when no client did. `arrived`: when the
    /// notification was received (`None`: now), so its sender took the server before.
    fn notifier(&mut self, server_pid: i32, _arrived: Option<std::time::Instant>) -> i32 {
        server_pid
    }
    /// A random seed in [-1, 1] for a server's `setseed` after a clean-up, one the previous
    /// client cannot know.
    fn seed(&mut self) -> f64;
}

/// The buffers [`Relay::end_round`] keeps. While the client holds nothing, idle clients
/// stay small: their emptied buffers are freed, except a warm session's up to
/// [`SHRINK_ABOVE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The client holds a server: everything.
    All,
    /// A warm session between transactions.
    Warm,
    /// Any other session between transactions: nothing emptied.
    None,
}

/// The side of the relay bytes go to ([`Relay::transmit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Client,
    Server,
}

/// A `LISTEN` or `UNLISTEN` the pool's listening connection serves (`track`): the client
/// holds no server for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscribe {
    Listen(String),
    /// `None`: `UNLISTEN *`.
    Unlisten(Option<String>),
}

/// What the driver does after [`Relay::on_client`]; each action carries what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Everything that can be handled now is: write what is queued for either side.
    Done,
    /// The message in front (of type `tag`) needs a server: take one, [`Relay::hold`] it and
    /// call again, or answer the pool's refusal with [`Input::Refused`]. The server to take
    /// is not the backend `spare` names (the message signals it: `pg_terminate_backend`
    /// and the like).
    NeedServer {
        tag: u8,
        spare: Option<std::num::NonZeroI32>,
    },
    /// Enough is queued for the server: write it (reading the server meanwhile) and call
    /// again.
    FlushServer,
    /// The client sent Terminate.
    Quit,
    /// `LISTEN`s/`UNLISTEN`s (`track`) no server runs: make them with the pool's listening
    /// connection, answer with [`Input::Subscribed`], then call again.
    Subscribe(Box<Subscriptions>),
    /// The message in front is a `DROP DATABASE` (or a rename, or a copy from a template) of
    /// this database, which PostgreSQL refuses while other sessions are connected there:
    /// close the pool's idle servers of it that no client uses, then call again (the message
    /// then goes to the server).
    FreeDatabase(Box<String>),
}

/// What [`Next::Subscribe`] hands the driver (boxed: the usual [`Next`] stays two words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriptions {
    /// The statements, in order.
    pub subs: Vec<Subscribe>,
    /// The client's transaction block is open, so each counts when it comes; otherwise they
    /// commit together.
    pub in_block: bool,
}

/// A server given up at a transaction boundary ([`Event::Release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The clock read the transaction's count used: the pool's check-in time.
    pub at: Instant,
    /// A listening client's texts mentioned `notify` in the transaction: it may have sent
    /// a notification it listens for itself, which reaches it before its ReadyForQuery.
    pub notified: bool,
}

/// How a session ends ([`Relay::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// What becomes of the server it held (`None`: it held none).
    pub leave: Option<Leave>,
    /// If the held server's connection ended: whether the client must still be told
    /// (08006), which it must not after the server's own FATAL, already passed on (the
    /// client then sees what a direct connection shows: that error, then the close).
    pub tell_server_lost: bool,
}

/// What becomes of the server a session ends holding ([`Relay::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Back to the pool as it is.
    Return,
    /// Reset with the reset query first (session mode, or a pinned client's server, whose
    /// session state must not reach the next client).
    Reset { pinned: bool },
    /// Closed: not idle and in step, or a pinned client's with no reset query.
    Close,
}

/// The client's side: its bytes both ways and where its message stream stands.
#[derive(Debug, Default)]
struct ClientSide {
    /// Bytes from the client not yet handled.
    cbuf: BytesMut,
    /// Bytes for the client.
    cout: BytesMut,
    /// The rest of a client message being passed on (or dropped) in pieces.
    cpass: Pass,
    /// After an error the pooler answered: drop client messages up to Sync, as a server would.
    skipping: bool,
    /// Statement mode refused a transaction block: client bytes received before the refusal
    /// (the rest of that block) are answered with 25P02 instead of being run.
    refused_bytes: u32,
    /// The session settings this client expects (what it was told, plus its own SETs).
    params: ClientParams,
    /// The session state it created on its server, which keeps it there (`pin.reason`).
    pin: pin::Pinning,
    /// The settings it made by SQL (`pool.session_state: track`) and where they stand in
    /// the transaction in flight: from its first setting on (boxed: idle clients stay small).
    log: Option<Box<track::Log>>,
    /// The `LISTEN`s/`UNLISTEN`s handed to the driver ([`Next::Subscribe`]). (Boxed: one
    /// pointer, so idle clients stay small.)
    subscribe: Option<Box<subscribe::Subscribes>>,
    /// It listens through the pool's listening connection (its texts are checked for a
    /// `NOTIFY`, whose notification PostgreSQL delivers before the transaction's end).
    listening: bool,
    /// The round ended with the client holding nothing ([`Keep::None`]): `cout` goes once
    /// written ([`Relay::transmitted`]).
    free_out: bool,
    /// The size of the Query in front when it was found to make no session state as a server
    /// was asked for it ([`Relay::spare`]): its first handling does not read it again (0:
    /// none).
    plain_front: u16,
}

/// What a client's kept statements hold that a Bind in front is checked for: a byte of
/// flags, so the idle client task stays in its allocation class.
#[derive(Debug, Default, Clone, Copy)]
struct KeptTexts(u8);

impl KeptTexts {
    /// A lone `LISTEN`/`UNLISTEN`: a Bind in front is checked for a batch the pool's
    /// listening connection serves.
    const SUBSCRIBES: u8 = 1;
    /// A signal of a backend by pid: a Bind in front is checked for the pid to spare
    /// ([`Relay::spare`]).
    const SIGNALS: u8 = 2;
    /// Not a kind: the Bind in front has left one server already
    /// ([`Relay::leave_signalled`]), and runs on the next it gets (a full pool may hand the
    /// same one back).
    const LEFT: u8 = 4;

    fn has(self, kind: u8) -> bool {
        self.0 & kind != 0
    }

    fn add(&mut self, kind: u8) {
        self.0 |= kind;
    }

    /// Clears `kind`; returns whether it was set.
    fn take(&mut self, kind: u8) -> bool {
        let was = self.has(kind);
        self.0 &= !kind;
        was
    }
}

/// The batch in flight on the held server.
#[derive(Debug, Default)]
struct Batch {
    /// Transaction status of the held server's last ReadyForQuery.
    status: u8,
    /// The held server answered everything it owed with a ReadyForQuery that ends the
    /// client's transaction (idle, a pooled mode, no pin): it may go back.
    release_due: bool,
    /// Nothing has been executed yet in the current batch (for the plan-change retry).
    clean: bool,
    retry: PlanRetry,
    /// Scratch space for replies skipped after an error.
    skipped: Vec<Owed>,
    /// The held server sent a FATAL error (passed on): its close ends the session quietly.
    server_fatal: bool,
    /// The held server has the client's unnamed statement (parsed there since it was taken).
    unnamed_here: bool,
    /// A statement was replayed for the simple Query's `EXECUTE` waiting in front: the
    /// server stays until that Query has run.
    execute_replay: bool,
    /// A listening client's text since its server was taken mentioned `notify`.
    notified: bool,
    /// The message in front names a database that must be free of other sessions, and the
    /// driver has been told ([`Next::FreeDatabase`]): it goes on to the server now.
    freeing: bool,
}

/// The clock reads the metrics need.
#[derive(Debug, Default)]
struct Clock {
    /// When the held server was taken, and when the request in flight was sent.
    held_since: Option<Instant>,
    request_since: Option<Instant>,
    /// When the last ReadyForQuery was handled, within the current round only (so a release
    /// right after it reuses that clock read), and the query's seconds when that query began
    /// the transaction (an autocommit statement: the transaction took as long). `f32`: a
    /// histogram needs no more, and the idle client task stays in its allocation class.
    ready_at: Option<(Instant, Option<f32>)>,
}

/// The relay of one client session.
pub struct Relay {
    /// The client's number: its statements' server names (`p<id>_...`) and event lines.
    id: u64,
    policy: Policy,
    client: ClientSide,
    statements: ClientStatements,
    /// Bytes for the server.
    sout: BytesMut,
    /// The rest of a server message being passed on (or dropped) in pieces.
    spass: Pass,
    batch: Batch,
    clock: Clock,
    /// Kept only while a timeout is on.
    marks: Option<Box<timeouts::Marks>>,
    /// Kept statements already counted in the gauge (at most
    /// `pool.max_client_prepared_statements`; 32 bits keep the idle client task small).
    kept_counted: u32,
    /// What the client's kept statements hold that a Bind in front is checked for.
    kept_texts: KeptTexts,
    /// The pooler's own conversation with the held server before the client's messages
    /// (`cleanup`): the clean-up of another client's session, then this client's settings.
    /// (Here rather than in `batch`: two bytes fit beside the fields above, and the idle
    /// client task stays in its allocation class.)
    prelude: cleanup::Prelude,
    /// The client's last unnamed Parse (tracking), replayed where the client binds or
    /// describes the unnamed statement on a server it did not parse it on: a driver may parse
    /// in one transaction and bind in the next (asyncpg does for statements too long for its
    /// cache). `None` once PostgreSQL would have dropped it (a simple Query, a Close).
    /// Boxed: one pointer in every idle client task; the Vec keeps its capacity between
    /// Parses, so a driver's unnamed statement each transaction allocates nothing.
    #[allow(clippy::box_collection)]
    unnamed: Option<Box<Vec<u8>>>,
    metrics: Arc<Metrics>,
    events: Events,
}

impl Relay {
    /// A session of client `id` expecting `params`, with `leftover` bytes it sent after its
    /// startup packet.
    pub fn new(
        id: u64,
        params: ClientParams,
        policy: Policy,
        leftover: BytesMut,
        metrics: Arc<Metrics>,
        events: Events,
    ) -> Relay {
        Relay {
            id,
            policy,
            client: ClientSide {
                // An empty leftover still holds the login's read buffer: not kept by an idle
                // client.
                cbuf: if leftover.is_empty() {
                    BytesMut::new()
                } else {
                    leftover
                },
                params,
                ..ClientSide::default()
            },
            statements: ClientStatements::default(),
            sout: BytesMut::new(),
            spass: Pass::default(),
            batch: Batch {
                status: backend::TX_IDLE,
                clean: true,
                ..Batch::default()
            },
            clock: Clock::default(),
            marks: None,
            kept_counted: 0,
            kept_texts: KeptTexts::default(),
            prelude: cleanup::Prelude::Idle,
            unnamed: None,
            metrics,
            events,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Where the driver reads the client's bytes into.
    pub fn client_in(&mut self) -> &mut BytesMut {
        &mut self.client.cbuf
    }

    /// Client bytes not handled yet (the simulation checks their bound).
    #[cfg(any(test, feature = "sim"))]
    pub fn client_buffered(&self) -> usize {
        self.client.cbuf.len()
    }

    /// What is queued for `peer`; the driver writes all of it, then calls
    /// [`Relay::transmitted`].
    #[inline]
    pub fn transmit(&self, peer: Peer) -> &[u8] {
        match peer {
            Peer::Client => &self.client.cout,
            Peer::Server => &self.sout,
        }
    }

    /// `peer` took everything queued for it.
    #[inline]
    pub fn transmitted(&mut self, peer: Peer) {
        let (buf, free) = match peer {
            Peer::Client => {
                let out = &mut self.client.cout;
                self.metrics.clients.bytes_out.inc_by(out.len() as u64);
                (out, std::mem::take(&mut self.client.free_out))
            }
            Peer::Server => (&mut self.sout, false),
        };
        buf.clear();
        if free || buf.capacity() > SHRINK_ABOVE {
            *buf = BytesMut::new();
        }
    }

    /// The settings this client expects.
    pub fn params(&self) -> &ClientParams {
        &self.client.params
    }

    pub fn params_mut(&mut self) -> &mut ClientParams {
        &mut self.client.params
    }

    /// How the client's texts are read: as PostgreSQL's scanner reads them under the
    /// session's `standard_conforming_strings` and `client_encoding` (what the client was
    /// told, ParameterStatus included).
    pub(super) fn scan(&self) -> Scan {
        let mut scan = Scan::STANDARD;
        for name in ["standard_conforming_strings", "client_encoding"] {
            if let Some(v) = self.client.params.get(name) {
                scan.observe(name.as_bytes(), v.as_bytes());
            }
        }
        scan
    }

    /// Transaction status of the held server's last ReadyForQuery.
    pub fn status(&self) -> u8 {
        self.batch.status
    }

    /// Starts holding server `srv` taken at `now` under the `fresh` policy (`None`: the
    /// configuration is unchanged, the last one holds). A reloaded mode applies
    /// from this transaction on; tracking switches only while the client keeps no
    /// statements, so none of its names is stranded. Before the client's messages run there,
    /// the server's session is cleaned if another client's work may have left state on it
    /// ([`ServerState::cleanup_for`]), and the client's settings are brought onto it.
    #[inline(always)]
    pub fn hold(
        &mut self,
        srv: &mut ServerState,
        fresh: Option<Policy>,
        now: Instant,
        departed: &impl Departed,
        check: Option<Check<'_>>,
    ) {
        let mut policy = fresh.unwrap_or_else(|| {
            let mut p = self.policy;
            p.tracking = p.tracking_configured;
            p
        });
        if !self.statements.is_empty() {
            policy.tracking = self.policy.tracking;
        }
        self.policy = policy;
        self.clock.held_since = Some(now);
        // The first request goes out right after: one clock read serves both.
        self.clock.request_since = Some(now);
        self.events.client_uses_server(self.id, srv.id);
        if policy.has_timeouts() || check.is_some() {
            let marks = self.marks.get_or_insert_with(|| {
                Box::new(timeouts::Marks {
                    cancelled: None,
                    quiet_since: now,
                    check_until: None,
                })
            });
            marks.cancelled = None;
            marks.check_until = check.map(|c| now + c.within);
        } else {
            self.marks = None;
        }
        self.spass = Pass::default();
        self.batch.unnamed_here = false;
        self.batch.status = backend::TX_IDLE;
        self.batch.release_due = false;
        self.batch.clean = true;
        let then = match srv.cleanup_for(self.id, policy.cleans_always()) {
            Some(c) => cleanup::Then::due(c),
            None if srv.in_sync_with(&self.client.params, self.settings()) => cleanup::Then::Idle,
            None => cleanup::Then::Sync,
        };
        self.prelude = match check {
            Some(c) => self.begin_check(srv, c, then),
            None => then.into(),
        };
        srv.last_client = self.id;
        if policy.tracking {
            self.close_departed(srv, departed);
        }
    }

    /// The transaction is over and `srv` owes nothing more: it may go back to the pool now.
    fn release_ready(&self, srv: &ServerState) -> bool {
        // `release_due` carries the transaction status, the mode and the pin, as they were
        // at the ReadyForQuery that set it.
        self.batch.release_due && srv.replies.is_empty() && self.client.cpass.is_idle()
    }

    /// Gives `srv` up if the transaction is over and `srv` owes nothing more (`None`: the
    /// client keeps it).
    #[inline]
    fn release(&mut self, srv: &ServerState, io: &mut impl Io) -> Option<Released> {
        if !self.release_ready(srv) {
            return None;
        }
        let at = self.count_transaction(io);
        self.events.client_released_server(self.id, srv.id);
        Some(Released {
            at,
            notified: std::mem::take(&mut self.batch.notified),
        })
    }

    /// The held server `srv` left (its FATAL unread, or its close) while the client sat at a
    /// transaction boundary with nothing in flight: the client keeps its session and takes
    /// another server for its next transaction; a pin, whose state went with `srv`, ends.
    /// The same for a server that failed its idle check: the client's messages, which
    /// waited for the check, go to the next server; what was queued for this one is dropped.
    fn lose_idle_server(&mut self, srv: &ServerState) {
        self.events.client_released_server(self.id, srv.id);
        self.batch.server_fatal = false;
        self.batch.release_due = false;
        self.batch.status = backend::TX_IDLE;
        self.prelude = cleanup::Prelude::Idle;
        self.sout.clear();
        self.end_pin();
    }

    /// The end of every round, before its bytes for the client are written: the clock read
    /// of its ReadyForQuery is stale from here on, the kept-statements gauge is brought up to
    /// date, and the buffers `keep` does not keep are freed (the client's output once
    /// written).
    #[inline]
    pub fn end_round(&mut self, keep: Keep) {
        self.clock.ready_at = None;
        if self.policy.tracking {
            self.count_kept();
        }
        if keep != Keep::All {
            self.free_idle(keep);
        }
    }

    /// The session ends holding `srv` (or none): counts what is left; says what becomes of
    /// `srv` (`reset`: a reset query is configured) and whether the client is still to hear
    /// of a lost server.
    pub fn finish(&mut self, srv: Option<&ServerState>, io: &mut impl Io, reset: bool) -> Ending {
        self.metrics.prepared.kept.sub(self.kept_counted as i64);
        self.kept_counted = 0;
        self.count_transaction(io);
        Ending {
            leave: srv.map(|srv| self.leave(srv, reset)),
            tell_server_lost: !self.batch.server_fatal,
        }
    }

    /// What becomes of `srv`, held as the session ends.
    fn leave(&self, srv: &ServerState, reset: bool) -> Leave {
        self.events.client_released_server(self.id, srv.id);
        // Idle, in step, nothing unread: otherwise it cannot be used again.
        let clean =
            srv.replies.is_empty() && self.batch.status == backend::TX_IDLE && srv.rbuf.is_empty();
        // A pinned client's server holds its session state (a setting, a temp table, a
        // lock...): reset before anyone else gets it, or closed when there is no reset query.
        let pinned = self.client.pin.reason.is_some();
        if !clean {
            Leave::Close
        } else if (self.policy.is_session() || pinned) && reset {
            Leave::Reset { pinned }
        } else if pinned {
            Leave::Close
        } else {
            Leave::Return
        }
    }

    /// Session mode's transaction boundary: idle, outside a transaction, nothing owed.
    fn at_session_boundary(&self, srv: &ServerState) -> bool {
        self.policy.is_session()
            && self.batch.status == backend::TX_IDLE
            && srv.replies.is_empty()
            && self.client.cbuf.is_empty()
            && self.client.cpass.is_idle()
    }

    /// The client holds nothing: its emptied buffers are freed (a warm session's up to
    /// [`SHRINK_ABOVE`]), and its output once written.
    #[inline]
    fn free_idle(&mut self, keep: Keep) {
        let above = if keep == Keep::Warm { SHRINK_ABOVE } else { 0 };
        for buf in [&mut self.client.cbuf, &mut self.client.cout, &mut self.sout] {
            if buf.capacity() > above && buf.is_empty() && buf.capacity() > 0 {
                *buf = BytesMut::new();
            }
        }
        self.client.free_out = keep == Keep::None && !self.client.cout.is_empty();
        self.batch.retry.free_spare(above);
    }

    /// Counts the transaction that ends now; returns the clock read it used.
    fn count_transaction(&mut self, io: &mut impl Io) -> Instant {
        // A ReadyForQuery handled in this same round already read the clock.
        let (now, took) = self
            .clock
            .ready_at
            .take()
            .unwrap_or_else(|| (io.now(), None));
        if let Some(since) = self.clock.held_since.take() {
            let m = &self.metrics.clients;
            m.transactions.inc();
            let took = took.map_or_else(
                || now.saturating_duration_since(since).as_secs_f64(),
                f64::from,
            );
            m.transaction_seconds.observe(took);
        }
        now
    }

    /// Brings the kept-statements gauge up to date with this session's count.
    fn count_kept(&mut self) {
        let now = u32::try_from(self.statements.len()).unwrap_or(u32::MAX);
        if now != self.kept_counted {
            let gauge = &self.metrics.prepared.kept;
            gauge.add(i64::from(now) - i64::from(self.kept_counted));
            self.kept_counted = now;
        }
    }

    /// An answer of the pooler's own, kept in its place after what the server still owes.
    fn answer(&mut self, srv: Option<&mut ServerState>, msg: Bytes) {
        match srv {
            Some(srv) if !srv.replies.is_empty() => {
                let o = Owed::Synthetic(msg);
                self.batch.retry.record_answer(&o);
                srv.replies.push(o);
            }
            _ => self.client.cout.extend_from_slice(&msg),
        }
    }

    /// Queues what `srv` owes for a message just written to it. One the server will ignore
    /// (sent while it skips to Sync) is settled as skipped at once.
    fn owe(&mut self, srv: &mut ServerState, o: Owed) {
        if owe_on(srv, &mut self.statements, o) {
            self.batch.release_due = false;
        }
    }

    /// An ERROR answered by the pooler, after which the client's messages are skipped to Sync.
    fn pooler_error(&mut self, srv: Option<&mut ServerState>, code: &str, message: String) {
        self.metrics.pooler_error(code);
        let mut m = BytesMut::new();
        backend::error_response(&mut m, &error_fields(code, message));
        self.answer(srv, m.freeze());
        self.client.skipping = true;
    }
}

/// Queues on `srv` what it owes for a message just written to it; one it will ignore (sent
/// while it skips to Sync) is settled as skipped at once. Returns whether `srv` now owes
/// anything (then it cannot go back to the pool before its next ReadyForQuery).
fn owe_on(srv: &mut ServerState, statements: &mut ClientStatements, o: Owed) -> bool {
    if let Some(ignored) = srv.replies.push(o) {
        settle::settle(statements, &mut srv.statements, ignored, true);
    }
    !srv.replies.is_empty()
}

/// An ERROR (not FATAL) answered by the pooler itself; the session continues.
pub fn error_fields(code: &str, message: String) -> backend::ErrorFields {
    backend::ErrorFields {
        severity: "ERROR".into(),
        code: code.into(),
        message,
        detail: None,
        hint: None,
    }
}
