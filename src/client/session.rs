//! A logged-in client's session: waits for requests, takes a server when one is needed,
//! relays until the pool mode says the server goes back, and ends cleanly whatever happens.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use crate::lifecycle::Watch;
use bytes::{Bytes, BytesMut};
use tokio_util::io::poll_read_buf;

use crate::net::ClientStream;

use super::cancel::CancelSlot;
use super::error::ClientError;
use super::io::{poll_read_some, release_if_empty, SHRINK_ABOVE};
use super::pass::Pass;
use super::startup::Login;
use crate::config::PoolMode;
use crate::params::ClientParams;
use crate::pool::{Pool, PoolError};
use crate::prepared::ClientStatements;
use crate::protocol::{backend, frontend, sqlstate};
use crate::server::{Owed, Server};
use crate::shared::Shared;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    Quit,
}

enum Event {
    Client(std::io::Result<usize>),
    Server(std::io::Result<usize>),
    Abort,
    Timeout(super::timeouts::Kind),
}

/// Queues on `srv` what it owes for a message just written to it; one it will ignore (sent
/// while it skips to Sync) is settled as skipped at once. Returns whether `srv` now owes
/// anything (then it cannot go back to the pool before its next ReadyForQuery).
pub(super) fn owe_on(srv: &mut Server, statements: &mut ClientStatements, o: Owed) -> bool {
    if let Some(ignored) = srv.replies.push(o) {
        super::settle::settle(statements, &mut srv.statements, ignored, true);
    }
    !srv.replies.is_empty()
}

pub struct Session<'a> {
    pub(super) id: u64,
    pub(super) client: &'a mut ClientStream,
    pub(super) shared: Arc<Shared>,
    pub(super) pool: Pool,
    /// The session settings this client expects (what it was told, plus its own SETs).
    pub(super) params: ClientParams,
    pub(super) cancel: Arc<CancelSlot>,
    /// Bytes from the client not yet handled.
    pub(super) cbuf: BytesMut,
    /// Bytes for the client, written at the end of each round.
    pub(super) cout: BytesMut,
    /// Bytes for the server, written at the end of each round.
    pub(super) sout: BytesMut,
    pub(super) server: Option<Server>,
    pub(super) statements: ClientStatements,
    pub(super) mode: PoolMode,
    pub(super) tracking: bool,
    pub(super) max_prepared: usize,
    /// After an error the pooler answered: drop client messages up to Sync, as a server would.
    pub(super) skipping: bool,
    /// Transaction status of the held server's last ReadyForQuery.
    pub(super) status: u8,
    pub(super) max_message: usize,
    /// `client.buffer_size`: how much is read from either side at a time, and the size above
    /// which a message that need not be held whole is passed on in pieces.
    pub(super) buffer: usize,
    /// `pool.max_client_prepared_statements`.
    pub(super) max_client_prepared: usize,
    /// The rest of a client message being passed on in pieces.
    pub(super) cpass: Pass,
    /// The rest of a server message being passed on (or dropped) in pieces.
    pub(super) spass: Pass,
    /// Scratch space for replies skipped after an error.
    pub(super) skipped: Vec<Owed>,
    /// The plan-change retry of the current batch.
    pub(super) retry: super::retry::PlanRetry,
    /// The held server answered everything it owed with ReadyForQuery: it may go back.
    pub(super) release_due: bool,
    /// Nothing has been executed yet in the current batch (for the plan-change retry).
    pub(super) batch_clean: bool,
    /// Statement mode refused a transaction block: client bytes received before the refusal
    /// (the rest of that block) are answered with 25P02 instead of being run.
    pub(super) refused_bytes: usize,
    /// This session's membership of its pool (client counts).
    _member: crate::pool::PoolClient,
    /// When the held server was taken, and when the request in flight was sent.
    pub(super) held_since: Option<Instant>,
    pub(super) request_since: Option<Instant>,
    /// When the last ReadyForQuery was handled, within the current step only (so a release
    /// right after it reuses that clock read), and the query's seconds when that query began
    /// the transaction (an autocommit statement: the transaction took as long).
    pub(super) ready_at: Option<(Instant, Option<f64>)>,
    /// Kept statements already counted in the gauge.
    pub(super) kept_counted: usize,
    /// Held by a session that keeps its buffers and round between transactions.
    pub(super) warm: Option<crate::shared::WarmSlot>,
    /// `client.warm_sessions` when this client logged in.
    warm_limit: usize,
    /// Which side [`Session::next_event`] reads first this time.
    client_first: bool,
    /// The held server sent a FATAL error (passed on): its close ends the session quietly.
    pub(super) server_fatal: bool,
    /// The pooler's query and transaction timeouts, when any is set.
    pub(super) timeouts: Option<Box<super::timeouts::Timeouts>>,
}

