//! The composition root: builds the shared context, binds the listener, accepts clients, and
//! stops on SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::shared::Shared;

#[derive(Debug, Error)]
pub enum AppError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot install signal handler: {0}")]
    Signal(std::io::Error),
}

/// Runs the pooler until `shutdown` is cancelled (or a signal arrives).
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), AppError> {
    let addr = SocketAddr::new(config.listen.addr, config.listen.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })?;
    let shared = Shared::new(config, shutdown.clone());
    let local = listener.local_addr().unwrap_or(addr);
    shared.events.listening(local);
    tracing::info!(%local, "accepting clients");
    spawn_signal_handler(shutdown.clone())?;
    let tracker = TaskTracker::new();
    accept_loop(&listener, &shared, &tracker).await;
    drop(listener);
    tracker.close();
    // Idle clients are told at once; busy ones finish their transaction first.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), tracker.wait()).await;
    Ok(())
}

async fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, tracker: &TaskTracker) {
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok((stream, _peer)) => {
                    tracker.spawn(crate::client::serve(stream, shared.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

fn spawn_signal_handler(shutdown: CancellationToken) -> Result<(), AppError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(AppError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(AppError::Signal)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        shutdown.cancel();
        // A second signal means stop now.
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::warn!("second signal: exiting immediately");
        std::process::exit(1);
    });
    Ok(())
}
