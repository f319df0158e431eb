//! Sparing the backend a transaction signals by pid (`session_state::signal`): the server
//! the pool hands a `pg_terminate_backend(pid)` is never the backend `pid` names, where the
//! pooler can tell before anything of the transaction has run.

use std::num::NonZeroI32;

use super::{KeptTexts, Relay, StateRule};
use crate::protocol::frame;
use crate::protocol::frontend as f;
use crate::server::{Owed, ServerState};
use crate::session_state::detect::plainly_nothing;
use crate::session_state::signal::{self, Target};

impl Relay {
    /// A whole Query in front (`seen` bytes) that needs a server: when it plainly makes no
    /// session state (so it signals nothing either), that is noted for its handling
    /// ([`Relay::plain_query`]) and for [`Relay::spare`], so neither reads it again.
    #[inline(always)]
    pub(super) fn note_plain_front(&mut self, seen: usize) {
        // (Where `plain_query` would not look, neither does this.)
        if self.policy.session_state != StateRule::Forward
            && self.client.log.is_none()
            && !self.client.pin.has_pending()
            && self
                .client
                .cbuf
                .get(frame::HEADER_LEN..seen - 1)
                .is_some_and(plainly_nothing)
        {
            // (A Query too long to note is read again: rare, and still right.)
            self.client.plain_front = u16::try_from(seen).unwrap_or(0);
        }
    }

    /// For [`super::Next::NeedServer`]: the pid of the backend the message in front
    /// signals, which the server taken for it must not be. Read where the pooler reads
    /// statements anyway (`pin`, `track`): a Query not noted as plain
    /// ([`Relay::note_plain_front`]), a Parse with the Bind after it, or a Bind of a kept
    /// statement found to signal.
    #[inline(always)]
    pub(super) fn spare(&self) -> Option<NonZeroI32> {
        if self.policy.session_state == StateRule::Forward || self.client.plain_front != 0 {
            return None;
        }
        self.spare_read().and_then(NonZeroI32::new)
    }

    /// [`Relay::spare`] for a message that may signal.
    #[inline(never)]
    fn spare_read(&self) -> Option<i32> {
        let (tag, len) = frame::peek_header(&self.client.cbuf)?;
        let seen = len as usize + 1;
        if seen > self.client.cbuf.len() {
            return None;
        }
        let cbuf = &self.client.cbuf;
        match tag {
            f::QUERY_TAG => {
                let text = cbuf.get(frame::HEADER_LEN..seen - 1)?;
                match signal::target(text)? {
                    Target::Pid(pid) => Some(pid),
                    Target::Param(_) => None,
                }
            }
            f::PARSE_TAG => {
                // One pass for a `(` settles the usual text (a `(` elsewhere in the message
                // only costs the full look).
                memchr::memchr(b'(', cbuf.get(frame::HEADER_LEN..seen)?)?;
                let (name, text, _) = f::parse_parts(&cbuf[..seen]).ok()?;
                match signal::target(text)? {
                    Target::Pid(pid) => Some(pid),
                    // The Bind of this statement, if it came with it (a Describe may come
                    // first).
                    Target::Param(n) => {
                        let mut rest = cbuf.get(seen..)?;
                        for _ in 0..4 {
                            let (t, len) = frame::peek_header(rest)?;
                            let (msg, after) = rest.split_at_checked(len as usize + 1)?;
                            match t {
                                f::DESCRIBE_TAG => rest = after,
                                f::BIND_TAG if f::bind_statement(msg).ok()?.get(msg) == name => {
                                    return bound_pid(msg, n)
                                }
                                _ => return None,
                            }
                        }
                        None
                    }
                }
            }
            f::BIND_TAG if self.kept_texts.has(KeptTexts::SIGNALS) => {
                self.bound_signal(&cbuf[..seen])
            }
            _ => None,
        }
    }

    /// A Bind in front (`seen` bytes) of a kept statement that signals the held server's own
    /// backend, where nothing of the transaction has run yet (a driver prepared the statement
    /// on this server in the same batch, as asyncpg does before it binds): the server is let
    /// go (a Sync of the pooler's own, its ReadyForQuery swallowed), and the Bind, left in
    /// front, then takes another one, sparing this ([`Relay::spare`]). Returns whether it
    /// was.
    /// Once only: a full pool may hand the same server back, and the Bind then runs there.
    pub(super) fn leave_signalled(&mut self, held: &mut ServerState, seen: usize) -> bool {
        if self.kept_texts.take(KeptTexts::LEFT)
            || !(self.batch.clean && self.may_release() && held.replies.is_empty())
            || self.bound_signal(&self.client.cbuf[..seen]) != Some(held.pid)
        {
            return false;
        }
        f::sync(&mut self.sout);
        self.owe(held, Owed::Internal);
        self.kept_texts.add(KeptTexts::LEFT);
        true
    }

    /// The pid a whole Bind `msg` of a kept statement that signals a backend names.
    fn bound_signal(&self, msg: &[u8]) -> Option<i32> {
        let kept = self.statements.get(f::bind_statement(msg).ok()?.get(msg))?;
        match kept.signal? {
            Target::Pid(pid) => Some(pid),
            Target::Param(n) => bound_pid(msg, n),
        }
    }
}

/// Bind `msg`'s parameter `$n` as a pid.
fn bound_pid(msg: &[u8], n: u16) -> Option<i32> {
    let (format, value) = f::bind_param(msg, usize::from(n).checked_sub(1)?).ok()??;
    signal::pid_of(format, value)
}
