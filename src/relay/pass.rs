//! Messages passed on in pieces: once the header of a message too large for the session's
//! buffers has been handled, the rest of its bytes go on (or are dropped) as they arrive, so
//! no whole row, COPY chunk or bind parameter is ever held.

/// The part of one message still to come from a peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Bytes of the message not seen yet (0: no message is being passed on). Messages are
    /// shorter than 2^31 bytes (their length is an `i32`).
    remaining: u32,
    /// Whether those bytes go on to the other side or are dropped.
    keep: bool,
}

impl Pass {
    /// The rest of a message of which `seen` of `total` bytes were handled with its header.
    pub fn rest(total: usize, seen: usize, keep: bool) -> Pass {
        debug_assert!(seen < total && total <= i32::MAX as usize + 1);
        Pass {
            remaining: (total - seen) as u32,
            keep,
        }
    }

    pub fn is_idle(&self) -> bool {
        self.remaining == 0
    }

    /// Whether the bytes go on to the other side.
    pub fn keeps(&self) -> bool {
        self.keep
    }

    /// Takes what of `available` bytes belongs to the message; returns how many.
    pub fn take(&mut self, available: usize) -> usize {
        let n = available.min(self.remaining as usize);
        self.remaining -= n as u32;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_exactly_the_rest_of_the_message() {
        let mut p = Pass::rest(100, 30, true);
        assert!(!p.is_idle() && p.keeps());
        assert_eq!(p.take(50), 50);
        assert_eq!(p.take(50), 20);
        assert!(p.is_idle());
        assert_eq!(p.take(10), 0);
        assert!(Pass::default().is_idle());
    }
}
