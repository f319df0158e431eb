//! Property tests for the sans-IO protocol codec (`droid_pool::protocol`): encoders and
//! parsers agree, framing does not depend on how the byte stream is split, and arbitrary
//! input never panics. Pure CPU, no PostgreSQL needed.

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::backend::{self, ErrorFields};
use droid_pool::protocol::frame::{self, Frame, FrameError, HEADER_LEN};
use droid_pool::protocol::frontend::{self, NameSpan};
use droid_pool::protocol::startup::{
    self, Startup, StartupError, StartupLimits, StartupPacket, CANCEL_REQUEST_CODE,
    GSSENC_REQUEST_CODE, SSL_REQUEST_CODE,
};
use proptest::prelude::*;

/// Frame limit used where the limit is not the point of the test.
const MAX: usize = 1 << 20;

const LIMITS: StartupLimits = StartupLimits {
    max_len: 10_000,
    max_params: 64,
};

/// Cases per property: enough to explore, small enough to keep the suite fast.
const CASES: u32 = 256;

// --- strategies ---------------------------------------------------------------

/// A string without NUL (the protocol's C strings cannot carry one).
fn text() -> impl Strategy<Value = String> {
    "[^\\x00]{0,24}"
}

/// A non-empty string without NUL (an empty key ends the startup parameter list).
fn key() -> impl Strategy<Value = String> {
    "[^\\x00]{1,16}"
}

/// Raw name bytes without NUL; names are not required to be UTF-8 by the parsers.
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(1u8..=255, 0..24)
}

fn error_fields() -> impl Strategy<Value = ErrorFields> {
    (
        text(),
        text(),
        text(),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(|(severity, code, message, detail, hint)| ErrorFields {
            severity,
            code,
            message,
            detail,
            hint,
        })
}

fn startup_params() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((key(), text()), 0..8)
}

/// Arbitrary bytes, fewer than `max`.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// A tag and a body; the tag need not be a known one, framing does not look at it.
fn raw_frame() -> impl Strategy<Value = (u8, Vec<u8>)> {
    (any::<u8>(), bytes(64))
}

const TX_STATUSES: [u8; 3] = [backend::TX_IDLE, backend::TX_IN_BLOCK, backend::TX_FAILED];

/// Positions at which to split a stream (resolved against its length later).
fn split_points() -> impl Strategy<Value = Vec<prop::sample::Index>> {
    prop::collection::vec(any::<prop::sample::Index>(), 0..12)
}

/// Strictly increasing split offsets in `0..=len`, ending with `len`.
fn cuts_for(len: usize, points: &[prop::sample::Index]) -> Vec<usize> {
    let mut cuts: Vec<usize> = points.iter().map(|i| i.index(len + 1)).collect();
    cuts.push(len);
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// One startup-phase packet and what `startup::cut` must return for it.
#[derive(Debug, Clone)]
enum Packet {
    Ssl,
    GssEnc,
    Cancel(i32, i32),
    Startup(Vec<(String, String)>),
}

fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        Just(Packet::Ssl),
        Just(Packet::GssEnc),
        (any::<i32>(), any::<i32>()).prop_map(|(p, s)| Packet::Cancel(p, s)),
        startup_params().prop_map(Packet::Startup),
    ]
}

// --- encoders for messages the crate only parses -------------------------------

fn put_cstr(buf: &mut BytesMut, s: &[u8]) {
    buf.put_slice(s);
    buf.put_u8(0);
}

fn encode_frame(buf: &mut BytesMut, tag: u8, body: &[u8]) {
    let at = frame::begin(buf, tag);
    buf.put_slice(body);
    frame::finish(buf, at);
}

fn parse_msg(name: &[u8], sql: &[u8], oids: &[i32]) -> BytesMut {
    let mut b = BytesMut::new();
    let at = frame::begin(&mut b, frontend::PARSE_TAG);
    put_cstr(&mut b, name);
    put_cstr(&mut b, sql);
    b.put_i16(oids.len() as i16);
    for o in oids {
        b.put_i32(*o);
    }
    frame::finish(&mut b, at);
    b
}

