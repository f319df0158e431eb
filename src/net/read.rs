//! Reading from a client socket without holding a buffer while idle.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use tokio_util::io::poll_read_buf;

use crate::net::ClientStream;

/// Capacity reserved for a read once the socket is readable.
const READ_CHUNK: usize = 8 * 1024;
/// The first reservation of an empty buffer.
const FIRST_READ: usize = 1024;

/// Waits until the client is readable, then reads what is there into `buf`. Cancel-safe:
/// nothing is reserved until the socket is ready, and a read that returns less than it could
/// tells tokio the socket is drained, so the next wait costs no extra `EAGAIN` read.
pub async fn read_some(stream: &mut ClientStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    read_chunk(stream, buf, READ_CHUNK).await
}

/// The poll behind [`read_some`].
pub fn poll_read_some(
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    poll_read_chunk(stream, buf, READ_CHUNK, cx)
}

/// As [`read_some`], reserving at most about `chunk` bytes (small for startup packets).
pub async fn read_chunk(
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    chunk: usize,
) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| poll_read_chunk(stream, buf, chunk, cx)).await
}

/// The poll behind [`read_chunk`], for loops that poll several sources by hand.
pub fn poll_read_chunk(
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    chunk: usize,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    // A buffer that already has room (a client in the middle of a transaction) is read at
    // once; an empty one gets memory only when there is something to read.
    if buf.capacity() - buf.len() < FIRST_READ / 2 {
        ready!(stream.poll_read_ready(cx))?;
        // Start small (most requests are a few hundred bytes) and grow when a read fills it.
        if buf.capacity() == 0 {
            buf.reserve(FIRST_READ.min(chunk));
        } else {
            buf.reserve(chunk.max(buf.len()));
        }
    }
    poll_read_buf(Pin::new(stream), cx, buf)
}
