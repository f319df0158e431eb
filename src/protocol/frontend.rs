//! Frontend (client → server) messages: tags, the statement names inside Parse, Bind, Describe
//! and Close, and encoders for what the pooler sends to a server itself.

use bytes::{BufMut, BytesMut};

use super::backend::put_cstr;
use super::cursor::{Cursor, ParseError};
use super::frame::{begin, finish, HEADER_LEN};

pub const BIND_TAG: u8 = b'B';
pub const CLOSE_TAG: u8 = b'C';
pub const COPY_DATA_TAG: u8 = b'd';
pub const COPY_DONE_TAG: u8 = b'c';
pub const COPY_FAIL_TAG: u8 = b'f';
pub const DESCRIBE_TAG: u8 = b'D';
pub const EXECUTE_TAG: u8 = b'E';
pub const FLUSH_TAG: u8 = b'H';
pub const FUNCTION_CALL_TAG: u8 = b'F';
pub const PARSE_TAG: u8 = b'P';
pub const PASSWORD_TAG: u8 = b'p';
pub const QUERY_TAG: u8 = b'Q';
pub const SYNC_TAG: u8 = b'S';
pub const TERMINATE_TAG: u8 = b'X';

/// Whether a client may send this tag after startup (anything else is a protocol violation).
pub fn is_known_tag(tag: u8) -> bool {
    matches!(
        tag,
        BIND_TAG
            | CLOSE_TAG
            | COPY_DATA_TAG
            | COPY_DONE_TAG
            | COPY_FAIL_TAG
            | DESCRIBE_TAG
            | EXECUTE_TAG
            | FLUSH_TAG
            | FUNCTION_CALL_TAG
            | PARSE_TAG
            | QUERY_TAG
            | SYNC_TAG
            | TERMINATE_TAG
    )
}

/// PostgreSQL's limit on the body of the messages that never carry data (Sync, Flush,
/// Terminate, Close, Describe, Execute, CopyDone, CopyFail): `PQ_SMALL_MESSAGE_LIMIT` in
/// `postgres.c`. A longer one is a protocol violation there, and so it is here.
pub const SMALL_MESSAGE_LIMIT: usize = 10_000;

/// PostgreSQL's limit on the body of any other message: `PQ_LARGE_MESSAGE_LIMIT` in
/// `postgres.c` (`MaxAllocSize - 1`). Messages the pooler passes on in pieces may be this
/// large; a longer one is a protocol violation.
pub const LARGE_MESSAGE_LIMIT: usize = 0x3fff_fffe;

/// Whether a message of this tag and total size (tag included) exceeds
/// [`SMALL_MESSAGE_LIMIT`] for its kind.
#[inline]
pub fn exceeds_small_limit(tag: u8, total: usize) -> bool {
    total > SMALL_MESSAGE_LIMIT + HEADER_LEN
        && matches!(
            tag,
            SYNC_TAG
                | FLUSH_TAG
                | TERMINATE_TAG
                | CLOSE_TAG
                | DESCRIBE_TAG
                | EXECUTE_TAG
                | COPY_DONE_TAG
                | COPY_FAIL_TAG
        )
}

/// Where a statement name sits inside a message, so it can be replaced without re-encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameSpan {
    /// Offset of the first byte of the name within the whole message (tag included).
    pub start: usize,
    /// Length of the name, without its NUL.
    pub len: usize,
}

impl NameSpan {
    pub fn get<'m>(&self, msg: &'m [u8]) -> &'m [u8] {
        &msg[self.start..self.start + self.len]
    }
}

/// The statement name of a Parse message (whole message, tag included).
pub fn parse_statement(msg: &[u8]) -> Result<NameSpan, ParseError> {
    let mut c = Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?);
    let name = c.cstr()?;
    c.cstr()?; // query text
    let n = c.i16()?;
    if n < 0 {
        return Err(ParseError::Invalid("negative parameter count"));
    }
    c.take(n as usize * 4)?;
    Ok(NameSpan {
        start: HEADER_LEN,
        len: name.len(),
    })
}

/// The statement name of a Parse from its first bytes (the rest may not have arrived yet):
/// `None` until the name's NUL is there.
pub fn parse_statement_prefix(msg: &[u8]) -> Option<NameSpan> {
    let body = msg.get(HEADER_LEN..)?;
    let len = body.iter().position(|&b| b == 0)?;
    Some(NameSpan {
        start: HEADER_LEN,
        len,
    })
}

