//! The expected-reply queue, message by message: what is forwarded, swallowed or completed,
//! and the server states (skip to Sync, COPY IN) the queue models.

use super::*;

#[test]
fn replay_parse_complete_is_swallowed_then_synthetic_follows() {
    let mut r = Replies::default();
    r.push(Owed::Replay {
        server_name: Bytes::from_static(b"p1_p"),
        id: 1,
    });
    r.push(Owed::Client(Request::Bind));
    r.push(Owed::Synthetic(Bytes::from_static(b"3\0\0\0\x04")));
    r.push(Owed::Client(Request::Sync));
    let s = r.on_message(b'1');
    assert!(!s.forward && matches!(s.completed, Some(Owed::Replay { .. })));
    let s = r.on_message(b'2');
    assert!(s.forward && matches!(s.completed, Some(Owed::Client(Request::Bind))));
    assert!(r.pop_answer().is_some());
    let s = r.on_message(b'Z');
    assert!(s.forward && s.ready);
    assert!(r.is_empty());
}

#[test]
fn rows_pass_exactly_when_on_message_would_forward_them_unchanged() {
    let name = || Bytes::from_static(b"p1_p");
    let cases = [
        (None, true),
        (Some(Owed::Client(Request::Execute)), true),
        (Some(Owed::Client(Request::Query)), true),
        (
            Some(Owed::Marked {
                req: Request::Execute,
                client_seq: 1,
                server_seq: 1,
            }),
            true,
        ),
        (Some(Owed::TrackedBind { id: 1 }), true),
        (Some(Owed::Internal), false),
        (
            Some(Owed::Replay {
                server_name: name(),
                id: 1,
            }),
            false,
        ),
        (
            Some(Owed::InjectedClose {
                server_name: name(),
                id: 1,
            }),
            false,
        ),
        (Some(Owed::Synthetic(Bytes::from_static(b"x"))), false),
    ];
    for (front, passes) in cases {
        let label = format!("{front:?}");
        let mut r = Replies::default();
        if let Some(o) = front {
            r.push(o);
        }
        assert_eq!(r.passes_rows(), passes, "{label}");
        if passes {
            // The slow path agrees: forwarded, and nothing completed.
            let s = r.on_message(b::DATA_ROW_TAG);
            assert!(s.forward && s.completed.is_none() && !s.ready, "{label}");
        } else if r.pop_answer().is_none() {
            // Not an answer waiting its turn, so the slow path keeps the row.
            assert!(!r.on_message(b::DATA_ROW_TAG).forward, "{label}");
        }
    }
}

#[test]
fn error_in_extended_skips_to_sync() {
    let mut r = Replies::default();
    r.push(Owed::Client(Request::Bind));
    r.push(Owed::TrackedParse {
        name: Bytes::from_static(b"q"),
        server_name: Bytes::from_static(b"p1_q"),
        id: 2,
    });
    r.push(Owed::Synthetic(Bytes::from_static(b"x")));
    r.push(Owed::Client(Request::Sync));
    let mut skipped = Vec::new();
    let s = r.on_error(&mut skipped);
    assert!(s.forward);
    assert!(matches!(s.completed, Some(Owed::Client(Request::Bind))));
    assert_eq!(skipped.len(), 2);
    assert_eq!(r.len(), 1);
}

#[test]
fn error_inside_query_waits_for_ready() {
    let mut r = Replies::default();
    r.push(Owed::Client(Request::Query));
    let mut skipped = Vec::new();
    let s = r.on_error(&mut skipped);
    assert!(s.forward && s.completed.is_none());
    assert!(r.on_message(b'Z').completed.is_some());
}

#[test]
fn internal_query_is_swallowed_whole() {
    let mut r = Replies::default();
    r.push(Owed::Internal);
    r.push(Owed::Client(Request::Query));
    assert!(!r.on_message(b'C').forward);
    assert!(!r.on_message(b'S').forward);
    let s = r.on_message(b'Z');
    assert!(!s.forward && s.ready && matches!(s.completed, Some(Owed::Internal)));
    assert!(r.on_message(b'T').forward);
}
fn sync() -> Owed {
    Owed::Client(Request::Sync)
}

/// Parse of bad SQL + Flush: the error arrives with no Sync owed. What is sent next up to
/// the Sync owes nothing (the server discards it), and the Sync's ReadyForQuery empties
/// the queue: the server is free again.
#[test]
fn error_before_sync_skips_what_follows_until_sync() {
    let mut r = Replies::default();
    assert!(r.push(Owed::Client(Request::Parse)).is_none());
    let mut skipped = Vec::new();
    let s = r.on_error(&mut skipped);
    assert!(s.forward && matches!(s.completed, Some(Owed::Client(Request::Parse))));
    assert!(r.skips_to_sync() && !r.is_empty());
    assert!(matches!(
        r.push(Owed::Client(Request::Bind)),
        Some(Owed::Client(Request::Bind))
    ));
    assert!(r.push(Owed::Client(Request::Execute)).is_some());
    assert!(r.push(sync()).is_none());
    assert!(!r.skips_to_sync());
    let s = r.on_message(b::READY_FOR_QUERY_TAG);
    assert!(s.forward && s.ready && s.completed.is_some());
    assert!(r.is_empty());
    // A simple query afterwards is owed and answered as usual.
    assert!(r.push(Owed::Client(Request::Query)).is_none());
    assert!(r.on_message(b::READY_FOR_QUERY_TAG).completed.is_some());
    assert!(r.is_empty());
}

