//! A logged-in client's session task: the driver around the relay machine (`crate::relay`).
//! It owns the sockets, the checkout and the clock: reads either side into the machine,
//! writes what the machine queued, takes a server when the machine needs one and gives it
//! back when the machine says the transaction is over, and ends cleanly whatever happens.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use tokio_util::io::poll_read_buf;

use super::error::{ClientError, Loss};
use super::timer::Timer;
use crate::cancel::CancelSlot;
use crate::counters::WarmSlot;
use crate::lifecycle::Watch;
use crate::listen::Inbox;
use crate::login::Login;
use crate::net::read::poll_read_some;
use crate::net::ClientStream;
use crate::pool::{CloseReason, PoolClient, PoolError};
use crate::protocol::sqlstate;
use crate::relay::{
    subscribe, Event, Input, Io, Keep, Kind, Next, Peer, PinChange, Relay, ServerFault, Subscribe,
    Subscriptions, TimedOut,
};
use crate::server::Server;
use crate::shared::Shared;

/// How [`Session::run`] stopped.
pub enum Ran {
    /// The session ended, and how.
    Ended(Result<(), ClientError>),
    /// Idle across a tick: the caller parks it (`client::park`).
    Parked,
}

/// Why the relay loop stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Quit,
    Park,
}

/// What an idle wait saw.
#[derive(Debug, PartialEq, Eq)]
enum Waited {
    Readable,
    Park,
}

/// Whether [`Session::wait_readable`] may say the session can be parked: never (a client
/// with an idle timeout), at the second tick that finds it idle, or now if it is not
/// readable.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Park {
    Never,
    AtTick,
    Now,
}

/// What woke [`Session::wait_readable`]: shutdown or a nudge, a notification, the client,
/// or nothing (`Park::Now` found the client quiet).
enum Woke {
    Stop,
    Inbox,
    Client(std::io::Result<()>),
    Quiet,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    Quit,
}

/// What woke the session ([`Session::next_event`]).
enum Woken {
    Client(std::io::Result<usize>),
    Server(std::io::Result<usize>),
    Abort,
    Timeout(Kind),
    /// A notification from the pool's listening connection, for a client between requests.
    Notification,
}

/// What the relay asks of the session while it works: the clock, and the client socket for
/// bytes it may take without a copy.
pub(super) struct Wire<'c> {
    pub client: &'c mut ClientStream,
    /// Who took which server, for the process id a notification carries.
    pub cancels: &'c crate::cancel::Cancels,
}

impl Io for Wire<'_> {
    fn now(&mut self) -> Instant {
        Instant::now()
    }

    fn direct(&self) -> bool {
        !self.client.is_tls()
    }

    fn offer_client(&mut self, bytes: &[u8]) -> usize {
        self.client.try_write_plain(bytes)
    }

    fn notifier(&mut self, server_pid: i32, arrived: Option<std::time::Instant>) -> i32 {
        self.cancels
            .notifier(server_pid, arrived.unwrap_or_else(Instant::now))
            .unwrap_or(server_pid)
    }

    fn seed(&mut self) -> f64 {
        rand::random::<f64>() * 2.0 - 1.0
    }
}

/// How long a listening client's ReadyForQuery waits for the pool's listening connection to
/// receive the notifications its transaction sent.
const CAUGHT_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A bounded few sessions keep their buffers and their future between transactions.
pub(super) struct Warm {
    pub slot: Option<WarmSlot>,
}

/// What a round's end must still do, rarely ([`Session::maybe_release`]): boxed, so the usual
/// round passes one word that is null.
pub(super) struct RareEnd {
    /// A listening client's transaction mentioned `notify`: its own notification may come
    /// before its ReadyForQuery.
    notified: bool,
    /// Committed subscriptions that include a `LISTEN` ([`Session::follow_pin`]).
    due: Option<Vec<Subscribe>>,
}

pub struct Session {
    pub(super) relay: Relay,
    /// The client's cancel key, unregistered when the session ends.
    pub(super) key: (i32, i32),
    pub(super) client: ClientStream,
    pub(super) shared: Arc<Shared>,
    /// The client's pool, and its membership of it (client counts, pins).
    pub(super) pool: PoolClient,
    pub(super) cancel: Arc<CancelSlot>,
    /// The server held, if any (its protocol state is the relay's to work on).
    pub(super) server: Option<Server>,
    pub(super) warm: Warm,
    /// Which side [`Session::next_event`] reads first this time.
    client_first: bool,
    /// A tick's nudge found the session idle, and it has been idle since (or it has been
    /// idle since its login): the next one parks it (`client::park`), so only a client idle
    /// for a whole tick, or since it logged in, is parked.
    nudged: bool,
    /// The pooler's timeouts' timer, when one is on.
    pub(super) timer: Option<Box<Timer>>,
    /// The generation of the pool's policy the relay's was read at
    /// ([`Pool::policy_generation`]): read again only once the pool's changes.
    pub(super) policy_generation: u32,
    /// `client.warm_sessions` when this client logged in (at most 65,535 here: 16 bits fit
    /// beside the fields above, and the idle client's task stays in its allocation class).
    warm_limit: u16,
    /// The client's notifications, once it listens through the pool's listening connection
    /// (`track`).
    inbox: Option<Box<Inbox>>,
    /// The slot the pool hands this session a server through when it waits
    /// (`pool::Handoff`), kept while the session works, dropped when it is parked.
    pub(super) handoff: Option<std::sync::Arc<crate::pool::Handoff>>,
    /// The server taken failed its idle check and was let go: the client's messages, which
    /// waited for it, take another ([`Session::replace_server`]).
    pub(super) replaced: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.relay.left_statements() {
            self.pool.orphans().add(self.relay.id());
        }
        // However the session ends (its task too may be dropped), a pin stops counting.
        if let Some(reason) = self.cancel.pin() {
            self.pool.unpin(reason);
        }
        if self
            .inbox
            .as_ref()
            .is_some_and(|i| !i.channels().is_empty())
        {
            self.pool.unlisten(self.relay.id(), None);
        }
    }
}

