//! Writing to the server (while still reading it) and to the client.

use std::pin::Pin;
use std::task::Poll;

use bytes::BytesMut;
use tokio::io::AsyncWrite;
use tokio_util::io::poll_read_buf;

use super::error::ClientError;
use super::io::SHRINK_ABOVE;
use super::session::Session;

enum Progress {
    Wrote(std::io::Result<usize>),
    Flushed(std::io::Result<()>),
    Read(std::io::Result<usize>),
}

impl Session<'_> {
    /// Writes what is queued for the server while still reading the server: a server blocked
    /// writing results stops reading, so a pooler that only wrote would deadlock with it on a
    /// large pipeline. What arrives meanwhile is handled and passed on to the client.
    pub(super) async fn flush_server(&mut self) -> Result<(), ClientError> {
        let mut written = 0;
        // A plain socket keeps nothing back; TLS may hold the last record until flushed.
        let mut unflushed = self.server.as_ref().is_some_and(|s| s.stream.is_tls());
        while written < self.sout.len() || unflushed {
            let Some(srv) = self.server.as_mut() else {
                break;
            };
            if srv.rbuf.capacity() - srv.rbuf.len() < 4096 {
                srv.rbuf.reserve(16 * 1024);
            }
            let (stream, rbuf) = (&mut srv.stream, &mut srv.rbuf);
            let pending = &self.sout[written..];
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
                Progress::Flushed(Err(e)) => return Err(ClientError::ServerLost(e.to_string())),
                Progress::Wrote(r) | Progress::Read(r) => {
                    let why = r
                        .err()
                        .map_or("server closed the connection".into(), |e| e.to_string());
                    return Err(ClientError::ServerLost(why));
                }
            }
        }
        self.sout.clear();
        if self.sout.capacity() > SHRINK_ABOVE {
            self.sout = BytesMut::new();
        }
        Ok(())
    }

    pub(super) async fn flush_client(&mut self) -> Result<(), ClientError> {
        if self.cout.is_empty() {
            return Ok(());
        }
        // Most replies fit the socket at once: written without a future; the rest waits.
        let n = self.client.try_write_plain(&self.cout);
        if n < self.cout.len() {
            self.client.send(&self.cout[n..]).await?;
        }
        self.shared
            .metrics
            .clients
            .bytes_out
            .inc_by(self.cout.len() as u64);
        self.cout.clear();
        if self.cout.capacity() > SHRINK_ABOVE {
            self.cout = BytesMut::new();
        }
        Ok(())
    }
}
