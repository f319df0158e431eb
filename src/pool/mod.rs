//! Server connection pools, one per (database, user): checkout with bounded waiting, checkin,
//! connecting on demand, and maintenance. A pool never parses client messages.

mod connect;
mod error;
mod follow;
mod hold;
mod hosts;
mod landing;
mod maintenance;
mod registry;
mod settings;
#[cfg(test)]
mod tests;

pub use connect::Backend;
pub use error::{PoolError, ServerFailure};
pub use hosts::{Host, Hosts, Route};
pub use registry::{PoolKey, Pools};
pub use settings::{resolve, PoolSettings, Resolved, RouteSpec};

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{oneshot, Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::events::Events;
use crate::metrics::{Metrics, PoolSnapshot};
use crate::params::Params;
use crate::server::{Server, ServerTarget};
use crate::shared::Counters;
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
            CloseReason::Role => "role",
        }
    }
}

/// What a pool shares with the rest of the pooler.
pub struct PoolDeps {
    pub events: Events,
    pub counters: Arc<Counters>,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
    pub backend: Arc<Backend>,
    /// The pooler is draining (shared by all pools).
    pub draining: Arc<std::sync::atomic::AtomicBool>,
}

/// A client queued for a server, since when (for `maxwait`) and until when.
struct Waiter {
    tx: oneshot::Sender<Result<Server, PoolError>>,
    /// Tokio's clock, so paused-time tests see waits grow.
    since: tokio::time::Instant,
    /// When the pool's deadline sweep answers it with 57014; `None`: no limit.
    deadline: Option<tokio::time::Instant>,
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
    /// The hosts servers come from and which of them fit (replaced by a reload).
    route: Arc<Route>,
    /// No host fitted at the last login and none has since: new waiters are held.
    held: bool,
}

