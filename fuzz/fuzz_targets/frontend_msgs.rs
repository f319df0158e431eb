//! The frontend message parsers on arbitrary message bodies.
//!
//! Input: byte 0 picks the tag (P, B, D, C, Q or the byte itself) and, via `b / 8`, the length
//! of the replacement name; the rest is the body, wrapped in a valid header (tag + length).
//!
//! Checks: `parse_statement`, `bind_statement`, `describe_or_close_target` and `query_text`
//! never panic; a name they find lies inside the message and holds no NUL; renaming it with
//! `write_renamed` keeps every other byte, writes a correct length, and the same parser then
//! finds the new name at the same place.

#![no_main]

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::frame::{self, HEADER_LEN};
use droid_pool::protocol::frontend::{self, NameSpan};
use libfuzzer_sys::fuzz_target;

type Finder = fn(&[u8]) -> Option<NameSpan>;

const FINDERS: [Finder; 3] = [
    |m| frontend::parse_statement(m).ok(),
    |m| frontend::bind_statement(m).ok(),
    |m| frontend::describe_or_close_target(m).ok().map(|(_, s)| s),
];

fuzz_target!(|data: &[u8]| {
    let [sel, body @ ..] = data else {
        return;
    };
    let tag = match sel % 8 {
        0 => frontend::PARSE_TAG,
        1 => frontend::BIND_TAG,
        2 => frontend::DESCRIBE_TAG,
        3 => frontend::CLOSE_TAG,
        4 => frontend::QUERY_TAG,
        _ => *sel,
    };
    let mut msg = BytesMut::new();
    let at = frame::begin(&mut msg, tag);
    msg.put_slice(body);
    frame::finish(&mut msg, at);

    if let Ok(q) = frontend::query_text(&msg) {
        assert!(!q.contains(&0));
    }
    if let Ok((kind, _)) = frontend::describe_or_close_target(&msg) {
        assert!(kind == b'S' || kind == b'P');
    }

    for find in FINDERS {
        let Some(span) = find(&msg) else { continue };
        assert!(span.start >= HEADER_LEN && span.start + span.len < msg.len());
        let old = span.get(&msg);
        assert!(!old.contains(&0));
        assert_eq!(msg[span.start + span.len], 0, "name is NUL-terminated");

        // A different NUL-free name, of a length picked by the input.
        let mut new = vec![b'n'; (*sel / 8) as usize];
        if new == old {
            new.push(b'x');
        }

        let mut out = BytesMut::from(&b"prefix"[..]);
        frontend::write_renamed(&mut out, &msg, span, &new);
        assert_eq!(&out[..6], b"prefix");
        let out = out.split_off(6);

        let declared = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert_eq!(declared + 1, out.len(), "length field");
        assert_eq!(out.len(), msg.len() - span.len + new.len());
        assert_eq!(out[0], tag);
        let end = span.start + new.len();
        assert_eq!(&out[HEADER_LEN..span.start], &msg[HEADER_LEN..span.start]);
        assert_eq!(&out[end..], &msg[span.start + span.len..]);

        let again = find(&out).expect("renamed message still parses");
        assert_eq!(again.start, span.start);
        assert_eq!(again.get(&out), &new[..]);
    }
});
