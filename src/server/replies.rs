//! The expected-reply queue: what a server connection still owes, in request order, and what
//! the pooler does with each reply (forward it, swallow it, or put its own answer in place).

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
    /// A Close the pooler sent (eviction or a stale copy) of copy `id`: CloseComplete
    /// swallowed; if the server skips it, the copy is still there.
    InjectedClose { server_name: Bytes, id: u64 },
    /// A message sent only to fail, so the server's transaction fails as it would have: its
    /// ErrorResponse is replaced by the pooler's own (26000 or 42P05 with the client's name).
    Substitute { error: Bytes, req: Request },
    /// The pooler's own answer: sent once every earlier reply has been forwarded.
    Synthetic(Bytes),
    /// The pooler's CloseComplete for a tracked Close S: if the server skips the batch there,
    /// the statement comes back.
    ClientClose {
        name: Bytes,
        kept: Arc<Kept>,
        reply: Bytes,
    },
    /// A simple Query of the pooler's own: everything through ReadyForQuery swallowed.
    Internal,
}

impl Owed {
    fn request(&self) -> Request {
        match self {
            Owed::Client(r) => *r,
            Owed::Marked { req, .. } | Owed::Substitute { req, .. } => *req,
            Owed::TrackedParse { .. } | Owed::Replay { .. } => Request::Parse,
            Owed::InjectedClose { .. } => Request::Close,
            Owed::TrackedBind { .. } => Request::Bind,
            Owed::Synthetic(_) | Owed::ClientClose { .. } => Request::Sync,
            Owed::Internal => Request::Query,
        }
    }

    fn is_answer(&self) -> bool {
        matches!(self, Owed::Synthetic(_) | Owed::ClientClose { .. })
    }

