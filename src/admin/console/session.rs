//! The SQL console's session over the wire: PostgreSQL's simple query protocol only, each
//! query one console command, answered as rows (text columns) or a command tag.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use thiserror::Error;

use super::answer::{escape, Answer};
use super::execute::{execute, Caller};
use crate::net::read::read_some;
use crate::net::ClientStream;
use crate::protocol::frame::{self, begin, finish};
use crate::protocol::{backend, frontend, sqlstate, FrameError};
use crate::relay::error_fields;
use crate::shared::Shared;

/// Why a console session ended early.
#[derive(Debug, Error)]
pub enum ConsoleError {
    #[error("client I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A message that cannot be cut: the client broke the protocol.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Serves a console session after a successful console login: `buf` holds what the client
/// sent after its startup packet, `out` what precedes AuthenticationOk.
pub async fn serve(
    stream: &mut ClientStream,
    shared: &Arc<Shared>,
    who: Caller,
    mut buf: BytesMut,
    mut out: BytesMut,
) -> Result<(), ConsoleError> {
    greeting(&mut out);
    stream.send(&out).await?;
    loop {
        let Some(f) = frame::cut(&mut buf, 1 << 20)? else {
            if read_some(stream, &mut buf).await? == 0 {
                return Ok(());
            }
            continue;
        };
        let mut out = BytesMut::new();
        match f.tag {
            frontend::TERMINATE_TAG => return Ok(()),
            frontend::QUERY_TAG => {
                let sql = frontend::query_text(&f.bytes).unwrap_or_default();
                let sql = String::from_utf8_lossy(sql);
                // A command that waits (PAUSE, KILL, WAIT_CLOSE) waits no longer than its
                // client: one that leaves ends the wait.
                {
                    let work = run(shared, &sql, &who, &mut out);
                    tokio::pin!(work);
                    loop {
                        tokio::select! {
                            () = &mut work => break,
                            r = read_some(stream, &mut buf), if buf.len() < 1 << 20 => {
                                if r? == 0 {
                                    return Ok(());
                                }
                            }
                        }
                    }
                }
                backend::ready_for_query(&mut out, backend::TX_IDLE);
            }
            frontend::SYNC_TAG => backend::ready_for_query(&mut out, backend::TX_IDLE),
            _ => {
                let e = error_fields(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "the admin console speaks the simple query protocol only".into(),
                );
                backend::error_response(&mut out, &e);
            }
        }
        stream.send(&out).await?;
    }
}

/// AuthenticationOk and what a server says next: the parameters psql reads, a BackendKeyData
/// of zeros (the console cancels nothing) and ReadyForQuery.
fn greeting(out: &mut BytesMut) {
    backend::auth_ok(out);
    for (k, v) in [
        (
            "server_version",
            concat!("15.0 (droid-pool ", env!("CARGO_PKG_VERSION"), ")"),
        ),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        backend::parameter_status(out, k, v);
    }
    backend::backend_key_data(out, 0, 0);
    backend::ready_for_query(out, backend::TX_IDLE);
}

/// Runs one console command and writes its answer: rows and `SHOW`, the command's tag, or an
/// ERROR.
async fn run(shared: &Arc<Shared>, sql: &str, who: &Caller, out: &mut BytesMut) {
    match execute(shared, sql, who).await {
        Answer::Table(cols, rows) => {
            table(out, cols, &rows);
            complete(out, "SHOW");
        }
        Answer::Done(tag) => complete(out, tag),
        Answer::Error(code, message) => {
            backend::error_response(out, &error_fields(code, message));
        }
    }
}

/// RowDescription (every column text) and one DataRow per row, each value escaped.
fn table(out: &mut BytesMut, cols: &[&str], rows: &[Vec<String>]) {
    let at = begin(out, backend::ROW_DESCRIPTION_TAG);
    out.put_i16(cols.len() as i16);
    for c in cols {
        out.put_slice(c.as_bytes());
        out.put_u8(0);
        out.put_i32(0); // table oid
        out.put_i16(0); // column number
        out.put_i32(25); // text
        out.put_i16(-1);
        out.put_i32(-1);
        out.put_i16(0); // text format
    }
    finish(out, at);
    for row in rows {
        let at = begin(out, backend::DATA_ROW_TAG);
        out.put_i16(row.len() as i16);
        for v in row {
            let v = escape(v);
            out.put_i32(v.len() as i32);
            out.put_slice(v.as_bytes());
        }
        finish(out, at);
    }
}

/// CommandComplete with `tag`.
fn complete(out: &mut BytesMut, tag: &str) {
    let at = begin(out, backend::COMMAND_COMPLETE_TAG);
    out.put_slice(tag.as_bytes());
    out.put_u8(0);
    finish(out, at);
}
