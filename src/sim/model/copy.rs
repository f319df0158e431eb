//! COPY FROM STDIN (protocol docs, "COPY Operations"): after CopyInResponse the session reads
//! CopyData, CopyDone or CopyFail; Flush and Sync are ignored (`CopyGetData`); each complete
//! line is converted as it arrives, so bad data fails the COPY at the CopyData that carries it;
//! any other message is a protocol violation that also loses the session.

use crate::protocol::backend::{COPY_IN_RESPONSE_TAG, COPY_OUT_RESPONSE_TAG};
use crate::protocol::cursor::Cursor;
use crate::protocol::frame::Frame;
use crate::protocol::frontend as f;

use super::error::{PgError, BAD_COPY_FORMAT, PROTOCOL_VIOLATION, QUERY_CANCELED};
use super::tx::TableRef;
use super::value::parse_int4;
use super::wire::Io;
use super::{ModelServer, State};

/// A COPY FROM STDIN in progress.
#[derive(Debug)]
pub struct CopyIn {
    table: TableRef,
    rows: Vec<Option<i32>>,
    /// The start of a line whose end has not arrived.
    partial: Vec<u8>,
    /// `\.` was read: what follows is ignored.
    ended: bool,
    /// The portal that runs it (extended protocol), or `None` for a simple Query.
    portal: Option<String>,
}

impl CopyIn {
    /// Converts every complete line of `data` (the start of the first joined to what was left
    /// over); with `last`, the rest too.
    fn take(&mut self, data: &[u8], last: bool) -> Result<(), PgError> {
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                self.line(&rest[..nl])?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&rest[..nl]);
                self.line(&line)?;
            }
            rest = &rest[nl + 1..];
        }
        self.partial.extend_from_slice(rest);
        if last && !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line)?;
        }
        Ok(())
    }

    /// One line of text format for a one-`int`-column table.
    fn line(&mut self, line: &[u8]) -> Result<(), PgError> {
        if self.ended {
            return Ok(());
        }
        match line {
            b"\\." => self.ended = true,
            b"\\N" => self.rows.push(None),
            l if l.contains(&b'\t') => {
                let msg = "extra data after last expected column";
                return Err(PgError::new(BAD_COPY_FORMAT, msg));
            }
            l => self.rows.push(Some(parse_int4(l)?)),
        }
        Ok(())
    }
}

impl ModelServer {
    /// CopyInResponse (sent at once: `ReceiveCopyBegin` flushes) and COPY IN mode.
    pub(super) fn start_copy_in(&mut self, io: &mut Io, table: TableRef, portal: Option<String>) {
        io.copy_response(COPY_IN_RESPONSE_TAG, 1);
        io.flush();
        self.state = State::CopyIn(CopyIn {
            table,
            rows: Vec::new(),
            partial: Vec::new(),
            ended: false,
            portal,
        });
    }

    pub(super) fn on_copy_message(&mut self, io: &mut Io, msg: &Frame) {
        let State::CopyIn(copy) = &mut self.state else {
            return;
        };
        let result = match msg.tag {
            f::COPY_DATA_TAG => copy.take(msg.body(), false),
            f::COPY_DONE_TAG => match copy.take(&[], true) {
                Ok(()) => return self.copy_done(io),
                Err(e) => Err(e),
            },
            f::COPY_FAIL_TAG => {
                let why = Cursor::new(msg.body()).cstr().unwrap_or_default();
                let why = String::from_utf8_lossy(why);
                let msg = format!("COPY from stdin failed: {why}");
                Err(PgError::new(QUERY_CANCELED, msg))
            }
            f::FLUSH_TAG | f::SYNC_TAG => Ok(()),
            tag => {
                let msg = format!("unexpected message type 0x{tag:02X} during COPY from stdin");
                self.state = State::Ready;
                io.error(&PgError::new(PROTOCOL_VIOLATION, msg));
                // The message's body was not read: PostgreSQL cannot find the next one, and
                // ends the session before any ReadyForQuery.
                let msg = "terminating connection because protocol synchronization was lost";
                return self.fail(io, PgError::fatal(PROTOCOL_VIOLATION, msg));
            }
        };
        if let Err(e) = result {
            self.copy_failed(io, e);
        }
    }

    /// CopyDone: the rows join the transaction, CommandComplete, and the Query or Execute
    /// that started the COPY goes on.
    fn copy_done(&mut self, io: &mut Io) {
        let State::CopyIn(copy) = std::mem::replace(&mut self.state, State::Ready) else {
            return;
        };
        let n = copy.rows.len();
        let table = copy.table;
        self.tx
            .writes
            .extend(copy.rows.into_iter().map(|v| (table.clone(), v)));
        io.command_complete(&format!("COPY {n}"));
        match copy.portal {
            None => {
                self.statement_done(io);
                self.run_query(io);
            }
            Some(_) => self.tx.pipelined = true,
        }
    }

    /// The COPY failed: as an error of the Query (ReadyForQuery follows) or of the Execute
    /// (skip to Sync) that started it.
    fn copy_failed(&mut self, io: &mut Io, e: PgError) {
        let State::CopyIn(copy) = std::mem::replace(&mut self.state, State::Ready) else {
            return;
        };
        if copy.portal.is_some() {
            return self.fail_extended(io, e);
        }
        self.work = None;
        self.fail(io, e);
        if !self.is_closed() {
            self.ready(io);
        }
    }
}

/// COPY TO STDOUT: CopyOutResponse, a CopyData per row in text format, CopyDone,
/// CommandComplete (protocol docs, "COPY Operations").
pub(super) fn send_copy_out(io: &mut Io, rows: &[Option<i32>]) {
    io.copy_response(COPY_OUT_RESPONSE_TAG, 1);
    for r in rows {
        match r {
            Some(n) => io.copy_data(format!("{n}\n").as_bytes()),
            None => io.copy_data(b"\\N\n"),
        }
    }
    io.empty(crate::protocol::frontend::COPY_DONE_TAG);
    io.command_complete(&format!("COPY {}", rows.len()));
}
