//! The machine's narrow side toward its driver besides the byte paths: what the driver tells
//! it ([`Input`], to [`Relay::handle`]), what it tells the driver at a round's end
//! ([`Event`], from [`Relay::poll`]), and where the session stands between calls
//! ([`Stand`], a read-only view from [`Relay::stand`]). Each carries its data: the driver
//! never asks a getter afterwards what an action meant. A new concern adds a variant here,
//! not a method.

use super::client::Deliver;
use super::{subscribe, Io, Relay, Released, Subscribe, TimedOut};
use crate::listen::Note;
use crate::protocol::backend::ErrorFields;
use crate::server::ServerState;

pub use super::pin::PinChange;
pub use super::timeouts::Kind;

/// What the driver tells the machine, apart from bytes ([`Relay::handle`]).
#[derive(Debug)]
pub enum Input<'a> {
    /// The pool could not give the message in front (of type `tag`, from
    /// [`super::Next::NeedServer`]) a server: it is answered with `fields` (ERROR).
    Refused { tag: u8, fields: &'a ErrorFields },
    /// What the driver did of a [`super::Next::Subscribe`]: one outcome per statement up to
    /// the first that failed (`Ok(new)`: the client did not listen on the channel before).
    Subscribed {
        subs: &'a [Subscribe],
        results: Vec<subscribe::Outcome>,
    },
    /// The client listens (or no longer does) through the pool's listening connection.
    Listening(bool),
    /// The held server left (its FATAL, or its close) while the client sat quiet at a
    /// transaction boundary ([`Stand::quiet`]), or it failed its idle check
    /// ([`Stand::checking`]): the client keeps its session and takes another server for its
    /// next transaction (or its messages waiting); a pin, whose state went with the server,
    /// ends.
    ServerLeft,
    /// A notification from the pool's listening connection (`None`: the mark of a loss
    /// alone; `lost`: notifications meant for the client were dropped, it is warned first).
    Notification { note: Option<&'a Note>, lost: bool },
    /// A notice of the pooler's for the client.
    Notice(&'a ErrorFields),
    /// A timeout the machine asked for ([`Relay::deadline`]) fired: answered at once by
    /// [`Event::TimedOut`].
    Timeout(Kind),
}

/// What the machine asks of the driver at a round's end ([`Relay::poll`]) or in answer to an
/// input ([`Relay::handle`]).
#[derive(Debug)]
pub enum Event {
    /// The client was pinned or unpinned, or subscriptions committed: SHOW CLIENTS, the
    /// pinned gauge and the listening connection follow.
    Pin(PinChange),
    /// The transaction is over and the held server owes nothing: it goes back to the pool.
    Release(Released),
    /// What a fired timeout does.
    TimedOut(TimedOut),
}

/// Where the session stands between calls ([`Relay::stand`]): a read-only view, each
/// question answered where the driver asks it (what is not asked costs nothing).
#[derive(Clone, Copy)]
pub struct Stand<'r> {
    relay: &'r Relay,
    srv: Option<&'r ServerState>,
}

impl Stand<'_> {
    /// Client bytes are buffered that the machine has not handled yet.
    #[inline(always)]
    pub fn pending(self) -> bool {
        !self.relay.client.cbuf.is_empty()
    }

    /// The client buffer has room for another read (`client.buffer_size`): while the driver
    /// waits for something else, it reads the client no further.
    #[inline(always)]
    pub fn room(self) -> bool {
        self.relay.client.cbuf.len() < self.relay.policy.buffer()
    }

    /// Reading the client now could help: its buffer has room, or the message in front must
    /// be held whole and is not complete yet. Otherwise the client is pushed back through
    /// its socket.
    #[inline(always)]
    pub fn read_client(self) -> bool {
        self.relay.wants_client()
    }

    /// The held server (if any) is between requests: it owes nothing, no transaction is
    /// open and the client has sent nothing more (a notification may go out now; a server
    /// that leaves now leaves the client its session).
    #[inline(always)]
    pub fn quiet(self) -> bool {
        self.srv.map_or(true, |s| self.relay.quiet(s))
    }

    /// The client's transaction block is open (not failed).
    #[inline(always)]
    pub fn in_block(self) -> bool {
        self.relay.in_block()
    }

    /// The held server, just taken, is answering its idle check: a server that leaves or
    /// fails now is replaced ([`Input::ServerLeft`]) and the client's messages wait on.
    #[inline(always)]
    pub fn checking(self) -> bool {
        self.srv.is_some() && self.relay.checking()
    }

    /// A deadline may be due ([`Relay::deadline`]): the driver keeps a timer.
    #[inline(always)]
    pub fn timed(self) -> bool {
        self.relay.marks.is_some()
    }

    /// Session mode's transaction boundary on the held server: idle, outside a
    /// transaction, nothing owed or buffered (a drain may close the client here).
    #[inline(always)]
    pub fn boundary(self) -> bool {
        self.srv.is_some_and(|s| self.relay.at_session_boundary(s))
    }
}

impl Relay {
    /// Where the session stands, holding `srv` (or nothing).
    #[inline(always)]
    pub fn stand<'r>(&'r self, srv: Option<&'r ServerState>) -> Stand<'r> {
        Stand { relay: self, srv }
    }

    /// What the driver must do now that a round's work is done, holding `srv` (or nothing):
    /// a change of pin first, then the server's release. `None`: nothing. Called until it
    /// returns `None` or a release (after which nothing else is due).
    #[inline(always)]
    pub fn poll(&mut self, srv: Option<&ServerState>, io: &mut impl Io) -> Option<Event> {
        if let Some(change) = self.take_pin_change() {
            return Some(Event::Pin(change));
        }
        self.release(srv?, io).map(Event::Release)
    }

    /// Takes what the driver tells the machine, holding `srv` (or nothing). An input that
    /// asks something of the driver at once (a timeout) returns it.
    #[cold]
    pub fn handle(
        &mut self,
        srv: Option<&mut ServerState>,
        input: Input<'_>,
        io: &mut impl Io,
    ) -> Option<Event> {
        match input {
            Input::Refused { tag, fields } => self.refuse(tag, fields),
            Input::Subscribed { subs, results } => self.subscribed(srv, subs, results),
            Input::Listening(on) => self.client.listening = on,
            Input::ServerLeft => {
                if let Some(srv) = srv {
                    self.lose_idle_server(srv);
                }
            }
            Input::Notification { note, lost } => {
                self.before_ready(|out: &mut Deliver| out.notify(note, lost, io))
            }
            Input::Notice(fields) => self.before_ready(|out: &mut Deliver| out.notice(fields)),
            Input::Timeout(kind) => {
                return Some(Event::TimedOut(self.timed_out(kind, srv.as_deref())))
            }
        }
        None
    }
}