impl PoolState {
    fn new(route: Route) -> Self {
        PoolState {
            idle: VecDeque::new(),
            waiters: VecDeque::new(),
            connecting: 0,
            startup_params: None,
            sweep_at: None,
            route: Arc::new(route),
            held: false,
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
    /// Permits still to forget as servers come back, after the pool shrank.
    debt: std::sync::atomic::AtomicUsize,
    /// One permit per server connection that may exist; a `ServerConn` holds its permit.
    capacity: Arc<Semaphore>,
    state: Mutex<PoolState>,
    events: Events,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    backend: Arc<Backend>,
    draining: Arc<std::sync::atomic::AtomicBool>,
    name_arc: Arc<str>,
    /// Whether the last server login succeeded.
    login_ok: std::sync::atomic::AtomicBool,
    /// Sessions attached to this pool.
    clients: AtomicI64,
    /// Wakes the deadline sweep when a waiter's deadline comes before the one it is armed for.
    rearm: Notify,
    /// Servers released by their client and being reset before reuse (PgBouncer's `used`).
    resetting: AtomicI64,
    database: String,
    user: String,
    mode: &'static str,
    /// `settings.mode`, readable per transaction without the settings lock.
    pool_mode: std::sync::atomic::AtomicU8,
}

impl Pool {
    pub fn new(
        key: &PoolKey,
        mode: &'static str,
        target: ServerTarget,
        route: Route,
        settings: PoolSettings,
        deps: PoolDeps,
    ) -> Pool {
        let PoolDeps {
            events,
            counters,
            metrics,
            shutdown,
            backend,
            draining,
        } = deps;
        let pool = Pool {
            inner: Arc::new(PoolInner {
                name: format!("{}/{}", key.database, key.user),
                capacity: Arc::new(Semaphore::new(settings.size)),
                target,
                pool_mode: std::sync::atomic::AtomicU8::new(settings.mode as u8),
                settings: Mutex::new(settings),
                debt: std::sync::atomic::AtomicUsize::new(0),
                state: Mutex::new(PoolState::new(route)),
                events,
                counters,
                metrics,
                shutdown,
                backend,
                draining,
                name_arc: Arc::from(format!("{}/{}", key.database, key.user)),
                login_ok: std::sync::atomic::AtomicBool::new(true),
                clients: AtomicI64::new(0),
                rearm: Notify::new(),
                resetting: AtomicI64::new(0),
                database: key.database.clone(),
                user: key.user.clone(),
                mode,
            }),
        };
        maintenance::spawn(pool.clone());
        pool
    }

    pub fn name(&self) -> &str {
        &self.inner.name
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

    /// The pooling mode in force (read per transaction: no lock).
    pub fn mode(&self) -> crate::config::PoolMode {
        use crate::config::PoolMode;
        match self.inner.pool_mode.load(Ordering::Relaxed) {
            m if m == PoolMode::Session as u8 => PoolMode::Session,
            m if m == PoolMode::Statement as u8 => PoolMode::Statement,
            _ => PoolMode::Transaction,
        }
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
            self.inner
                .pool_mode
                .store(new.mode as u8, Ordering::Relaxed);
            std::mem::replace(&mut *s, new)
        };
        let cap = &self.inner.capacity;
        let debt = &self.inner.debt;
        if new.size > old.size {
            let grow = new.size - old.size;
            let cancelled = grow.min(debt.load(Ordering::Relaxed));
            debt.fetch_sub(cancelled, Ordering::Relaxed);
            cap.add_permits(grow - cancelled);
        } else if new.size < old.size {
            let shrink = old.size - new.size;
            let got = cap.forget_permits(shrink);
            debt.fetch_add(shrink - got, Ordering::Relaxed);
        }
        let surplus: Vec<_> = {
            let mut st = self.lock();
            let mut out = Vec::new();
            while self.open_count() > new.size + out.len() {
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

    /// Forgets permits owed after a shrink, as far as they are free.
    fn settle_debt(&self) {
        let d = self.inner.debt.load(Ordering::Relaxed);
        if d > 0 {
            let got = self.inner.capacity.forget_permits(d);
            self.inner.debt.fetch_sub(got, Ordering::Relaxed);
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

    /// Numbers of the idle servers (for the admin console).
    pub fn idle_server_ids(&self) -> Vec<u64> {
        self.lock().idle.iter().map(|c| c.id).collect()
    }

    /// The client-side database name of this pool.
    pub fn database(&self) -> &str {
        &self.inner.database
    }

    pub fn user(&self) -> &str {
        &self.inner.user
    }

    /// Whether the pooler is draining (its servers then go back as clients leave).
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    fn attached_clients(&self) -> i64 {
        self.inner.clients.load(Ordering::Relaxed)
    }

    /// A session attaches to the pool for its life (for client counts).
    pub fn attach(&self) -> PoolClient {
        self.inner.clients.fetch_add(1, Ordering::Relaxed);
        PoolClient(self.clone())
    }

    /// Counts of this pool now, for metrics and status.
    pub fn snapshot(&self) -> PoolSnapshot {
        let (idle, connecting, waiting, max_wait) = {
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
            )
        };
        let open = self.open_count() as i64;
        let used = self.inner.resetting.load(Ordering::Relaxed);
        let active = (open - idle - connecting - used).max(0);
        let clients = self.inner.clients.load(Ordering::Relaxed);
        PoolSnapshot {
            pool: self.inner.name.clone(),
            database: self.inner.database.clone(),
            user: self.inner.user.clone(),
            mode: match self.inner.mode {
                "lookup" => "lookup",
                _ => self.settings().mode.as_str(),
            },
            clients_active: active,
            clients_waiting: waiting,
            clients_idle: (clients - active - waiting).max(0),
            servers_active: active,
            servers_idle: idle,
            servers_login: connecting,
            servers_used: used,
            pool_size: self.settings().size as i64,
            max_waiting: self.settings().max_waiting as i64,
            max_wait_seconds: max_wait,
        }
    }

    /// Server connections open or being opened.
    pub fn open_count(&self) -> usize {
        let owed = self.settings().size + self.inner.debt.load(Ordering::Relaxed);
        owed.saturating_sub(self.inner.capacity.available_permits())
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

    /// Takes a usable idle server without waiting, if there is one. `now`: the caller's clock.
    pub fn try_checkout(&self, now: Instant) -> Option<Server> {
        let round_robin = self.settings().round_robin;
        let mut st = self.lock();
        self.take_idle(&mut st, round_robin, now)
    }

    fn take_idle(&self, st: &mut PoolState, round_robin: bool, now: Instant) -> Option<Server> {
        while let Some(mut conn) = pop_idle(st, round_robin) {
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
        let settings = self.settings();
        let rx = {
            let mut st = self.lock();
            if let Some(conn) = self.take_idle(&mut st, settings.round_robin, Instant::now()) {
                return Ok(conn);
            }
            if let Some(e) = self.circuit_open(&mut st) {
                if settings.hold_timeout.is_zero() {
                    return Err(e);
                }
                self.hold_locked(&mut st, &settings);
            }
            let max_waiting = settings.max_waiting;
            if st.waiters.len() >= max_waiting {
                st.waiters.retain(|w| !w.is_closed());
                if st.waiters.len() >= max_waiting {
                    return Err(PoolError::TooManyWaiting {
                        pool: self.inner.name.clone(),
                        max: max_waiting,
                    });
                }
            }
            let (deadline, held) = Pool::deadline_for(&st, &settings, since);
            if let Some(d) = deadline {
                if st.sweep_at.map_or(true, |at| d < at) {
                    st.sweep_at = Some(d);
                    self.inner.rearm.notify_one();
                }
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push_back(Waiter {
                tx,
                since,
                deadline,
                held,
            });
            self.spawn_connects(&mut st);
            rx
        };
        rx.await
            .unwrap_or_else(|_| Err(PoolError::Closed(self.inner.name.clone())))
    }

    /// Answers every waiter whose deadline has passed with 57014 and drops those that left;
    /// returns the next deadline to sweep at.
    fn sweep_waiters(&self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
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
                        }
                    };
                    let _ = w.send(Err(err));
                }
                d => {
                    if let Some(d) = d {
                        next = Some(next.map_or(d, |n| n.min(d)));
                    }
                    keep.push_back(w);
                }
            }
        }
        st.waiters = keep;
        st.sweep_at = next;
        next
    }

    /// The deadline the sweep is armed for.
    fn sweep_at(&self) -> Option<tokio::time::Instant> {
        self.lock().sweep_at
    }

    /// Stops every waiter: each sees the pool closed.
    fn drop_waiters(&self) {
        self.lock().waiters.clear();
    }

    /// Returns a server in a clean idle state: to the first live waiter, else to the idle list.
    pub fn checkin(&self, conn: Server) {
        self.checkin_at(conn, Instant::now());
    }

    /// As [`Pool::checkin`], with the caller's clock read.
    pub fn checkin_at(&self, mut conn: Server, now: Instant) {
        if conn.read_only_error {
            if self.lock().route.tsa().needs_writes() {
                return self.verify_writable(conn);
            }
            conn.read_only_error = false;
        }
        let over = self.inner.debt.load(Ordering::Relaxed) > 0;
        if conn.is_expired(now) || self.inner.shutdown.is_cancelled() || over {
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
        let mut st = self.lock();
        if let Err(reason) = self.check_fit(&st.route, &mut conn) {
            drop(st);
            self.close(conn, reason);
            self.lock_and_spawn();
            return;
        }
        loop {
            let Some(w) = st.waiters.pop_front() else {
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
                Ok(()) => return,
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
        // Give the capacity back now (a shrink may be waiting to forget it).
        drop(conn.permit.take());
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

fn pop_idle(st: &mut PoolState, round_robin: bool) -> Option<Server> {
    if round_robin {
        st.idle.pop_front()
    } else {
        st.idle.pop_back()
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

impl Drop for PoolClient {
    fn drop(&mut self) {
        let left = self.0.inner.clients.fetch_sub(1, Ordering::Relaxed) - 1;
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
