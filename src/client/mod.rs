//! One task per client connection: startup and authentication, then the session that relays
//! between the client and the server it holds.

pub mod cancel;
mod error;
mod io;
mod replies;
mod requests;
mod retry;
mod session;
mod startup;
mod tracking;

pub use error::ClientError;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::protocol::backend;
use crate::shared::Shared;

/// Serves one accepted connection to its end. Never panics the process: every error is
/// answered (if the client can still hear it) and the connection closed.
pub async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    shared.counters.clients_open.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    let mut id = None;
    let res = run(&mut stream, &shared, &mut id).await;
    if let Err(e) = res {
        if let Some(fields) = e.to_fields() {
            let mut out = BytesMut::new();
            backend::error_response(&mut out, &fields);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.write_all(&out))
                .await;
        }
        tracing::debug!(client = ?id, error = %e, "client session ended with an error");
    }
    if let Some(id) = id {
        shared.events.client_disconnected(id);
    }
    shared.counters.clients_open.fetch_sub(1, Ordering::Relaxed);
}

async fn run(
    stream: &mut TcpStream,
    shared: &Arc<Shared>,
    id: &mut Option<u64>,
) -> Result<(), ClientError> {
    let login = match startup::login(stream, shared, id).await? {
        startup::Outcome::Session(login) => login,
        startup::Outcome::Done => return Ok(()),
    };
    let pid = login.pid;
    let res = session::Session::new(stream, shared.clone(), login)
        .run()
        .await;
    shared.cancels.unregister(pid);
    res
}
