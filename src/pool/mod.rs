//! Server connection pools, one per (database, user): checkout with bounded waiting, checkin,
//! connecting on demand, and maintenance. A pool never parses client messages.

mod capacity;
mod connect;
mod error;
mod follow;
mod generation;
mod handoff;
mod hold;
mod hosts;
mod landing;
mod limits;
mod listener;
mod maintenance;
mod orphans;
mod parked;
mod registry;
mod settings;
#[cfg(test)]
mod tests;

pub use capacity::{Limit, LimitKind};
pub use connect::Backend;
pub use error::{PoolError, ServerFailure};
pub use handoff::{Handoff, Waiting};
pub use hosts::{Host, Hosts, Route};
pub use listener::ListenResult;
pub use registry::{PoolKey, Pools};
pub use settings::{resolve, PoolSettings, Resolved, RouteSpec};

use std::collections::VecDeque;
use std::num::NonZeroI32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::cancel::Ticket;
use crate::counters::Counters;
use crate::events::Events;
use crate::metrics::{Metrics, PoolSnapshot};
use crate::params::Params;
use crate::server::{Generation, Server, ServerTarget};
use std::sync::atomic::{AtomicI64, Ordering};

/// Why a server connection is closed: the `reason` label of `droidpool_servers_closed_total`,
/// so churn (and the logins that replace it) can be told apart from recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Its client's session ended while it was busy or inside a transaction: it is not in a
    /// state another client may inherit.
    ClientEnded,
    /// It failed, was lost, or answered out of step.
    Broken,
    /// `server.lifetime` passed.
    Lifetime,
    /// Idle longer than `server.idle_timeout`.
    IdleTimeout,
    /// An idle server that had closed or had something to say (EOF, a FATAL).
    Unusable,
    /// Not needed any more: the pool shrank, the pooler drains or shuts down.
    Retired,
    /// The session-mode reset query failed.
    ResetFailed,
    /// `server.check_query` failed on an idle server (an error, a close, no answer).
    CheckFailed,
    /// `KILL` or `KILL_CLIENT` in the admin console.
    Killed,
    /// Opened before a `RECONNECT`: closed when released (idle ones at once).
    Reconnect,
    /// Idle, and another pool needed its room under a shared limit (database or user).
    Evicted,
    /// Its host no longer fits the pool: a standby (or read-only) where writes are needed,
    /// or a primary where a standby is.
    Role,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClientEnded => "client_ended",
            CloseReason::Broken => "broken",
            CloseReason::Lifetime => "lifetime",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Unusable => "unusable",
            CloseReason::Retired => "retired",
            CloseReason::ResetFailed => "reset_failed",
            CloseReason::CheckFailed => "check_failed",
            CloseReason::Killed => "killed",
            CloseReason::Reconnect => "reconnect",
            CloseReason::Evicted => "evicted",
            CloseReason::Role => "role",
        }
    }
}

/// What a pool shares with the rest of the pooler.
pub struct PoolDeps {
    pub events: Events,
    pub counters: Arc<Counters>,
    pub metrics: Arc<Metrics>,
    pub backend: Arc<Backend>,
    /// The pooler's lifecycle: its drain (servers go back as clients leave), its stop (the
    /// pool's tasks end) and its ticks (when the pool's upkeep runs).
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// The limits this pool shares with others (its database's, its user's).
    pub limits: Vec<Arc<Limit>>,
}

/// A client queued for a server, since when (for `maxwait`) and until when.
struct Waiter {
    tx: handoff::Sender,
    /// Tokio's clock, so paused-time tests see waits grow.
    since: tokio::time::Instant,
    /// When the pool's deadline sweep answers it with 57014; `None`: no limit.
    deadline: Option<tokio::time::Instant>,
    /// Who waits ([`Ticket::owner`]), so one waiter can be dropped by name; 0: anonymous.
    owner: usize,
    /// The deadline is the failover hold's: it is answered with 57P03 instead.
    held: bool,
}

impl Waiter {
    /// The client stopped waiting (gave up, timed out or left).
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Hands over the result; gives it back if the client stopped waiting.
    fn send(self, r: Result<Server, PoolError>) -> Result<(), Result<Server, PoolError>> {
        self.tx.send(r)
    }
}

