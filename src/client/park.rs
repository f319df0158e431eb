//! Idle clients kept without a task. A client that stays idle (no server held, nothing
//! buffered, no LISTEN, plain TCP, no idle timeout) across a tick is parked: its session is
//! kept boxed in the lot, its socket leaves the runtime's reactor for an epoll set of the
//! lot's own, and its task ends. Its bytes (or its close) bring it back as a new task. An idle
//! client then costs its boxed session and its cancel slot, not a task's future, cell and
//! reactor entry as well (PgBouncer keeps a few hundred bytes per client; a task-resident one
//! here was about 1.35 KiB).
//!
//! A busy client is never parked: only a tick finds it idle, so it pays a park at most once a
//! second. A drain that closes idle clients brings every parked one back (each then ends at
//! its boundary as a task would); a console KILL brings back the killed ones. While any
//! client is parked the lot holds a token of the clients' tracker, so a drain waits for them
//! as for tasks.

use std::collections::HashMap;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use tokio::io::unix::AsyncFd;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use super::session::Session;
use crate::net::MaybeTls;
use crate::shared::Shared;

/// A parked session and its socket, out of the runtime's reactor.
struct Parked {
    session: Box<Session>,
    stream: std::net::TcpStream,
}

#[derive(Default)]
struct Spots {
    /// By client number (each one's token in the lot's epoll set).
    parked: HashMap<u64, Parked>,
    /// Held while `parked` is not empty.
    token: Option<TaskTrackerToken>,
}

