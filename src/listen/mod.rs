//! `LISTEN` without a server (`pool.session_state: track`): the channels a pool's clients
//! listen on and the queue each client's notifications wait in. One connection per pool
//! listens for all of them (`pool::listener`); a notification it receives is copied, as the
//! same bytes, into the queue of every client subscribed to its channel, and the client's
//! session writes it out while the client holds no server (where PostgreSQL too delivers
//! them: between transactions).
//!
//! Memory is bounded by configuration: a client's queue holds at most [`QUEUE`]
//! notifications; one that does not read loses the rest and is told so with a warning when
//! it next gets one, as it is when the listening connection was lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame;

/// Notifications one client's queue holds before further ones are dropped (and it is told).
pub const QUEUE: usize = 1024;
/// Channels one client may listen on through the pool's listening connection: its list,
/// and the pool's subscriptions for it, are bounded by this, not by what it sends.
pub const MAX_CHANNELS: usize = 10_000;

/// One notification as the listening connection received it, shared by every client it is
/// queued for: its sender's process id is mapped to the client key the sender had once, by
/// the first client that delivers it (the mapping looks through every client).
#[derive(Debug)]
pub struct Note {
    raw: Bytes,
    /// When the listening connection received it: its sender took its server before then
    /// (a client that took that server later is not the sender).
    arrived: Instant,
    renumbered: OnceLock<Bytes>,
}

impl Note {
    pub fn new(raw: Bytes) -> Arc<Note> {
        Arc::new(Note {
            raw,
            arrived: Instant::now(),
            renumbered: OnceLock::new(),
        })
    }

    /// The message as clients get it: `renumber` (given the received message and when it
    /// arrived; `None` when it stays as it is) runs once per notification, whoever delivers
    /// it first.
    pub fn bytes(&self, renumber: impl FnOnce(&[u8], Instant) -> Option<Bytes>) -> &[u8] {
        self.renumbered
            .get_or_init(|| renumber(&self.raw, self.arrived).unwrap_or_else(|| self.raw.clone()))
    }
}

/// What a client's queue holds: a notification, or (`None`) the mark of a loss alone.
pub type Item = Option<Arc<Note>>;

/// The sending half of one client's queue, kept by the pool for each channel it listens on.
#[derive(Debug, Clone)]
pub struct Mailbox {
    client: u64,
    tx: mpsc::Sender<Item>,
    /// Set when a notification could not be queued or the listening connection was lost.
    lost: Arc<AtomicBool>,
}

impl Mailbox {
    /// Queues `note`; a full queue drops it and marks the loss.
    pub fn send(&self, note: Arc<Note>) -> bool {
        match self.tx.try_send(Some(note)) {
            Ok(()) => true,
            Err(_) => {
                self.lost.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    /// Notifications may have been lost (the listening connection failed): told to the client
    /// with the next one, or as soon as it is idle.
    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::Relaxed);
        // Wakes an idle client.
        let _ = self.tx.try_send(None);
    }

    pub fn client(&self) -> u64 {
        self.client
    }
}

/// One client's queue of notifications (its session reads it).
#[derive(Debug)]
pub struct Inbox {
    rx: mpsc::Receiver<Item>,
    /// One item taken off the queue by [`Inbox::poll_ready`].
    next: Option<Item>,
    mailbox: Mailbox,
    /// The channels the client listens on (through the pool's connection).
    channels: Vec<String>,
    /// Listens that begin at a commit ([`Inbox::listened_early`]).
    fresh: Fresh,
}

/// The channels a client that listened on nothing began to listen on inside its open block.
/// The pooler makes such a `LISTEN` when it comes (so the block's own `NOTIFY` reaches the
/// client at its commit), but PostgreSQL starts that listener only at the commit, skipping
/// what other sessions committed before: a notification on one of them that arrived before
/// `cutoff` (the last time the client spoke in that block with nothing owed, at the latest
/// its `COMMIT`) is not delivered. One from a session that committed after that arrives after
/// it, so none is lost.
#[derive(Debug, Default)]
struct Fresh {
    channels: Vec<String>,
    cutoff: Option<Instant>,
    /// The block is open: the cutoff still moves.
    open: bool,
}

impl Inbox {
    pub fn new(client: u64) -> Inbox {
        let (tx, rx) = mpsc::channel(QUEUE);
        Inbox {
            rx,
            next: None,
            mailbox: Mailbox {
                client,
                tx,
                lost: Arc::new(AtomicBool::new(false)),
            },
            channels: Vec::new(),
            fresh: Fresh::default(),
        }
    }

    pub fn mailbox(&self) -> &Mailbox {
        &self.mailbox
    }

    /// The channels the client listens on.
    pub fn channels(&self) -> &[String] {
        &self.channels
    }

