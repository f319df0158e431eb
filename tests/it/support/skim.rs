//! A client that reads replies without holding them: message headers are parsed and small
//! bodies kept, large ones counted and dropped as they arrive. For tests of results larger
//! than the test wants to buffer, and for measuring what a pooler holds meanwhile.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bodies up to this size are kept.
const KEEP: usize = 64 << 10;

/// One message as it was read: its tag, its length (tag excluded), its body if small.
#[derive(Debug, Clone)]
pub struct Seen {
    pub tag: u8,
    pub len: usize,
    pub body: Option<Bytes>,
}

/// Reads messages from a stream, keeping at most [`KEEP`] bytes of any one.
pub struct Skim {
    buf: BytesMut,
}

impl Default for Skim {
    fn default() -> Self {
        Skim {
            buf: BytesMut::with_capacity(64 << 10),
        }
    }
}

impl Skim {
    /// The next message, or `None` at EOF or after `timeout` without one.
    pub async fn next(
        &mut self,
        s: &mut (impl AsyncRead + Unpin),
        timeout: Duration,
    ) -> Option<Seen> {
        tokio::time::timeout(timeout, self.next_inner(s))
            .await
            .ok()
            .flatten()
    }

    async fn next_inner(&mut self, s: &mut (impl AsyncRead + Unpin)) -> Option<Seen> {
        while self.buf.len() < 5 {
            self.fill(s).await?;
        }
        let tag = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        self.buf.advance(5);
        let mut left = len.checked_sub(4)?;
        if left <= KEEP {
            while self.buf.len() < left {
                self.fill(s).await?;
            }
            let body = self.buf.split_to(left).freeze();
            return Some(Seen {
                tag,
                len,
                body: Some(body),
            });
        }
        while left > 0 {
            if self.buf.is_empty() {
                self.fill(s).await?;
            }
            let n = left.min(self.buf.len());
            self.buf.advance(n);
            left -= n;
        }
        Some(Seen {
            tag,
            len,
            body: None,
        })
    }

    async fn fill(&mut self, s: &mut (impl AsyncRead + Unpin)) -> Option<()> {
        self.buf.reserve(64 << 10);
        match s.read_buf(&mut self.buf).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(()),
        }
    }

    /// Messages up to and including the next ReadyForQuery; panics after `timeout` per
    /// message or at EOF.
    pub async fn until_ready(
        &mut self,
        s: &mut (impl AsyncRead + Unpin),
        timeout: Duration,
    ) -> Vec<Seen> {
        let mut out = Vec::new();
        loop {
            let m = self
                .next(s, timeout)
                .await
                .expect("a message before the timeout");
            let ready = m.tag == b'Z';
            out.push(m);
            if ready {
                return out;
            }
        }
    }
}

/// The tags of messages, as a string.
pub fn tags(seen: &[Seen]) -> String {
    seen.iter().map(|m| m.tag as char).collect()
}