    /// Whether the server's replies to this entry stay with the pooler (errors aside): it
    /// sent the message itself.
    fn is_swallowed(&self) -> bool {
        matches!(
            self,
            Owed::Internal | Owed::Replay { .. } | Owed::InjectedClose { .. }
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

/// The queue itself.
#[derive(Debug, Default)]
pub struct Replies {
    q: VecDeque<Owed>,
}

impl Replies {
    pub fn push(&mut self, o: Owed) {
        self.q.push_back(o);
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Whether a ReadyForQuery is still to come (a Sync, a Query or the pooler's own query).
    pub fn owes_ready(&self) -> bool {
        self.q.iter().any(|o| {
            matches!(
                o,
                Owed::Client(Request::Sync | Request::Query) | Owed::Internal
            )
        })
    }

    /// Whether statement `id`'s Parse is still owed and a Sync follows it: its outcome then
    /// decides whether a later Parse of the same name is valid.
    pub fn parse_pending_before_sync(&self, id: u64) -> bool {
        let mut seen = false;
        for o in &self.q {
            match o {
                Owed::TrackedParse { id: i, .. } if *i == id => seen = true,
                Owed::Client(Request::Sync) if seen => return true,
                _ => {}
            }
        }
        false
    }

    pub fn front(&self) -> Option<&Owed> {
        self.q.front()
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn clear(&mut self) {
        self.q.clear();
    }

    /// Whether the pooler is running its own query (whose messages are all swallowed).
    pub fn internal_in_front(&self) -> bool {
        matches!(self.q.front(), Some(Owed::Internal))
    }

    /// Pops the pooler's answers that have reached the front (their bytes go to the client).
    pub fn pop_answer(&mut self) -> Option<Owed> {
        if self.q.front().is_some_and(Owed::is_answer) {
            self.q.pop_front()
        } else {
            None
        }
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
            completed: if done { self.q.pop_front() } else { None },
            ready,
        }
    }

    /// Classifies an ErrorResponse. For an extended-protocol request the server now skips to
    /// Sync, so every entry up to the next Sync is removed and returned in `skipped` (their
    /// messages were never executed). Internal errors are swallowed; all others forwarded.
    pub fn on_error(&mut self, skipped: &mut Vec<Owed>) -> Step {
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
                forward: !matches!(front, Owed::Internal),
                completed: None,
                ready: false,
            };
        }
        let failed = self.q.pop_front();
        while let Some(next) = self.q.front() {
            if matches!(next, Owed::Client(Request::Sync) | Owed::Internal) {
                break;
            }
            if let Some(o) = self.q.pop_front() {
                skipped.push(o);
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
mod tests {
    use super::*;

    #[test]
    fn replay_parse_complete_is_swallowed_then_synthetic_follows() {
        let mut r = Replies::default();
        r.push(Owed::Replay {
            server_name: Bytes::from_static(b"p1_p"),
            id: 1,
        });
        r.push(Owed::Client(Request::Bind));
        r.push(Owed::Synthetic(Bytes::from_static(b"3\0\0\0\x04")));
        r.push(Owed::Client(Request::Sync));
        let s = r.on_message(b'1');
        assert!(!s.forward && matches!(s.completed, Some(Owed::Replay { .. })));
        let s = r.on_message(b'2');
        assert!(s.forward && matches!(s.completed, Some(Owed::Client(Request::Bind))));
        assert!(r.pop_answer().is_some());
        let s = r.on_message(b'Z');
        assert!(s.forward && s.ready);
        assert!(r.is_empty());
    }

    #[test]
    fn rows_pass_exactly_when_on_message_would_forward_them_unchanged() {
        let name = || Bytes::from_static(b"p1_p");
        let cases = [
            (None, true),
            (Some(Owed::Client(Request::Execute)), true),
            (Some(Owed::Client(Request::Query)), true),
            (
                Some(Owed::Marked {
                    req: Request::Execute,
                    client_seq: 1,
                    server_seq: 1,
                }),
                true,
            ),
            (Some(Owed::TrackedBind { id: 1 }), true),
            (Some(Owed::Internal), false),
            (
                Some(Owed::Replay {
                    server_name: name(),
                    id: 1,
                }),
                false,
            ),
            (
                Some(Owed::InjectedClose {
                    server_name: name(),
                    id: 1,
                }),
                false,
            ),
            (Some(Owed::Synthetic(Bytes::from_static(b"x"))), false),
        ];
        for (front, passes) in cases {
            let label = format!("{front:?}");
            let mut r = Replies::default();
            if let Some(o) = front {
                r.push(o);
            }
            assert_eq!(r.passes_rows(), passes, "{label}");
            if passes {
                // The slow path agrees: forwarded, and nothing completed.
                let s = r.on_message(b::DATA_ROW_TAG);
                assert!(s.forward && s.completed.is_none() && !s.ready, "{label}");
            } else if r.pop_answer().is_none() {
                // Not an answer waiting its turn, so the slow path keeps the row.
                assert!(!r.on_message(b::DATA_ROW_TAG).forward, "{label}");
            }
        }
    }

    #[test]
    fn error_in_extended_skips_to_sync() {
        let mut r = Replies::default();
        r.push(Owed::Client(Request::Bind));
        r.push(Owed::TrackedParse {
            name: Bytes::from_static(b"q"),
            server_name: Bytes::from_static(b"p1_q"),
            id: 2,
        });
        r.push(Owed::Synthetic(Bytes::from_static(b"x")));
        r.push(Owed::Client(Request::Sync));
        let mut skipped = Vec::new();
        let s = r.on_error(&mut skipped);
        assert!(s.forward);
        assert!(matches!(s.completed, Some(Owed::Client(Request::Bind))));
        assert_eq!(skipped.len(), 2);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn error_inside_query_waits_for_ready() {
        let mut r = Replies::default();
        r.push(Owed::Client(Request::Query));
        let mut skipped = Vec::new();
        let s = r.on_error(&mut skipped);
        assert!(s.forward && s.completed.is_none());
        assert!(r.on_message(b'Z').completed.is_some());
    }

    #[test]
    fn internal_query_is_swallowed_whole() {
        let mut r = Replies::default();
        r.push(Owed::Internal);
        r.push(Owed::Client(Request::Query));
        assert!(!r.on_message(b'C').forward);
        assert!(!r.on_message(b'S').forward);
        let s = r.on_message(b'Z');
        assert!(!s.forward && s.ready && matches!(s.completed, Some(Owed::Internal)));
        assert!(r.on_message(b'T').forward);
    }
}