/// The statement name of a Bind message (after the portal name).
pub fn bind_statement(msg: &[u8]) -> Result<NameSpan, ParseError> {
    let mut c = Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?);
    c.cstr()?; // portal
    let start = HEADER_LEN + c.position();
    let name = c.cstr()?;
    Ok(NameSpan {
        start,
        len: name.len(),
    })
}

/// A whole Parse's parts: its statement name, its text and how many parameter types it
/// declares.
pub fn parse_parts(msg: &[u8]) -> Result<(&[u8], &[u8], i16), ParseError> {
    let mut c = Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?);
    let name = c.cstr()?;
    let text = c.cstr()?;
    let n = c.i16()?;
    Ok((name, text, n))
}

/// A whole Bind's portal and statement names and how many parameter values it carries.
pub fn bind_parts(msg: &[u8]) -> Result<(&[u8], &[u8], i16), ParseError> {
    let mut c = Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?);
    let portal = c.cstr()?;
    let stmt = c.cstr()?;
    let formats = c.i16()?;
    if formats < 0 {
        return Err(ParseError::Invalid("negative format count"));
    }
    c.take(formats as usize * 2)?;
    Ok((portal, stmt, c.i16()?))
}

/// A whole Bind's parameter `index` (from 0): its format code and value, or `None` when it
/// is NULL or the Bind has no such parameter.
pub fn bind_param(msg: &[u8], index: usize) -> Result<Option<(i16, &[u8])>, ParseError> {
    let mut c = Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?);
    c.cstr()?; // portal
    c.cstr()?; // statement
    let formats = c.i16()?;
    if formats < 0 {
        return Err(ParseError::Invalid("negative format count"));
    }
    let codes = c.take(formats as usize * 2)?;
    let format = match formats {
        0 => 0,
        1 => i16::from_be_bytes([codes[0], codes[1]]),
        _ => match codes.get(index * 2..index * 2 + 2) {
            Some(b) => i16::from_be_bytes([b[0], b[1]]),
            None => return Ok(None),
        },
    };
    let count = c.i16()?;
    if index >= count.max(0) as usize {
        return Ok(None);
    }
    for _ in 0..index {
        let len = c.i32()?;
        if len > 0 {
            c.take(len as usize)?;
        }
    }
    let len = c.i32()?;
    if len < 0 {
        return Ok(None);
    }
    Ok(Some((format, c.take(len as usize)?)))
}

/// The portal an Execute runs.
pub fn execute_portal(msg: &[u8]) -> Result<&[u8], ParseError> {
    Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?).cstr()
}

/// The target of Describe or Close: `b'S'` (statement) or `b'P'` (portal), and its name.
pub fn describe_or_close_target(msg: &[u8]) -> Result<(u8, NameSpan), ParseError> {
    let mut c = Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?);
    let kind = c.u8()?;
    if kind != b'S' && kind != b'P' {
        return Err(ParseError::Invalid("Describe/Close target"));
    }
    let name = c.cstr()?;
    Ok((
        kind,
        NameSpan {
            start: HEADER_LEN + 1,
            len: name.len(),
        },
    ))
}

/// The SQL text of a Query message.
pub fn query_text(msg: &[u8]) -> Result<&[u8], ParseError> {
    Cursor::new(msg.get(HEADER_LEN..).ok_or(ParseError::Truncated)?).cstr()
}

/// A PasswordMessage body (cleartext or md5 response): the NUL-terminated password.
pub fn parse_password(body: &[u8]) -> Result<&[u8], ParseError> {
    let mut c = Cursor::new(body);
    let pw = c.cstr()?;
    if !c.is_empty() {
        return Err(ParseError::Invalid("bytes after the password"));
    }
    Ok(pw)
}

/// A SASLInitialResponse body: the mechanism and the initial response (absent for length -1).
pub fn parse_sasl_initial(body: &[u8]) -> Result<(&str, Option<&[u8]>), ParseError> {
    let mut c = Cursor::new(body);
    let mechanism = c.str()?;
    let data = match c.i32()? {
        -1 => None,
        n => Some(c.take(usize::try_from(n).map_err(|_| ParseError::Invalid("SASL length"))?)?),
    };
    if !c.is_empty() {
        return Err(ParseError::Invalid("bytes after the SASL response"));
    }
    Ok((mechanism, data))
}

/// Copies `msg` into `out` with the name at `span` replaced by `name`, rewriting the length.
pub fn write_renamed(out: &mut BytesMut, msg: &[u8], span: NameSpan, name: &[u8]) {
    let at = begin(out, msg[0]);
    out.put_slice(&msg[HEADER_LEN..span.start]);
    out.put_slice(name);
    out.put_slice(&msg[span.start + span.len..]);
    finish(out, at);
}

