//! The untagged first packet of a connection: StartupMessage, SSLRequest, GSSENCRequest or
//! CancelRequest (protocol docs, "Start-up" and "Canceling Requests in Progress").

use bytes::{Buf, BytesMut};
use thiserror::Error;

use super::cursor::{Cursor, ParseError};

pub const PROTOCOL_3_0: i32 = 196608;
pub const CANCEL_REQUEST_CODE: i32 = 80877102;
pub const SSL_REQUEST_CODE: i32 = 80877103;
pub const GSSENC_REQUEST_CODE: i32 = 80877104;

/// Smallest valid packet: length + code.
const MIN_LEN: usize = 8;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum StartupError {
    #[error("invalid length of startup packet: {0}")]
    BadLength(u32),
    #[error("unsupported frontend protocol {major}.{minor}: server supports 3.0")]
    UnsupportedVersion { major: u16, minor: u16 },
    #[error("too many startup parameters (limit {0})")]
    TooManyParams(usize),
    #[error("invalid startup packet layout: {0}")]
    Malformed(#[from] ParseError),
}

/// One parsed first packet.
#[derive(Debug, PartialEq, Eq)]
pub enum StartupPacket {
    SslRequest,
    GssEncRequest,
    Cancel { pid: i32, secret: i32 },
    Startup(Startup),
}

/// A StartupMessage: the requested minor version and the parameters in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Startup {
    pub minor: u16,
    pub params: Vec<(String, String)>,
}

impl Startup {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Limits applied before any allocation for the packet.
#[derive(Debug, Clone, Copy)]
pub struct StartupLimits {
    pub max_len: usize,
    pub max_params: usize,
}

/// Cuts and parses the first packet; `Ok(None)` until it is fully buffered.
pub fn cut(
    buf: &mut BytesMut,
    limits: StartupLimits,
) -> Result<Option<StartupPacket>, StartupError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if (len as usize) < MIN_LEN || len as usize > limits.max_len {
        return Err(StartupError::BadLength(len));
    }
    if buf.len() < len as usize {
        return Ok(None);
    }
    let packet = buf.split_to(len as usize);
    parse(&packet[4..], limits).map(Some)
}

fn parse(body: &[u8], limits: StartupLimits) -> Result<StartupPacket, StartupError> {
    let mut c = Cursor::new(body);
    let code = c.i32()?;
    match code {
        SSL_REQUEST_CODE if c.is_empty() => return Ok(StartupPacket::SslRequest),
        GSSENC_REQUEST_CODE if c.is_empty() => return Ok(StartupPacket::GssEncRequest),
        CANCEL_REQUEST_CODE => {
            let (pid, secret) = (c.i32()?, c.i32()?);
            return Ok(StartupPacket::Cancel { pid, secret });
        }
        _ => {}
    }
    let (major, minor) = ((code >> 16) as u16, (code & 0xffff) as u16);
    if major != 3 {
        return Err(StartupError::UnsupportedVersion { major, minor });
    }
    let mut params = Vec::new();
    loop {
        let k = c.str()?;
        if k.is_empty() {
            break;
        }
        let v = c.str()?;
        if params.len() >= limits.max_params {
            return Err(StartupError::TooManyParams(limits.max_params));
        }
        params.push((k.to_owned(), v.to_owned()));
    }
    Ok(StartupPacket::Startup(Startup { minor, params }))
}

/// Reads only the declared length, so a caller can reject a packet before it arrives in full.
pub fn declared_len(buf: &[u8]) -> Option<u32> {
    (buf.len() >= 4).then(|| (&buf[..4]).get_u32())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frontend;

    const LIMITS: StartupLimits = StartupLimits {
        max_len: 10_000,
        max_params: 64,
    };

    #[test]
    fn startup_roundtrip() {
        let mut b = BytesMut::new();
        frontend::startup_message(&mut b, &[("user", "u"), ("database", "d")]);
        let p = cut(&mut b, LIMITS).unwrap().unwrap();
        let StartupPacket::Startup(s) = p else {
            panic!("not a startup")
        };
        assert_eq!(s.get("user"), Some("u"));
        assert_eq!(s.minor, 0);
        assert!(b.is_empty());
    }

    #[test]
    fn ssl_cancel_and_bad_lengths() {
        let mut b = BytesMut::from(&[0u8, 0, 0, 8, 4, 210, 22, 47][..]);
        assert_eq!(cut(&mut b, LIMITS), Ok(Some(StartupPacket::SslRequest)));
        let mut b = BytesMut::new();
        frontend::cancel_request(&mut b, 7, 9);
        assert_eq!(
            cut(&mut b, LIMITS),
            Ok(Some(StartupPacket::Cancel { pid: 7, secret: 9 }))
        );
        let mut b = BytesMut::from(&[0x80u8, 0, 0, 0][..]);
        assert!(matches!(
            cut(&mut b, LIMITS),
            Err(StartupError::BadLength(_))
        ));
        let mut b = BytesMut::from(&[0u8, 0, 0, 8, 0, 2, 0, 0][..]);
        assert!(matches!(
            cut(&mut b, LIMITS),
            Err(StartupError::UnsupportedVersion { major: 2, .. })
        ));
    }

    #[test]
    fn grease_minor_version_parses() {
        let mut b = BytesMut::new();
        frontend::startup_message(&mut b, &[("user", "u")]);
        b[6..8].copy_from_slice(&9999u16.to_be_bytes());
        let Some(StartupPacket::Startup(s)) = cut(&mut b, LIMITS).unwrap() else {
            panic!()
        };
        assert_eq!(s.minor, 9999);
    }
}