struct PoolState {
    idle: VecDeque<Server>,
    waiters: VecDeque<Waiter>,
    /// Logins in flight.
    connecting: usize,
    /// What the first server reported at login: told to clients at their login.
    startup_params: Option<Arc<Params>>,
    /// The earliest waiter deadline the sweep is armed for.
    sweep_at: Option<tokio::time::Instant>,
    /// The generation new servers are opened under, and older ones still held by a server
    /// (or a login) somewhere.
    generation: Generation,
    older: Vec<Generation>,
    /// Bit `i`: a login waits for a slot of `limits[i]`.
    waiting_on: u32,
    /// A slot of `limits[i]` handed to this pool after a wait, for its next login.
    granted: Vec<Option<OwnedSemaphorePermit>>,
    /// The hosts servers come from and which of them fit (replaced by a reload).
    route: Arc<Route>,
    /// No host fitted at the last login and none has since: new waiters are held.
    held: bool,
    /// Standbys kept for the next recheck (see `parked`), each holding a slot.
    parked: Vec<Server>,
    /// A client's `DROP DATABASE` (or the like) of this pool's database came while clients
    /// were attached: if the last leaves before then, the servers are closed.
    free_until: Option<std::time::Instant>,
}

impl PoolState {
    fn new(route: Route, limits: usize) -> Self {
        PoolState {
            idle: VecDeque::new(),
            waiters: VecDeque::new(),
            connecting: 0,
            startup_params: None,
            sweep_at: None,
            generation: Generation::default(),
            older: Vec::new(),
            waiting_on: 0,
            granted: (0..limits).map(|_| None).collect(),
            route: Arc::new(route),
            held: false,
            parked: Vec::new(),
            free_until: None,
        }
    }
}

/// A cloneable handle to one pool.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    name: String,
    /// Who logs in to which database; the host and port are each host's of the route.
    target: ServerTarget,
    settings: Mutex<PoolSettings>,
    /// One slot per server connection that may exist; a `ServerConn` holds its slot.
    capacity: capacity::Capacity,
    /// Slots of the reserve (`pool.reserve_size`).
    reserve: capacity::Capacity,
    /// The limits shared with other pools, each counting this pool's servers too.
    limits: Vec<Arc<Limit>>,
    state: Mutex<PoolState>,
    events: Events,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
    /// Cancelled when the pooler stops or this pool is retired: its tasks end.
    shutdown: CancellationToken,
    backend: Arc<Backend>,
    lifecycle: Arc<crate::lifecycle::Lifecycle>,
    name_arc: Arc<str>,
    /// Whether the last server login succeeded.
    login_ok: std::sync::atomic::AtomicBool,
    /// Sessions attached to this pool.
    clients: AtomicI64,
    /// Wakes the deadline sweep when a waiter's deadline comes before the one it is armed for.
    rearm: Notify,
    /// Servers released by their client and being reset before reuse (PgBouncer's `used`).
    resetting: AtomicI64,
    /// Statements of departed clients, closed by the next client on each server.
    orphans: orphans::Orphans,
    /// Clients pinned to their server by session state, by reason (touched when a client is
    /// pinned or leaves, and read by the wait timeout's error and the snapshot).
    pins: Mutex<Vec<(&'static str, i64)>>,
    database: String,
    user: String,
    /// The auth_query lookup pool (its mode label is `lookup`).
    lookup: bool,
    /// Counts the changes of `settings.policy`: a checkout compares it with the one its
    /// client's policy was read at (one load per transaction, no lock).
    policy_generation: std::sync::atomic::AtomicU32,
    /// `shutdown` has fired, as the maintenance task saw it (set before it closes the idle
    /// servers): one atomic load per checkin, where the token's own check takes a lock.
    closing: std::sync::atomic::AtomicBool,
    /// Who listens on which channel, and the listening connection's task (`listener`).
    listen: Mutex<listener::ListenState>,
}

