//! The admin HTTP server: probes, Prometheus metrics, status, reload and drain. It runs on its
//! own thread and runtime, so it answers while the data plane is saturated, and it owns the
//! signal handlers so readiness drops the moment SIGTERM arrives.

pub mod console;
mod guard;
mod http;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::shared::Shared;

/// Binds the admin listener now (so a bad address fails startup) and serves it on its own
/// thread until the process exits.
pub fn start(shared: Arc<Shared>) -> std::io::Result<SocketAddr> {
    let cfg = shared.config.load();
    let cfg = &cfg.admin;
    let listener = std::net::TcpListener::bind(SocketAddr::new(cfg.addr, cfg.port))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Installed before returning, so a signal sent once the pooler says it is listening is
    // never met by the default action (which, for SIGHUP, would end the process).
    let signals = {
        let _in_runtime = runtime.enter();
        Signals::install()?
    };
    std::thread::Builder::new()
        .name("droid-pool-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                spawn_signal_handlers(signals, shared.clone());
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "admin listener failed");
                        return;
                    }
                };
                let (config, metrics) = (shared.config.clone(), shared.metrics.clone());
                server::serve(listener, http::router(shared), config, metrics).await;
            })
        })?;
    Ok(local)
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
fn spawn_signal_handlers(signals: Signals, shared: Arc<Shared>) {
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
        std::process::exit(2);
    });
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            shared.reload.notify_one();
        }
    });
}