    /// Notes a channel listened on (once) / no longer listened on (`None`: all).
    pub fn note(&mut self, listen: bool, channel: Option<&str>) {
        match (listen, channel) {
            (true, Some(c)) if !self.channels.iter().any(|x| x == c) => {
                self.channels.push(c.to_owned())
            }
            (false, Some(c)) => {
                self.channels.retain(|x| x != c);
                self.fresh.channels.retain(|x| x != c);
            }
            (false, None) => {
                self.channels.clear();
                self.fresh.channels.clear();
            }
            _ => {}
        }
    }

    /// `channel`, listened on inside the client's open block, was made at once; `first`: the
    /// client listened on nothing before it. A first listener's channels of that block wait
    /// for its commit ([`Fresh`]).
    pub fn listened_early(&mut self, channel: &str, first: bool) {
        if !first && !self.fresh.open {
            return;
        }
        if !self.fresh.open {
            self.fresh.channels.clear();
            self.fresh.open = true;
        }
        self.fresh.channels.push(channel.to_owned());
        self.fresh.cutoff = Some(Instant::now());
    }

    /// Whether a block's first listens wait for its commit.
    pub fn fresh_open(&self) -> bool {
        self.fresh.open
    }

    /// The client spoke in its open block with nothing owed by its server: what others
    /// commit before this may have committed before the client's commit.
    pub fn client_spoke(&mut self) {
        if self.fresh.open {
            self.fresh.cutoff = Some(Instant::now());
        }
    }

    /// The client's block has ended: the cutoff stays where it is.
    pub fn block_ended(&mut self) {
        self.fresh.open = false;
    }

    /// Whether `note` is on a channel the client listens on now: one queued before its
    /// `UNLISTEN` (or before a rollback ended its `LISTEN`) is not delivered, as PostgreSQL,
    /// which reads its queue when it delivers, does not deliver it.
    pub fn hears(&self, note: &Note) -> bool {
        let channel = note
            .raw
            .get(frame::HEADER_LEN..)
            .and_then(parse_notification)
            .map(|(_, channel, _)| channel);
        let Some(channel) = channel else {
            return true;
        };
        let eq = |x: &String| x.as_bytes() == channel;
        self.channels.iter().any(eq)
            && !(self.fresh.cutoff.is_some_and(|at| note.arrived < at)
                && self.fresh.channels.iter().any(eq))
    }

    /// Ready once a notification is queued (taken with [`Inbox::try_recv`]): the waiting
    /// future carries no message.
    pub fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.next.is_some() {
            return std::task::Poll::Ready(());
        }
        match self.rx.poll_recv(cx) {
            std::task::Poll::Ready(Some(m)) => {
                self.next = Some(m);
                std::task::Poll::Ready(())
            }
            // The pool keeps a sender while the client is subscribed; with none left nothing
            // comes.
            _ => std::task::Poll::Pending,
        }
    }

    /// The next queued item, if one is there now.
    pub fn try_recv(&mut self) -> Option<Item> {
        self.next.take().or_else(|| self.rx.try_recv().ok())
    }

    /// Whether notifications were lost since the last call (the client is then warned).
    pub fn take_lost(&self) -> bool {
        self.mailbox.lost.swap(false, Ordering::Relaxed)
    }
}

/// The warning a client gets when notifications meant for it may have been lost.
pub fn lost_notice(out: &mut BytesMut) {
    let fields = ErrorFields {
        severity: "WARNING".into(),
        code: "01000".into(),
        message: "notifications may have been lost (the pooler's listening connection \
                  failed, or this client did not read them in time)"
            .into(),
        detail: None,
        hint: Some("check what the channels' notifications announce".into()),
    };
    backend::notice_response(out, &fields);
}

/// The sender's process id, channel and payload of a NotificationResponse's body.
pub fn parse_notification(body: &[u8]) -> Option<(i32, &[u8], &[u8])> {
    let pid = i32::from_be_bytes(body.get(..4)?.try_into().ok()?);
    let rest = &body[4..];
    let end = rest.iter().position(|&b| b == 0)?;
    let channel = &rest[..end];
    let rest = &rest[end + 1..];
    let pend = rest.iter().position(|&b| b == 0)?;
    Some((pid, channel, &rest[..pend]))
}

/// A whole NotificationResponse `msg` with the sender's process id replaced by `pid`.
pub fn with_pid(msg: &[u8], pid: i32) -> Bytes {
    let mut m = BytesMut::with_capacity(msg.len());
    m.extend_from_slice(&msg[..frame::HEADER_LEN]);
    m.put_i32(pid);
    m.extend_from_slice(&msg[frame::HEADER_LEN + 4..]);
    m.freeze()
}

/// A channel name as an SQL identifier (double-quoted, quotes doubled), as `LISTEN` takes it.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Who listens on which channel.
#[derive(Debug, Default)]
pub struct Channels {
    by_name: HashMap<String, Vec<Mailbox>>,
}

impl Channels {
    /// Subscribes `mb` to `channel`; returns whether the channel was new (nobody listened).
    pub fn add(&mut self, channel: &str, mb: &Mailbox) -> bool {
        match self.by_name.get_mut(channel) {
            Some(list) => {
                if !list.iter().any(|m| m.client == mb.client) {
                    list.push(mb.clone());
                }
                false
            }
            None => {
                self.by_name.insert(channel.to_owned(), vec![mb.clone()]);
                true
            }
        }
    }

