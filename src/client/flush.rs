//! Writing to the server (while still reading it) and to the client.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::ClientError;
use super::io::SHRINK_ABOVE;
use super::session::Session;

enum Progress {
    Wrote(std::io::Result<usize>),
    Read(std::io::Result<usize>),
}

impl Session<'_> {
    /// Writes what is queued for the server while still reading the server: a server blocked
    /// writing results stops reading, so a pooler that only wrote would deadlock with it on a
    /// large pipeline. What arrives meanwhile is handled and passed on to the client.
    pub(super) async fn flush_server(&mut self) -> Result<(), ClientError> {
        let mut written = 0;
        while written < self.sout.len() {
            let Some(srv) = self.server.as_mut() else {
                break;
            };
            if srv.rbuf.capacity() - srv.rbuf.len() < 4096 {
                srv.rbuf.reserve(16 * 1024);
            }
            let (mut rd, mut wr) = srv.stream.split();
            let progress = tokio::select! {
                biased;
                r = wr.write(&self.sout[written..]) => Progress::Wrote(r),
                r = rd.read_buf(&mut srv.rbuf) => Progress::Read(r),
            };
            match progress {
                Progress::Wrote(Ok(n)) if n > 0 => written += n,
                Progress::Read(Ok(n)) if n > 0 => {
                    self.drain_server()?;
                    self.flush_client().await?;
                }
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
        self.client.write_all(&self.cout).await?;
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