/// As [`write_renamed`] for the first bytes of a message of `total` bytes (tag included)
/// whose rest is passed on as it arrives: the length written is the renamed whole's.
pub fn write_renamed_head(
    out: &mut BytesMut,
    head: &[u8],
    span: NameSpan,
    name: &[u8],
    total: usize,
) {
    let renamed = total - span.len + name.len() - 1;
    out.put_u8(head[0]);
    out.put_u32(renamed as u32);
    out.put_slice(&head[HEADER_LEN..span.start]);
    out.put_slice(name);
    out.put_slice(&head[span.start + span.len..]);
}

pub fn startup_message(buf: &mut BytesMut, params: &[(&str, &str)]) {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i32(super::startup::PROTOCOL_3_0);
    for (k, v) in params {
        put_cstr(buf, k.as_bytes());
        put_cstr(buf, v.as_bytes());
    }
    buf.put_u8(0);
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn cancel_request(buf: &mut BytesMut, pid: i32, secret: i32) {
    buf.put_i32(16);
    buf.put_i32(super::startup::CANCEL_REQUEST_CODE);
    buf.put_i32(pid);
    buf.put_i32(secret);
}

pub fn ssl_request(buf: &mut BytesMut) {
    buf.put_i32(8);
    buf.put_i32(super::startup::SSL_REQUEST_CODE);
}

pub fn password(buf: &mut BytesMut, pw: &[u8]) {
    let at = begin(buf, PASSWORD_TAG);
    put_cstr(buf, pw);
    finish(buf, at);
}

pub fn sasl_initial_response(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
    let at = begin(buf, PASSWORD_TAG);
    put_cstr(buf, mechanism.as_bytes());
    buf.put_i32(data.len() as i32);
    buf.put_slice(data);
    finish(buf, at);
}

pub fn sasl_response(buf: &mut BytesMut, data: &[u8]) {
    let at = begin(buf, PASSWORD_TAG);
    buf.put_slice(data);
    finish(buf, at);
}

pub fn query(buf: &mut BytesMut, sql: &str) {
    let at = begin(buf, QUERY_TAG);
    put_cstr(buf, sql.as_bytes());
    finish(buf, at);
}

pub fn terminate(buf: &mut BytesMut) {
    let at = begin(buf, TERMINATE_TAG);
    finish(buf, at);
}

/// Close of a prepared statement (`S`) by name.
pub fn close_statement(buf: &mut BytesMut, name: &[u8]) {
    let at = begin(buf, CLOSE_TAG);
    buf.put_u8(b'S');
    put_cstr(buf, name);
    finish(buf, at);
}

/// Parse of `sql` as statement `name`, with no parameter types.
pub fn parse(buf: &mut BytesMut, name: &[u8], sql: &str) {
    let at = begin(buf, PARSE_TAG);
    put_cstr(buf, name);
    put_cstr(buf, sql.as_bytes());
    buf.put_i16(0);
    finish(buf, at);
}

/// Bind of statement `name`, without parameters, to the unnamed portal (text results).
pub fn bind_unnamed(buf: &mut BytesMut, name: &[u8]) {
    let at = begin(buf, BIND_TAG);
    put_cstr(buf, b"");
    put_cstr(buf, name);
    buf.put_i16(0);
    buf.put_i16(0);
    buf.put_i16(0);
    finish(buf, at);
}

/// Execute of the unnamed portal, every row.
pub fn execute_unnamed(buf: &mut BytesMut) {
    let at = begin(buf, EXECUTE_TAG);
    put_cstr(buf, b"");
    buf.put_i32(0);
    finish(buf, at);
}

pub fn flush(buf: &mut BytesMut) {
    let at = begin(buf, FLUSH_TAG);
    finish(buf, at);
}

pub fn sync(buf: &mut BytesMut) {
    let at = begin(buf, SYNC_TAG);
    finish(buf, at);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_msg(name: &str, sql: &str) -> BytesMut {
        let mut b = BytesMut::new();
        let at = begin(&mut b, PARSE_TAG);
        put_cstr(&mut b, name.as_bytes());
        put_cstr(&mut b, sql.as_bytes());
        b.put_i16(1);
        b.put_i32(23);
        finish(&mut b, at);
        b
    }

    #[test]
    fn rename_rewrites_length() {
        let m = parse_msg("p", "select $1");
        let span = parse_statement(&m).unwrap();
        assert_eq!(span.get(&m), b"p");
        let mut out = BytesMut::new();
        write_renamed(&mut out, &m, span, b"p12_p");
        assert_eq!(out.len(), m.len() + 4);
        let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert_eq!(len + 1, out.len());
        assert_eq!(parse_statement(&out).unwrap().get(&out), b"p12_p");
        assert_eq!(&out[out.len() - 6..], &m[m.len() - 6..]);
    }

    #[test]
    fn bind_and_close_names() {
        let mut b = BytesMut::new();
        let at = begin(&mut b, BIND_TAG);
        put_cstr(&mut b, b"portal");
        put_cstr(&mut b, b"stmt");
        b.put_slice(&[0, 0, 0, 0, 0, 0]);
        finish(&mut b, at);
        assert_eq!(bind_statement(&b).unwrap().get(&b), b"stmt");
        let mut c = BytesMut::new();
        close_statement(&mut c, b"x");
        let (k, s) = describe_or_close_target(&c).unwrap();
        assert_eq!((k, s.get(&c)), (b'S', &b"x"[..]));
    }

    #[test]
    fn bind_parameters_are_read_with_their_formats() {
        // Formats: none (all text), one for all, one each; a NULL; past the last.
        let bind = |formats: &[i16], values: &[Option<&[u8]>]| {
            let mut b = BytesMut::new();
            let at = begin(&mut b, BIND_TAG);
            put_cstr(&mut b, b"");
            put_cstr(&mut b, b"s");
            b.put_i16(formats.len() as i16);
            formats.iter().for_each(|f| b.put_i16(*f));
            b.put_i16(values.len() as i16);
            for v in values {
                match v {
                    Some(v) => {
                        b.put_i32(v.len() as i32);
                        b.put_slice(v);
                    }
                    None => b.put_i32(-1),
                }
            }
            b.put_i16(0);
            finish(&mut b, at);
            b
        };
        let m = bind(&[], &[Some(b"12"), None, Some(b"x")]);
        assert_eq!(bind_param(&m, 0).unwrap(), Some((0, &b"12"[..])));
        assert_eq!(bind_param(&m, 1).unwrap(), None);
        assert_eq!(bind_param(&m, 2).unwrap(), Some((0, &b"x"[..])));
        assert_eq!(bind_param(&m, 3).unwrap(), None);
        let m = bind(&[1], &[Some(&[0, 0, 0, 7]), Some(b"ab")]);
        assert_eq!(bind_param(&m, 1).unwrap(), Some((1, &b"ab"[..])));
        let m = bind(&[0, 1], &[Some(b"1"), Some(&[0, 0, 0, 7])]);
        assert_eq!(bind_param(&m, 1).unwrap(), Some((1, &[0u8, 0, 0, 7][..])));
        // A value longer than the message is an error, not a panic.
        let mut cut = bind(&[], &[Some(b"1234")]);
        cut.truncate(cut.len() - 5);
        assert!(bind_param(&cut, 0).is_err());
    }

    #[test]
    fn renamed_head_carries_the_whole_length() {
        let m = parse_msg("p", "select $1");
        let span = parse_statement(&m).unwrap();
        let mut whole = BytesMut::new();
        write_renamed(&mut whole, &m, span, b"p12_p");
        for cut in span.start + span.len + 1..=m.len() {
            let mut out = BytesMut::new();
            write_renamed_head(&mut out, &m[..cut], span, b"p12_p", m.len());
            out.extend_from_slice(&m[cut..]);
            assert_eq!(out, whole, "cut at {cut}");
        }
        assert_eq!(parse_statement_prefix(&m[..span.start + 1]), None);
        assert_eq!(parse_statement_prefix(&m[..span.start + 2]), Some(span));
    }

    #[test]
    fn small_limit_applies_to_control_messages_only() {
        assert!(exceeds_small_limit(SYNC_TAG, SMALL_MESSAGE_LIMIT + 6));
        assert!(!exceeds_small_limit(SYNC_TAG, SMALL_MESSAGE_LIMIT + 5));
        assert!(!exceeds_small_limit(QUERY_TAG, 1 << 30));
        assert!(!exceeds_small_limit(COPY_DATA_TAG, 1 << 30));
    }

    #[test]
    fn truncated_parse_is_an_error() {
        let m = parse_msg("p", "select 1");
        let cut = &m[..m.len() - 2];
        assert!(parse_statement(cut).is_err());
    }
}
