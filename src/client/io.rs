//! Reading from a client socket without holding a buffer while idle.

use bytes::BytesMut;
use tokio::net::TcpStream;

/// Capacity reserved for a read once the socket is readable.
const READ_CHUNK: usize = 8 * 1024;
/// A buffer above this that has been emptied is given back rather than kept.
pub const SHRINK_ABOVE: usize = 64 * 1024;

/// Waits until the client is readable, then reads what is there into `buf`. Cancel-safe:
/// nothing is read until the socket is ready, and the read itself does not await.
pub async fn read_some(stream: &TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        if buf.capacity() - buf.len() < READ_CHUNK / 2 {
            buf.reserve(READ_CHUNK);
        }
        match stream.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
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
