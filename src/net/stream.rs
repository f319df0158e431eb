//! A socket that is plain TCP or TLS over TCP, by static dispatch: the plain case costs one
//! branch per call and no copy or allocation (the hot path), the TLS case goes through rustls.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Plain TCP or TLS session `T` over TCP. `Gone` only stands in while the TCP stream is moved
/// into a TLS handshake (or after that handshake failed): every I/O on it fails.
#[derive(Debug)]
pub enum MaybeTls<T> {
    Plain(TcpStream),
    Tls(Box<T>),
    Gone,
}

/// A client connection (the pooler is the TLS server).
pub type ClientStream = MaybeTls<tokio_rustls::server::TlsStream<TcpStream>>;
/// A server connection (the pooler is the TLS client).
pub type ServerStream = MaybeTls<tokio_rustls::client::TlsStream<TcpStream>>;

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "connection closed by a failed TLS handshake",
    )
}

impl<T> MaybeTls<T> {
    /// The TCP stream for a TLS handshake, leaving `Gone` behind; `None` if not plain.
    pub fn take_plain(&mut self) -> Option<TcpStream> {
        match std::mem::replace(self, MaybeTls::Gone) {
            MaybeTls::Plain(s) => Some(s),
            other => {
                *self = other;
                None
            }
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, MaybeTls::Tls(_))
    }
}

impl ClientStream {
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            MaybeTls::Plain(s) => s.peer_addr(),
            MaybeTls::Tls(s) => s.get_ref().0.peer_addr(),
            MaybeTls::Gone => Err(gone()),
        }
    }

    /// Writes what a plain socket takes at once, without waiting; 0 for TLS (whose bytes go
    /// through rustls), when the socket is full, or on an error (the next write reports it).
    pub fn try_write_plain(&self, buf: &[u8]) -> usize {
        match self {
            MaybeTls::Plain(s) => s.try_write(buf).unwrap_or(0),
            _ => 0,
        }
    }

    /// Ready when a read would not wait: the socket is readable, or (TLS) rustls already holds
    /// decrypted bytes or the peer's close. Registers no waiter node of its own.
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            MaybeTls::Plain(s) => s.poll_read_ready(cx),
            MaybeTls::Tls(s) => {
                let (tcp, conn) = s.get_mut();
                match conn.process_new_packets() {
                    Ok(st) if st.plaintext_bytes_to_read() == 0 && !st.peer_has_closed() => {
                        tcp.poll_read_ready(cx)
                    }
                    // Buffered plaintext, a close or an error: the next read reports it.
                    _ => Poll::Ready(Ok(())),
                }
            }
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl ServerStream {
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            MaybeTls::Plain(s) => s.peer_addr(),
            MaybeTls::Tls(s) => s.get_ref().0.peer_addr(),
            MaybeTls::Gone => Err(gone()),
        }
    }

    /// For an idle server: true if it has sent nothing (a byte or EOF means it cannot be used).
    /// Reads at most one byte straight from the socket, only if it is readable; for TLS any
    /// record at all (an alert, a FATAL) makes the connection unusable just the same.
    pub fn is_quiet(&self) -> bool {
        let tcp = match self {
            MaybeTls::Plain(s) => s,
            MaybeTls::Tls(s) => s.get_ref().0,
            MaybeTls::Gone => return false,
        };
        let mut probe = [0u8; 1];
        match tcp.try_read(&mut probe) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for MaybeTls<T> {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            MaybeTls::Gone => Poll::Ready(Ok(())),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
            MaybeTls::Gone => false,
        }
    }
}

impl<T: AsyncWrite + Unpin> MaybeTls<T> {
    /// Writes all of `buf` and, for TLS, flushes what rustls still holds (a plain socket has
    /// nothing to flush, so the plain path is a bare `write_all`).
    pub async fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.write_all(buf).await?;
        if let MaybeTls::Tls(s) = self {
            s.flush().await?;
        }
        Ok(())
    }
}
