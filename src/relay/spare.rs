//! Sparing the backend a transaction signals by pid (`session_state::signal`): the server
//! the pool hands a `pg_terminate_backend(pid)` is never the backend `pid` names, where the
//! pooler can tell before anything of the transaction has run.

use super::{KeptTexts, Relay, StateRule};
use crate::protocol::frame;
use crate::protocol::frontend as f;
use crate::server::{Owed, ServerState};
use crate::session_state::detect::plainly_nothing;
use crate::session_state::signal::{self, Target};

impl Relay {
    /// The pid of the backend the message in front (`seen` bytes of it, `whole`) signals,
    /// when it is the first of a transaction: the server to take for it is another. Read
    /// where the pooler reads statements anyway (`pin`, `track`): a Query (whose verdict of
    /// no session state is kept for its handling, [`Relay::plain_query`]), a Parse with the
    /// Bind after it, or a Bind of a kept statement found to signal.
    pub(super) fn spare(&mut self, tag: u8, seen: usize, whole: bool) -> Option<i32> {
        if self.policy.session_state == StateRule::Forward || !whole {
            return None;
        }
        let cbuf = &self.client.cbuf;
        match tag {
            f::QUERY_TAG => {
                let text = cbuf.get(frame::HEADER_LEN..seen - 1)?;
                // (Where `plain_query` would not look, neither does this.)
                if self.client.log.is_none()
                    && !self.client.pin.has_pending()
                    && plainly_nothing(text)
                {
                    // (A Query too long to note is read again: rare, and still right.)
                    self.client.plain_front = u16::try_from(seen).unwrap_or(0);
                    return None;
                }
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
    pub(super) fn leave_signalled(&mut self, held: &mut ServerState, seen: usize) -> bool {
        if !(self.batch.clean && self.may_release() && held.replies.is_empty())
            || self.bound_signal(&self.client.cbuf[..seen]) != Some(held.pid)
        {
            return false;
        }
        f::sync(&mut self.sout);
        self.owe(held, Owed::Internal);
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
