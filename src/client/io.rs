//! Reading from a client socket without holding a buffer while idle.

use bytes::BytesMut;
use tokio::net::TcpStream;

/// Capacity reserved for a read once the socket is readable.
const READ_CHUNK: usize = 8 * 1024;
/// The first reservation of an empty buffer.
const FIRST_READ: usize = 1024;
/// A buffer above this that has been emptied is given back rather than kept.
pub const SHRINK_ABOVE: usize = 64 * 1024;

/// Waits until the client is readable, then reads what is there into `buf`. Cancel-safe:
/// nothing is read until the socket is ready, and the read itself does not await.
pub async fn read_some(stream: &TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    read_chunk(stream, buf, READ_CHUNK).await
}

/// As [`read_some`], reserving at most about `chunk` bytes (small for startup packets).
pub async fn read_chunk(
    stream: &TcpStream,
    buf: &mut BytesMut,
    chunk: usize,
) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        // Start small (most requests are a few hundred bytes) and grow when a read fills it.
        if buf.capacity() == 0 {
            buf.reserve(FIRST_READ.min(chunk));
        } else if buf.capacity() - buf.len() < FIRST_READ / 2 {
            buf.reserve(chunk.max(buf.len()));
        }
        match stream.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Readiness was stale: wait without holding memory.
                release_if_empty(buf);
                continue;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Frees an empty buffer's memory so an idle client costs little.
pub fn release_if_empty(buf: &mut BytesMut) {
    if buf.is_empty() && buf.capacity() > 0 {
        *buf = BytesMut::new();
    }
}
