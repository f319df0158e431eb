//! The expected-reply queue fed arbitrary requests and arbitrary server messages.
//!
//! Input: a sequence of operations, one byte each (plus a tag byte for server messages):
//! queue one of the owed kinds the session queues, or handle one server message (any tag,
//! ErrorResponse through `on_error`), or pop the pooler's answers at the front.
//!
//! Checks: nothing panics; the queue never holds more than was pushed; a DataRow that
//! `passes_rows` says goes to the client as it is is forwarded and completes nothing (the fast
//! path agrees with the slow one); the pooler's own messages are never forwarded; a Sync
//! queued while the server skips to Sync ends the skip; an empty queue in its normal state
//! forwards whatever comes.

#![no_main]

use bytes::Bytes;
use droid_pool::protocol::backend as b;
use droid_pool::server::{Owed, Replies, Request};
use libfuzzer_sys::fuzz_target;

fn owed(kind: u8) -> Owed {
    let name = || Bytes::from_static(b"p1_s");
    match kind % 12 {
        0 => Owed::Client(Request::Parse),
        1 => Owed::Client(Request::Bind),
        2 => Owed::Client(Request::Describe),
        3 => Owed::Client(Request::Execute),
        4 => Owed::Client(Request::Close),
        5 => Owed::Client(Request::Sync),
        6 => Owed::Client(Request::Query),
        7 => Owed::Replay {
            server_name: name(),
            id: 1,
        },
        8 => Owed::InjectedClose {
            server_name: name(),
            id: 1,
        },
        9 => Owed::Synthetic(Bytes::from_static(b"3\0\0\0\x04")),
        10 => Owed::Internal,
        _ => Owed::CopyEnd,
    }
}

const TAGS: &[u8] = &[
    b::PARSE_COMPLETE_TAG,
    b::BIND_COMPLETE_TAG,
    b::CLOSE_COMPLETE_TAG,
    b::COMMAND_COMPLETE_TAG,
    b::COPY_IN_RESPONSE_TAG,
    b::COPY_OUT_RESPONSE_TAG,
    b::DATA_ROW_TAG,
    b::EMPTY_QUERY_RESPONSE_TAG,
    b::ERROR_RESPONSE_TAG,
    b::NO_DATA_TAG,
    b::NOTICE_RESPONSE_TAG,
    b::PARAMETER_STATUS_TAG,
    b::PORTAL_SUSPENDED_TAG,
    b::READY_FOR_QUERY_TAG,
    b::ROW_DESCRIPTION_TAG,
];

fuzz_target!(|data: &[u8]| {
    let mut r = Replies::default();
    let mut pushed = 0usize;
    let mut skipped = Vec::new();
    let mut ops = data.iter();
    while let Some(&op) = ops.next() {
        match op % 3 {
            0 => {
                let o = owed(op / 3);
                let sync = matches!(o, Owed::Client(Request::Sync));
                let was_skipping = r.skips_to_sync();
                if r.push(o).is_none() {
                    pushed += 1;
                }
                if sync && was_skipping {
                    assert!(!r.skips_to_sync(), "a Sync ends the skip");
                }
            }
            1 => {
                let Some(&t) = ops.next() else { break };
                // Mostly the tags a server sends; now and then any byte at all.
                let tag = if t >= 240 { t } else { TAGS[t as usize % TAGS.len()] };
                let swallowing = matches!(
                    r.front(),
                    Some(Owed::Internal | Owed::Replay { .. } | Owed::InjectedClose { .. })
                );
                let fresh = r.is_empty();
                let passes = r.passes_rows();
                let step = if tag == b::ERROR_RESPONSE_TAG {
                    skipped.clear();
                    r.on_error(&mut skipped)
                } else {
                    r.on_message(tag)
                };
                if tag == b::DATA_ROW_TAG && passes {
                    assert!(step.forward && step.completed.is_none() && !step.ready);
                }
                if fresh && tag != b::NOTICE_RESPONSE_TAG && tag != b::PARAMETER_STATUS_TAG {
                    assert!(step.forward, "nothing owed: the message is the client's");
                }
                if swallowing && !matches!(tag, b::ERROR_RESPONSE_TAG | b::NOTIFICATION_RESPONSE_TAG)
                {
                    if let Some(Owed::Internal | Owed::Replay { .. } | Owed::InjectedClose { .. }) =
                        &step.completed
                    {
                        assert!(!step.forward, "the pooler's own replies stay with it");
                    }
                }
                assert_eq!(step.ready, tag == b::READY_FOR_QUERY_TAG);
            }
            _ => while r.pop_answer().is_some() {},
        }
        assert!(r.len() <= pushed, "{} queued, {} pushed", r.len(), pushed);
        if r.len() == 0 && !r.skips_to_sync() && !r.in_copy_in() {
            assert!(r.is_empty());
        }
    }
});