impl Pool {
    /// A pool of clients' servers, or (`lookup`) the auth_query lookup pool.
    pub fn new(
        key: &PoolKey,
        lookup: bool,
        target: ServerTarget,
        route: Route,
        settings: PoolSettings,
        deps: PoolDeps,
    ) -> Pool {
        let PoolDeps {
            events,
            counters,
            metrics,
            backend,
            lifecycle,
            limits,
        } = deps;
        let ticks = lifecycle.ticks.clone();
        let pool = Pool {
            inner: Arc::new(PoolInner {
                name: format!("{}/{}", key.database, key.user),
                capacity: capacity::Capacity::new(settings.size),
                reserve: capacity::Capacity::new(settings.reserve_size),
                target,
                policy_generation: std::sync::atomic::AtomicU32::new(1),
                settings: Mutex::new(settings),
                state: Mutex::new(PoolState::new(route, limits.len())),
                limits,
                events,
                counters,
                metrics,
                shutdown: lifecycle.drain.pool_token(),
                backend,
                lifecycle,
                name_arc: Arc::from(format!("{}/{}", key.database, key.user)),
                login_ok: std::sync::atomic::AtomicBool::new(true),
                clients: AtomicI64::new(0),
                rearm: Notify::new(),
                resetting: AtomicI64::new(0),
                orphans: orphans::Orphans::default(),
                pins: Mutex::new(Vec::new()),
                closing: std::sync::atomic::AtomicBool::new(false),
                listen: Mutex::new(Default::default()),
                database: key.database.clone(),
                user: key.user.clone(),
                lookup,
            }),
        };
        for limit in &pool.inner.limits {
            limit.join(&pool.inner);
        }
        maintenance::spawn(pool.clone(), ticks);
        pool
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The name as a log line shows it: clients choose databases and users.
    pub fn log_name(&self) -> crate::logs::Escaped<&str> {
        crate::logs::Escaped::new(&self.inner.name)
    }

    /// Statements of this pool's departed clients (`--track-prepared`).
    pub fn orphans(&self) -> &orphans::Orphans {
        &self.inner.orphans
    }

    /// The pool's name as a shared string (no copy per client).
    pub fn shared_name(&self) -> Arc<str> {
        self.inner.name_arc.clone()
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than stopping the pool would, so recover the guard.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The policy the pool's transactions run under now, and its generation
    /// ([`Pool::policy_generation`]): the one place a client's policy comes from.
    pub fn policy(&self) -> (u32, crate::config::policy::Policy) {
        let s = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Read under the lock `update` bumps it under: the pair is consistent.
        let generation = self.inner.policy_generation.load(Ordering::Relaxed);
        (generation, s.policy)
    }

    /// Which policy is in force: it changes whenever [`Pool::policy`] would return another
    /// (one atomic load, every checkout).
    #[inline]
    pub fn policy_generation(&self) -> u32 {
        self.inner.policy_generation.load(Ordering::Relaxed)
    }

    /// The settings in force.
    pub fn settings(&self) -> PoolSettings {
        *self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Applies reloaded settings: the pool grows at once and shrinks by retiring idle
    /// servers now and busy ones as they come back.
    pub fn update(&self, new: PoolSettings) {
        let old = {
            let mut s = self
                .inner
                .settings
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if new.policy != s.policy {
                self.inner.policy_generation.fetch_add(1, Ordering::Relaxed);
            }
            std::mem::replace(&mut *s, new)
        };
        if new.size != old.size {
            self.inner.capacity.resize(new.size);
        }
        if new.reserve_size != old.reserve_size {
            self.inner.reserve.resize(new.reserve_size);
        }
        let surplus: Vec<_> = {
            let mut st = self.lock();
            let mut out = Vec::new();
            while self.inner.capacity.taken() > new.size + out.len() {
                match st.idle.pop_front() {
                    Some(c) => out.push(c),
                    None => break,
                }
            }
            self.spawn_connects(&mut st);
            out
        };
        for conn in surplus {
            self.close(conn, CloseReason::Retired);
        }
    }

    /// Forgets slots owed after a shrink (of the pool, its reserve or a shared limit), as far
    /// as they are free.
    fn settle_debt(&self) {
        self.inner.capacity.settle();
        self.inner.reserve.settle();
        for l in &self.inner.limits {
            l.cap.settle();
        }
    }

    /// No client holds this pool and it has no server: it can be dropped from the registry.
    /// (The registry and the maintenance task hold the only two handles.)
    pub(crate) fn is_unused(&self) -> bool {
        Arc::strong_count(&self.inner) <= 2 && self.open_count() == 0
    }

    /// Stops the maintenance task of a pool dropped from the registry.
    pub(crate) fn retire(&self) {
        self.inner.shutdown.cancel();
    }

    pub fn last_login_ok(&self) -> bool {
        self.inner.login_ok.load(Ordering::Relaxed)
    }

    /// Terminates every idle server and waits until that is sent.
    pub async fn close_idle_now(&self) {
        let idle: Vec<_> = self.lock().idle.drain(..).collect();
        for conn in idle {
            self.inner.events.server_closed(conn.id);
            self.count_close(CloseReason::Retired);
            terminate(conn).await;
        }
    }

    /// The client-side database name of this pool.
    pub fn database(&self) -> &str {
        &self.inner.database
    }

    /// The database and user its servers log in as.
    pub fn server_login(&self) -> (&str, &str) {
        (&self.inner.target.database, &self.inner.target.user)
    }

    /// Whether `other` is this pool.
    pub fn is(&self, other: &Pool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A client's `DROP DATABASE` (or rename, or copy) of this pool's database is about to
    /// run, which PostgreSQL refuses while other sessions are connected there: if no client
    /// uses the pool, its servers are closed (idle ones now, the others when released, as
    /// `RECONNECT` does), so that idle servers kept for departed clients do not stand in the
    /// way. With clients, nothing is closed: the statement meets their sessions, as it would
    /// directly. But PostgreSQL waits a while for other sessions to go before it refuses, and
    /// a client may be leaving as the statement comes (a test suite closes its pool, then
    /// drops its database): if the last client leaves within that wait, the servers are
    /// closed then. Returns whether it closed now.
    pub fn free_for_database_command(&self) -> bool {
        /// PostgreSQL's wait for other sessions (`CountOtherDBBackends`: 50 × 100 ms).
        const POSTGRES_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
        if self.attached_clients() > 0 {
            self.lock().free_until = Some(std::time::Instant::now() + POSTGRES_WAIT);
            return false;
        }
        self.reconnect();
        true
    }

    /// The last client left: the servers are closed if a database command asked for it
    /// a moment ago ([`Pool::free_for_database_command`]).
    fn last_client_left(&self) {
        let due = self
            .lock()
            .free_until
            .take()
            .is_some_and(|until| std::time::Instant::now() < until);
        if due {
            self.reconnect();
        }
    }

    pub fn user(&self) -> &str {
        &self.inner.user
    }

    /// Whether the pooler is draining (its servers then go back as clients leave).
    pub fn is_draining(&self) -> bool {
        self.inner.lifecycle.is_draining()
    }

    fn attached_clients(&self) -> i64 {
        self.inner.clients.load(Ordering::Relaxed)
    }

    /// Counts of this pool now, for metrics and status.
    pub fn snapshot(&self) -> PoolSnapshot {
        let (idle, connecting, waiting, max_wait, parked) = {
            let st = self.lock();
            // Queued and still listening: a client handed a server but not yet run is not
            // waiting any more, and one that gave up has left.
            let live = || st.waiters.iter().filter(|w| !w.is_closed());
            let max_wait = live()
                .map(|w| w.since.elapsed().as_secs_f64())
                .next()
                .unwrap_or(0.0);
            (
                st.idle.len() as i64,
                st.connecting as i64,
                live().count() as i64,
                max_wait,
                st.parked.len() as i64,
            )
        };
        let open = self.open_count() as i64;
        let used = self.inner.resetting.load(Ordering::Relaxed);
        let active = (open - idle - connecting - used - parked).max(0);
        let clients = self.inner.clients.load(Ordering::Relaxed);
        let settings = self.settings();
        PoolSnapshot {
            pool: self.inner.name.clone(),
            database: self.inner.database.clone(),
            user: self.inner.user.clone(),
            mode: if self.inner.lookup {
                "lookup"
            } else {
                settings.mode.as_str()
            },
            clients_active: active,
            clients_waiting: waiting,
            clients_idle: (clients - active - waiting).max(0),
            servers_active: active,
            servers_idle: idle,
            servers_login: connecting,
            servers_used: used,
            pool_size: settings.size as i64,
            max_waiting: settings.max_waiting as i64,
            max_wait_seconds: max_wait,
            reserve_size: settings.reserve_size as i64,
            servers_reserve: self.inner.reserve.taken() as i64,
            limits: self.limit_snapshot(),
            clients_pinned: self.pinned_clients(),
        }
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, i64)>> {
        self.inner.pins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Clients pinned to their server now.
    pub fn pinned_clients(&self) -> i64 {
        self.pins().iter().map(|(_, n)| n).sum()
    }

    /// What a client that waited in vain is told about the pinned clients holding servers,
    /// if any are: how many, and why.
    fn pins_detail(&self) -> Option<String> {
        let pins = self.pins();
        let total: i64 = pins.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        let why: Vec<String> = pins
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(reason, n)| format!("{reason}: {n}"))
            .collect();
        Some(format!(
            "{total} of the pool's {} servers are held by clients pinned by session state ({}); \
             a pinned client keeps its server until it disconnects",
            self.settings().size,
            why.join(", ")
        ))
    }

    fn count_pin(&self, reason: &'static str, by: i64) {
        let mut pins = self.pins();
        match pins.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += by,
            None => pins.push((reason, by)),
        }
    }

    /// Server connections open or being opened (the reserve's included).
    pub fn open_count(&self) -> usize {
        self.inner.capacity.taken() + self.inner.reserve.taken()
    }

    /// The parameters a client is told at login; logs in a first server if none has yet.
    pub async fn startup_params(&self) -> Result<Arc<Params>, PoolError> {
        if let Some(p) = self.lock().startup_params.clone() {
            return Ok(p);
        }
        let conn = self.checkout().await?;
        self.checkin(conn);
        Ok(self
            .lock()
            .startup_params
            .clone()
            .unwrap_or_else(|| Arc::new(Params::default())))
    }

    /// A server idle past a `check_delay` shorter than the maintenance tick is found out here;
    /// the tick marks those idle past a longer one (at most a tick late), which spares every
    /// checkout a clock subtraction.
    fn take_idle(&self, st: &mut PoolState, pick: IdlePick, now: Instant) -> Option<Server> {
        while let Some(mut conn) = pop_idle(st, pick.round_robin) {
            if conn.is_expired(now) {
                self.close(conn, CloseReason::Lifetime);
                continue;
            }
            if !conn.is_usable_idle() {
                self.close(conn, CloseReason::Unusable);
                continue;
            }
            if let Err(reason) = self.check_fit(&st.route, &mut conn) {
                self.close(conn, reason);
                continue;
            }
            match pick.check_delay {
                None => conn.check_due = false,
                Some(d) if d < crate::lifecycle::TICK => {
                    conn.check_due = now.saturating_duration_since(conn.last_used) >= d;
                }
                Some(_) => {}
            }
            return Some(conn);
        }
        None
    }

    /// Takes an idle server, or waits (bounded in count and time) for one.
    pub async fn checkout(&self) -> Result<Server, PoolError> {
        self.checkout_since(tokio::time::Instant::now()).await
    }

    /// As [`Pool::checkout`], for a request that arrived at `since` (the caller's clock read).
    /// A waiter carries no timer of its own: the pool's deadline sweep answers it with 57014
    /// (one timer per pool instead of one registered and removed per queued transaction).
    pub async fn checkout_since(&self, since: tokio::time::Instant) -> Result<Server, PoolError> {
        self.checkout_as(since, None, None).await
    }

    /// As [`Pool::checkout_since`], for the waiter `ticket` names: it sees the pool closed when
    /// its stop flag is set before it would queue, or when it is dropped by name. `spare`: the
    /// pid of a backend whose server is not to be taken (`session_state::signal`): another idle
    /// one is; when it is the only idle one, a new one is opened for this client if the pool
    /// has room, else it is taken after all (as it would be without the pooler's care).
    pub async fn checkout_as(
        &self,
        since: tokio::time::Instant,
        ticket: Option<Ticket<'_>>,
        spare: Option<NonZeroI32>,
    ) -> Result<Server, PoolError> {
        let settings = self.settings();
        // A slot of its own: this path is not the busy client's.
        let handoff = Handoff::new();
        let wait = {
            let mut st = self.lock();
            if ticket.is_some_and(|t| t.stop.load(Ordering::Acquire)) {
                return Err(PoolError::Closed(self.inner.name.clone()));
            }
            let pick = IdlePick {
                round_robin: settings.round_robin,
                check_delay: settings.check_delay,
            };
            let aside = spare.and_then(|pid| set_aside(&mut st, pid));
            let taken = self.take_idle(&mut st, pick, Instant::now());
            let spared = aside.is_some();
            put_back(&mut st, aside);
            if let Some(conn) = taken {
                return Ok(conn);
            }
            if spared && self.inner.capacity.available() == 0 {
                if let Some(conn) = self.take_idle(&mut st, pick, Instant::now()) {
                    return Ok(conn);
                }
            }
            let tx = handoff.begin();
            let wait = tx.wait();
            self.queue_locked(&mut st, &settings, since, ticket, tx)?;
            wait
        };
        Waiting::new(&handoff, wait, self)
            .await
            .unwrap_or_else(|| Err(PoolError::Closed(self.inner.name.clone())))
    }

    /// The usual checkout in one look at the pool: an idle server now (`now`: the caller's
    /// clock, also the wait's start), or a place in the queue for one, answered through the
    /// client's `handoff` (`Ok(Err(wait))`: await [`Pool::waiting`] for `wait`), or the
    /// refusal (circuit open, too many waiting, `ticket`'s client killed).
    pub fn checkout_or_queue(
        &self,
        now: Instant,
        ticket: Ticket<'_>,
        handoff: &mut Option<Arc<Handoff>>,
    ) -> Result<Result<Server, u64>, PoolError> {
        // Two fields, not a copy of all the settings: most checkouts find a server idle.
        let pick = {
            let s = self
                .inner
                .settings
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            IdlePick {
                round_robin: s.round_robin,
                check_delay: s.check_delay,
            }
        };
        let mut st = self.lock();
        if let Some(conn) = self.take_idle(&mut st, pick, now) {
            return Ok(Ok(conn));
        }
        if ticket.stop.load(Ordering::Acquire) {
            return Err(PoolError::Closed(self.inner.name.clone()));
        }
        // (The settings' lock inside the pool's, the order the reserve's check takes too.)
        let settings = self.settings();
        let since = tokio::time::Instant::from_std(now);
        // Made on the client's first wait, kept for its next ones.
        let tx = handoff.get_or_insert_with(Handoff::new).begin();
        let wait = tx.wait();
        self.queue_locked(&mut st, &settings, since, Some(ticket), tx)?;
        Ok(Err(wait))
    }

    /// The client's end of wait `wait` of [`Pool::checkout_or_queue`].
    pub fn waiting<'a>(&'a self, handoff: &'a Handoff, wait: u64) -> Waiting<'a> {
        Waiting::new(handoff, wait, self)
    }

    /// Queues a waiter that arrived at `since` for the next server, under the pool's lock
    /// `st`, after a look at the idle list found none: refused while the circuit is open (or
    /// held through it), or when `pool.max_waiting_clients` wait already.
    fn queue_locked(
        &self,
        st: &mut PoolState,
        settings: &PoolSettings,
        since: tokio::time::Instant,
        ticket: Option<Ticket<'_>>,
        tx: handoff::Sender,
    ) -> Result<(), PoolError> {
        if let Some(e) = self.circuit_open(st) {
            if settings.hold_timeout.is_zero() {
                self.count_refusal(since);
                return Err(e);
            }
            self.hold_locked(st, settings);
        }
        let max_waiting = settings.max_waiting;
        if st.waiters.len() >= max_waiting {
            st.waiters.retain(|w| !w.is_closed());
            if st.waiters.len() >= max_waiting {
                self.count_refusal(since);
                return Err(PoolError::TooManyWaiting {
                    pool: self.inner.name.clone(),
                    max: max_waiting,
                });
            }
        }
        let (deadline, held) = Pool::deadline_for(st, settings, since);
        // The sweep also opens the reserve when this client has waited long enough.
        let reserve_at = (settings.reserve_size > 0).then(|| since + settings.reserve_timeout);
        if let Some(d) = earliest(deadline, reserve_at) {
            if st.sweep_at.map_or(true, |at| d < at) {
                st.sweep_at = Some(d);
                self.inner.rearm.notify_one();
            }
        }
        st.waiters.push_back(Waiter {
            tx,
            since,
            deadline,
            owner: ticket.map_or(0, |t| t.owner),
            held,
        });
        self.spawn_connects(st);
        Ok(())
    }

    /// Answers every waiter whose deadline has passed with 57014 and drops those that left,
    /// then opens the reserve for those that waited long enough; returns the next time to
    /// sweep at.
    fn sweep_waiters(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let s = self.settings();
        let reserve = (s.reserve_size > 0).then_some(s.reserve_timeout);
        let mut st = self.lock();
        let mut next: Option<tokio::time::Instant> = None;
        let mut keep = VecDeque::with_capacity(st.waiters.len());
        for w in st.waiters.drain(..) {
            match w.deadline {
                _ if w.is_closed() => {}
                Some(d) if d <= now => {
                    let waited = d.duration_since(w.since);
                    let err = if w.held {
                        PoolError::HoldExpired {
                            database: self.inner.database.clone(),
                            waited,
                        }
                    } else {
                        PoolError::WaitTimeout {
                            pool: self.inner.name.clone(),
                            waited,
                            pins: self.pins_detail(),
                        }
                    };
                    let _ = w.send(Err(err));
                }
                d => {
                    let reserve_at = reserve.map(|t| w.since + t).filter(|at| *at > now);
                    next = earliest(next, earliest(d, reserve_at));
                    keep.push_back(w);
                }
            }
        }
        st.waiters = keep;
        st.sweep_at = next;
        if reserve.is_some() {
            self.spawn_connects(&mut st);
        }
        next
    }

    /// The deadline the sweep is armed for.
    fn sweep_at(&self) -> Option<tokio::time::Instant> {
        self.lock().sweep_at
    }

    /// Stops every waiter: each sees the pool closed.
    pub fn drop_waiters(&self) {
        self.lock().waiters.clear();
    }

    /// Stops the waiters `owners` name: each sees the pool closed.
    pub fn drop_waiters_of(&self, owners: &[usize]) {
        self.lock().waiters.retain(|w| !owners.contains(&w.owner));
    }

    /// Returns a server in a clean idle state: to the first live waiter, else to the idle list.
    pub fn checkin(&self, conn: Server) {
        self.checkin_at(conn, Instant::now());
    }

    /// As [`Pool::checkin`], with the caller's clock read.
    pub fn checkin_at(&self, mut conn: Server, now: Instant) {
        if !conn.state.rbuf.is_empty() {
            // It spoke after its transaction ended (a FATAL, a notification): not reused.
            self.close(conn, CloseReason::Unusable);
            self.lock_and_spawn();
            return;
        }
        if conn.read_only_error {
            if self.lock().route.tsa().needs_writes() {
                return self.verify_writable(conn);
            }
            conn.read_only_error = false;
        }
        // A lowered size or shared limit: the surplus goes as it is released.
        let over = (self.inner.capacity.is_over() && !conn.slots.reserve) || self.limits_over();
        if conn.is_expired(now) || self.inner.closing.load(Ordering::Acquire) || over {
            let reason = if conn.is_expired(now) {
                CloseReason::Lifetime
            } else {
                CloseReason::Retired
            };
            self.close(conn, reason);
            self.lock_and_spawn();
            return;
        }
        conn.last_used = now;
        conn.check_due = false;
        let mut st = self.lock();
        if conn.generation.number() != st.generation.number() {
            // Opened before a RECONNECT: closed instead of reused.
            drop(st);
            self.discard(conn, CloseReason::Reconnect);
            return;
        }
        if let Err(reason) = self.check_fit(&st.route, &mut conn) {
            drop(st);
            self.close(conn, reason);
            self.lock_and_spawn();
            return;
        }
        loop {
            let Some(w) = st.waiters.pop_front() else {
                // Nobody waits: nothing is left for the sweep, whose timer goes now (the
                // data plane's timer wheel is then empty while no client waits).
                if st.sweep_at.take().is_some() {
                    self.inner.rearm.notify_one();
                }
                // Nobody here waits for it: a reserve server goes, and so does one whose room
                // another pool waits for under a shared limit.
                if conn.slots.reserve || self.limits_want_room() {
                    drop(st);
                    let reason = if conn.slots.reserve {
                        CloseReason::Retired
                    } else {
                        CloseReason::Evicted
                    };
                    self.close(conn, reason);
                    return;
                }
                // Draining: keep no more idle servers than clients still attached (one that
                // has left will not need one), so the servers go back as clients leave.
                if self.is_draining() && st.idle.len() as i64 >= self.attached_clients() {
                    drop(st);
                    self.close(conn, CloseReason::Retired);
                    return;
                }
                st.idle.push_back(conn);
                return;
            };
            match w.send(Ok(conn)) {
                Ok(()) => {
                    if st.waiters.is_empty() && st.sweep_at.take().is_some() {
                        self.inner.rearm.notify_one();
                    }
                    return;
                }
                Err(Ok(back)) => conn = back,
                // A waiter is only ever sent `Ok(conn)`, so this arm cannot be reached.
                Err(Err(_)) => return,
            }
        }
    }

    /// Closes a server that must not be reused (broken, mid-transaction, expired).
    pub fn discard(&self, conn: Server, reason: CloseReason) {
        self.close(conn, reason);
        self.lock_and_spawn();
    }

    fn lock_and_spawn(&self) {
        let mut st = self.lock();
        self.spawn_connects(&mut st);
    }

    /// Times a refusal from the request it answers (`since`: the caller's clock read).
    fn count_refusal(&self, since: tokio::time::Instant) {
        self.inner
            .metrics
            .clients
            .refusal_seconds
            .observe(since.elapsed().as_secs_f64());
    }

    fn count_close(&self, reason: CloseReason) {
        self.inner
            .metrics
            .servers
            .closed
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    fn close(&self, mut conn: Server, reason: CloseReason) {
        self.inner.events.server_closed(conn.id);
        self.count_close(reason);
        // Give the slots back now (a shrink may be waiting to forget them).
        drop(std::mem::take(&mut conn.slots));
        self.settle_debt();
        tokio::spawn(terminate(conn));
    }

    fn expiry(&self) -> Option<Instant> {
        let s = self.settings();
        if s.lifetime.is_zero() {
            return None;
        }
        let jitter = s
            .lifetime
            .mul_f64(s.lifetime_jitter * rand::thread_rng().gen::<f64>());
        Some(Instant::now() + s.lifetime + jitter)
    }
}

/// The earlier of two optional times.
fn earliest(
    a: Option<tokio::time::Instant>,
    b: Option<tokio::time::Instant>,
) -> Option<tokio::time::Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The settings taking an idle server needs.
#[derive(Clone, Copy)]
struct IdlePick {
    round_robin: bool,
    check_delay: Option<Duration>,
}

fn pop_idle(st: &mut PoolState, round_robin: bool) -> Option<Server> {
    if round_robin {
        st.idle.pop_front()
    } else {
        st.idle.pop_back()
    }
}

/// Takes backend `pid`'s server out of the idle list, with its place there, so a take
/// passes it over.
fn set_aside(st: &mut PoolState, pid: NonZeroI32) -> Option<(usize, Server)> {
    let at = st.idle.iter().position(|s| s.key.0 == pid.get())?;
    st.idle.remove(at).map(|s| (at, s))
}

/// Puts a server [`set_aside`] took back in its place (or the nearest one left).
fn put_back(st: &mut PoolState, aside: Option<(usize, Server)>) {
    if let Some((at, s)) = aside {
        let at = at.min(st.idle.len());
        st.idle.insert(at, s);
    }
}

/// A server counted as `used` (being reset) until the guard drops.
pub struct Resetting(Pool);

impl Pool {
    /// Counts a server as `used` while its client's leftovers are reset away.
    pub fn resetting(&self) -> Resetting {
        self.inner.resetting.fetch_add(1, Ordering::Relaxed);
        Resetting(self.clone())
    }
}

impl Drop for Resetting {
    fn drop(&mut self) {
        self.0.inner.resetting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A session's membership of a pool; leaving decrements the client count.
pub struct PoolClient(Pool);

/// The pool a member belongs to.
impl std::ops::Deref for PoolClient {
    type Target = Pool;

    fn deref(&self) -> &Pool {
        &self.0
    }
}

impl PoolClient {
    /// The client is pinned to its server (`reason`: the pin's label); counted until
    /// [`PoolClient::unpin`]. The session calls each once.
    pub fn pin(&self, reason: &'static str) {
        self.0.count_pin(reason, 1);
    }

    pub fn unpin(&self, reason: &'static str) {
        self.0.count_pin(reason, -1);
    }
}

impl Drop for PoolClient {
    fn drop(&mut self) {
        self.0.detach_user_client();
        let left = self.0.inner.clients.fetch_sub(1, Ordering::Relaxed) - 1;
        if left == 0 {
            self.0.last_client_left();
        }
        if self.0.is_draining() {
            // One client fewer: an idle server beyond the clients left goes now.
            let extra = {
                let mut st = self.0.lock();
                (st.idle.len() as i64 > left.max(0))
                    .then(|| st.idle.pop_front())
                    .flatten()
            };
            if let Some(conn) = extra {
                self.0.close(conn, CloseReason::Retired);
            }
        }
    }
}

/// Says goodbye to a server politely; it is closed either way when dropped.
async fn terminate(mut conn: Server) {
    let mut b = bytes::BytesMut::new();
    crate::protocol::frontend::terminate(&mut b);
    let _ = tokio::time::timeout(Duration::from_secs(1), conn.stream.send(&b)).await;
}
