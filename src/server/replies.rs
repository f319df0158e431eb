//! The expected-reply queue: what a server connection still owes, in request order, and what
//! the pooler does with each reply (forward it, swallow it, or put its own answer in place).
//!
//! Beside the queue it models the two states in which PostgreSQL reads messages without
//! answering them (protocol docs, "Extended Query" and "COPY Operations"): after an error in
//! an extended-protocol message the server discards everything up to the next Sync, and in
//! COPY FROM STDIN it ignores Sync and Flush until CopyDone or CopyFail. A message sent into
//! either state owes nothing, so it must not be queued as if it did.

use std::collections::VecDeque;

use std::sync::Arc;

use bytes::Bytes;

use crate::prepared::Kept;
use crate::protocol::backend as b;

/// Which client request a reply belongs to, by what completes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Parse,
    Bind,
    /// Describe of a statement or portal: completed by RowDescription or NoData.
    Describe,
    Execute,
    Close,
    Sync,
    /// A simple Query or FunctionCall: completed by ReadyForQuery.
    Query,
}

impl Request {
    fn completed_by(self, tag: u8) -> bool {
        match self {
            Request::Parse => tag == b::PARSE_COMPLETE_TAG,
            Request::Bind => tag == b::BIND_COMPLETE_TAG,
            Request::Describe => tag == b::ROW_DESCRIPTION_TAG || tag == b::NO_DATA_TAG,
            Request::Execute => matches!(
                tag,
                b::COMMAND_COMPLETE_TAG | b::EMPTY_QUERY_RESPONSE_TAG | b::PORTAL_SUSPENDED_TAG
            ),
            Request::Close => tag == b::CLOSE_COMPLETE_TAG,
            Request::Sync | Request::Query => tag == b::READY_FOR_QUERY_TAG,
        }
    }

    /// Extended-protocol requests: after their error the server skips to Sync.
    fn is_extended(self) -> bool {
        !matches!(self, Request::Sync | Request::Query)
    }
}

/// One thing the server owes, or an answer of the pooler's waiting for its turn.
#[derive(Debug, Clone)]
pub enum Owed {
    /// Replies to a client message: forwarded.
    Client(Request),
    /// A client Query or Execute, with what existed before it (statement ids, server copy
    /// sequence), so a `DISCARD ALL` it runs forgets exactly what it dropped.
    Marked {
        req: Request,
        client_seq: u64,
        server_seq: u64,
    },
    /// The client's Parse of a tracked statement: forwarded; an error (or a skip) drops it.
    TrackedParse {
        name: Bytes,
        server_name: Bytes,
        id: u64,
    },
    /// The client's Bind of a tracked statement: forwarded, unless the plan-change retry
    /// holds its error back.
    TrackedBind { id: u64 },
    /// A Parse the pooler sent (replay): ParseComplete swallowed; an error is forwarded.
    Replay { server_name: Bytes, id: u64 },
    /// The client's unnamed Parse sent again (a later transaction binds it on another
    /// server): ParseComplete swallowed; an error is forwarded.
    UnnamedReplay,
    /// A Close the pooler sent (eviction or a stale copy) of copy `id`: CloseComplete
    /// swallowed; if the server skips it, the copy is still there.
    InjectedClose { server_name: Bytes, id: u64 },
    /// A message sent only to fail, so the server's transaction fails as it would have: its
    /// ErrorResponse is replaced by the pooler's own (26000 or 42P05 with the client's name).
    Substitute { error: Bytes, req: Request },
    /// The pooler's own answer: sent once every earlier reply has been forwarded.
    Synthetic(Bytes),
    /// A tracked Close S sent while earlier replies are owed, so the server decides whether
    /// it runs: renamed and forwarded; if the server skips it, the statement comes back, and
    /// the server still holds the copy it had under that name (`had`).
    ClientClose {
        name: Bytes,
        kept: Arc<Kept>,
        had: Option<crate::prepared::Held>,
    },
    /// A simple Query of the pooler's own: everything through ReadyForQuery swallowed.
    Internal,
    /// The pooler's own one-value question (Parse, Bind, Execute, Close, Sync of a statement
    /// of its own): everything through ReadyForQuery swallowed, its row read by the relay.
    Check,
    /// The client's CopyDone or CopyFail, sent after a request whose COPY had not started
    /// yet: owes nothing, but marks where a COPY that starts would end (Syncs before it are
    /// read by the COPY and ignored, Syncs after it are answered).
    CopyEnd,
}

impl Owed {
    fn request(&self) -> Request {
        match self {
            Owed::Client(r) => *r,
            Owed::Marked { req, .. } | Owed::Substitute { req, .. } => *req,
            Owed::TrackedParse { .. } | Owed::Replay { .. } | Owed::UnnamedReplay => Request::Parse,
            Owed::InjectedClose { .. } | Owed::ClientClose { .. } => Request::Close,
            Owed::TrackedBind { .. } => Request::Bind,
            Owed::Synthetic(_) | Owed::CopyEnd | Owed::Check => Request::Sync,
            Owed::Internal => Request::Query,
        }
    }

