//! Checked reads inside one already-cut message body.

use thiserror::Error;

/// A message body that does not match its declared layout.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("message truncated")]
    Truncated,
    #[error("string not terminated")]
    Unterminated,
    #[error("invalid UTF-8 in message")]
    Utf8,
    #[error("invalid message: {0}")]
    Invalid(&'static str),
}

/// A forward-only reader over a message body; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn u8(&mut self) -> Result<u8, ParseError> {
        let b = *self.buf.get(self.pos).ok_or(ParseError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    pub fn i16(&mut self) -> Result<i16, ParseError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, ParseError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let end = self.pos.checked_add(n).ok_or(ParseError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(ParseError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// A NUL-terminated string, without its terminator.
    pub fn cstr(&mut self) -> Result<&'a [u8], ParseError> {
        let rest = &self.buf[self.pos.min(self.buf.len())..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(ParseError::Unterminated)?;
        self.pos += nul + 1;
        Ok(&rest[..nul])
    }

    /// A NUL-terminated UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, ParseError> {
        std::str::from_utf8(self.cstr()?).map_err(|_| ParseError::Utf8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_checked() {
        let mut c = Cursor::new(b"ab\0\x00\x01");
        assert_eq!(c.str().unwrap(), "ab");
        assert_eq!(c.i16().unwrap(), 1);
        assert_eq!(c.u8(), Err(ParseError::Truncated));
        assert_eq!(Cursor::new(b"abc").cstr(), Err(ParseError::Unterminated));
        assert_eq!(Cursor::new(b"\x00").i32(), Err(ParseError::Truncated));
    }
}
