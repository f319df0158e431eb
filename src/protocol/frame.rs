//! Framing of tagged messages: one tag byte, then a big-endian `i32` length that counts itself
//! and the body but not the tag (protocol docs, "Message Formats").

use bytes::{Bytes, BytesMut};
use thiserror::Error;

/// Tag plus length field.
pub const HEADER_LEN: usize = 5;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("invalid message length {0}")]
    BadLength(u32),
    #[error("message of {len} bytes exceeds the maximum of {max}")]
    TooLarge { len: usize, max: usize },
}

/// One whole message: the tag and the complete bytes (tag and length included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub tag: u8,
    pub bytes: Bytes,
}

impl Frame {
    /// The message body, after the tag and length.
    pub fn body(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..]
    }
}

/// Tag and declared length of the first message, once its header is buffered.
#[inline]
pub fn peek_header(buf: &[u8]) -> Option<(u8, u32)> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    Some((buf[0], u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]])))
}

/// Total size of the first message (tag included) once it is fully buffered. `Ok(None)` means
/// more bytes are needed. The length is checked before anything is allocated for it.
#[inline]
pub fn complete_len(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    let Some((_, len)) = peek_header(buf) else {
        return Ok(None);
    };
    let total = checked_total(len, max)?;
    Ok((buf.len() >= total).then_some(total))
}

/// Validates a declared length and returns the whole message size including the tag.
#[inline]
pub fn checked_total(len: u32, max: usize) -> Result<usize, FrameError> {
    if len < 4 || len > i32::MAX as u32 {
        return Err(FrameError::BadLength(len));
    }
    let total = len as usize + 1;
    if total > max {
        return Err(FrameError::TooLarge { len: total, max });
    }
    Ok(total)
}

/// Cuts the first whole message off `buf`; `Ok(None)` until it is complete.
pub fn cut(buf: &mut BytesMut, max: usize) -> Result<Option<Frame>, FrameError> {
    match complete_len(buf, max)? {
        Some(total) => {
            let bytes = buf.split_to(total).freeze();
            Ok(Some(Frame {
                tag: bytes[0],
                bytes,
            }))
        }
        None => Ok(None),
    }
}

/// Starts a message in `buf`; returns the offset to hand to [`finish`] once the body is written.
#[inline]
pub fn begin(buf: &mut BytesMut, tag: u8) -> usize {
    buf.extend_from_slice(&[tag, 0, 0, 0, 0]);
    buf.len() - 4
}

/// Back-patches the length of a message started with [`begin`].
#[inline]
pub fn finish(buf: &mut BytesMut, len_at: usize) {
    let len = (buf.len() - len_at) as u32;
    buf[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_is_none_not_error() {
        let mut b = BytesMut::from(&b"Q\0\0\0\x09sel"[..]);
        assert_eq!(cut(&mut b, 1024), Ok(None));
        b.extend_from_slice(b"e\0Z");
        let f = cut(&mut b, 1024).unwrap().unwrap();
        assert_eq!(f.tag, b'Q');
        assert_eq!(f.body(), b"sele\0");
        assert_eq!(&b[..], b"Z");
    }

    #[test]
    fn bad_lengths_rejected_before_allocation() {
        assert_eq!(
            complete_len(b"Q\0\0\0\x03", 1024),
            Err(FrameError::BadLength(3))
        );
        assert_eq!(
            complete_len(b"Q\x80\0\0\0", usize::MAX),
            Err(FrameError::BadLength(0x8000_0000))
        );
        assert!(matches!(
            complete_len(b"Q\x7f\0\0\0", 1 << 20),
            Err(FrameError::TooLarge { .. })
        ));
    }
}
