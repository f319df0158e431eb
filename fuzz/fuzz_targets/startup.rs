//! `startup::cut` on arbitrary bytes.
//!
//! Input: byte 0 picks `max_len` (`8 + 8 * b`, so 8..=2048), byte 1 `max_params` (b % 16);
//! the rest is the byte stream, cut packet after packet.
//!
//! Checks: no panic; a packet consumes exactly its declared length and a bad length consumes
//! nothing; a parsed StartupMessage of minor version 0 re-encodes with
//! `frontend::startup_message` to the same bytes (minus any trailing garbage) and parses back
//! equal; SSLRequest and CancelRequest re-encode to the bytes they came from.

#![no_main]

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::frontend;
use droid_pool::protocol::startup::{
    self, StartupError, StartupLimits, StartupPacket, GSSENC_REQUEST_CODE, PROTOCOL_3_0,
    SSL_REQUEST_CODE,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [m, p, stream @ ..] = data else {
        return;
    };
    let limits = StartupLimits {
        max_len: 8 + *m as usize * 8,
        max_params: *p as usize % 16,
    };
    let mut buf = BytesMut::from(stream);
    loop {
        let before = buf.len();
        let declared = startup::declared_len(&buf);
        // The packet as it was on the wire, when it is all here.
        let raw = declared
            .filter(|&n| n as usize <= buf.len())
            .map(|n| buf[..n as usize].to_vec());
        match startup::cut(&mut buf, limits) {
            Ok(Some(packet)) => {
                let raw = raw.expect("a packet is only returned when complete");
                assert_eq!(
                    before - buf.len(),
                    raw.len(),
                    "consumed the declared length"
                );
                assert!(raw.len() >= 8 && raw.len() <= limits.max_len);
                check_reencode(&packet, &raw, limits);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "nothing consumed while incomplete");
                break;
            }
            Err(StartupError::BadLength(n)) => {
                assert_eq!(Some(n), declared);
                assert_eq!(buf.len(), before, "nothing consumed for a bad length");
                break;
            }
            // The malformed packet was consumed whole; go on with what follows.
            Err(_) => {
                let raw = raw.expect("a packet is only parsed when complete");
                assert_eq!(before - buf.len(), raw.len());
            }
        }
    }
});

fn check_reencode(packet: &StartupPacket, raw: &[u8], limits: StartupLimits) {
    let mut enc = BytesMut::new();
    match packet {
        StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
            let code = if *packet == StartupPacket::SslRequest {
                SSL_REQUEST_CODE
            } else {
                GSSENC_REQUEST_CODE
            };
            enc.put_i32(8);
            enc.put_i32(code);
            assert_eq!(&enc[..], raw);
        }
        StartupPacket::Cancel { pid, secret } => {
            frontend::cancel_request(&mut enc, *pid, *secret);
            // Trailing bytes after the secret are tolerated and ignored.
            assert_eq!(&enc[4..], &raw[4..16]);
        }
        StartupPacket::Startup(s) => {
            assert!(s.params.len() <= limits.max_params);
            if s.minor != 0 {
                return;
            }
            assert_eq!(&raw[4..8], &PROTOCOL_3_0.to_be_bytes());
            let params: Vec<(&str, &str)> = s
                .params
                .iter()
                .map(|(k, v)| {
                    assert!(!k.is_empty() && !k.contains('\0') && !v.contains('\0'));
                    (k.as_str(), v.as_str())
                })
                .collect();
            frontend::startup_message(&mut enc, &params);
            // Same bytes up to the terminating NUL; the original may carry garbage after it.
            assert!(enc.len() <= raw.len());
            assert_eq!(&enc[4..], &raw[4..enc.len()]);
            let back = startup::cut(&mut enc, limits).expect("re-encoded packet parses");
            assert_eq!(back.as_ref(), Some(packet));
            assert!(enc.is_empty());
        }
    }
}
