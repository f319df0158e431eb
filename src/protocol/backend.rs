//! Backend (server → client) messages: tags, parsers for the few the pooler inspects, and
//! encoders for the ones it answers with itself.

use bytes::{BufMut, BytesMut};

use super::cursor::{Cursor, ParseError};
use super::frame::{begin, finish};

pub const AUTHENTICATION_TAG: u8 = b'R';
pub const BACKEND_KEY_DATA_TAG: u8 = b'K';
pub const BIND_COMPLETE_TAG: u8 = b'2';
pub const CLOSE_COMPLETE_TAG: u8 = b'3';
pub const COMMAND_COMPLETE_TAG: u8 = b'C';
pub const COPY_IN_RESPONSE_TAG: u8 = b'G';
pub const COPY_OUT_RESPONSE_TAG: u8 = b'H';
pub const COPY_BOTH_RESPONSE_TAG: u8 = b'W';
pub const DATA_ROW_TAG: u8 = b'D';
pub const EMPTY_QUERY_RESPONSE_TAG: u8 = b'I';
pub const ERROR_RESPONSE_TAG: u8 = b'E';
pub const FUNCTION_CALL_RESPONSE_TAG: u8 = b'V';
pub const NEGOTIATE_PROTOCOL_VERSION_TAG: u8 = b'v';
pub const NO_DATA_TAG: u8 = b'n';
pub const NOTICE_RESPONSE_TAG: u8 = b'N';
pub const NOTIFICATION_RESPONSE_TAG: u8 = b'A';
pub const PARAMETER_DESCRIPTION_TAG: u8 = b't';
pub const PARAMETER_STATUS_TAG: u8 = b'S';
pub const PARSE_COMPLETE_TAG: u8 = b'1';
pub const PORTAL_SUSPENDED_TAG: u8 = b's';
pub const READY_FOR_QUERY_TAG: u8 = b'Z';
pub const ROW_DESCRIPTION_TAG: u8 = b'T';

/// Transaction status carried by ReadyForQuery.
pub const TX_IDLE: u8 = b'I';
pub const TX_IN_BLOCK: u8 = b'T';
pub const TX_FAILED: u8 = b'E';

/// An authentication request from the server (message 'R').
#[derive(Debug, PartialEq, Eq)]
pub enum AuthRequest<'a> {
    Ok,
    Cleartext,
    Md5 { salt: [u8; 4] },
    Sasl { mechanisms: Vec<&'a str> },
    SaslContinue { data: &'a [u8] },
    SaslFinal { data: &'a [u8] },
    Other(i32),
}

pub fn parse_auth(body: &[u8]) -> Result<AuthRequest<'_>, ParseError> {
    let mut c = Cursor::new(body);
    Ok(match c.i32()? {
        0 => AuthRequest::Ok,
        3 => AuthRequest::Cleartext,
        5 => {
            let s = c.take(4)?;
            AuthRequest::Md5 {
                salt: [s[0], s[1], s[2], s[3]],
            }
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = c.str()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m);
            }
            AuthRequest::Sasl { mechanisms }
        }
        11 => AuthRequest::SaslContinue {
            data: c.remaining(),
        },
        12 => AuthRequest::SaslFinal {
            data: c.remaining(),
        },
        n => AuthRequest::Other(n),
    })
}

/// The fields of an ErrorResponse or NoticeResponse the pooler cares about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFields {
    pub severity: String,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

pub fn parse_error(body: &[u8]) -> Result<ErrorFields, ParseError> {
    let mut c = Cursor::new(body);
    let mut f = ErrorFields::default();
    loop {
        let kind = c.u8()?;
        if kind == 0 {
            break;
        }
        let v = String::from_utf8_lossy(c.cstr()?).into_owned();
        match kind {
            b'V' => f.severity = v,
            b'S' if f.severity.is_empty() => f.severity = v,
            b'C' => f.code = v,
            b'M' => f.message = v,
            b'D' => f.detail = Some(v),
            b'H' => f.hint = Some(v),
            _ => {}
        }
    }
    Ok(f)
}

pub fn parse_parameter_status(body: &[u8]) -> Result<(&str, &str), ParseError> {
    let mut c = Cursor::new(body);
    Ok((c.str()?, c.str()?))
}

pub fn parse_backend_key(body: &[u8]) -> Result<(i32, i32), ParseError> {
    let mut c = Cursor::new(body);
    Ok((c.i32()?, c.i32()?))
}

/// The columns of a DataRow body (`None`: SQL NULL).
pub fn parse_data_row(body: &[u8]) -> Result<Vec<Option<&[u8]>>, ParseError> {
    let mut c = Cursor::new(body);
    let n = c.i16()?;
    let n = usize::try_from(n).map_err(|_| ParseError::Invalid("DataRow column count"))?;
    // Each column takes at least its 4-byte length: a count beyond that is a lie.
    if n > c.remaining().len() / 4 {
        return Err(ParseError::Truncated);
    }
    let mut cols = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.i32()?;
        cols.push(match usize::try_from(len) {
            Ok(len) => Some(c.take(len)?),
            Err(_) if len == -1 => None,
            Err(_) => return Err(ParseError::Invalid("DataRow column length")),
        });
    }
    Ok(cols)
}

/// Transaction status of a ReadyForQuery body.
pub fn parse_ready_for_query(body: &[u8]) -> Result<u8, ParseError> {
    match body {
        [s @ (TX_IDLE | TX_IN_BLOCK | TX_FAILED)] => Ok(*s),
        _ => Err(ParseError::Invalid("ReadyForQuery status")),
    }
}