fn bind_msg(
    portal: &[u8],
    name: &[u8],
    formats: &[i16],
    params: &[Option<Vec<u8>>],
    results: &[i16],
) -> BytesMut {
    let mut b = BytesMut::new();
    let at = frame::begin(&mut b, frontend::BIND_TAG);
    put_cstr(&mut b, portal);
    put_cstr(&mut b, name);
    b.put_i16(formats.len() as i16);
    for f in formats {
        b.put_i16(*f);
    }
    b.put_i16(params.len() as i16);
    for p in params {
        match p {
            Some(v) => {
                b.put_i32(v.len() as i32);
                b.put_slice(v);
            }
            None => b.put_i32(-1),
        }
    }
    b.put_i16(results.len() as i16);
    for r in results {
        b.put_i16(*r);
    }
    frame::finish(&mut b, at);
    b
}

fn target_msg(tag: u8, kind: u8, name: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    let at = frame::begin(&mut b, tag);
    b.put_u8(kind);
    put_cstr(&mut b, name);
    frame::finish(&mut b, at);
    b
}

fn encode_packet(buf: &mut BytesMut, p: &Packet) -> StartupPacket {
    match p {
        Packet::Ssl => {
            buf.put_i32(8);
            buf.put_i32(SSL_REQUEST_CODE);
            StartupPacket::SslRequest
        }
        Packet::GssEnc => {
            buf.put_i32(8);
            buf.put_i32(GSSENC_REQUEST_CODE);
            StartupPacket::GssEncRequest
        }
        Packet::Cancel(pid, secret) => {
            frontend::cancel_request(buf, *pid, *secret);
            StartupPacket::Cancel {
                pid: *pid,
                secret: *secret,
            }
        }
        Packet::Startup(params) => {
            let refs: Vec<(&str, &str)> = params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            frontend::startup_message(buf, &refs);
            StartupPacket::Startup(Startup {
                minor: 0,
                params: params.clone(),
            })
        }
    }
}

/// The length field of a whole tagged message.
fn declared_len(msg: &[u8]) -> usize {
    u32::from_be_bytes([msg[1], msg[2], msg[3], msg[4]]) as usize
}

/// Checks `write_renamed` of `msg` (whose name is at `span`) to `new`, appended after a
/// non-empty prefix, and returns the renamed message.
fn check_rename(msg: &[u8], span: NameSpan, new: &[u8], prefix: &[u8]) -> BytesMut {
    let mut out = BytesMut::from(prefix);
    frontend::write_renamed(&mut out, msg, span, new);
    assert_eq!(&out[..prefix.len()], prefix, "prefix untouched");
    let out = out.split_off(prefix.len());
    assert_eq!(out.len(), msg.len() - span.len + new.len());
    assert_eq!(declared_len(&out) + 1, out.len(), "length field");
    assert_eq!(out[0], msg[0], "tag kept");
    let end = span.start + new.len();
    assert_eq!(&out[HEADER_LEN..span.start], &msg[HEADER_LEN..span.start]);
    assert_eq!(&out[span.start..end], new);
    assert_eq!(&out[end..], &msg[span.start + span.len..]);
    out
}

/// Feeds `stream` to `frame::cut` in the chunks given by `cuts`, draining after each chunk.
fn feed_frames(stream: &[u8], cuts: &[usize]) -> (Vec<Frame>, BytesMut) {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let (mut fed, mut consumed) = (0, 0);
    for &c in cuts {
        buf.extend_from_slice(&stream[fed..c]);
        fed = c;
        while let Some(f) = frame::cut(&mut buf, MAX).expect("valid frames") {
            consumed += f.bytes.len();
            frames.push(f);
        }
        assert_eq!(
            consumed + buf.len(),
            fed,
            "bytes conserved after each chunk"
        );
    }
    (frames, buf)
}