impl<'a> Session<'a> {
    pub fn new(client: &'a mut ClientStream, shared: Arc<Shared>, login: Login) -> Self {
        let cfg = shared.config.load();
        let mode = login.pool.mode();
        Session {
            id: login.id,
            client,
            pool: login.pool.clone(),
            params: login.params,
            cancel: login.cancel,
            cbuf: if login.leftover.is_empty() {
                BytesMut::new()
            } else {
                login.leftover
            },
            cout: BytesMut::new(),
            sout: BytesMut::new(),
            server: None,
            statements: ClientStatements::default(),
            mode,
            tracking: cfg.pool.track_prepared && mode != PoolMode::Session,
            max_prepared: cfg.pool.max_prepared_statements,
            skipping: false,
            status: backend::TX_IDLE,
            max_message: cfg.client.max_message_size,
            buffer: cfg.client.buffer_size,
            max_client_prepared: cfg.pool.max_client_prepared_statements,
            cpass: Pass::default(),
            spass: Pass::default(),
            skipped: Vec::new(),
            retry: Default::default(),
            release_due: false,
            batch_clean: true,
            refused_bytes: 0,
            _member: login.member,
            held_since: None,
            request_since: None,
            ready_at: None,
            kept_counted: 0,
            warm: None,
            warm_limit: cfg.client.warm_sessions,
            client_first: false,
            server_fatal: false,
            timeouts: None,
            shared,
        }
    }

    /// Runs the session to its end and returns or discards the server it holds.
    pub async fn run(&mut self) -> Result<(), ClientError> {
        let res = match self.relay().await {
            Err(ClientError::ServerLost(_)) if self.server_fatal => Err(ClientError::ServerEnded),
            res => res,
        };
        let close = self.must_close(&res);
        if res.is_err() {
            // Deliver what is already queued; `serve` then writes the FATAL for the error.
            let _ = self.flush_client().await;
        }
        self.finish(close);
        res
    }

    /// Alternates between a small idle wait and boxed rounds of work, so an idle client
    /// carries no buffers and no large future.
    async fn relay(&mut self) -> Result<(), ClientError> {
        if !self.cbuf.is_empty() && Box::pin(self.on_client()).await? == Flow::Quit {
            return Ok(());
        }
        // One registration for the session's life, kept inline (no allocation).
        let shared = self.shared.clone();
        let mut close = pin!(shared.lifecycle.close_idle.watch());
        // A kill before the watch was made is seen here, later ones by the watch.
        self.check_killed()?;
        loop {
            if self.server.is_none() && self.cbuf.is_empty() {
                self.wait_idle(close.as_mut()).await?;
            }
            if Box::pin(self.rounds(close.as_mut())).await? == Flow::Quit {
                return Ok(());
            }
        }
    }

    /// Rounds of work. A warm session (one of a bounded few) waits for its next request in
    /// here, keeping this future and its buffers: a busy client then pays no allocation and
    /// no waiter registration per transaction. Any other session leaves after one round.
    async fn rounds(&mut self, mut close: Pin<&mut Watch<'_>>) -> Result<Flow, ClientError> {
        // One waiter registration for as long as the session works rather than one per event.
        let lifecycle = self.shared.lifecycle.clone();
        let mut abort = pin!(lifecycle.abort.watch());
        self.check_killed()?;
        loop {
            let flow = self.round(abort.as_mut()).await?;
            if flow == Flow::Quit || self.warm.is_none() {
                return Ok(flow);
            }
            if self.server.is_none() && self.cbuf.is_empty() {
                self.wait_idle(close.as_mut()).await?;
            }
        }
    }

