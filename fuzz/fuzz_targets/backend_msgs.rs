//! The backend message parsers on arbitrary bodies: what the pooler reads from a server.
//!
//! Input: byte 0 picks the parser (authentication, ErrorResponse/NoticeResponse,
//! ParameterStatus, BackendKeyData, ReadyForQuery); the rest is the message body.
//!
//! Checks: no parser panics; what parses re-encodes with the pooler's own encoder
//! (`error_response`, `parameter_status`, `backend_key_data`, `ready_for_query`) into a message
//! that parses back to the same value.

#![no_main]

use bytes::BytesMut;
use droid_pool::protocol::backend::{self, AuthRequest};
use droid_pool::protocol::frame::{self, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

/// The body of the one whole message in `buf`.
fn body(buf: &BytesMut) -> &[u8] {
    let total = frame::complete_len(buf, 1 << 20)
        .expect("the encoder writes a valid length")
        .expect("the encoder writes a whole message");
    assert_eq!(total, buf.len());
    &buf[HEADER_LEN..]
}

fuzz_target!(|data: &[u8]| {
    let [sel, body_in @ ..] = data else {
        return;
    };
    match sel % 5 {
        0 => {
            if let Ok(AuthRequest::Sasl { mechanisms }) = backend::parse_auth(body_in) {
                assert!(mechanisms.iter().all(|m| !m.is_empty() && !m.contains('\0')));
            }
        }
        1 => {
            let Ok(e) = backend::parse_error(body_in) else {
                return;
            };
            let mut out = BytesMut::new();
            backend::error_response(&mut out, &e);
            let again = backend::parse_error(body(&out)).expect("re-encoded error parses");
            assert_eq!(again.code, e.code);
            assert_eq!(again.message, e.message);
            assert_eq!(again.severity, e.severity);
            assert_eq!(again.detail, e.detail);
            assert_eq!(again.hint, e.hint);
        }
        2 => {
            let Ok((k, v)) = backend::parse_parameter_status(body_in) else {
                return;
            };
            let mut out = BytesMut::new();
            backend::parameter_status(&mut out, k, v);
            let again = backend::parse_parameter_status(body(&out)).expect("parses back");
            assert_eq!(again, (k, v));
        }
        3 => {
            let Ok((pid, secret)) = backend::parse_backend_key(body_in) else {
                return;
            };
            let mut out = BytesMut::new();
            backend::backend_key_data(&mut out, pid, secret);
            assert_eq!(backend::parse_backend_key(body(&out)), Ok((pid, secret)));
        }
        _ => {
            let Ok(status) = backend::parse_ready_for_query(body_in) else {
                return;
            };
            let mut out = BytesMut::new();
            backend::ready_for_query(&mut out, status);
            assert_eq!(backend::parse_ready_for_query(body(&out)), Ok(status));
        }
    }
});