    fn is_answer(&self) -> bool {
        matches!(self, Owed::Synthetic(_))
    }

    /// Whether the server's replies to this entry stay with the pooler (errors aside): it
    /// sent the message itself.
    fn is_swallowed(&self) -> bool {
        matches!(
            self,
            Owed::Internal
                | Owed::Check
                | Owed::Replay { .. }
                | Owed::UnnamedReplay
                | Owed::InjectedClose { .. }
        )
    }
}

/// What to do with one server message.
#[derive(Debug)]
pub struct Step {
    pub forward: bool,
    /// The entry this message completed, if any (its side effects are the caller's).
    pub completed: Option<Owed>,
    /// The message was a ReadyForQuery.
    pub ready: bool,
}

/// What the server does with the messages it reads next, besides answering them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    /// Every message is answered as the protocol says.
    #[default]
    Normal,
    /// An extended-protocol message failed and no Sync was owed after it: the server reads
    /// and discards every message up to the next Sync, which it answers.
    SkipToSync,
    /// COPY FROM STDIN is running and the client's CopyDone/CopyFail has not been sent: Sync
    /// and Flush are read and ignored.
    CopyIn,
}

/// The queue itself.
#[derive(Debug, Default)]
pub struct Replies {
    q: VecDeque<Owed>,
    mode: Mode,
}

impl Replies {
    /// Queues what the server owes for a message just written to it. A message sent into a
    /// state in which the server ignores it owes nothing: it is handed back (to be settled as
    /// skipped by the caller) instead of queued.
    pub fn push(&mut self, o: Owed) -> Option<Owed> {
        match (self.mode, &o) {
            (Mode::Normal, Owed::CopyEnd) if self.q.is_empty() => None,
            (Mode::Normal, _) => {
                self.q.push_back(o);
                None
            }
            (Mode::SkipToSync, Owed::Client(Request::Sync)) => {
                self.mode = Mode::Normal;
                self.q.push_back(o);
                None
            }
            (Mode::SkipToSync, Owed::CopyEnd) => None,
            (Mode::SkipToSync, _) => Some(o),
            (Mode::CopyIn, Owed::CopyEnd) => {
                self.mode = Mode::Normal;
                None
            }
            (Mode::CopyIn, Owed::Client(Request::Sync)) => None,
            (Mode::CopyIn, _) => {
                // Anything else ends the COPY with an error (protocol docs, "COPY
                // Operations"); its reply is then the error.
                self.q.push_back(o);
                None
            }
        }
    }