    /// Waits for the idle client to send something, its idle timeout, or shutdown (`close`:
    /// the session's watch of `close_idle`).
    async fn wait_idle(&mut self, close: Pin<&mut Watch<'_>>) -> Result<(), ClientError> {
        let idle = self.shared.config.load().client.idle_timeout;
        if !idle.is_zero() {
            // Boxed: a timer is only carried by clients that have an idle timeout.
            return match Box::pin(tokio::time::timeout(idle, self.wait_readable(close))).await {
                Ok(r) => r,
                Err(_) => Err(ClientError::Fatal {
                    code: sqlstate::PROTOCOL_VIOLATION,
                    message: "client_idle_timeout".into(),
                }),
            };
        }
        self.wait_readable(close).await
    }

    async fn wait_readable(&mut self, mut close: Pin<&mut Watch<'_>>) -> Result<(), ClientError> {
        loop {
            let client = &mut *self.client;
            // poll_read_ready keeps no waiter node of its own, and one poll_fn no select state:
            // an idle client's task stays small.
            let woken = std::future::poll_fn(|cx| {
                if close.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                client.poll_read_ready(cx).map(Some)
            })
            .await;
            if let Some(r) = woken {
                return Ok(r?);
            }
            // The deadline fires close_idle too, so one watch covers both.
            let l = &self.shared.lifecycle;
            if l.close_idle.is_fired() {
                return Err(ClientError::Shutdown {
                    forced: l.abort.is_fired(),
                });
            }
            // Kicked: the console killed a client, maybe this one.
            close.as_mut().rearm();
            if self.cancel.is_killed() {
                return Err(ClientError::Killed);
            }
        }
    }

    /// Relays client and server traffic until the client holds no server and has nothing
    /// buffered (or leaves).
    async fn round(&mut self, mut abort: Pin<&mut Watch<'_>>) -> Result<Flow, ClientError> {
        loop {
            match self.next_event(abort.as_mut()).await {
                Event::Client(r) => {
                    let n = r?;
                    self.shared.metrics.clients.bytes_in.inc_by(n as u64);
                    if n == 0 || self.on_client().await? == Flow::Quit {
                        return Ok(Flow::Quit);
                    }
                }
                Event::Server(r) => match r {
                    Ok(0) => {
                        return Err(ClientError::ServerLost(
                            "server closed the connection".into(),
                        ))
                    }
                    Err(e) => return Err(ClientError::ServerLost(e.to_string())),
                    Ok(_) => {
                        self.on_server().await?;
                        if self.at_session_boundary() && self.shared.lifecycle.close_idle.is_fired()
                        {
                            return Err(ClientError::Shutdown { forced: false });
                        }
                        // Statement mode, a full reply queue or a wait for the server's copy
                        // state may have held client messages back until now.
                        if !self.cbuf.is_empty() && self.on_client().await? == Flow::Quit {
                            return Ok(Flow::Quit);
                        }
                    }
                },
                Event::Abort if self.shared.lifecycle.abort.is_fired() => {
                    return Err(ClientError::Shutdown { forced: true })
                }
                Event::Abort => {
                    // Kicked: the console killed a client, maybe this one.
                    abort.as_mut().rearm();
                    self.check_killed()?;
                }
                Event::Timeout(kind) => self.timed_out(kind)?,
            }
            if self.server.is_none() && self.cbuf.is_empty() {
                return Ok(Flow::Continue);
            }
        }
    }

