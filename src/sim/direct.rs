//! The oracle's expectation: a client's program run directly against a model session, as a
//! client connected straight to PostgreSQL would run it (write, then read: up to the fence's
//! ReadyForQuery, or what was sent by a Flush), and the comparison of two transcripts.

use bytes::BytesMut;

use super::model::{ModelDb, ModelServer};
use super::program::{self, ClientProgram, End, Program};
use crate::protocol::backend::{
    self as b, EMPTY_QUERY_RESPONSE_TAG, NOTIFICATION_RESPONSE_TAG, READY_FOR_QUERY_TAG,
};
use crate::protocol::frame::{self, Frame};

/// The process id of the model session a direct run uses.
pub const DIRECT_PID: i32 = 4242;

/// What one client received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirectRun {
    /// Every backend message, whole, in order.
    pub messages: Vec<Frame>,
    /// After each Flush-ended write, how many messages had arrived.
    pub after_flush: Vec<usize>,
    /// The server ended the session (FATAL): the program stopped there.
    pub closed: bool,
    /// A fence got no answer (the session waits for a lock or in COPY): the program stopped.
    pub stalled: bool,
}

/// Runs one client's program on a new session of `db` (process id `pid`); the session is
/// disconnected at the end, releasing what it held.
pub fn run_client(program: &ClientProgram, db: &mut ModelDb, pid: i32) -> DirectRun {
    let mut server = ModelServer::new(pid);
    let mut run = DirectRun::default();
    let mut out = BytesMut::new();
    let mut bytes = BytesMut::new();
    for w in &program.writes {
        bytes.clear();
        w.encode(&mut bytes);
        server.feed(db, &bytes, &mut out);
        while let Ok(Some(f)) = frame::cut(&mut out, usize::MAX) {
            run.messages.push(f);
        }
        if server.is_closed() {
            run.closed = true;
            break;
        }
        match w.end {
            End::Fence if !fenced(&run.messages) => {
                run.stalled = true;
                break;
            }
            End::Fence => {}
            End::Flush => run.after_flush.push(run.messages.len()),
        }
    }
    server.disconnect(db);
    run
}

/// Whether the transcript ends with the fence's answer (EmptyQueryResponse, ReadyForQuery).
fn fenced(messages: &[Frame]) -> bool {
    matches!(
        messages,
        [.., i, z] if i.tag == EMPTY_QUERY_RESPONSE_TAG && z.tag == READY_FOR_QUERY_TAG
    )
}

/// A database holding the tables of `clients` clients, empty.
pub fn database(clients: usize) -> ModelDb {
    ModelDb::with_tables(program::tables(clients))
}

/// Runs each client of `program` alone on a fresh database: each works on its own table and
/// objects, so what it receives does not depend on the others.
pub fn run_program(program: &Program) -> Vec<DirectRun> {
    program
        .clients
        .iter()
        .map(|c| run_client(c, &mut database(program.clients.len()), DIRECT_PID))
        .collect()
}

/// The first difference between the messages a client should have received and those it
/// did, with some context around it; NotificationResponse is compared without its process id
/// (directly it is the model session's, through a pooler the server's).
pub fn first_difference(expected: &[Frame], actual: &[Frame]) -> Option<String> {
    let same = |a: &Frame, b: &Frame| {
        if a.tag == NOTIFICATION_RESPONSE_TAG && b.tag == NOTIFICATION_RESPONSE_TAG {
            a.body().get(4..) == b.body().get(4..)
        } else {
            a == b
        }
    };
    let at = expected
        .iter()
        .zip(actual)
        .enumerate()
        .position(|(i, (a, b))| {
            !same(a, b) && documented(a, b, &actual[..i]) != Some(Departure::SameBlock)
        })
        .or_else(|| (expected.len() != actual.len()).then(|| expected.len().min(actual.len())))?;
    if at < expected.len().min(actual.len())
        && documented(&expected[at], &actual[at], &actual[..at]) == Some(Departure::Ends)
    {
        return None;
    }
    let from = at.saturating_sub(3);
    let show = |t: &[Frame]| {
        let lines: Vec<String> = t
            .iter()
            .enumerate()
            .skip(from)
            .take(8)
            .map(|(i, f)| format!("    {i}: {}", describe(f)))
            .collect();
        if lines.is_empty() {
            "    (nothing)".to_owned()
        } else {
            lines.join("\n")
        }
    };
    Some(format!(
        "first difference at message {at}\n  expected:\n{}\n  received:\n{}",
        show(expected),
        show(actual)
    ))
}

