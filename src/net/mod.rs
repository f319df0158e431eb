//! Sockets below the protocol: plain-or-TLS streams and the TLS configurations.

pub mod admission;
pub mod stream;
pub mod tls;

pub use stream::{ClientStream, MaybeTls, ServerStream};
pub use tls::{TlsCell, TlsError, TlsState};