pub fn auth_ok(buf: &mut BytesMut) {
    let at = begin(buf, AUTHENTICATION_TAG);
    buf.put_i32(0);
    finish(buf, at);
}

/// An authentication request (message 'R'): the inverse of [`parse_auth`].
pub fn auth_request(buf: &mut BytesMut, req: &AuthRequest<'_>) {
    let at = begin(buf, AUTHENTICATION_TAG);
    match req {
        AuthRequest::Ok => buf.put_i32(0),
        AuthRequest::Cleartext => buf.put_i32(3),
        AuthRequest::Md5 { salt } => {
            buf.put_i32(5);
            buf.put_slice(salt);
        }
        AuthRequest::Sasl { mechanisms } => {
            buf.put_i32(10);
            for m in mechanisms {
                put_cstr(buf, m.as_bytes());
            }
            buf.put_u8(0);
        }
        AuthRequest::SaslContinue { data } => {
            buf.put_i32(11);
            buf.put_slice(data);
        }
        AuthRequest::SaslFinal { data } => {
            buf.put_i32(12);
            buf.put_slice(data);
        }
        AuthRequest::Other(n) => buf.put_i32(*n),
    }
    finish(buf, at);
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    let at = begin(buf, PARAMETER_STATUS_TAG);
    put_cstr(buf, name.as_bytes());
    put_cstr(buf, value.as_bytes());
    finish(buf, at);
}

pub fn backend_key_data(buf: &mut BytesMut, pid: i32, secret: i32) {
    let at = begin(buf, BACKEND_KEY_DATA_TAG);
    buf.put_i32(pid);
    buf.put_i32(secret);
    finish(buf, at);
}

pub fn ready_for_query(buf: &mut BytesMut, status: u8) {
    let at = begin(buf, READY_FOR_QUERY_TAG);
    buf.put_u8(status);
    finish(buf, at);
}

/// A CommandComplete with command tag `tag`.
pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    let at = begin(buf, COMMAND_COMPLETE_TAG);
    buf.put_slice(tag.as_bytes());
    buf.put_u8(0);
    finish(buf, at);
}

/// An ErrorResponse (or, with `notice`, a NoticeResponse) with severity, code and message.
pub fn error_response(buf: &mut BytesMut, fields: &ErrorFields) {
    notice_or_error(buf, ERROR_RESPONSE_TAG, fields)
}

pub fn notice_response(buf: &mut BytesMut, fields: &ErrorFields) {
    notice_or_error(buf, NOTICE_RESPONSE_TAG, fields)
}

fn notice_or_error(buf: &mut BytesMut, tag: u8, f: &ErrorFields) {
    let at = begin(buf, tag);
    for (kind, value) in [(b'S', &f.severity), (b'V', &f.severity), (b'C', &f.code)] {
        buf.put_u8(kind);
        put_cstr(buf, value.as_bytes());
    }
    buf.put_u8(b'M');
    put_cstr(buf, f.message.as_bytes());
    for (kind, value) in [(b'D', &f.detail), (b'H', &f.hint)] {
        if let Some(v) = value {
            buf.put_u8(kind);
            put_cstr(buf, v.as_bytes());
        }
    }
    buf.put_u8(0);
    finish(buf, at);
}

/// NegotiateProtocolVersion: the newest minor version we support and the options we ignored.
pub fn negotiate_protocol_version(buf: &mut BytesMut, minor: i32, unrecognized: &[&str]) {
    let at = begin(buf, NEGOTIATE_PROTOCOL_VERSION_TAG);
    buf.put_i32(minor);
    buf.put_i32(unrecognized.len() as i32);
    for o in unrecognized {
        put_cstr(buf, o.as_bytes());
    }
    finish(buf, at);
}

/// A message with an empty body (ParseComplete, CloseComplete, ...).
pub fn empty(buf: &mut BytesMut, tag: u8) {
    let at = begin(buf, tag);
    finish(buf, at);
}

pub(crate) fn put_cstr(buf: &mut BytesMut, s: &[u8]) {
    buf.put_slice(s);
    buf.put_u8(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame;

    #[test]
    fn error_roundtrip() {
        let f = ErrorFields {
            severity: "ERROR".into(),
            code: "26000".into(),
            message: "prepared statement \"p\" does not exist".into(),
            detail: Some("d".into()),
            hint: None,
        };
        let mut b = BytesMut::new();
        error_response(&mut b, &f);
        let fr = frame::cut(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(fr.tag, ERROR_RESPONSE_TAG);
        assert_eq!(parse_error(fr.body()).unwrap(), f);
    }

    #[test]
    fn ready_for_query_tag_is_z() {
        assert_eq!(READY_FOR_QUERY_TAG, b'Z');
        let mut b = BytesMut::new();
        ready_for_query(&mut b, TX_IDLE);
        assert_eq!(&b[..], b"Z\0\0\0\x05I");
    }

    #[test]
    fn data_rows_parse_with_checked_lengths() {
        let row = b"\0\x02\0\0\0\x01t\xff\xff\xff\xff";
        let cols = parse_data_row(row).unwrap();
        assert_eq!(cols, vec![Some(&b"t"[..]), None]);
        assert_eq!(
            parse_data_row(b"\0\x02\0\0\0\x05t"),
            Err(ParseError::Truncated)
        );
        assert_eq!(parse_data_row(b"\x7f\xff"), Err(ParseError::Truncated));
        assert!(parse_data_row(b"\0\x01\xff\xff\xff\xfe").is_err());
        assert!(parse_data_row(b"\xff\xff").is_err());
    }
}
