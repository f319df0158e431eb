//! Sockets below the protocol: plain-or-TLS streams, reading a client without holding a
//! buffer while it is idle, and the TLS configurations.

pub mod admission;
pub mod read;
pub mod stream;
pub mod tls;

pub use stream::{ClientStream, MaybeTls, ServerStream};
pub use tls::{TlsCell, TlsError, TlsState};
