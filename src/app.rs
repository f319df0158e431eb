//! The composition root: builds the shared context, starts the admin server, accepts clients,
//! and drains on SIGTERM: readiness drops at once, the listener stays open for the accept
//! window, then clients are closed as `drain.mode` says, with stragglers cancelled at the
//! deadline.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::config::{Cli, Config, DrainMode};
use crate::shared::Shared;

#[derive(Debug, Error)]
pub enum AppError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the admin server: {0}")]
    Admin(std::io::Error),
    #[error("cannot load credentials or certificates: {0}")]
    Secrets(#[from] crate::shared::SecretsError),
}

/// How the pooler stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every client finished before the deadline.
    Drained,
    /// The deadline cancelled queries or closed clients.
    Forced,
    /// A second SIGTERM or SIGINT stopped it at once.
    Interrupted,
}

/// Runs the pooler until a drain finishes, or a second signal stops it.
pub async fn run(config: Config, cli: Arc<Cli>) -> Result<Stopped, AppError> {
    let shared = Shared::new(config.clone());
    let lifecycle = shared.clone();
    tokio::select! {
        stopped = serve(config, cli, shared) => stopped,
        () = lifecycle.lifecycle.interrupted() => Ok(Stopped::Interrupted),
    }
}

async fn serve(config: Config, cli: Arc<Cli>, shared: Arc<Shared>) -> Result<Stopped, AppError> {
    let addr = SocketAddr::new(config.listen.addr, config.listen.port);
    shared.load_secrets(&config)?;
    // The admin server first: /startupz answers 503 until the listener is bound.
    let (admin, admin_runtime) = crate::admin::start(shared.clone()).map_err(AppError::Admin)?;
    // Installed before the pooler says it listens, so a signal is never met by the default
    // action (which, for SIGHUP, would end the process); run on the admin runtime, so a
    // drain starts however busy the data plane is.
    let signals = {
        let _in_runtime = admin_runtime.enter();
        Signals::install().map_err(AppError::Admin)?
    };
    admin_runtime.spawn(handle_signals(signals, shared.clone()));
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })?;
    let local = listener.local_addr().unwrap_or(addr);
    warm_up(&shared).await;
    shared.lifecycle.mark_started();
    shared.events.listening(local);
    tracing::info!(%local, %admin, "accepting clients; admin server up");
    spawn_heartbeat(shared.clone());
    crate::reload::spawn(shared.clone(), cli);
    let tracker = TaskTracker::new();
    // Idle clients are kept here without a task; those that come back run as the tracker's.
    let lot = crate::client::lot(shared.clone(), tracker.clone());
    accept_loop(&listener, &shared, &tracker, &lot).await;
    drop(listener);
    // No accept loop any more: the drain's own loop proves the runtime turns.
    spawn_beat(shared.clone(), |s| s.lifecycle.accept_beat());
    let stopped = drain(&shared, &tracker).await;
    shared.lifecycle.drain.stop();
    shared.pools.shut_down().await;
    let l = &shared.lifecycle;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    shared.events.shutdown_summary(
        load(&l.accepted),
        load(&l.completed),
        load(&l.refused),
        load(&l.aborted),
    );
    Ok(stopped)
}

/// With `pool.min_size` > 0 and a configured server user and database, that pool is opened
/// before startup completes: `/startupz` turns 200 once its first login succeeded or failed
/// for good.
async fn warm_up(shared: &Arc<Shared>) {
    let cfg = shared.config.load();
    let (Some(user), Some(database)) = (&cfg.server.user, &cfg.server.database) else {
        return;
    };
    if cfg.pool.min_size == 0 {
        return;
    }
    let key = crate::pool::PoolKey {
        database: database.clone(),
        user: user.clone(),
    };
    let pool = shared.pools.get(&key);
    let limit = cfg.server.connect_timeout * 2;
    match tokio::time::timeout(limit, pool.startup_params()).await {
        Ok(Ok(_)) => tracing::info!(pool = pool.name(), "first server login succeeded"),
        Ok(Err(e)) => tracing::error!(pool = pool.name(), error = %e, "first server login failed"),
        Err(_) => tracing::error!(pool = pool.name(), "first server login timed out"),
    }
}