impl Session {
    pub fn new(client: ClientStream, shared: Arc<Shared>, login: Login) -> Self {
        let cfg = shared.config.load();
        let (generation, policy) = login.pool.policy();
        let relay = Relay::new(
            login.id,
            login.params,
            policy,
            login.leftover,
            shared.metrics.clone(),
            shared.events,
        );
        Session {
            relay,
            key: login.key,
            client,
            pool: login.member,
            cancel: login.cancel,
            server: None,
            warm: Warm { slot: None },
            warm_limit: warm_limit(cfg.client.warm_sessions),
            client_first: false,
            // A client idle since its login is parked at once (`Park::Now`).
            nudged: true,
            timer: None,
            policy_generation: generation,
            inbox: None,
            handoff: None,
            replaced: false,
            shared,
        }
    }

    /// The session's driver I/O for a relay call (the clock and the client socket).
    pub(super) fn wire<'c>(
        client: &'c mut ClientStream,
        cancels: &'c crate::cancel::Cancels,
    ) -> Wire<'c> {
        Wire { client, cancels }
    }

    /// Runs the session to its end and returns or discards the server it holds; or, idle
    /// across a tick, stops to be parked (`client::park`).
    pub async fn run(&mut self) -> Ran {
        // A match, not a `let` of the await: the result then takes no room of its own
        // beside the loop's future (the idle client's task stays in its allocation class).
        #[allow(clippy::match_single_binding)]
        let res = match self.relay_loop().await {
            Ok(Stop::Park) => {
                // Back from the lot, it is not fresh: it waits a whole tick to park again
                // (its socket may not look readable before the runtime has polled it).
                self.nudged = false;
                // A warm session's buffers stay behind: a parked one carries none.
                self.relay.end_round(Keep::None);
                self.handoff = None;
                return Ran::Parked;
            }
            Ok(Stop::Quit) => Ok(()),
            Err(e) => Err(e),
        };
        let close = self.must_close(&res);
        if res.is_err() {
            // Deliver what is already queued; `serve` then writes the FATAL for the error.
            // Boxed: beside the error, it would set the size of every client's task.
            let _ = Box::pin(self.flush_client()).await;
        }
        let ending = self.finish(close);
        Ran::Ended(match res {
            Err(ClientError::ServerLost(_)) if !ending.tell_server_lost => {
                Err(ClientError::ServerEnded)
            }
            res => res,
        })
    }

    /// Alternates between a small idle wait and boxed rounds of work, so an idle client
    /// carries no buffers and no large future.
    async fn relay_loop(&mut self) -> Result<Stop, ClientError> {
        if self.relay.stand(None).pending() && Box::pin(self.on_client()).await? == Flow::Quit {
            return Ok(Stop::Quit);
        }
        // One registration for the session's life, kept inline (no allocation).
        let shared = self.shared.clone();
        let mut close = pin!(shared.lifecycle.client_shutdown().closing());
        // A kill before the watch was made is seen here, later ones by the watch.
        self.check_killed()?;
        loop {
            if self.idle() {
                match self.idle_timeout() {
                    None => {
                        // Fresh from its login (or back from the lot), a client that has not
                        // spoken yet is parked at once: the tasks of a burst of logins are not
                        // all held for a tick, and their memory is not kept by the allocator.
                        let now = if self.nudged { Park::Now } else { Park::AtTick };
                        if self.wait_readable(close.as_mut(), now).await? == Waited::Park {
                            return Ok(Stop::Park);
                        }
                    }
                    Some(idle) => self.wait_idle(close.as_mut(), idle).await?,
                }
            }
            if Box::pin(self.rounds(close.as_mut())).await? == Flow::Quit {
                return Ok(Stop::Quit);
            }
            // A warm session idle for a whole tick gave its slot up to be parked.
            if self.nudged && self.parkable() {
                return Ok(Stop::Park);
            }
        }
    }

    /// Rounds of work. A warm session (one of a bounded few) waits for its next request in
    /// here, keeping this future and its buffers: a busy client then pays no allocation and
    /// no waiter registration per transaction. Any other session leaves after one round.
    async fn rounds(&mut self, mut close: Pin<&mut Watch<'_>>) -> Result<Flow, ClientError> {
        // One waiter registration for as long as the session works rather than one per event.
        let lifecycle = self.shared.lifecycle.clone();
        let mut abort = pin!(lifecycle.client_shutdown().aborting());
        self.check_killed()?;
        loop {
            let flow = self.round(abort.as_mut()).await?;
            if flow == Flow::Quit || self.warm.slot.is_none() {
                return Ok(flow);
            }
            if self.idle() {
                match self.idle_timeout() {
                    None => {
                        if self.wait_readable(close.as_mut(), Park::AtTick).await? == Waited::Park {
                            // Idle for a whole tick: no longer warm, and parked.
                            self.warm.slot = None;
                            return Ok(Flow::Continue);
                        }
                    }
                    Some(idle) => self.wait_idle(close.as_mut(), idle).await?,
                }
            }
        }
    }

    /// `client.idle_timeout`, if one is set. Without one the idle wait is
    /// [`Session::wait_readable`] itself, called directly: one future level less per
    /// transaction.
    fn idle_timeout(&self) -> Option<std::time::Duration> {
        self.relay.policy().client_idle_timeout()
    }

    /// Waits for the idle client to send something within `idle` (its idle timeout), or
    /// shutdown (`close`: the session's watch of
    /// [`crate::lifecycle::ClientShutdown::closing`]).
    async fn wait_idle(
        &mut self,
        close: Pin<&mut Watch<'_>>,
        idle: std::time::Duration,
    ) -> Result<(), ClientError> {
        // Boxed: a timer is only carried by clients that have an idle timeout.
        match Box::pin(tokio::time::timeout(
            idle,
            self.wait_readable(close, Park::Never),
        ))
        .await
        {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(ClientError::Fatal {
                code: sqlstate::PROTOCOL_VIOLATION,
                message: "client_idle_timeout".into(),
            }),
        }
    }

    /// Waits for the idle client to send something, or shutdown; or, woken by a tick's nudge
    /// (`park`: a session that may be parked), says it can be parked.
    async fn wait_readable(
        &mut self,
        mut close: Pin<&mut Watch<'_>>,
        mut park: Park,
    ) -> Result<Waited, ClientError> {
        loop {
            let now = park == Park::Now && self.may_park();
            // One borrow of the session (not one per field): an idle client's future is kept
            // small.
            let this = &mut *self;
            // poll_read_ready keeps no waiter node of its own, and one poll_fn no select state:
            // an idle client's task stays small.
            let woken = std::future::poll_fn(|cx| {
                if close.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Stop);
                }
                if let Some(Poll::Ready(())) = this.inbox.as_mut().map(|i| i.poll_ready(cx)) {
                    return Poll::Ready(Woke::Inbox);
                }
                match this.client.poll_read_ready(cx) {
                    Poll::Ready(r) => Poll::Ready(Woke::Client(r)),
                    Poll::Pending if now => Poll::Ready(Woke::Quiet),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            match woken {
                Woke::Quiet => return Ok(Waited::Park),
                Woke::Client(r) => {
                    self.nudged = false;
                    return r.map(|()| Waited::Readable).map_err(Into::into);
                }
                Woke::Inbox => {
                    self.deliver_notifications();
                    // Boxed: rare, and an idle client's future stays small.
                    Box::pin(self.flush_client()).await?;
                    continue;
                }
                Woke::Stop => {}
            }
            // The deadline closes idle sessions too, so one watch covers both.
            let end = self.shared.lifecycle.client_shutdown();
            if end.is_closing() {
                return Err(ClientError::Shutdown {
                    forced: end.is_aborted(),
                });
            }
            // Kicked: the console killed a client, maybe this one; or a tick's nudge.
            close.as_mut().rearm();
            if self.cancel.is_killed() {
                return Err(ClientError::Killed);
            }
            // A tick's nudge (or a kick): parked at the second one that finds it idle.
            if park != Park::Never && self.may_park() {
                if self.nudged {
                    return Ok(Waited::Park);
                }
                self.nudged = true;
            }
            park = park.min(Park::AtTick);
        }
    }

    /// Whether the idle session can be kept without its task: plain TCP (a TLS session's
    /// state stays with its socket), nothing held or buffered, no LISTEN (notifications wake
    /// it), not warm.
    fn parkable(&self) -> bool {
        self.warm.slot.is_none() && self.may_park()
    }

    /// [`Session::parkable`] but for a warm slot, which a warm session gives up to be parked.
    fn may_park(&self) -> bool {
        !self.client.is_tls() && self.inbox.is_none() && self.idle()
    }

    /// Relays client and server traffic until the client holds no server and has nothing
    /// buffered (or leaves).
    async fn round(&mut self, mut abort: Pin<&mut Watch<'_>>) -> Result<Flow, ClientError> {
        loop {
            if self.replaced {
                // The messages that waited for a server that failed its check go on.
                self.replaced = false;
                if self.relay.stand(None).pending() && self.on_client().await? == Flow::Quit {
                    return Ok(Flow::Quit);
                }
                if self.idle() {
                    return Ok(Flow::Continue);
                }
            }
            match self.next_event(abort.as_mut()).await {
                Woken::Client(r) => {
                    let n = r?;
                    self.shared.metrics.clients.bytes_in.inc_by(n as u64);
                    let cbuf = self.relay.client_in();
                    let full = cbuf.len() == cbuf.capacity();
                    if n == 0 || self.on_client().await? == Flow::Quit {
                        return Ok(Flow::Quit);
                    }
                    if full {
                        self.client_streams().await;
                    }
                }
                Woken::Server(r) if self.idle_server_left(&r) => {
                    let srv = self.server.as_ref().map(|s| &s.state);
                    if self.relay.stand(srv).checking() {
                        let why = match &r {
                            Err(e) => e.to_string(),
                            _ => "the server closed, or sent a FATAL error".to_owned(),
                        };
                        self.replace_server(&why);
                    } else if let Some(due) = self.lose_server(CloseReason::Unusable) {
                        Box::pin(self.follow_subscriptions(due)).await;
                    }
                }
                Woken::Server(r) => match r {
                    Ok(0) => self.server_lost(Loss::Closed)?,
                    Err(e) => self.server_lost(e.into())?,
                    Ok(_) => {
                        self.on_server().await?;
                        let stand = self.relay.stand(self.server.as_ref().map(|s| &s.state));
                        if stand.boundary() && self.shared.lifecycle.client_shutdown().is_closing()
                        {
                            return Err(ClientError::Shutdown { forced: false });
                        }
                        // Statement mode, a full reply queue or a wait for the server's copy
                        // state may have held client messages back until now.
                        if stand.pending() && self.on_client().await? == Flow::Quit {
                            return Ok(Flow::Quit);
                        }
                    }
                },
                Woken::Abort if self.shared.lifecycle.client_shutdown().is_aborted() => {
                    return Err(ClientError::Shutdown { forced: true })
                }
                Woken::Abort => {
                    // Kicked: the console killed a client, maybe this one.
                    abort.as_mut().rearm();
                    self.check_killed()?;
                }
                Woken::Timeout(kind) => self.timed_out(kind)?,
                Woken::Notification => {
                    self.deliver_notifications();
                    self.flush_client().await?;
                }
            }
            if self.idle() {
                return Ok(Flow::Continue);
            }
        }
    }

    /// The client holds no server and the machine has none of its bytes left to handle.
    #[inline(always)]
    fn idle(&self) -> bool {
        self.server.is_none() && !self.relay.stand(None).pending()
    }

    /// The client's read filled the buffer: it may be streaming (a pipeline, COPY data, a large
    /// message). The runtime learns that a socket became readable only when its I/O driver
    /// runs, which a task that always finds the client readable postpones for its whole
    /// cooperative budget (128 reads and writes): the server's reply, an error that ends the
    /// stream, would wait behind that many client chunks. As on a direct connection, where
    /// nothing stands between them, the reply goes first: while the server owes replies, the
    /// session yields once so the driver runs, and reads the server before the client. A
    /// buffer the relay has taken all of grows to `client.buffer_size` (read after read, all
    /// of a message passed on in pieces is taken), so such a stream is read in chunks of that
    /// size rather than of the first read's.
    #[cold]
    async fn client_streams(&mut self) {
        // Only once all was taken: grown while it holds bytes, it would double each time.
        let buffer = self.relay.policy().buffer();
        let cbuf = self.relay.client_in();
        if cbuf.is_empty() {
            cbuf.reserve(buffer);
        }
        if self
            .server
            .as_ref()
            .is_some_and(|s| !s.state.replies.is_empty())
        {
            tokio::task::yield_now().await;
            // `next_event` turns it round: the server is read first.
            self.client_first = true;
        }
    }

    /// The next thing to handle: the abort, the server's reply or the client's request. Polled
    /// by hand (no `select!` and no nested read futures): this runs twice per round trip.
    async fn next_event(&mut self, mut abort: Pin<&mut Watch<'_>>) -> Woken {
        // A client whose buffered messages cannot be handled yet is not read: it is pushed
        // back through its socket instead of buffered.
        let stand = self.relay.stand(self.server.as_ref().map(|s| &s.state));
        let read_client = stand.read_client();
        let due = match (&self.timer, &self.server) {
            (Some(_), Some(srv)) => self.relay.deadline(&srv.state),
            _ => None,
        };
        let mut timer = self.timer.as_deref_mut();
        // Between requests (a pinned client's server idle) a notification may go out.
        let mut inbox = self.inbox.as_deref_mut().filter(|_| stand.quiet());
        let client = &mut self.client;
        let buffer = self.relay.policy().buffer();
        let cbuf = self.relay.client_in();
        let mut server = self.server.as_mut().map(|srv| {
            let rbuf = &mut srv.state.rbuf;
            if rbuf.capacity() - rbuf.len() < 4096 {
                rbuf.reserve(buffer);
            }
            (&mut srv.stream, rbuf)
        });
        // Which side goes first alternates, so neither a streaming server nor a pipelining
        // client keeps the other from being read.
        self.client_first = !self.client_first;
        let client_first = self.client_first;
        std::future::poll_fn(|cx| {
            // Checked first: a cheap flag, and a busy socket must not hide it.
            if abort.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Woken::Abort);
            }
            if let Some(t) = timer.as_mut() {
                if let Poll::Ready(kind) = t.poll_due(due, cx) {
                    return Poll::Ready(Woken::Timeout(kind));
                }
            }
            if let Some(Poll::Ready(())) = inbox.as_mut().map(|i| i.poll_ready(cx)) {
                return Poll::Ready(Woken::Notification);
            }
            let Some((stream, rbuf)) = server.as_mut() else {
                return poll_read_some(client, cbuf, cx).map(Woken::Client);
            };
            if client_first && read_client {
                if let Poll::Ready(r) = poll_read_some(client, cbuf, cx) {
                    return Poll::Ready(Woken::Client(r));
                }
                poll_read_buf(Pin::new(&mut **stream), cx, *rbuf).map(Woken::Server)
            } else {
                if let Poll::Ready(r) = poll_read_buf(Pin::new(&mut **stream), cx, *rbuf) {
                    return Poll::Ready(Woken::Server(r));
                }
                if !read_client {
                    return Poll::Pending;
                }
                poll_read_some(client, cbuf, cx).map(Woken::Client)
            }
        })
        .await
    }

    /// Feeds what the client sent to the relay, doing what it asks (take a server, write a
    /// long pipeline out) until it has handled all it can, then ends the round.
    pub(super) async fn on_client(&mut self) -> Result<Flow, ClientError> {
        if self.inbox.is_some() {
            self.client_spoke();
        }
        loop {
            let srv = self.server.as_mut().map(|s| &mut s.state);
            let next = self.relay.on_client(
                srv,
                &mut Wire {
                    client: &mut self.client,
                    cancels: &self.shared.cancels,
                },
            )?;
            match next {
                Next::Done => break,
                Next::FlushServer => self.flush_server().await?,
                Next::Quit => {
                    self.flush_server().await?;
                    self.flush_client().await?;
                    return Ok(Flow::Quit);
                }
                Next::NeedServer { tag, spare } => {
                    // Awaited here, not through a future of its own: most transactions wait
                    // when clients outnumber servers, and each level is polled on each wake.
                    if let Err(taken) = self.acquire_now(spare) {
                        match self.acquire(taken).await {
                            Ok(()) => {}
                            Err(ClientError::Pool(pe)) => self.answer_pool_error(tag, pe)?,
                            Err(other) => return Err(other),
                        }
                    }
                }
                // Boxed: rare, and this future stays the size it was.
                Next::Subscribe(batch) => Box::pin(self.subscribe(*batch)).await,
                Next::FreeDatabase(db) => self.free_database(&db),
            }
        }
        self.finish_round().await?;
        Ok(Flow::Continue)
    }

    /// Tells the machine `input`, holding the server it holds (if any); returns what the
    /// machine asks at once.
    #[cold]
    pub(super) fn tell(&mut self, input: Input<'_>) -> Option<Event> {
        let srv = self.server.as_mut().map(|s| &mut s.state);
        let mut wire = Wire {
            client: &mut self.client,
            cancels: &self.shared.cancels,
        };
        self.relay.handle(srv, input, &mut wire)
    }

    /// Feeds what the server sent to the relay, then ends the round.
    async fn on_server(&mut self) -> Result<(), ClientError> {
        self.drain_server()?;
        self.finish_round().await
    }

    /// The relay handles what the held server sent (writing what it can straight to the
    /// client).
    pub(super) fn drain_server(&mut self) -> Result<(), ClientError> {
        let srv = self
            .server
            .as_mut()
            .expect("server messages are handled only while a server is held");
        let mut wire = Wire {
            client: &mut self.client,
            cancels: &self.shared.cancels,
        };
        match self.relay.on_server(&mut srv.state, &mut wire) {
            Ok(()) => Ok(()),
            Err(ServerFault::CheckFailed(why)) => {
                self.replace_server(&why);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The held server was lost (`loss`): the session's end, unless it was answering its
    /// idle check, when the client takes another.
    pub(super) fn server_lost(&mut self, loss: Loss) -> Result<(), ClientError> {
        let stand = self.relay.stand(self.server.as_ref().map(|s| &s.state));
        if !stand.checking() {
            return Err(ClientError::ServerLost(loss));
        }
        self.replace_server(&loss.to_string());
        Ok(())
    }

    /// The server just taken failed its idle check (`why`): closed, and the client's
    /// waiting messages take another.
    #[cold]
    pub(super) fn replace_server(&mut self, why: &str) {
        if let Some(srv) = self.server.as_ref() {
            tracing::info!(
                server = srv.state.id,
                error = %why,
                "an idle server failed server.check_query; closed, the client gets another"
            );
        }
        self.lose_server(CloseReason::CheckFailed);
        self.replaced = true;
    }

    /// The end of every round: queued bytes to the server (reading it meanwhile), the server
    /// back to the pool when the relay says the transaction is over, queued bytes to the
    /// client.
    pub(super) async fn finish_round(&mut self) -> Result<(), ClientError> {
        // Most rounds that read a reply have nothing for the server: no write future then
        // (TLS may still hold a record back, so it always goes through the flush).
        if !self.relay.transmit(Peer::Server).is_empty()
            || self.server.as_ref().is_some_and(|s| s.stream.is_tls())
        {
            self.flush_server().await?;
        } else {
            self.relay.transmitted(Peer::Server);
        }
        // The rare ends of a round share one await point (the usual round's future stays as
        // it was): committed subscriptions made, a listening client's own notification waited
        // for.
        if let Some(rare) = self.maybe_release() {
            Box::pin(self.rare_round_end(*rare)).await?;
        }
        if self.server.is_none() && self.inbox.is_some() {
            // Notifications wait for the end of the client's transaction, as PostgreSQL's do.
            self.deliver_notifications();
        }
        let keep = if self.server.is_some() {
            Keep::All
        } else {
            self.keep_idle()
        };
        self.relay.end_round(keep);
        if let Some(written) = self.write_client_now() {
            self.write_client_rest(written).await?;
        }
        Ok(())
    }

    /// Follows a change of the client's pin, then gives the server back if the transaction is
    /// over. Returns what the round's end must still do, in the rare case it must do anything
    /// ([`RareEnd`]). Inlined: the round's end is the hot path, and the pin change's call is
    /// cold.
    #[inline(always)]
    fn maybe_release(&mut self) -> Option<Box<RareEnd>> {
        let mut due = None;
        let mut notified = false;
        loop {
            let srv = self.server.as_ref().map(|s| &s.state);
            let mut wire = Wire {
                client: &mut self.client,
                cancels: &self.shared.cancels,
            };
            match self.relay.poll(srv, &mut wire) {
                None => break,
                Some(Event::Pin(change)) => due = self.follow_pin(change),
                Some(Event::Release(released)) => {
                    if let Some(mut conn) = self.server.take() {
                        self.cancel.clear();
                        conn.state.trim_buffers();
                        self.pool.checkin_at(conn, released.at);
                    }
                    // A listening client's transaction mentioned `notify`
                    // ([`crate::relay::Released::notified`]).
                    notified = released.notified && self.inbox.is_some();
                    break;
                }
                // Only `handle` answers with it.
                Some(Event::TimedOut(_)) => break,
            }
        }
        if !notified && due.is_none() {
            return None;
        }
        Some(Box::new(RareEnd { notified, due }))
    }

    /// The committed subscriptions, then the wait for a listening client's own notification
    /// (`notified`): its notification, and any committed before it, goes out before its
    /// ReadyForQuery, as directly.
    #[cold]
    async fn rare_round_end(&mut self, rare: RareEnd) -> Result<(), ClientError> {
        let RareEnd { notified, due } = rare;
        if let Some(due) = due {
            // Boxed: this future's drop stays small enough to inline in the usual round.
            Box::pin(self.follow_subscriptions(due)).await;
        }
        if notified {
            self.caught_up().await;
        }
        Ok(())
    }

    /// Waits (a bounded while) for the pool's listening connection to receive every
    /// notification committed so far.
    #[cold]
    async fn caught_up(&mut self) {
        if tokio::time::timeout(CAUGHT_UP_WAIT, self.pool.listener_caught_up())
            .await
            .is_err()
        {
            tracing::debug!(
                client = self.relay.id(),
                "the listening connection did not catch up in time"
            );
        }
    }

    /// A Query or batch of `LISTEN`s/`UNLISTEN`s (`track`, [`Next::Subscribe`]), done with
    /// the pool's listening connection, so the client holds no server for it, and answered
    /// as PostgreSQL answers it.
    #[cold]
    async fn subscribe(&mut self, batch: Subscriptions) {
        let Subscriptions { subs, in_block } = batch;
        let results = if in_block {
            self.subscribe_in_block(&subs).await
        } else {
            self.subscribe_now(&subs).await
        };
        let srv = self.server.as_mut().map(|s| &mut s.state);
        let mut wire = Wire {
            client: &mut self.client,
            cancels: &self.shared.cancels,
        };
        let subscribed = Input::Subscribed {
            subs: &subs,
            results,
        };
        self.relay.handle(srv, subscribed, &mut wire);
    }

    /// In a block: each `LISTEN` is made when it comes (a rollback ends it again, so the
    /// client's own `NOTIFY` of the block reaches it at the commit), each `UNLISTEN` counts
    /// at the commit (the relay notes it); up to the first that cannot be made.
    async fn subscribe_in_block(&mut self, subs: &[Subscribe]) -> Vec<subscribe::Outcome> {
        let mut results = Vec::with_capacity(subs.len());
        for sub in subs {
            let res = match sub {
                Subscribe::Listen(channel) => {
                    let first = self
                        .inbox
                        .as_deref()
                        .map_or(true, |i| i.channels().is_empty());
                    let res = self.listen(channel, 0).await;
                    if let (Ok(true), Some(inbox)) = (&res, self.inbox.as_deref_mut()) {
                        inbox.listened_early(channel, first);
                    }
                    res
                }
                Subscribe::Unlisten(_) => Ok(false),
            };
            let failed = res.is_err();
            results.push(res);
            if failed {
                break;
            }
        }
        results
    }

    /// Outside a block the statements of one Query or batch commit together: their sum is
    /// made, `LISTEN`s first ([`subscribe::plan`]). If one cannot be made, the ones made for
    /// these statements end again and nothing changes, as the implicit transaction's rollback
    /// leaves it ([`subscribe::failed_at`]).
    async fn subscribe_now(&mut self, subs: &[Subscribe]) -> Vec<subscribe::Outcome> {
        let current = self.inbox.as_deref().map_or(&[][..], |i| i.channels());
        let change = match subscribe::plan(current, subs) {
            Ok(change) => change,
            Err(refused) => return refused,
        };
        let room = change.unlisten.len();
        for (made, channel) in change.listen.iter().enumerate() {
            if let Err(e) = self.listen(channel, room).await {
                for c in &change.listen[..made] {
                    self.unlisten(Some(c));
                }
                return subscribe::failed_at(subs, channel, e);
            }
        }
        if change.none_left {
            self.unlisten(None);
        } else {
            for c in &change.unlisten {
                self.unlisten(Some(c));
            }
        }
        subs.iter().map(|_| Ok(false)).collect()
    }

    /// Subscribes the client to `channel` with the pool's listening connection, within
    /// `query_wait_timeout`; returns whether it did not listen there before.
    async fn listen(
        &mut self,
        channel: &str,
        room: usize,
    ) -> Result<bool, crate::protocol::backend::ErrorFields> {
        let id = self.relay.id();
        let inbox = self.inbox.get_or_insert_with(|| Box::new(Inbox::new(id)));
        let wait = self.shared.config.load().pool.query_wait_timeout;
        let already = inbox.channels().iter().any(|c| c == channel);
        if !already && inbox.channels().len() >= crate::listen::MAX_CHANNELS + room {
            return Err(subscribe::too_many_channels());
        }
        let listen = self.pool.listen(channel, inbox.mailbox());
        let res = match tokio::time::timeout(wait, listen).await {
            Ok(r) => r,
            Err(_) => {
                if !already {
                    self.pool.unlisten(id, Some(channel));
                }
                Err(crate::relay::error_fields(
                    sqlstate::QUERY_CANCELED,
                    format!(
                        "the pooler's listening connection did not listen within {wait:?} (query_wait_timeout)"
                    ),
                ))
            }
        };
        if res.is_ok() {
            inbox.note(true, Some(channel));
        }
        let on = !inbox.channels().is_empty();
        self.tell(Input::Listening(on));
        res.map(|()| !already)
    }

    /// Ends the client's subscription to `channel` (`None`: all).
    fn unlisten(&mut self, channel: Option<&str>) {
        let id = self.relay.id();
        if let Some(inbox) = self.inbox.as_deref_mut() {
            self.pool.unlisten(id, channel);
            inbox.note(false, channel);
            let on = !inbox.channels().is_empty();
            self.tell(Input::Listening(on));
        }
    }

    /// The client's `LISTEN`s and `UNLISTEN`s that committed (in a block, beside other
    /// statements), made with the pool's listening connection in order, before the client
    /// hears of the commit: what is committed after its `COMMIT` returns reaches it, as
    /// directly. A `LISTEN` that cannot be made is warned of (its transaction committed).
    #[cold]
    async fn follow_subscriptions(&mut self, due: Vec<Subscribe>) {
        for sub in due {
            match sub {
                Subscribe::Listen(channel) => {
                    if let Err(e) = self.listen(&channel, 0).await {
                        tracing::warn!(
                            client = self.relay.id(),
                            "committed LISTEN not made: {}",
                            e.message
                        );
                        let fields = crate::protocol::backend::ErrorFields {
                            severity: "WARNING".into(),
                            code: "01000".into(),
                            message: format!(
                                "LISTEN {channel} committed, but the pooler could not listen: {}",
                                e.message
                            ),
                            detail: None,
                            hint: None,
                        };
                        self.tell(Input::Notice(&fields));
                    }
                }
                Subscribe::Unlisten(channel) => self.unlisten(channel.as_deref()),
            }
        }
    }

    /// The client's next statement needs a database free of other sessions (`DROP
    /// DATABASE` and the like): the pools of it that log in as this client's pool does and
    /// that no client uses close their servers first. Another role's pools are left alone,
    /// so a client cannot make another tenant's servers churn.
    #[cold]
    fn free_database(&mut self, db: &str) {
        let (_, user) = self.pool.server_login();
        for pool in self.shared.pools.all() {
            if pool.is(&self.pool) || pool.server_login() != (db, user) {
                continue;
            }
            if pool.free_for_database_command() {
                tracing::info!(
                    client = self.relay.id(),
                    pool = pool.database(),
                    "closing the idle servers of database {db:?}, which a statement of the client's needs free"
                );
            }
        }
    }

    /// A listening client sent more: in its open block, with nothing owed by its server,
    /// that moves the cutoff of the block's first listens ([`Inbox::listened_early`]).
    #[cold]
    fn client_spoke(&mut self) {
        let quiet = self
            .server
            .as_ref()
            .is_some_and(|s| s.state.replies.is_empty());
        if let Some(inbox) = self.inbox.as_deref_mut().filter(|i| i.fresh_open()) {
            if quiet && self.relay.stand(None).in_block() {
                inbox.client_spoke();
            }
        }
    }

    /// Queues the notifications waiting in the inbox (and the warning of a loss) for the
    /// client.
    #[cold]
    fn deliver_notifications(&mut self) {
        let Some(inbox) = self.inbox.as_deref_mut() else {
            return;
        };
        // The client holds no server: its block, if it had one, has ended.
        inbox.block_ended();
        let mut wire = Wire {
            client: &mut self.client,
            cancels: &self.shared.cancels,
        };
        // The machine puts each before the ReadyForQuery that ends the client's transaction,
        // where PostgreSQL puts a transaction's own notifications.
        while let Some(item) = inbox.try_recv() {
            let note = item.as_deref().filter(|n| inbox.hears(n));
            if note.is_some() || item.is_none() {
                let lost = inbox.take_lost();
                let input = Input::Notification { note, lost };
                self.relay.handle(None, input, &mut wire);
            }
        }
    }

    /// The client was pinned or unpinned: SHOW CLIENTS and the pool's pinned gauge follow;
    /// committed `UNLISTEN`s alone are made now. Returns committed subscriptions that
    /// include a `LISTEN`, which waits to be made, with the rest in order, before the round
    /// ends.
    #[cold]
    pub(super) fn follow_pin(&mut self, change: PinChange) -> Option<Vec<Subscribe>> {
        if change.discarded {
            // DISCARD ALL includes UNLISTEN *.
            if let Some(inbox) = self.inbox.as_deref_mut() {
                self.pool.unlisten(self.relay.id(), None);
                inbox.note(false, None);
                self.tell(Input::Listening(false));
            }
        }
        let subs = change.subscriptions;
        let due = if subs.iter().any(|s| matches!(s, Subscribe::Listen(_))) {
            Some(subs)
        } else {
            for sub in subs {
                if let Subscribe::Unlisten(channel) = sub {
                    self.unlisten(channel.as_deref());
                }
            }
            None
        };
        let now = change.pinned.map(|p| p.label());
        if let Some(was) = self.cancel.pin() {
            self.pool.unpin(was);
        }
        if let Some(reason) = now {
            self.pool.pin(reason);
        }
        self.cancel.set_pin(now);
        due
    }

    /// A timeout fired: a query is cancelled (the session goes on); an idle or too long
    /// transaction ends the session, its server closed (PostgreSQL rolls it back).
    fn timed_out(&mut self, kind: Kind) -> Result<(), ClientError> {
        match self.tell(Input::Timeout(kind)) {
            Some(Event::TimedOut(TimedOut::CheckFailed)) => {
                self.replace_server("no answer within server.connect_timeout");
                Ok(())
            }
            Some(Event::TimedOut(TimedOut::CancelQuery)) => {
                tracing::info!(
                    client = self.relay.id(),
                    "query_timeout: cancelling the running query"
                );
                self.cancel.cancel_now(self.shared.cancel_sender());
                Ok(())
            }
            Some(Event::TimedOut(TimedOut::Close {
                code,
                message,
                cancel_running,
            })) => {
                tracing::info!(
                    client = self.relay.id(),
                    timeout = kind.label(),
                    "closing the client and its server"
                );
                if cancel_running {
                    self.cancel.cancel_now(self.shared.cancel_sender());
                }
                Err(ClientError::Fatal {
                    code,
                    message: message.into(),
                })
            }
            // A timeout is always answered.
            _ => Ok(()),
        }
    }

    /// The pool refused or failed to give a server: answer the request with an ERROR and keep
    /// the session usable. Config errors from the server's login are FATAL, as a direct
    /// connection would see them.
    fn answer_pool_error(&mut self, tag: u8, e: PoolError) -> Result<(), ClientError> {
        if e.is_fatal_for_client() {
            return Err(ClientError::Pool(e));
        }
        self.shared
            .metrics
            .clients
            .shed
            .with_label_values(&[e.shed_reason()])
            .inc();
        self.shared.metrics.pooler_error(e.sqlstate());
        let mut fields = crate::relay::error_fields(e.sqlstate(), e.to_string());
        if let PoolError::WaitTimeout { pins: Some(p), .. } = &e {
            fields.detail = Some(p.clone());
        }
        if let PoolError::CircuitOpen { retry_after, .. } = &e {
            // The pooler's Retry-After.
            fields.detail = Some(format!(
                "next connection attempt in {} ms",
                retry_after.as_millis()
            ));
            fields.hint = Some("retry after that delay; the pooler retries for you".into());
        }
        self.tell(Input::Refused {
            tag,
            fields: &fields,
        });
        Ok(())
    }

    /// What the client keeps while it holds nothing: idle clients stay small, a warm
    /// session keeps its buffers unless a large message grew one.
    fn keep_idle(&mut self) -> Keep {
        if self.warm.slot.is_none() {
            self.warm.slot = self.shared.counters.take_warm(self.warm_limit.into());
        }
        if self.warm.slot.is_some() {
            Keep::Warm
        } else {
            Keep::None
        }
    }
}

/// `client.warm_sessions` as a session keeps it: 16 bits, a larger value counting as 65,535
/// (a cap no pooler reaches: each warm session keeps its buffers), never wrapped to a small one.
fn warm_limit(configured: usize) -> u16 {
    u16::try_from(configured).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn warm_sessions_past_16_bits_count_as_the_most() {
        assert_eq!(super::warm_limit(0), 0);
        assert_eq!(super::warm_limit(64), 64);
        assert_eq!(super::warm_limit(65_535), 65_535);
        // `as u16` would make 65,536 zero warm sessions and 65,600 sixty-four.
        assert_eq!(super::warm_limit(65_536), u16::MAX);
        assert_eq!(super::warm_limit(65_600), u16::MAX);
        assert_eq!(super::warm_limit(usize::MAX), u16::MAX);
    }
}
