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