/// Proves the data plane's runtime is turning, for liveness, even with no pools yet; and says
/// how many log lines the rate limits held back.
fn spawn_heartbeat(shared: Arc<Shared>) {
    spawn_beat(shared, |s| {
        s.lifecycle.maintenance_beat();
        s.flush_log_limits();
    });
}

/// Beats at each tick until the pooler stops.
fn spawn_beat(shared: Arc<Shared>, beat: fn(&Shared)) {
    let mut shutdown = shared.lifecycle.shutdown();
    let mut ticks = shared.lifecycle.ticks.clone();
    beat(&shared);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.stopped() => return,
                _ = ticks.tick() => beat(&shared),
            }
        }
    });
}

/// Accepts until a drain's accept window has passed.
async fn accept_loop(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    tracker: &TaskTracker,
    lot: &Arc<crate::client::park::Lot>,
) {
    let l = &shared.lifecycle;
    let window = shared.config.load().drain.accept_window;
    let mut shutdown = l.shutdown();
    let closing = async {
        shutdown.draining().await;
        // Servers no client needs go back to PostgreSQL now, the rest as clients leave: a
        // terminating pod's connections still count against the budget its successors share.
        shared.pools.begin_drain().await;
        tracing::info!(
            ?window,
            "drain: readiness down, still accepting for the window"
        );
        tokio::time::sleep(window).await;
    };
    tokio::pin!(closing);
    let mut ticks = l.ticks.clone();
    l.accept_beat();
    loop {
        tokio::select! {
            _ = &mut closing => return,
            _ = ticks.tick() => l.accept_beat(),
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    l.accepted.fetch_add(1, Ordering::Relaxed);
                    let pending = admit(shared, peer);
                    tracker.spawn(crate::client::serve(stream, shared.clone(), pending, lot.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Counts a new connection among the pending logins. Older pending logins ended to make
/// room are counted here; each tells its own client.
fn admit(shared: &Shared, peer: SocketAddr) -> crate::net::admission::Pending {
    let cfg = shared.config.load();
    let c = &cfg.client;
    let shed = &shared.metrics.clients.shed;
    let (pending, evicted) =
        shared
            .pending_logins
            .admit(peer.ip(), c.max_pending_logins, c.max_pending_logins_per_ip);
    for (reason, n) in [
        ("pending_logins_per_ip", evicted.per_ip),
        ("pending_logins", evicted.total),
    ] {
        if n > 0 {
            shed.with_label_values(&[reason]).inc_by(n as u64);
        }
    }
    pending
}

/// Closes clients as the drain mode says and enforces the deadline.
async fn drain(shared: &Arc<Shared>, tracker: &TaskTracker) -> Stopped {
    let l = &shared.lifecycle;
    let cfg = shared.config.load().drain.clone();
    l.drain
        .close_listener(cfg.mode == DrainMode::TransactionBoundary);
    tracker.close();
    let remaining = cfg.timeout.saturating_sub(cfg.accept_window);
    let deadline = Instant::now() + remaining;
    // Leave the last part of the budget for cancelled queries to come back.
    let cancel_at = deadline - (remaining / 4).min(Duration::from_secs(2));
    if tokio::time::timeout_at(cancel_at, tracker.wait())
        .await
        .is_ok()
    {
        return Stopped::Drained;
    }
    let cancelled = shared.cancels.cancel_all(shared.cancel_sender());
    tracing::warn!(cancelled, "drain deadline near: cancelling running queries");
    let _ = tokio::time::timeout_at(deadline, tracker.wait()).await;
    if !tracker.is_empty() {
        tracing::warn!(
            clients = tracker.len(),
            "drain deadline: closing remaining clients"
        );
        l.drain.abort();
        let _ = tokio::time::timeout(Duration::from_secs(2), tracker.wait()).await;
    }
    Stopped::Forced
}

/// The signals the pooler handles, registered with the admin runtime.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Must run inside the admin runtime's context.
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// SIGTERM/SIGINT start a drain; a second one stops at once. SIGHUP reloads the config.
async fn handle_signals(signals: Signals, shared: Arc<Shared>) {
    let Signals {
        mut term,
        mut int,
        mut hup,
    } = signals;
    let drain_shared = shared.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: draining"),
            _ = int.recv() => tracing::info!("SIGINT: draining"),
        }
        drain_shared.lifecycle.begin_drain();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::warn!("second signal: stopping now");
        drain_shared.lifecycle.interrupt();
    });
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            shared.reload.notify_one();
        }
    });
}
