//! Sending CancelRequests on connections of their own: to the server a client holds (bounded
//! by `pool.cancel_wait_timeout` and counted by result), and to a peer pooler.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use prometheus::IntCounterVec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};

use crate::protocol::frontend;

/// Sends CancelRequests to servers, bounded by `pool.cancel_wait_timeout` and counted by
/// result in `droidpool_server_cancels_total`.
#[derive(Clone)]
pub struct CancelSender {
    /// Zero: no limit.
    wait: Duration,
    counts: IntCounterVec,
}

impl CancelSender {
    /// Sends that wait at most `wait` (`pool.cancel_wait_timeout`; zero: no limit) and count
    /// their result in `counts` (`droidpool_server_cancels_total`).
    pub fn new(wait: Duration, counts: IntCounterVec) -> Self {
        CancelSender { wait, counts }
    }

    /// Sends a CancelRequest for the server process `key` to `addr`, on a connection of its
    /// own, and waits for the server to close it: PostgreSQL closes it once it has acted on
    /// the request (libpq's cancel waits for the same), so the client's cancel connection
    /// is not closed before that either.
    pub(super) async fn send(self, addr: SocketAddr, key: (i32, i32)) {
        let mut buf = BytesMut::new();
        frontend::cancel_request(&mut buf, key.0, key.1);
        let send = async {
            let mut s = TcpStream::connect(addr).await?;
            s.write_all(&buf).await?;
            let mut sink = [0u8; 64];
            while s.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        };
        let res = if self.wait.is_zero() {
            Some(send.await)
        } else {
            tokio::time::timeout(self.wait, send).await.ok()
        };
        let result = match res {
            Some(Ok(())) => "done",
            Some(Err(e)) => {
                tracing::warn!(error = %e, "sending a cancel request to the server failed");
                "failed"
            }
            None => {
                tracing::warn!(
                    wait = ?self.wait,
                    "a cancel request was not confirmed by the server in time (pool.cancel_wait_timeout); given up"
                );
                "timeout"
            }
        };
        self.counts.with_label_values(&[result]).inc();
    }
}

/// Sends a CancelRequest for process `spid` to `addr` (a peer pooler), on a connection of its
/// own, within `timeout`; whether it was sent.
pub(super) async fn send_cancel(
    addr: impl ToSocketAddrs,
    spid: i32,
    ssecret: i32,
    timeout: Duration,
) -> bool {
    let mut buf = BytesMut::new();
    frontend::cancel_request(&mut buf, spid, ssecret);
    let send = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(&buf).await?;
        s.shutdown().await
    };
    match tokio::time::timeout(timeout, send).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "forwarding a cancel request to a peer failed");
            false
        }
        Err(_) => {
            tracing::warn!("forwarding a cancel request to a peer timed out");
            false
        }
    }
}
