//! The admin HTTP server: probes, Prometheus metrics, status, reload and drain. It runs on its
//! own thread and runtime, so it answers while the data plane is saturated; the composition
//! root runs the signal handlers there too (`app`), so readiness drops the moment SIGTERM
//! arrives.

pub mod console;
mod guard;
mod http;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::shared::Shared;

/// Binds the admin listener now (so a bad address fails startup) and serves it on its own
/// thread until the process exits; returns its address and its runtime, where the caller
/// may run what must answer while the data plane is busy.
pub fn start(shared: Arc<Shared>) -> std::io::Result<(SocketAddr, tokio::runtime::Handle)> {
    let cfg = shared.config.load();
    let cfg = &cfg.admin;
    let listener = std::net::TcpListener::bind(SocketAddr::new(cfg.addr, cfg.port))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("droid-pool-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
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
    Ok((local, handle))
}
