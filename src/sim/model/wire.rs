//! The model's output side: PostgreSQL's send buffer (what is sent when) and the encoders of
//! the backend messages the pooler's codec has no encoder for.
//!
//! PostgreSQL writes messages into an 8 KiB send buffer and sends it when it is full and more
//! must go in, on a Flush or ReadyForQuery, after every ErrorResponse and NoticeResponse, after
//! CopyInResponse and NotificationResponse (`pqcomm.c`, `elog.c`). Replies to Parse or Bind
//! without Flush or Sync therefore stay unsent: a pooler that waits for them hangs, and the
//! model keeps them back the same way.

use bytes::{BufMut, BytesMut};

use crate::protocol::backend::{
    self, put_cstr, COMMAND_COMPLETE_TAG, DATA_ROW_TAG, NOTIFICATION_RESPONSE_TAG,
    PARAMETER_DESCRIPTION_TAG, ROW_DESCRIPTION_TAG,
};
use crate::protocol::frame::{begin, finish};
use crate::protocol::frontend::COPY_DATA_TAG;

use super::db::ModelDb;
use super::error::{Notice, PgError};
use super::value::{Column, Value};

/// `PQ_SEND_BUFFER_SIZE` in `pqcomm.c`.
pub const SEND_BUFFER: usize = 8192;

/// One call's view of the session's surroundings: the shared database and the caller's output
/// buffer. What the session kept unsent goes into `out` only when something more is written
/// or flushed, so a call that sends nothing (a piece of a message fed in) copies nothing;
/// from then on the tail of `out` from `unflushed` is what is still in the send buffer.
pub struct Io<'a> {
    pub db: &'a mut ModelDb,
    out: &'a mut BytesMut,
    kept: BytesMut,
    merged: bool,
    unflushed: usize,
}

