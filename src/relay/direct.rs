//! Server bytes passed on unchanged go to a plain client straight from the server's read
//! buffer when nothing else is queued before them; only what the socket does not take (and
//! everything after anything the pooler changed or added) is copied to the client buffer.

use bytes::BytesMut;

/// The run of forwarded bytes at the start of a drain that has not been copied: it can go to
/// the client straight from the server's buffer.
pub(super) struct Direct {
    /// Still possible: the client buffer is empty and nothing but this run was forwarded.
    pub allowed: bool,
    pub run: Option<std::ops::Range<usize>>,
}

impl Direct {
    /// Passes `buf[from..to]` (whole messages, unchanged) on: extends the run when it
    /// continues it, else queues it in `cout` behind everything before it.
    pub fn pass_on(&mut self, cout: &mut BytesMut, buf: &[u8], from: usize, to: usize) {
        if self.allowed {
            match &mut self.run {
                None => {
                    self.run = Some(from..to);
                    return;
                }
                Some(run) if run.end == from => {
                    run.end = to;
                    return;
                }
                Some(_) => {}
            }
        }
        self.spill(cout, buf);
        cout.extend_from_slice(&buf[from..to]);
    }

    /// Before anything else goes to `cout`: the run goes there first, and the rest of this
    /// drain is queued there too, so the order holds.
    pub fn spill(&mut self, cout: &mut BytesMut, buf: &[u8]) {
        if self.allowed {
            self.allowed = false;
            // Room for everything forwarded, in one reservation rather than growth by doubling.
            cout.reserve(buf.len());
        }
        if let Some(run) = self.run.take() {
            cout.extend_from_slice(&buf[run]);
        }
    }
}
