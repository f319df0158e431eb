//! The SCRAM-SHA-256 client messages (client-first, client-final) and the server exchange.
//!
//! Input: byte 0 splits the rest into a client-first and a client-final candidate.
//!
//! Checks: the parsers never panic; what they accept is cut from the input exactly (GS2
//! header + bare = the message, without-proof + ",p=" + proof = the message, a nonce is
//! printable and comma-free); parse of encode is identity for the encoders; the server side of
//! the exchange never panics and never accepts a proof it did not see computed from the key.

#![no_main]

use droid_pool::auth::{Exchange, Verifier};
use droid_pool::protocol::scram::{self, ChannelBinding};
use libfuzzer_sys::fuzz_target;

/// A fixed verifier with one iteration: the exchange's logic, not PBKDF2, is under test.
fn verifier() -> Verifier {
    Verifier {
        iterations: 1,
        salt: b"fuzzsalt".to_vec(),
        stored_key: [7; 32],
        server_key: [9; 32],
    }
}

fn printable(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fuzz_target!(|data: &[u8]| {
    let [split, rest @ ..] = data else {
        return;
    };
    let at = (*split as usize).min(rest.len());
    let (first, fin) = rest.split_at(at);

    if let Ok(m) = scram::parse_client_first(first) {
        let text = std::str::from_utf8(first).expect("accepted input is UTF-8");
        assert_eq!(format!("{}{}", m.gs2_header, m.bare), text);
        assert!(printable(m.nonce));
        assert!(m.bare.contains(m.nonce));
        if matches!(m.binding, ChannelBinding::None) && !m.user.contains(',') {
            let again = scram::client_first(m.user, m.nonce);
            let p = scram::parse_client_first(again.as_bytes()).expect("encoded parses");
            assert_eq!((p.user, p.nonce), (m.user, m.nonce));
        }
    }
    if let Ok(m) = scram::parse_client_final(fin) {
        let text = std::str::from_utf8(fin).expect("accepted input is UTF-8");
        assert_eq!(format!("{},p={}", m.without_proof, m.proof), text);
        assert!(printable(m.nonce));
        if !m.binding.contains(',') {
            let again = scram::client_final(m.binding, m.nonce, m.proof);
            let p = scram::parse_client_final(again.as_bytes()).expect("encoded parses");
            assert_eq!((p.binding, p.nonce, p.proof), (m.binding, m.nonce, m.proof));
        }
    }

    // The server side on the same bytes: errors are fine, success is not (the fuzzer cannot
    // know the client key behind the stored key).
    if let Ok((ex, server_first)) = Exchange::start(verifier(), first) {
        assert!(server_first.starts_with("r="));
        assert!(ex.finish(fin).is_err(), "a made-up proof was accepted");
    }
});