impl<'a> Io<'a> {
    /// Starts a call, taking over what the session kept unsent last time.
    pub fn start(db: &'a mut ModelDb, out: &'a mut BytesMut, kept: &mut BytesMut) -> Io<'a> {
        let unflushed = out.len();
        let kept = std::mem::take(kept);
        Io {
            db,
            out,
            kept,
            merged: false,
            unflushed,
        }
    }

    /// Ends a call: the unsent tail (at most [`SEND_BUFFER`] bytes) goes back to the session.
    pub fn end(self, kept: &mut BytesMut) {
        if self.merged {
            kept.extend_from_slice(&self.out[self.unflushed..]);
            self.out.truncate(self.unflushed);
        } else {
            *kept = self.kept;
        }
    }

    /// The output buffer, with the kept bytes first in it.
    fn buf(&mut self) -> &mut BytesMut {
        if !self.merged {
            self.out.extend_from_slice(&self.kept);
            self.kept.clear();
            self.merged = true;
        }
        self.out
    }

    /// Sends everything written so far.
    pub fn flush(&mut self) {
        self.unflushed = self.buf().len();
    }

    /// Drops what was not sent yet (the process exits without flushing).
    pub fn discard(&mut self) {
        if self.merged {
            self.out.truncate(self.unflushed);
        }
        self.kept.clear();
    }

    /// Writes one message with `write`, then sends whole buffers as PostgreSQL's
    /// `internal_putbytes` does: whenever the buffer is full and more bytes must go in.
    pub fn message(&mut self, write: impl FnOnce(&mut BytesMut)) {
        write(self.buf());
        let held = self.out.len() - self.unflushed;
        if held > SEND_BUFFER {
            self.unflushed = self.out.len() - ((held - 1) % SEND_BUFFER + 1);
        }
    }

    pub fn empty(&mut self, tag: u8) {
        self.message(|b| backend::empty(b, tag));
    }

    pub fn command_complete(&mut self, tag: &str) {
        self.message(|b| {
            let at = begin(b, COMMAND_COMPLETE_TAG);
            put_cstr(b, tag.as_bytes());
            finish(b, at);
        });
    }

    /// An ErrorResponse, sent at once (`send_message_to_frontend` flushes).
    pub fn error(&mut self, e: &PgError) {
        let fields = backend::ErrorFields {
            severity: if e.fatal { "FATAL" } else { "ERROR" }.into(),
            code: e.code.into(),
            message: e.message.clone(),
            detail: None,
            hint: None,
        };
        self.message(|b| backend::error_response(b, &fields));
        self.flush();
    }

    /// A NoticeResponse, sent at once like an error.
    pub fn notice(&mut self, n: &Notice) {
        let fields = backend::ErrorFields {
            severity: n.severity.into(),
            code: n.code.into(),
            message: n.message.clone(),
            detail: None,
            hint: None,
        };
        self.message(|b| backend::notice_response(b, &fields));
        self.flush();
    }

    /// RowDescription; `formats` as Bind gave them (none: all text, one: for every column).
    pub fn row_description(&mut self, cols: &[Column], formats: &[i16]) {
        self.message(|b| {
            let at = begin(b, ROW_DESCRIPTION_TAG);
            b.put_i16(cols.len() as i16);
            for (i, c) in cols.iter().enumerate() {
                put_cstr(b, c.name.as_bytes());
                b.put_u32(c.table_oid);
                b.put_i16(c.attnum);
                b.put_u32(c.ty.oid());
                b.put_i16(c.ty.len());
                b.put_i32(-1); // typmod: none of the model's types has one
                b.put_i16(format_of(formats, i));
            }
            finish(b, at);
        });
    }

    pub fn data_row(&mut self, row: &[Value], formats: &[i16]) {
        self.message(|b| {
            let at = begin(b, DATA_ROW_TAG);
            b.put_i16(row.len() as i16);
            for (i, v) in row.iter().enumerate() {
                v.put(b, format_of(formats, i) == 1);
            }
            finish(b, at);
        });
    }

    pub fn parameter_description(&mut self, oids: &[u32]) {
        self.message(|b| {
            let at = begin(b, PARAMETER_DESCRIPTION_TAG);
            b.put_i16(oids.len() as i16);
            for oid in oids {
                b.put_u32(*oid);
            }
            finish(b, at);
        });
    }

    /// CopyInResponse or CopyOutResponse: text format, `columns` text columns.
    pub fn copy_response(&mut self, tag: u8, columns: i16) {
        self.message(|b| {
            let at = begin(b, tag);
            b.put_i8(0);
            b.put_i16(columns);
            for _ in 0..columns {
                b.put_i16(0);
            }
            finish(b, at);
        });
    }

    pub fn copy_data(&mut self, data: &[u8]) {
        self.message(|b| {
            let at = begin(b, COPY_DATA_TAG);
            b.put_slice(data);
            finish(b, at);
        });
    }

    pub fn parameter_status(&mut self, name: &str, value: &str) {
        self.message(|b| backend::parameter_status(b, name, value));
    }

    /// NotificationResponse, sent at once (`ProcessIncomingNotify` flushes).
    pub fn notification(&mut self, pid: i32, channel: &str, payload: &str) {
        self.message(|b| {
            let at = begin(b, NOTIFICATION_RESPONSE_TAG);
            b.put_i32(pid);
            put_cstr(b, channel.as_bytes());
            put_cstr(b, payload.as_bytes());
            finish(b, at);
        });
        self.flush();
    }
}

/// The format code of column `i` under Bind's result-format list.
fn format_of(formats: &[i16], i: usize) -> i16 {
    match formats {
        [] => 0,
        [one] => *one,
        many => many.get(i).copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_whole_buffers_and_keeps_the_tail() {
        let mut db = ModelDb::new();
        let mut out = BytesMut::new();
        let mut kept = BytesMut::new();
        let mut io = Io::start(&mut db, &mut out, &mut kept);
        io.copy_data(&[b'x'; 20_000]);
        io.end(&mut kept);
        // 20,005 bytes written: two full buffers sent, the rest held.
        assert_eq!(out.len(), 2 * SEND_BUFFER);
        assert_eq!(kept.len(), 20_005 - 2 * SEND_BUFFER);
        let mut io = Io::start(&mut db, &mut out, &mut kept);
        io.flush();
        io.end(&mut kept);
        assert_eq!(out.len(), 20_005);
        assert!(kept.is_empty());
    }

    #[test]
    fn a_full_buffer_waits_for_the_next_byte() {
        let mut db = ModelDb::new();
        let mut out = BytesMut::new();
        let mut kept = BytesMut::new();
        let mut io = Io::start(&mut db, &mut out, &mut kept);
        io.copy_data(&[b'x'; SEND_BUFFER - 5]);
        io.end(&mut kept);
        assert!(out.is_empty());
        assert_eq!(kept.len(), SEND_BUFFER);
    }
}
