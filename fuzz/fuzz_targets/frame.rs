//! `frame::cut` on arbitrary bytes.
//!
//! Input: byte 0 picks the frame limit (`max = 4 * b`, so 0..=1020), byte 1 the chunk size
//! (1..=64) for a second, incremental pass; the rest is the byte stream.
//!
//! Checks: every frame's declared length matches its size and the limit; frames plus the
//! leftover bytes are exactly the input; nothing is consumed without a frame; feeding the
//! same stream in chunks gives the same frames and leftover as feeding it at once.

#![no_main]

use bytes::BytesMut;
use droid_pool::protocol::frame::{self, Frame, FrameError, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

/// Cuts frames off `buf` until `None` or an error; asserts the per-frame invariants.
fn drain(buf: &mut BytesMut, max: usize, frames: &mut Vec<Frame>) -> Result<(), FrameError> {
    loop {
        let before = buf.len();
        match frame::cut(buf, max) {
            Ok(Some(f)) => {
                let declared = u32::from_be_bytes([f.bytes[1], f.bytes[2], f.bytes[3], f.bytes[4]]);
                assert_eq!(declared as usize + 1, f.bytes.len(), "declared length");
                assert!(f.bytes.len() >= HEADER_LEN && f.bytes.len() <= max);
                assert_eq!(f.tag, f.bytes[0]);
                assert_eq!(f.body().len(), f.bytes.len() - HEADER_LEN);
                assert_eq!(
                    before - buf.len(),
                    f.bytes.len(),
                    "consumed exactly one frame"
                );
                frames.push(f);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "nothing consumed while incomplete");
                return Ok(());
            }
            Err(e) => {
                assert_eq!(buf.len(), before, "nothing consumed on error");
                assert!(before >= HEADER_LEN, "an error needs a whole header");
                return Err(e);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [m, chunk, stream @ ..] = data else {
        return;
    };
    let max = *m as usize * 4;
    let chunk = (*chunk as usize % 64) + 1;

    // All at once.
    let mut buf = BytesMut::from(stream);
    let mut frames = Vec::new();
    let res = drain(&mut buf, max, &mut frames);
    let mut at = 0;
    for f in &frames {
        assert_eq!(&stream[at..at + f.bytes.len()], &f.bytes[..]);
        at += f.bytes.len();
    }
    assert_eq!(at + buf.len(), stream.len(), "bytes conserved");
    assert_eq!(&stream[at..], &buf[..]);

    // In chunks, draining after each one: same frames, same outcome.
    let mut buf2 = BytesMut::new();
    let mut frames2 = Vec::new();
    let mut res2 = Ok(());
    for piece in stream.chunks(chunk) {
        buf2.extend_from_slice(piece);
        res2 = drain(&mut buf2, max, &mut frames2);
        if res2.is_err() {
            break;
        }
    }
    assert_eq!(frames, frames2);
    assert_eq!(res, res2);
    if res.is_ok() {
        assert_eq!(buf, buf2);
    }
});