/// What runs a session that comes back (the client task's body, `client::live`): given
/// here so the lot does not reach up into the module that spawns it.
pub type Resume = fn(Box<Session>, Arc<Lot>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The parked clients and the epoll set their sockets wait in.
pub struct Lot {
    /// `None`: the lot parks nothing.
    registry: Option<Registry>,
    spots: Mutex<Spots>,
    tracker: TaskTracker,
    /// Parking is over: the drain closes idle clients, or the lot could not start.
    closed: AtomicBool,
    shared: Arc<Shared>,
    resume: Resume,
}

impl Lot {
    /// A lot whose returning clients run as tasks of `tracker`; its task (polling the epoll
    /// set, nudging idle clients at each tick, bringing clients back for a drain or a KILL)
    /// is spawned on the current runtime. Without an epoll set no client is parked.
    pub fn start(shared: Arc<Shared>, tracker: TaskTracker, resume: Resume) -> Arc<Lot> {
        let poll = Poll::new().and_then(|p| {
            let registry = p.registry().try_clone()?;
            Ok((p, registry))
        });
        let (poll, registry) = match poll {
            Ok(pr) => pr,
            Err(e) => {
                tracing::warn!(error = %e, "no epoll set for idle clients; none is parked");
                return Arc::new(Lot::closed(shared, tracker, resume));
            }
        };
        let lot = Arc::new(Lot {
            registry: Some(registry),
            spots: Mutex::default(),
            tracker,
            closed: AtomicBool::new(false),
            shared,
            resume,
        });
        tokio::spawn(lot.clone().run(poll));
        lot
    }

    /// A lot that parks nothing (tests, and a machine without an epoll set to spare).
    pub fn closed(shared: Arc<Shared>, tracker: TaskTracker, resume: Resume) -> Lot {
        Lot {
            registry: None,
            spots: Mutex::default(),
            tracker,
            closed: AtomicBool::new(true),
            shared,
            resume,
        }
    }

    fn spots(&self) -> std::sync::MutexGuard<'_, Spots> {
        self.spots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks `session` (its caller's task then ends), or gives it back when it cannot be
    /// parked (the lot is closed, the socket is not plain TCP, a registration failed).
    pub(super) fn park(&self, mut session: Box<Session>) -> Result<(), Box<Session>> {
        let Some(registry) = self
            .registry
            .as_ref()
            .filter(|_| !self.closed.load(Ordering::Acquire))
        else {
            return Err(session);
        };
        let MaybeTls::Plain(tcp) = &session.client else {
            return Err(session);
        };
        let fd = tcp.as_raw_fd();
        let id = session.relay.id();
        // Registered before the runtime lets the socket go: a byte that arrives in between is
        // reported here (an edge-triggered set reports a socket readable when added).
        if let Err(e) =
            registry.register(&mut SourceFd(&fd), Token(id as usize), Interest::READABLE)
        {
            tracing::debug!(client = id, error = %e, "cannot park an idle client");
            return Err(session);
        }
        let MaybeTls::Plain(tcp) = std::mem::replace(&mut session.client, MaybeTls::Gone) else {
            unreachable!("checked plain above");
        };
        let stream = match tcp.into_std() {
            Ok(s) => s,
            Err(e) => {
                // The socket is lost with its registration: the session ends as a task.
                tracing::debug!(client = id, error = %e, "a parked client's socket was lost");
                let _ = registry.deregister(&mut SourceFd(&fd));
                return Err(session);
            }
        };
        let mut spots = self.spots();
        if spots.token.is_none() {
            spots.token = Some(self.tracker.token());
        }
        spots.parked.insert(id, Parked { session, stream });
        self.shared.metrics.clients.parked.inc();
        Ok(())
    }

    /// Brings client `id` back as a task, if it is parked.
    fn unpark(self: &Arc<Self>, id: u64) {
        let Some(p) = self.take(id) else {
            return;
        };
        let Parked {
            mut session,
            stream,
        } = p;
        if let Some(registry) = &self.registry {
            let _ = registry.deregister(&mut SourceFd(&stream.as_raw_fd()));
        }
        session.client = match tokio::net::TcpStream::from_std(stream) {
            Ok(tcp) => MaybeTls::Plain(tcp),
            Err(e) => {
                // The session ends at its first read (its socket closed).
                tracing::debug!(client = id, error = %e, "a parked client could not come back");
                MaybeTls::Gone
            }
        };
        self.tracker.spawn((self.resume)(session, self.clone()));
        // Only now: with the token gone first, a drain's wait could find the tracker empty
        // and end before the client is told.
        let mut spots = self.spots();
        if spots.parked.is_empty() {
            spots.token = None;
        }
    }

    fn take(&self, id: u64) -> Option<Parked> {
        let p = self.spots().parked.remove(&id)?;
        self.shared.metrics.clients.parked.dec();
        Some(p)
    }

    /// Brings back the parked clients `which` picks.
    fn unpark_where(self: &Arc<Self>, which: impl Fn(&Session) -> bool) {
        let ids: Vec<u64> = self
            .spots()
            .parked
            .iter()
            .filter(|(_, p)| which(&p.session))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.unpark(id);
        }
    }

    async fn run(self: Arc<Self>, poll: Poll) {
        // Deprecated for an `AsRawFd` whose descriptor may close or change while registered;
        // a `Poll` owns its epoll descriptor for as long as it lives, here inside the
        // `AsyncFd`. (The unsafe replacement is not open to a crate that forbids unsafe code.)
        #[allow(deprecated)]
        let set = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE);
        let mut set = match set {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(error = %e, "cannot poll the idle clients' epoll set; none is parked");
                self.closed.store(true, Ordering::Release);
                return;
            }
        };
        let shared = self.shared.clone();
        let clients = shared.lifecycle.drain.clients();
        let mut close = pin!(clients.closing());
        let mut ticks = shared.lifecycle.ticks.clone();
        let mut events = Events::with_capacity(256);
        loop {
            tokio::select! {
                ready = set.readable_mut() => {
                    let Ok(mut ready) = ready else {
                        self.close_all();
                        return;
                    };
                    events.clear();
                    match ready.get_inner_mut().poll(&mut events, Some(Duration::ZERO)) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            tracing::warn!(error = %e, "the idle clients' epoll set failed");
                            self.close_all();
                            return;
                        }
                    }
                    if events.is_empty() {
                        ready.clear_ready();
                    }
                    for ev in events.iter() {
                        self.unpark(ev.token().0 as u64);
                    }
                }
                _ = ticks.tick() => {
                    clients.nudge_idle();
                    // A KILL whose kick came between two waits is seen here.
                    self.unpark_where(|s| s.cancel.is_killed());
                }
                _ = close.as_mut() => {
                    if clients.is_closing() {
                        self.close_all();
                        return;
                    }
                    close.as_mut().rearm();
                }
                _ = clients.kicked() => self.unpark_where(|s| s.cancel.is_killed()),
            }
        }
    }

    /// No more parking; every parked client comes back (to end at its boundary).
    fn close_all(self: &Arc<Self>) {
        self.closed.store(true, Ordering::Release);
        self.unpark_where(|_| true);
    }
}