/// How a pooled client may depart from the direct run, as the README's "Prepared
/// statements" documents (and the differential test against PostgreSQL allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// In a failed block, a Bind of a tracked statement the held server lacks needs a
    /// replayed Parse, which is refused with 25P02 before the Bind could be checked (directly,
    /// PostgreSQL checks the Bind's parameter count first: 08P01). Both fail the same block,
    /// and the transcripts go on alike.
    SameBlock,
    /// The same for a Describe of a statement returning no rows: directly it is described,
    /// pooled the replay is refused with 25P02 and the batch skips to Sync. The transcripts
    /// no longer line up: the client is compared up to here. Also: a server that ended itself
    /// (`pg_terminate_backend(pg_backend_pid())`) dies at its next message; a message the
    /// pooler answers itself (a Close of a tracked statement) meanwhile still gets its
    /// answer before the FATAL (as it would had the server been ended a moment later).
    Ends,
}

/// Whether `actual` in place of `expected` is a documented departure; `before`: what the
/// client received before it.
pub fn documented(expected: &Frame, actual: &Frame, before: &[Frame]) -> Option<Departure> {
    let failed_block = before
        .iter()
        .rev()
        .find(|f| f.tag == READY_FOR_QUERY_TAG)
        .is_some_and(|z| z.body() == b"E");
    let code = |f: &Frame| {
        (f.tag == b::ERROR_RESPONSE_TAG)
            .then(|| b::parse_error(f.body()).ok())
            .flatten()
    };
    let ended = code(expected).is_some_and(|e| e.severity == "FATAL" && e.code == "57P01");
    if ended && actual.tag == b::CLOSE_COMPLETE_TAG {
        return Some(Departure::Ends);
    }
    let refused = code(actual).is_some_and(|e| e.code == "25P02");
    if !failed_block || !refused {
        return None;
    }
    if code(expected)
        .is_some_and(|e| e.code == "08P01" && e.message.starts_with("bind message supplies"))
    {
        return Some(Departure::SameBlock);
    }
    (expected.tag == b::PARAMETER_DESCRIPTION_TAG).then_some(Departure::Ends)
}

/// One message on one line: its tag and what it says, long values cut short.
pub fn describe(f: &Frame) -> String {
    let tag = f.tag as char;
    let body = f.body();
    match f.tag {
        b::ERROR_RESPONSE_TAG | b::NOTICE_RESPONSE_TAG => match b::parse_error(body) {
            Ok(e) => format!("{tag} {} {} {}", e.severity, e.code, e.message),
            Err(_) => format!("{tag} <unparsable>"),
        },
        b::DATA_ROW_TAG => match b::parse_data_row(body) {
            Ok(cols) => {
                let cols: Vec<String> = cols.iter().map(|c| short(*c)).collect();
                format!("D [{}]", cols.join(", "))
            }
            Err(_) => "D <unparsable>".to_owned(),
        },
        _ if body.len() <= 80 => format!("{tag} {}", String::from_utf8_lossy(body).escape_debug()),
        _ => format!("{tag} <{} bytes>", body.len()),
    }
}

fn short(col: Option<&[u8]>) -> String {
    match col {
        None => "NULL".to_owned(),
        Some(v) if v.len() <= 40 => format!("{:?}", String::from_utf8_lossy(v)),
        Some(v) => format!("<{} bytes>", v.len()),
    }
}

#[cfg(test)]
mod tests;
