//! A simple query the pooler runs itself on an idle server (the session-mode reset query, the
//! idle check): sent, answered up to ReadyForQuery, the answer dropped.

use bytes::BytesMut;

use super::{read_frame, ServerConn, ServerError};
use crate::protocol::{backend, frontend};

/// Runs `sql` on `conn`, which must owe nothing, up to its ReadyForQuery; values reported with
/// ParameterStatus are recorded. An ErrorResponse, or a transaction left open, is an error:
/// the connection is then not fit for a client.
pub async fn run_simple(conn: &mut ServerConn, sql: &str) -> Result<(), ServerError> {
    let mut out = BytesMut::new();
    frontend::query(&mut out, sql);
    conn.stream.send(&out).await?;
    let mut failed = None;
    loop {
        let f = read_frame(conn).await?;
        match f.tag {
            backend::PARAMETER_STATUS_TAG => {
                if let Ok((k, v)) = backend::parse_parameter_status(f.body()) {
                    conn.set_param(k, v);
                }
            }
            backend::ERROR_RESPONSE_TAG => {
                let e = backend::parse_error(f.body())?;
                failed = Some(format!("{} ({})", e.message, e.code));
            }
            backend::READY_FOR_QUERY_TAG => {
                return match failed {
                    Some(e) => Err(ServerError::QueryFailed(e)),
                    None if f.body() == [backend::TX_IDLE] => Ok(()),
                    None => Err(ServerError::QueryFailed(
                        "it left a transaction open".into(),
                    )),
                };
            }
            _ => {}
        }
    }
}

/// The name of the pooler's own one-value statement: spaces keep it apart from any name a
/// driver generates (tracked clients' names are `p<c>_...` there anyway).
const VALUE_STATEMENT: &[u8] = b"droid-pool value";

/// Runs `sql`, a one-value query, on `conn` (idle, owing nothing) up to its ReadyForQuery:
/// the first column of its first row, `None` for an error, a NULL or no row (the connection
/// is in step either way). `Err` when the connection failed or the server broke the
/// protocol. It runs as a named statement closed at once, not as a simple Query: a simple
/// Query would drop the client's unnamed statement, which a pinned client may still bind.
pub async fn query_value(conn: &mut ServerConn, sql: &str) -> Result<Option<Vec<u8>>, ServerError> {
    let mut out = BytesMut::new();
    frontend::parse(&mut out, VALUE_STATEMENT, sql);
    frontend::bind_unnamed(&mut out, VALUE_STATEMENT);
    frontend::execute_unnamed(&mut out);
    // Skipped with the rest if the Parse fails (a statement of that name is not ours).
    frontend::close_statement(&mut out, VALUE_STATEMENT);
    frontend::sync(&mut out);
    conn.stream.send(&out).await?;
    let mut value = None;
    let mut failed = false;
    loop {
        let f = read_frame(conn).await?;
        match f.tag {
            backend::DATA_ROW_TAG if value.is_none() => {
                let row = backend::parse_data_row(f.body())?;
                value = row.first().copied().flatten().map(<[u8]>::to_vec);
            }
            backend::PARAMETER_STATUS_TAG => {
                if let Ok((k, v)) = backend::parse_parameter_status(f.body()) {
                    conn.set_param(k, v);
                }
            }
            backend::ERROR_RESPONSE_TAG => failed = true,
            backend::READY_FOR_QUERY_TAG => return Ok(value.filter(|_| !failed)),
            _ => {}
        }
    }
}
