//! The password-message family a client sends during authentication ('p': PasswordMessage,
//! SASLInitialResponse, SASLResponse) and the Authentication requests the pooler reads from a
//! server and writes to clients ('R').
//!
//! Input: byte 0 picks the message kind; the rest is its body.
//!
//! Checks: the parsers never panic and accept only what lies inside the body; parse of encode
//! is identity (SASLInitialResponse, PasswordMessage, every Authentication request).

#![no_main]

use bytes::BytesMut;
use droid_pool::protocol::backend::{self, AuthRequest};
use droid_pool::protocol::{frame, frontend};
use libfuzzer_sys::fuzz_target;

/// Cuts the single frame an encoder wrote.
fn one_frame(mut buf: BytesMut) -> frame::Frame {
    let f = frame::cut(&mut buf, 1 << 20)
        .expect("encoded frame is valid")
        .expect("encoded frame is whole");
    assert!(buf.is_empty(), "exactly one frame");
    f
}

fuzz_target!(|data: &[u8]| {
    let [kind, body @ ..] = data else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok((mechanism, initial)) = frontend::parse_sasl_initial(body) {
                assert!(!mechanism.contains('\0'));
                let mut out = BytesMut::new();
                if let Some(d) = initial {
                    frontend::sasl_initial_response(&mut out, mechanism, d);
                    let f = one_frame(out);
                    assert_eq!(f.body(), body, "re-encoding gives the same body");
                }
            }
        }
        1 => {
            if let Ok(pw) = frontend::parse_password(body) {
                assert!(!pw.contains(&0));
                let mut out = BytesMut::new();
                frontend::password(&mut out, pw);
                assert_eq!(one_frame(out).body(), body);
            }
        }
        _ => {
            if let Ok(req) = backend::parse_auth(body) {
                let mut out = BytesMut::new();
                backend::auth_request(&mut out, &req);
                let f = one_frame(out);
                let again = backend::parse_auth(f.body()).expect("encoded request parses");
                assert_eq!(again, req);
                if !matches!(req, AuthRequest::Sasl { .. } | AuthRequest::Md5 { .. }) {
                    assert!(body.starts_with(&f.body()[..4]));
                }
            }
        }
    }
});