    /// Nothing owed, and the server answers the next message normally: it may go back to the
    /// pool (given an idle ReadyForQuery) or be handed to another client.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty() && self.mode == Mode::Normal
    }

    /// The server discards messages until it reads a Sync: the client's messages up to its
    /// Sync are to be dropped (a server would ignore them unanswered).
    pub fn skips_to_sync(&self) -> bool {
        self.mode == Mode::SkipToSync
    }

    /// COPY FROM STDIN is running: the client's CopyData, CopyDone, CopyFail (and Sync and
    /// Flush, which the server ignores meanwhile) belong to the running statement.
    pub fn in_copy_in(&self) -> bool {
        self.mode == Mode::CopyIn
    }

    /// Whether a ReadyForQuery is still to come (a Sync, a Query or the pooler's own query).
    pub fn owes_ready(&self) -> bool {
        self.q.iter().any(|o| {
            matches!(
                o,
                Owed::Client(Request::Sync | Request::Query)
                    | Owed::Marked {
                        req: Request::Query,
                        ..
                    }
                    | Owed::Internal
                    | Owed::Check
            )
        })
    }

    /// Whether statement `id` is being parsed here (the client's Parse or a replay, still
    /// owed) with a Sync after it: whether the server will hold it is not known yet.
    pub fn made_before_sync(&self, id: u64) -> bool {
        let mut seen = false;
        for o in &self.q {
            match o {
                Owed::TrackedParse { id: i, .. } | Owed::Replay { id: i, .. } if *i == id => {
                    seen = true
                }
                Owed::Client(Request::Sync) if seen => return true,
                _ => {}
            }
        }
        false
    }

    /// The statement a Close of client name `name` still owed would close.
    pub fn pending_close(&self, name: &[u8]) -> Option<&Arc<Kept>> {
        self.q.iter().rev().find_map(|o| match o {
            Owed::ClientClose { name: n, kept, .. } if n == name => Some(kept),
            _ => None,
        })
    }

    pub fn front(&self) -> Option<&Owed> {
        self.q.front()
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Gives back the memory of a long pipeline once nothing is owed.
    #[inline]
    pub fn trim(&mut self) {
        if self.q.capacity() > 64 && self.q.is_empty() {
            self.q = VecDeque::new();
        }
    }

    /// Forgets everything (the connection is being closed).
    pub fn clear(&mut self) {
        self.q.clear();
        self.mode = Mode::Normal;
    }

    /// Whether the pooler is running its own query (whose messages are all swallowed).
    pub fn internal_in_front(&self) -> bool {
        matches!(self.q.front(), Some(Owed::Internal | Owed::Check))
    }

    /// Pops the pooler's answers that have reached the front (their bytes go to the client).
    /// Inlined: asked before every server message, and almost always answered no.
    #[inline]
    pub fn pop_answer(&mut self) -> Option<Owed> {
        if self.q.front().is_some_and(Owed::is_answer) {
            self.pop()
        } else {
            None
        }
    }

    /// Pops the front entry, and any CopyEnd markers that reach the front after it (they
    /// only matter behind a request whose COPY may yet start).
    #[inline]
    fn pop(&mut self) -> Option<Owed> {
        let o = self.q.pop_front();
        while matches!(self.q.front(), Some(Owed::CopyEnd)) {
            self.q.pop_front();
        }
        o
    }

    /// Whether a DataRow now goes to the client as it is: it belongs to a client's request
    /// (or to none) and, never completing a request, changes nothing here.
    pub fn passes_rows(&self) -> bool {
        match self.q.front() {
            None => true,
            // An answer in front must be sent first, which only the slow path does.
            Some(o) => !o.is_answer() && !o.is_swallowed(),
        }
    }

    /// Classifies one server message (other than ErrorResponse) by the entry in front.
    /// Inlined into the relay's loop, so the step is built in registers.
    #[inline]
    pub fn on_message(&mut self, tag: u8) -> Step {
        let ready = tag == b::READY_FOR_QUERY_TAG;
        if matches!(
            tag,
            b::NOTICE_RESPONSE_TAG | b::NOTIFICATION_RESPONSE_TAG | b::PARAMETER_STATUS_TAG
        ) {
            // Asynchronous messages belong to no request.
            return Step {
                forward: !self.internal_in_front() || tag == b::NOTIFICATION_RESPONSE_TAG,
                completed: None,
                ready: false,
            };
        }
        match tag {
            b::COPY_IN_RESPONSE_TAG => self.enter_copy_in(),
            // The COPY is over, whatever the client still sends.
            b::COMMAND_COMPLETE_TAG if self.mode == Mode::CopyIn => self.mode = Mode::Normal,
            _ => {}
        }
        let Some(front) = self.q.front() else {
            return Step {
                forward: true,
                completed: None,
                ready,
            };
        };
        let forward = !front.is_swallowed();
        let done = front.request().completed_by(tag);
        Step {
            forward,
            completed: if done { self.pop() } else { None },
            ready,
        }
    }

    /// COPY FROM STDIN started for the request in front. Syncs sent after that request and
    /// before the client's CopyDone/CopyFail are read by the COPY and ignored; if that end is
    /// not sent yet, Syncs owe nothing until it is.
    fn enter_copy_in(&mut self) {
        let mut i = 1;
        while i < self.q.len() {
            match self.q[i] {
                Owed::CopyEnd => {
                    self.q.remove(i);
                    return;
                }
                Owed::Client(Request::Sync) => {
                    self.q.remove(i);
                }
                _ => i += 1,
            }
        }
        if !self.q.is_empty() {
            self.mode = Mode::CopyIn;
        }
    }

    /// Classifies an ErrorResponse. For an extended-protocol request the server now skips to
    /// Sync, so every entry up to the next Sync is removed and returned in `skipped` (their
    /// messages were never executed); with no Sync owed, the server skips whatever is sent
    /// until the next one. Internal errors are swallowed; all others forwarded.
    pub fn on_error(&mut self, skipped: &mut Vec<Owed>) -> Step {
        if self.mode == Mode::CopyIn {
            // An error ends the COPY (the client may still be sending data).
            self.mode = Mode::Normal;
        }
        let Some(front) = self.q.front() else {
            return Step {
                forward: true,
                completed: None,
                ready: false,
            };
        };
        if !front.request().is_extended() {
            // Part of a Query (or Internal) that still ends with ReadyForQuery.
            return Step {
                forward: !matches!(front, Owed::Internal | Owed::Check),
                completed: None,
                ready: false,
            };
        }
        let failed = self.q.pop_front();
        loop {
            match self.q.front() {
                Some(Owed::Client(Request::Sync) | Owed::Internal | Owed::Check) => break,
                Some(_) => {
                    if let Some(o) = self.q.pop_front() {
                        skipped.push(o);
                    }
                }
                None => {
                    self.mode = Mode::SkipToSync;
                    break;
                }
            }
        }
        Step {
            forward: true,
            completed: failed,
            ready: false,
        }
    }
}

#[cfg(test)]
mod tests;