// --- properties ---------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn error_response_roundtrip(f in error_fields(), notice in any::<bool>()) {
        let mut b = BytesMut::new();
        if notice {
            backend::notice_response(&mut b, &f);
        } else {
            backend::error_response(&mut b, &f);
        }
        let fr = frame::cut(&mut b, MAX).unwrap().expect("whole frame");
        prop_assert!(b.is_empty());
        let tag = if notice { backend::NOTICE_RESPONSE_TAG } else { backend::ERROR_RESPONSE_TAG };
        prop_assert_eq!(fr.tag, tag);
        prop_assert_eq!(backend::parse_error(fr.body()).unwrap(), f);
    }

    #[test]
    fn parameter_status_roundtrip(name in text(), value in text()) {
        let mut b = BytesMut::new();
        backend::parameter_status(&mut b, &name, &value);
        let fr = frame::cut(&mut b, MAX).unwrap().expect("whole frame");
        prop_assert!(b.is_empty());
        prop_assert_eq!(fr.tag, backend::PARAMETER_STATUS_TAG);
        let (n, v) = backend::parse_parameter_status(fr.body()).unwrap();
        prop_assert_eq!((n, v), (name.as_str(), value.as_str()));
    }

    #[test]
    fn small_backend_messages_roundtrip(
        pid in any::<i32>(),
        secret in any::<i32>(),
        status in prop::sample::select(TX_STATUSES.to_vec()),
    ) {
        let mut b = BytesMut::new();
        backend::backend_key_data(&mut b, pid, secret);
        backend::ready_for_query(&mut b, status);
        backend::auth_ok(&mut b);
        let key = frame::cut(&mut b, MAX).unwrap().unwrap();
        prop_assert_eq!(key.tag, backend::BACKEND_KEY_DATA_TAG);
        prop_assert_eq!(backend::parse_backend_key(key.body()).unwrap(), (pid, secret));
        let rfq = frame::cut(&mut b, MAX).unwrap().unwrap();
        prop_assert_eq!(rfq.tag, backend::READY_FOR_QUERY_TAG);
        prop_assert_eq!(backend::parse_ready_for_query(rfq.body()).unwrap(), status);
        let auth = frame::cut(&mut b, MAX).unwrap().unwrap();
        prop_assert_eq!(auth.tag, backend::AUTHENTICATION_TAG);
        prop_assert_eq!(backend::parse_auth(auth.body()).unwrap(), backend::AuthRequest::Ok);
        prop_assert!(b.is_empty());
    }

    #[test]
    fn startup_message_roundtrip(params in startup_params()) {
        let mut b = BytesMut::new();
        let expected = encode_packet(&mut b, &Packet::Startup(params.clone()));
        let got = startup::cut(&mut b, LIMITS).unwrap().expect("whole packet");
        prop_assert!(b.is_empty());
        prop_assert_eq!(got, expected);

        // One parameter fewer allowed than sent is refused, not truncated.
        if !params.is_empty() {
            let mut b = BytesMut::new();
            encode_packet(&mut b, &Packet::Startup(params.clone()));
            let tight = StartupLimits { max_params: params.len() - 1, ..LIMITS };
            prop_assert_eq!(
                startup::cut(&mut b, tight),
                Err(StartupError::TooManyParams(params.len() - 1))
            );
        }
    }

    #[test]
    fn parse_statement_finds_name(
        name in name_bytes(),
        sql in name_bytes(),
        oids in prop::collection::vec(any::<i32>(), 0..6),
        new in name_bytes(),
        prefix in bytes(8),
    ) {
        let m = parse_msg(&name, &sql, &oids);
        let span = frontend::parse_statement(&m).unwrap();
        prop_assert_eq!(span.start, HEADER_LEN);
        prop_assert_eq!(span.get(&m), &name[..]);

        let out = check_rename(&m, span, &new, &prefix);
        let again = frontend::parse_statement(&out).unwrap();
        prop_assert_eq!(again.get(&out), &new[..]);
        prop_assert_eq!(parse_msg(&new, &sql, &oids), out);

        // Any truncation of the body is an error, never a panic or a wrong name.
        for keep in HEADER_LEN..m.len() {
            prop_assert!(frontend::parse_statement(&m[..keep]).is_err());
        }
    }

    #[test]
    fn bind_statement_finds_name(
        portal in name_bytes(),
        name in name_bytes(),
        formats in prop::collection::vec(0i16..=1, 0..4),
        params in prop::collection::vec(prop::option::of(bytes(8)), 0..4),
        results in prop::collection::vec(0i16..=1, 0..4),
        new in name_bytes(),
        prefix in bytes(8),
    ) {
        let m = bind_msg(&portal, &name, &formats, &params, &results);
        let span = frontend::bind_statement(&m).unwrap();
        prop_assert_eq!(span.start, HEADER_LEN + portal.len() + 1);
        prop_assert_eq!(span.get(&m), &name[..]);

        let out = check_rename(&m, span, &new, &prefix);
        let again = frontend::bind_statement(&out).unwrap();
        prop_assert_eq!(again.get(&out), &new[..]);
        prop_assert_eq!(bind_msg(&portal, &new, &formats, &params, &results), out);
    }

    #[test]
    fn describe_and_close_find_name(
        close in any::<bool>(),
        kind in prop::sample::select(vec![b'S', b'P']),
        name in name_bytes(),
        new in name_bytes(),
        prefix in bytes(8),
    ) {
        let tag = if close { frontend::CLOSE_TAG } else { frontend::DESCRIBE_TAG };
        let m = target_msg(tag, kind, &name);
        let (k, span) = frontend::describe_or_close_target(&m).unwrap();
        prop_assert_eq!(k, kind);
        prop_assert_eq!(span.start, HEADER_LEN + 1);
        prop_assert_eq!(span.get(&m), &name[..]);

        let out = check_rename(&m, span, &new, &prefix);
        let (k2, again) = frontend::describe_or_close_target(&out).unwrap();
        prop_assert_eq!(k2, kind);
        prop_assert_eq!(again.get(&out), &new[..]);
        prop_assert_eq!(target_msg(tag, kind, &new), out);

        if close && kind == b'S' {
            let mut c = BytesMut::new();
            frontend::close_statement(&mut c, &name);
            prop_assert_eq!(c, m);
        }
    }

    #[test]
    fn query_text_roundtrip(sql in text()) {
        let mut b = BytesMut::new();
        frontend::query(&mut b, &sql);
        let fr = frame::cut(&mut b, MAX).unwrap().unwrap();
        prop_assert_eq!(fr.tag, frontend::QUERY_TAG);
        prop_assert_eq!(frontend::query_text(&fr.bytes).unwrap(), sql.as_bytes());
    }

    #[test]
    fn frames_survive_any_split(
        msgs in prop::collection::vec(raw_frame(), 0..16),
        points in split_points(),
    ) {
        let mut stream = BytesMut::new();
        for (tag, body) in &msgs {
            encode_frame(&mut stream, *tag, body);
        }
        let cuts = cuts_for(stream.len(), &points);
        let (frames, rest) = feed_frames(&stream, &cuts);
        prop_assert!(rest.is_empty());
        prop_assert_eq!(frames.len(), msgs.len());
        let mut total = 0;
        for (f, (tag, body)) in frames.iter().zip(&msgs) {
            prop_assert_eq!(f.tag, *tag);
            prop_assert_eq!(f.bytes[0], *tag);
            prop_assert_eq!(f.body(), &body[..]);
            prop_assert_eq!(declared_len(&f.bytes) + 1, f.bytes.len());
            total += f.bytes.len();
        }
        prop_assert_eq!(total, stream.len());
    }

    #[test]
    fn frames_survive_any_split_with_trailing_partial(
        msgs in prop::collection::vec(raw_frame(), 1..8),
        drop in 1usize..64,
        points in split_points(),
    ) {
        // The last frame is cut short: everything before it comes out, its bytes stay buffered.
        let mut stream = BytesMut::new();
        let mut last_start = 0;
        for (tag, body) in &msgs {
            last_start = stream.len();
            encode_frame(&mut stream, *tag, body);
        }
        let drop = drop.min(stream.len() - last_start);
        let stream = &stream[..stream.len() - drop];
        let (frames, rest) = feed_frames(stream, &cuts_for(stream.len(), &points));
        prop_assert_eq!(frames.len(), msgs.len() - 1);
        prop_assert_eq!(&rest[..], &stream[last_start..]);
    }

    #[test]
    fn startup_packets_survive_any_split(
        packets in prop::collection::vec(packet(), 0..6),
        points in split_points(),
    ) {
        let mut stream = BytesMut::new();
        let expected: Vec<StartupPacket> =
            packets.iter().map(|p| encode_packet(&mut stream, p)).collect();
        let cuts = cuts_for(stream.len(), &points);

        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut fed = 0;
        for &c in &cuts {
            buf.extend_from_slice(&stream[fed..c]);
            fed = c;
            loop {
                let before = buf.len();
                match startup::cut(&mut buf, LIMITS) {
                    Ok(Some(p)) => {
                        // Exactly the declared length was consumed.
                        let consumed = before - buf.len();
                        prop_assert!(consumed >= 8);
                        got.push(p);
                    }
                    Ok(None) => {
                        prop_assert_eq!(buf.len(), before, "nothing consumed while incomplete");
                        break;
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("valid packet refused: {e}"))),
                }
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn random_bytes_never_panic_frame_cut(
        data in bytes(512),
        max in 0usize..600,
    ) {
        let mut buf = BytesMut::from(&data[..]);
        let mut consumed = 0;
        loop {
            let before = buf.len();
            match frame::cut(&mut buf, max) {
                Ok(Some(f)) => {
                    prop_assert!(f.bytes.len() >= HEADER_LEN && f.bytes.len() <= max);
                    prop_assert_eq!(declared_len(&f.bytes) + 1, f.bytes.len());
                    prop_assert_eq!(f.tag, f.bytes[0]);
                    consumed += f.bytes.len();
                }
                Ok(None) | Err(_) => {
                    prop_assert_eq!(buf.len(), before, "nothing consumed without a frame");
                    break;
                }
            }
        }
        prop_assert_eq!(consumed + buf.len(), data.len());
        prop_assert_eq!(&data[consumed..], &buf[..]);
    }

    #[test]
    fn random_bytes_never_panic_startup_cut(
        data in bytes(256),
        // Random data rarely starts with a plausible length; half the time, give it one.
        fix_len in any::<bool>(),
        max_len in 0usize..300,
        max_params in 0usize..8,
    ) {
        let mut data = data;
        if fix_len && data.len() >= 4 {
            let n = data.len() as u32;
            data[..4].copy_from_slice(&n.to_be_bytes());
        }
        let limits = StartupLimits { max_len, max_params };
        let mut buf = BytesMut::from(&data[..]);
        loop {
            let before = buf.len();
            let declared = startup::declared_len(&buf);
            match startup::cut(&mut buf, limits) {
                Ok(Some(p)) => {
                    prop_assert_eq!(Some((before - buf.len()) as u32), declared);
                    if let StartupPacket::Startup(s) = p {
                        prop_assert!(s.params.len() <= max_params);
                    }
                }
                Ok(None) => {
                    prop_assert_eq!(buf.len(), before);
                    break;
                }
                Err(StartupError::BadLength(n)) => {
                    prop_assert_eq!(Some(n), declared);
                    prop_assert_eq!(buf.len(), before, "a bad length consumes nothing");
                    break;
                }
                // A malformed packet was consumed whole; keep going with the rest.
                Err(_) => prop_assert_eq!(Some((before - buf.len()) as u32), declared),
            }
        }
    }

    #[test]
    fn random_bodies_never_panic_parsers(
        tag in any::<u8>(),
        body in bytes(128),
    ) {
        // Backend parsers take a body; frontend ones a whole message (header included).
        let _ = backend::parse_error(&body);
        let _ = backend::parse_parameter_status(&body);
        let _ = backend::parse_auth(&body);
        let _ = backend::parse_backend_key(&body);
        let _ = backend::parse_ready_for_query(&body);

        let mut m = BytesMut::new();
        encode_frame(&mut m, tag, &body);
        let spans = [
            frontend::parse_statement(&m).ok(),
            frontend::bind_statement(&m).ok(),
            frontend::describe_or_close_target(&m).ok().map(|(_, s)| s),
        ];
        for span in spans.into_iter().flatten() {
            // A found name lies inside the message and is NUL-free; renaming stays consistent.
            prop_assert!(span.start + span.len < m.len());
            prop_assert!(!span.get(&m).contains(&0));
            check_rename(&m, span, b"renamed_1", b"");
        }
        if let Ok(q) = frontend::query_text(&m) {
            prop_assert!(!q.contains(&0));
        }
    }

    #[test]
    fn frame_over_max_is_refused_before_body(
        tag in any::<u8>(),
        max in HEADER_LEN..100_000,
        extra in 0u32..1_000_000,
        partial in bytes(32),
    ) {
        // Declared total (len + 1) is over max; only the header and a little body are here.
        let len = (max as u32).saturating_add(extra).min(i32::MAX as u32);
        let mut buf = BytesMut::new();
        buf.put_u8(tag);
        buf.put_u32(len);
        buf.put_slice(&partial);
        let before = buf.clone();
        prop_assert_eq!(
            frame::cut(&mut buf, max),
            Err(FrameError::TooLarge { len: len as usize + 1, max })
        );
        prop_assert_eq!(buf, before, "nothing consumed");
    }

    #[test]
    fn frame_bad_length_is_refused(
        tag in any::<u8>(),
        len in prop_oneof![0u32..4, (i32::MAX as u32 + 1)..=u32::MAX],
    ) {
        let mut buf = BytesMut::new();
        buf.put_u8(tag);
        buf.put_u32(len);
        prop_assert_eq!(frame::cut(&mut buf, usize::MAX), Err(FrameError::BadLength(len)));
        prop_assert_eq!(buf.len(), HEADER_LEN);
    }

    #[test]
    fn frame_exactly_at_max_is_accepted(tag in any::<u8>(), body_len in 0usize..2048) {
        let mut buf = BytesMut::new();
        encode_frame(&mut buf, tag, &vec![0xAB; body_len]);
        let max = buf.len();
        let f = frame::cut(&mut buf, max).unwrap().expect("whole frame at the limit");
        prop_assert_eq!(f.bytes.len(), max);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn startup_over_max_is_refused_before_body(
        max_len in 8usize..100_000,
        extra in 1u32..1_000_000,
        partial in bytes(32),
    ) {
        let len = (max_len as u32).saturating_add(extra);
        let mut buf = BytesMut::new();
        buf.put_u32(len);
        buf.put_slice(&partial);
        let before = buf.clone();
        let limits = StartupLimits { max_len, max_params: 64 };
        prop_assert_eq!(startup::cut(&mut buf, limits), Err(StartupError::BadLength(len)));
        prop_assert_eq!(buf, before, "nothing consumed");
    }

    #[test]
    fn startup_exactly_at_max_is_accepted(params in startup_params()) {
        let mut buf = BytesMut::new();
        let expected = encode_packet(&mut buf, &Packet::Startup(params));
        let limits = StartupLimits { max_len: buf.len(), ..LIMITS };
        prop_assert_eq!(startup::cut(&mut buf, limits), Ok(Some(expected)));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn error_severity_prefers_unlocalized_v(
        localized in text(),
        severity in key(),
        v_first in any::<bool>(),
    ) {
        // 'S' may be translated; a (non-empty) 'V' never is and wins in either order.
        let mut body = BytesMut::new();
        let fields = [(b'S', &localized), (b'V', &severity)];
        let order = if v_first { [1, 0] } else { [0, 1] };
        for i in order {
            body.put_u8(fields[i].0);
            put_cstr(&mut body, fields[i].1.as_bytes());
        }
        body.put_u8(0);
        prop_assert_eq!(backend::parse_error(&body).unwrap().severity, severity);
    }

    #[test]
    fn startup_too_short_is_refused(len in 0u32..8) {
        let mut buf = BytesMut::new();
        buf.put_u32(len);
        prop_assert_eq!(startup::cut(&mut buf, LIMITS), Err(StartupError::BadLength(len)));
    }
}

/// Cancel and SSL codes are distinct from any protocol 3.x version, so they never parse as one.
#[test]
fn special_codes_are_not_versions() {
    for code in [CANCEL_REQUEST_CODE, SSL_REQUEST_CODE, GSSENC_REQUEST_CODE] {
        assert_ne!(code >> 16, 3);
    }
}