    /// The next thing to handle: the abort, the server's reply or the client's request. Polled
    /// by hand (no `select!` and no nested read futures): this runs twice per round trip.
    async fn next_event(&mut self, mut abort: Pin<&mut Watch<'_>>) -> Event {
        // A client whose buffered messages cannot be handled yet is not read: it is pushed
        // back through its socket instead of buffered.
        let read_client = self.wants_client();
        let due = if self.timeouts.is_some() {
            self.timeout_due()
        } else {
            None
        };
        let mut timeouts = self.timeouts.as_deref_mut();
        let client = &mut *self.client;
        let cbuf = &mut self.cbuf;
        let buffer = self.buffer;
        let mut server = self.server.as_mut().map(|srv| {
            if srv.rbuf.capacity() - srv.rbuf.len() < 4096 {
                srv.rbuf.reserve(buffer);
            }
            (&mut srv.stream, &mut srv.rbuf)
        });
        // Which side goes first alternates, so neither a streaming server nor a pipelining
        // client keeps the other from being read.
        self.client_first = !self.client_first;
        let client_first = self.client_first;
        std::future::poll_fn(|cx| {
            // Checked first: a cheap flag, and a busy socket must not hide it.
            if abort.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Abort);
            }
            if let Some(t) = timeouts.as_mut() {
                if let Poll::Ready(kind) = t.poll_due(due, cx) {
                    return Poll::Ready(Event::Timeout(kind));
                }
            }
            let Some((stream, rbuf)) = server.as_mut() else {
                return poll_read_some(client, cbuf, cx).map(Event::Client);
            };
            if client_first && read_client {
                if let Poll::Ready(r) = poll_read_some(client, cbuf, cx) {
                    return Poll::Ready(Event::Client(r));
                }
                poll_read_buf(Pin::new(&mut **stream), cx, *rbuf).map(Event::Server)
            } else {
                if let Poll::Ready(r) = poll_read_buf(Pin::new(&mut **stream), cx, *rbuf) {
                    return Poll::Ready(Event::Server(r));
                }
                if !read_client {
                    return Poll::Pending;
                }
                poll_read_some(client, cbuf, cx).map(Event::Client)
            }
        })
        .await
    }

    /// A timeout fired: a query is cancelled (the session goes on); an idle or too long
    /// transaction ends the session, its server closed (PostgreSQL rolls it back).
    fn timed_out(&mut self, kind: super::timeouts::Kind) -> Result<(), ClientError> {
        use super::timeouts::Kind;
        let (code, message) = match kind {
            Kind::Query => {
                self.query_timed_out();
                return Ok(());
            }
            Kind::IdleTransaction => (
                sqlstate::IDLE_IN_TRANSACTION_TIMEOUT,
                "terminating connection due to idle-in-transaction timeout (pool.idle_transaction_timeout)",
            ),
            Kind::Transaction => (
                sqlstate::TRANSACTION_TIMEOUT,
                "terminating connection due to transaction timeout (pool.transaction_timeout)",
            ),
        };
        self.count_timeout(kind);
        tracing::info!(
            client = self.id,
            timeout = kind.label(),
            "closing the client and its server"
        );
        if self.server.as_ref().is_some_and(|s| !s.replies.is_empty()) {
            // A statement still runs: cancel it, or the backend would run it to its end.
            self.cancel.cancel_now(&self.shared);
        }
        // Not returned to the pool: closing it is PostgreSQL's rollback.
        self.server_fatal = false;
        Err(ClientError::Fatal {
            code,
            message: message.into(),
        })
    }

    /// Counts the transaction that ends now; returns the clock read it used.
    pub(super) fn count_transaction(&mut self) -> Instant {
        // A ReadyForQuery handled in this same step already read the clock.
        let (now, took) = self
            .ready_at
            .take()
            .unwrap_or_else(|| (Instant::now(), None));
        if let Some(since) = self.held_since.take() {
            let m = &self.shared.metrics.clients;
            m.transactions.inc();
            let took = took.unwrap_or_else(|| now.saturating_duration_since(since).as_secs_f64());
            m.transaction_seconds.observe(took);
        }
        now
    }

    /// Brings the kept-statements gauge up to date with this session's count.
    pub(super) fn count_kept(&mut self) {
        let now = self.statements.len();
        if now != self.kept_counted {
            let gauge = &self.shared.metrics.prepared.kept;
            gauge.add(now as i64 - self.kept_counted as i64);
            self.kept_counted = now;
        }
    }

    /// Gives the server back at a transaction boundary.
    pub(super) fn release(&mut self) {
        let now = self.count_transaction();
        if let Some(mut conn) = self.server.take() {
            self.shared.events.client_released_server(self.id, conn.id);
            self.cancel.clear();
            conn.trim_buffers();
            self.pool.checkin_at(conn, now);
        }
    }

    /// The pool refused or failed to give a server: answer the request with an ERROR and keep
    /// the session usable. Config errors from the server's login are FATAL, as a direct
    /// connection would see them.
    pub(super) fn answer_pool_error(&mut self, tag: u8, e: PoolError) -> Result<(), ClientError> {
        if let PoolError::Server(f) = &e {
            let code = &f.code;
            if code.starts_with("28") || code == sqlstate::INVALID_CATALOG_NAME {
                return Err(ClientError::Pool(e));
            }
        }
        let reason = match &e {
            PoolError::WaitTimeout { .. } => "wait_timeout",
            PoolError::TooManyWaiting { .. } => "waiting_full",
            PoolError::Closed(_) => "shutting_down",
            PoolError::Server(_) => "server_unavailable",
            PoolError::CircuitOpen { .. } => "circuit_open",
            PoolError::Unavailable { .. } => "server_unavailable",
            PoolError::NoHostFits { .. } => "no_host_fits",
            PoolError::HoldExpired { .. } => "hold_expired",
        };
        self.shared
            .metrics
            .clients
            .shed
            .with_label_values(&[reason])
            .inc();
        self.shared.metrics.pooler_error(e.sqlstate());
        let mut fields = super::error::error_fields(e.sqlstate(), e.to_string());
        if let PoolError::CircuitOpen { retry_after, .. } = &e {
            // The pooler's Retry-After.
            fields.detail = Some(format!(
                "next connection attempt in {} ms",
                retry_after.as_millis()
            ));
            fields.hint = Some("retry after that delay; the pooler retries for you".into());
        }
        backend::error_response(&mut self.cout, &fields);
        if tag == frontend::QUERY_TAG || tag == frontend::FUNCTION_CALL_TAG {
            backend::ready_for_query(&mut self.cout, backend::TX_IDLE);
        } else {
            self.skipping = true;
        }
        Ok(())
    }

    /// An answer of the pooler's own, kept in its place after what the server still owes.
    pub(super) fn answer(&mut self, msg: Bytes) {
        match self.server.as_mut() {
            Some(srv) if !srv.replies.is_empty() => {
                let o = Owed::Synthetic(msg);
                self.retry.record_answer(&o);
                srv.replies.push(o);
            }
            _ => self.cout.extend_from_slice(&msg),
        }
    }

    /// Queues what the held server will owe for a message just written to it. One the server
    /// will ignore (sent while it skips to Sync) is settled as skipped at once.
    pub(super) fn owe(&mut self, o: Owed) {
        let srv = self
            .server
            .as_mut()
            .expect("messages are only written to a held server");
        if owe_on(srv, &mut self.statements, o) {
            self.release_due = false;
        }
    }

    /// An ERROR answered by the pooler, after which the client's messages are skipped to Sync.
    pub(super) fn pooler_error(&mut self, code: &str, message: String) {
        self.shared.metrics.pooler_error(code);
        let mut m = BytesMut::new();
        backend::error_response(&mut m, &super::error::error_fields(code, message));
        self.answer(m.freeze());
        self.skipping = true;
    }

    /// Session mode's transaction boundary: idle, outside a transaction, nothing owed.
    fn at_session_boundary(&self) -> bool {
        self.mode == PoolMode::Session
            && self.status == backend::TX_IDLE
            && self.server.as_ref().is_some_and(|s| s.replies.is_empty())
            && self.cbuf.is_empty()
            && self.cpass.is_idle()
    }

    /// Frees buffers while the client holds nothing, so idle clients stay small. A warm
    /// session keeps them, unless a large message grew one.
    pub(super) fn shrink_idle(&mut self) {
        if self.warm.is_none() {
            self.warm = self.shared.counters.take_warm(self.warm_limit);
        }
        let keep = if self.warm.is_some() { SHRINK_ABOVE } else { 0 };
        for buf in [&mut self.cbuf, &mut self.cout, &mut self.sout] {
            if buf.capacity() > keep {
                release_if_empty(buf);
            }
        }
    }
}