    /// Unsubscribes `client` from `channel` (`None`: from every channel); returns the
    /// channels nobody listens on any more.
    pub fn remove(&mut self, client: u64, channel: Option<&str>) -> Vec<String> {
        let mut emptied = Vec::new();
        let mut drop_from = |name: &str, list: &mut Vec<Mailbox>| {
            list.retain(|m| m.client != client);
            if list.is_empty() {
                emptied.push(name.to_owned());
            }
        };
        match channel {
            Some(c) => {
                if let Some(list) = self.by_name.get_mut(c) {
                    drop_from(c, list);
                }
            }
            None => {
                for (name, list) in self.by_name.iter_mut() {
                    drop_from(name, list);
                }
            }
        }
        for name in &emptied {
            self.by_name.remove(name);
        }
        emptied
    }

    /// Whether anyone listens on `channel`.
    pub fn has(&self, channel: &str) -> bool {
        self.by_name.contains_key(channel)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every channel listened on.
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    /// The subscribers of `channel`.
    pub fn subscribers(&self, channel: &[u8]) -> &[Mailbox] {
        std::str::from_utf8(channel)
            .ok()
            .and_then(|c| self.by_name.get(c))
            .map_or(&[], Vec::as_slice)
    }

    /// Every subscriber (once per channel it listens on).
    pub fn all(&self) -> impl Iterator<Item = &Mailbox> {
        self.by_name.values().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification(pid: i32, channel: &str, payload: &str) -> BytesMut {
        let mut m = BytesMut::new();
        let at = frame::begin(&mut m, backend::NOTIFICATION_RESPONSE_TAG);
        m.put_i32(pid);
        m.extend_from_slice(channel.as_bytes());
        m.put_u8(0);
        m.extend_from_slice(payload.as_bytes());
        m.put_u8(0);
        frame::finish(&mut m, at);
        m
    }

    #[test]
    fn a_notification_read_and_its_sender_replaced() {
        let m = notification(77, "ch", "hello");
        assert_eq!(
            parse_notification(&m[frame::HEADER_LEN..]),
            Some((77, &b"ch"[..], &b"hello"[..]))
        );
        let n = with_pid(&m, 1234);
        assert_eq!(
            parse_notification(&n[frame::HEADER_LEN..]),
            Some((1234, &b"ch"[..], &b"hello"[..]))
        );
        assert_eq!(n.len(), m.len());
        assert_eq!(parse_notification(&m[frame::HEADER_LEN..8]), None);
    }

    #[test]
    fn channels_count_their_subscribers() {
        let a = Inbox::new(1);
        let b = Inbox::new(2);
        let mut c = Channels::default();
        assert!(c.add("x", a.mailbox()));
        assert!(!c.add("x", b.mailbox()));
        assert!(!c.add("x", a.mailbox()));
        assert!(c.add("y", a.mailbox()));
        assert_eq!(c.subscribers(b"x").len(), 2);
        assert!(c.remove(1, Some("x")).is_empty());
        assert_eq!(c.remove(2, None), vec!["x".to_string()]);
        assert!(c.has("y") && !c.has("x"));
        assert_eq!(c.remove(1, None), vec!["y".to_string()]);
        assert!(c.is_empty());
    }

    #[test]
    fn a_full_queue_drops_and_marks_the_loss() {
        let mut inbox = Inbox::new(1);
        let mb = inbox.mailbox().clone();
        let note = Note::new(Bytes::from_static(b"n"));
        for _ in 0..QUEUE {
            assert!(mb.send(note.clone()));
        }
        assert!(!inbox.take_lost());
        assert!(!mb.send(note.clone()));
        assert!(inbox.take_lost());
        assert!(!inbox.take_lost());
        assert!(inbox.try_recv().is_some());
    }

    #[test]
    fn only_a_channel_listened_on_now_is_delivered() {
        let mut inbox = Inbox::new(1);
        let on = |c| Note::new(with_pid(&notification(7, c, "p"), 7));
        inbox.note(true, Some("a"));
        assert!(inbox.hears(&on("a")));
        assert!(!inbox.hears(&on("b")));
        // Queued before the UNLISTEN: not delivered after it.
        inbox.note(false, Some("a"));
        assert!(!inbox.hears(&on("a")));
    }

    #[test]
    fn a_note_is_renumbered_once() {
        let note = Note::new(with_pid(&notification(7, "c", "p"), 7));
        let mut calls = 0;
        for _ in 0..3 {
            let b = note.bytes(|m, _| {
                calls += 1;
                Some(with_pid(m, 42))
            });
            assert_eq!(
                parse_notification(&b[frame::HEADER_LEN..]).map(|n| n.0),
                Some(42)
            );
        }
        assert_eq!(calls, 1);
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("Ab\"c"), "\"Ab\"\"c\"");
    }
}
