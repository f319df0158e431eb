//! Writing to the server (while still reading it) and to the client.

use std::pin::Pin;
use std::task::Poll;

use tokio::io::AsyncWrite;
use tokio_util::io::poll_read_buf;

use super::error::{ClientError, Loss};
use super::session::Session;
use crate::relay::Peer;

enum Progress {
    Wrote(std::io::Result<usize>),
    Flushed(std::io::Result<()>),
    Read(std::io::Result<usize>),
}

impl Session {
    /// Writes what the relay queued for the server while still reading the server: a server
    /// blocked writing results stops reading, so a pooler that only wrote would deadlock
    /// with it on a large pipeline. What arrives meanwhile goes through the relay and on to
    /// the client.
    pub(super) async fn flush_server(&mut self) -> Result<(), ClientError> {
        let mut written = 0;
        // A plain socket keeps nothing back; TLS may hold the last record until flushed.
        let mut unflushed = self.server.as_ref().is_some_and(|s| s.stream.is_tls());
        while written < self.relay.transmit(Peer::Server).len() || unflushed {
            let Some(srv) = self.server.as_mut() else {
                break;
            };
            if srv.state.rbuf.capacity() - srv.state.rbuf.len() < 4096 {
                srv.state.rbuf.reserve(16 * 1024);
            }
            let (stream, rbuf) = (&mut srv.stream, &mut srv.state.rbuf);
            let pending = &self.relay.transmit(Peer::Server)[written..];
            // Write (or flush) first, else read: one stream polled both ways, no split needed.
            let progress = std::future::poll_fn(|cx| {
                let mut s = Pin::new(&mut *stream);
                if !pending.is_empty() {
                    if let Poll::Ready(r) = s.as_mut().poll_write(cx, pending) {
                        return Poll::Ready(Progress::Wrote(r));
                    }
                } else if let Poll::Ready(r) = s.as_mut().poll_flush(cx) {
                    return Poll::Ready(Progress::Flushed(r));
                }
                poll_read_buf(s, cx, rbuf).map(Progress::Read)
            })
            .await;
            match progress {
                Progress::Wrote(Ok(n)) if n > 0 => written += n,
                Progress::Flushed(Ok(())) => unflushed = false,
                Progress::Read(Ok(n)) if n > 0 => {
                    self.drain_server()?;
                    self.flush_client().await?;
                }
                Progress::Flushed(Err(e)) => return self.lost_while_flushing(e.into()),
                Progress::Wrote(r) | Progress::Read(r) => {
                    return self.lost_while_flushing(r.err().map_or(Loss::Closed, Loss::Io));
                }
            }
        }
        self.relay.transmitted(Peer::Server);
        Ok(())
    }

    /// The server was lost (`loss`) while [`Session::flush_server`] wrote to it: the
    /// session's end, or, if it was answering its idle check, its replacement (what was
    /// queued for it went with it).
    #[cold]
    fn lost_while_flushing(&mut self, loss: Loss) -> Result<(), ClientError> {
        self.server_lost(loss)?;
        self.relay.transmitted(Peer::Server);
        Ok(())
    }

    /// Writes what the relay queued for the client.
    pub(super) async fn flush_client(&mut self) -> Result<(), ClientError> {
        match self.write_client_now() {
            None => Ok(()),
            Some(written) => self.write_client_rest(written).await,
        }
    }

    /// Most replies fit the socket at once: written without a future (the round's end
    /// calls this itself, so no future is polled in the usual round). Returns how much was
    /// written when the rest must wait for the socket.
    #[inline(always)]
    pub(super) fn write_client_now(&mut self) -> Option<usize> {
        let out = self.relay.transmit(Peer::Client);
        if out.is_empty() {
            return None;
        }
        let n = self.client.try_write_plain(out);
        if n < out.len() {
            return Some(n);
        }
        self.relay.transmitted(Peer::Client);
        None
    }

    /// Writes the rest of what the relay queued for the client, `written` bytes of it
    /// already out.
    pub(super) async fn write_client_rest(&mut self, written: usize) -> Result<(), ClientError> {
        let out = self.relay.transmit(Peer::Client);
        self.client.send(&out[written..]).await?;
        self.relay.transmitted(Peer::Client);
        Ok(())
    }
}