#[test]
fn a_tracked_query_owes_ready() {
    let mut r = Replies::default();
    assert!(r
        .push(Owed::Marked {
            req: Request::Query,
            client_seq: 1,
            server_seq: 1,
        })
        .is_none());
    assert!(r.owes_ready());
    assert!(r.on_message(b::READY_FOR_QUERY_TAG).completed.is_some());
    assert!(!r.owes_ready());
}

/// Extended-protocol COPY as libpq sends it: Execute and Sync, then the data, CopyDone
/// and a second Sync. The first Sync is read by the COPY and ignored; one ReadyForQuery
/// comes, for the second.
#[test]
fn copy_in_ignores_the_sync_sent_before_its_data() {
    let mut r = Replies::default();
    for o in [
        Owed::Client(Request::Parse),
        Owed::Client(Request::Bind),
        Owed::Client(Request::Execute),
        sync(),
    ] {
        assert!(r.push(o).is_none());
    }
    assert!(r.on_message(b::PARSE_COMPLETE_TAG).completed.is_some());
    assert!(r.on_message(b::BIND_COMPLETE_TAG).completed.is_some());
    assert!(r.on_message(b::COPY_IN_RESPONSE_TAG).completed.is_none());
    assert!(r.in_copy_in() && !r.owes_ready());
    // A Sync sent during the COPY owes nothing; CopyDone ends the client's part.
    assert!(r.push(sync()).is_none());
    assert!(r.push(Owed::CopyEnd).is_none());
    assert!(!r.in_copy_in());
    assert!(r.push(sync()).is_none());
    assert!(r.on_message(b::COMMAND_COMPLETE_TAG).completed.is_some());
    let s = r.on_message(b::READY_FOR_QUERY_TAG);
    assert!(s.ready && s.completed.is_some());
    assert!(r.is_empty());
}

/// A client that pipelines its COPY data and CopyDone before the server's CopyInResponse:
/// only the Syncs before the CopyDone are the COPY's.
#[test]
fn copy_in_with_pipelined_end_keeps_the_later_sync() {
    let mut r = Replies::default();
    for o in [
        Owed::Client(Request::Execute),
        sync(),
        Owed::CopyEnd,
        sync(),
    ] {
        assert!(r.push(o).is_none());
    }
    r.on_message(b::COPY_IN_RESPONSE_TAG);
    assert!(!r.in_copy_in());
    assert!(r.on_message(b::COMMAND_COMPLETE_TAG).completed.is_some());
    assert!(r.on_message(b::READY_FOR_QUERY_TAG).completed.is_some());
    assert!(r.is_empty());
}

/// An error in the middle of an extended COPY (bad data, or CopyFail) before the client's
/// CopyDone: the server skips to the client's next Sync.
#[test]
fn error_during_copy_in_skips_to_the_next_sync() {
    let mut r = Replies::default();
    assert!(r.push(Owed::Client(Request::Execute)).is_none());
    assert!(r.push(sync()).is_none());
    r.on_message(b::COPY_IN_RESPONSE_TAG);
    let mut skipped = Vec::new();
    let s = r.on_error(&mut skipped);
    assert!(s.forward && s.completed.is_some());
    assert!(r.skips_to_sync() && !r.in_copy_in());
    assert!(r.push(Owed::CopyEnd).is_none());
    assert!(r.push(sync()).is_none());
    assert!(r.on_message(b::READY_FOR_QUERY_TAG).completed.is_some());
    assert!(r.is_empty());
}

/// COPY in a simple Query: its ReadyForQuery completes it, and a CopyDone the client sends
/// after the server's error owes nothing.
#[test]
fn simple_copy_error_then_late_copy_done() {
    let mut r = Replies::default();
    assert!(r.push(Owed::Client(Request::Query)).is_none());
    r.on_message(b::COPY_IN_RESPONSE_TAG);
    assert!(r.in_copy_in());
    let mut skipped = Vec::new();
    assert!(r.on_error(&mut skipped).completed.is_none());
    assert!(!r.in_copy_in() && !r.skips_to_sync());
    assert!(r.push(Owed::CopyEnd).is_none());
    assert!(r.on_message(b::READY_FOR_QUERY_TAG).completed.is_some());
    assert!(r.is_empty());
    assert!(r.push(Owed::CopyEnd).is_none());
    assert!(r.is_empty());
}
