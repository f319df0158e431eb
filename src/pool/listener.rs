//! The pool's listening connection (`pool.session_state: track`): one server connection per
//! pool, opened on a client's first `LISTEN`, that listens on every channel the pool's
//! clients listen on, so that a listening client holds no server. It counts against the
//! limits pools share (`pool.max_db_connections`, `pool.max_user_connections`), not against
//! the pool's size: the pool's servers stay the clients'. A notification it receives goes to
//! each subscribed client's queue ([`crate::listen`]). After a failure it is opened again
//! (the pool's logins, with their backoff, budget and breakers) and listens on every channel
//! again, and every subscribed client is warned that notifications may have been lost. With
//! no channel left it closes.

use std::collections::HashSet;
use std::sync::MutexGuard;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};

use super::Pool;
use crate::listen::{parse_notification, quote_ident, Channels, Mailbox, Note};
use crate::logs::Escaped;
use crate::protocol::backend::{self as b, ErrorFields};
use crate::protocol::frontend as f;
use crate::protocol::{frame, sqlstate};
use crate::server::{ServerConn, Slots};

/// How long a failed listening connection waits before it is opened again (beyond the
/// login's own backoff), while clients still listen.
const REOPEN_PAUSE: Duration = Duration::from_secs(1);

/// The largest message the listening connection reads (a notification's payload is at most
/// 8000 bytes by default; an error is small).
const MAX_MESSAGE: usize = 1 << 20;

/// What a client's `LISTEN` is answered with when it fails.
pub type ListenResult = Result<(), ErrorFields>;

enum Cmd {
    Listen(String, oneshot::Sender<ListenResult>),
    Unlisten(String),
    /// Answered once every notification committed before it was asked has been received.
    CaughtUp(oneshot::Sender<()>),
}

/// The channel the listening connection notifies itself on to know it has caught up: a
/// session's own notifications, and every one committed before, reach it before the
/// ReadyForQuery of its `NOTIFY` (they are read from PostgreSQL's queue in commit order).
/// Never handed to clients.
const CAUGHT_UP: &str = "droid-pool caught up";

/// Who listens on what, and the running connection task's queue.
#[derive(Default)]
pub(super) struct ListenState {
    channels: Channels,
    cmd: Option<mpsc::UnboundedSender<Cmd>>,
}

impl Pool {
    fn listeners(&self) -> MutexGuard<'_, ListenState> {
        self.inner.listen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `LISTEN channel` for the client whose queue `mb` feeds: once this returns `Ok`, the
    /// pool's connection listens on the channel.
    pub async fn listen(&self, channel: &str, mb: &Mailbox) -> ListenResult {
        let (tx, rx) = oneshot::channel();
        let already;
        {
            let mut st = self.listeners();
            already = st
                .channels
                .subscribers(channel.as_bytes())
                .iter()
                .any(|m| m.client() == mb.client());
            st.channels.add(channel, mb);
            let cmd = match &st.cmd {
                Some(c) => c.clone(),
                None => {
                    let (c, r) = mpsc::unbounded_channel();
                    st.cmd = Some(c.clone());
                    tokio::spawn(self.clone().run_listener(r));
                    c
                }
            };
            // The task clears `cmd` under this lock before it ends: a send cannot be lost.
            let _ = cmd.send(Cmd::Listen(channel.to_owned(), tx));
        }
        let res = rx.await.unwrap_or_else(|_| Err(closed()));
        // A failed repeat of a LISTEN leaves the subscription the client had.
        if res.is_err() && !already {
            self.unlisten(mb.client(), Some(channel));
        }
        res
    }

    /// `UNLISTEN channel` (`None`: `UNLISTEN *`, or the client left) for client `client`:
    /// nothing more is queued for it from then on.
    pub fn unlisten(&self, client: u64, channel: Option<&str>) {
        let mut st = self.listeners();
        let emptied = st.channels.remove(client, channel);
        if let Some(cmd) = &st.cmd {
            for c in emptied {
                let _ = cmd.send(Cmd::Unlisten(c));
            }
        }
    }

    /// Waits until the listening connection has received every notification committed
    /// before now (a client's own `NOTIFY` reaches it before the client's ReadyForQuery, as
    /// directly). Returns at once when the pool has no listening connection.
    pub async fn listener_caught_up(&self) {
        let Some(cmd) = self.listeners().cmd.clone() else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        if cmd.send(Cmd::CaughtUp(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Opens the listening connection: a login like any of the pool's, counted against the
    /// shared limits only.
    async fn open_listener(&self) -> Result<ServerConn, ErrorFields> {
        let mut shared = Vec::with_capacity(self.inner.limits.len());
        for limit in &self.inner.limits {
            match limit.cap.try_take() {
                Some(slot) => shared.push(slot),
                None => {
                    return Err(crate::relay::error_fields(
                        sqlstate::TOO_MANY_CONNECTIONS,
                        format!(
                            "no room for pool {}'s listening connection under its database's or user's connection limit",
                            self.inner.name
                        ),
                    ))
                }
            }
        }
        match self.connect(true).await {
            Ok(mut conn) => {
                conn.id = self.inner.counters.next_server_id();
                conn.slots = Slots {
                    pool: None,
                    reserve: false,
                    shared,
                };
                self.inner.events.server_connected(conn.id);
                Ok(conn)
            }
            Err(failure) => {
                let (e, _) = self.failure_error(failure);
                Err(crate::relay::error_fields(e.sqlstate(), e.to_string()))
            }
        }
    }

    /// The listening connection's task: runs the clients' LISTEN and UNLISTEN on it in order,
    /// hands out what it receives, and opens it again after a failure, until nobody listens
    /// or the pool shuts down.
    async fn run_listener(self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        let mut conn: Option<ServerConn> = None;
        let mut on: HashSet<String> = HashSet::new();
        let mut rbuf = BytesMut::with_capacity(8192);
        let shutdown = self.inner.shutdown.clone();
        loop {
            {
                let mut st = self.listeners();
                if st.channels.is_empty() && rx.is_empty() {
                    st.cmd = None;
                    break;
                }
            }
            let Some(c) = conn.as_mut() else {
                let opened = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    r = self.open_listener() => r,
                };
                match opened {
                    Ok(c) => {
                        rbuf.clear();
                        on.clear();
                        conn = Some(c);
                        let mut names = self.listeners().channels.names();
                        names.insert(0, CAUGHT_UP.to_owned());
                        for name in names {
                            let c = conn.as_mut().expect("just opened");
                            match self.exec(c, &mut rbuf, "LISTEN", &name).await {
                                Ok(None) => {
                                    on.insert(name);
                                }
                                Ok(Some(e)) => {
                                    tracing::warn!(pool = %self.log_name(), error = %Escaped::new(&e.message), "the listening connection could not listen again");
                                }
                                Err(()) => {
                                    conn = None;
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(pool = %self.log_name(), error = %Escaped::new(&e.message), "could not open the listening connection");
                        // Those waiting for a LISTEN are told now; the others wait for the
                        // next attempt.
                        while let Ok(cmd) = rx.try_recv() {
                            if let Cmd::Listen(_, ack) = cmd {
                                let _ = ack.send(Err(e.clone()));
                            }
                        }
                        tokio::select! {
                            _ = shutdown.cancelled() => break,
                            _ = tokio::time::sleep(REOPEN_PAUSE) => {}
                        }
                    }
                }
                continue;
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    if self.run_cmd(c, &mut rbuf, &mut on, cmd).await.is_err() {
                        self.listener_lost(&mut conn);
                    }
                }
                r = c.stream.read_buf(&mut rbuf) => {
                    let ended = match r {
                        Ok(0) | Err(_) => true,
                        Ok(_) => self.hand_out(&mut rbuf).is_err(),
                    };
                    if ended {
                        self.listener_lost(&mut conn);
                    }
                }
            }
        }
        if let Some(c) = conn {
            super::terminate(Box::new(c)).await;
        }
    }

    async fn run_cmd(
        &self,
        c: &mut ServerConn,
        rbuf: &mut BytesMut,
        on: &mut HashSet<String>,
        cmd: Cmd,
    ) -> Result<(), ()> {
        match cmd {
            Cmd::Listen(name, ack) => {
                if on.contains(&name) {
                    let _ = ack.send(Ok(()));
                    return Ok(());
                }
                match self.exec(c, rbuf, "LISTEN", &name).await {
                    Ok(None) => {
                        on.insert(name);
                        let _ = ack.send(Ok(()));
                    }
                    Ok(Some(e)) => {
                        let _ = ack.send(Err(e));
                    }
                    Err(()) => {
                        let _ = ack.send(Err(closed()));
                        return Err(());
                    }
                }
            }
            Cmd::CaughtUp(ack) => {
                let caught_up = self.exec(c, rbuf, "NOTIFY", CAUGHT_UP).await;
                let _ = ack.send(());
                caught_up?;
            }
            // Subscribed again meanwhile: still listened on.
            Cmd::Unlisten(name) if self.listeners().channels.has(&name) => {}
            Cmd::Unlisten(name) => {
                if on.remove(&name) {
                    self.exec(c, rbuf, "UNLISTEN", &name).await?;
                }
            }
        }
        Ok(())
    }

    /// The listening connection failed: closed, and every subscriber warned.
    fn listener_lost(&self, conn: &mut Option<ServerConn>) {
        tracing::warn!(pool = %self.log_name(), "the listening connection was lost; opening it again");
        *conn = None;
        for mb in self.listeners().channels.all() {
            mb.mark_lost();
        }
    }

    /// Runs `verb channel` on the listening connection, handing out notifications that arrive
    /// meanwhile. `Ok(Some(error))`: PostgreSQL refused it; `Err`: the connection failed.
    async fn exec(
        &self,
        c: &mut ServerConn,
        rbuf: &mut BytesMut,
        verb: &str,
        channel: &str,
    ) -> Result<Option<ErrorFields>, ()> {
        let mut q = BytesMut::new();
        f::query(&mut q, &format!("{verb} {}", quote_ident(channel)));
        c.stream.send(&q).await.map_err(|_| ())?;
        let mut error = None;
        loop {
            if answer_read(rbuf, &mut error, |m| self.deliver(m))? {
                return Ok(error);
            }
            if c.stream.read_buf(rbuf).await.map_err(|_| ())? == 0 {
                return Err(());
            }
        }
    }

    /// Hands out every whole notification read; an error (a FATAL: the server is going) ends
    /// the connection.
    fn hand_out(&self, rbuf: &mut BytesMut) -> Result<(), ()> {
        notifications_read(rbuf, |m| self.deliver(m))
    }

    /// Queues notification `msg` for every client listening on its channel.
    fn deliver(&self, msg: Bytes) {
        let Some((_, channel, _)) = parse_notification(&msg[frame::HEADER_LEN..]) else {
            return;
        };
        if channel == CAUGHT_UP.as_bytes() {
            return;
        }
        let st = self.listeners();
        let subscribers = st.channels.subscribers(channel);
        if subscribers.is_empty() {
            return;
        }
        let note = Note::new(msg.clone());
        for mb in subscribers {
            let ok = mb.send(note.clone());
            self.inner
                .metrics
                .clients
                .notifications
                .with_label_values(&[if ok { "queued" } else { "dropped" }])
                .inc();
        }
    }
}

/// Reads the whole frames in `rbuf` of the answer to a command on the listening connection:
/// notifications go to `deliver`, an error is put in `error`. True once its ReadyForQuery is
/// read: notifications read with it go out too, not with whatever the connection reads next
/// (which may be much later).
fn answer_read(
    rbuf: &mut BytesMut,
    error: &mut Option<ErrorFields>,
    mut deliver: impl FnMut(Bytes),
) -> Result<bool, ()> {
    while let Some(frame) = frame::cut(rbuf, MAX_MESSAGE).map_err(|_| ())? {
        match frame.tag {
            b::READY_FOR_QUERY_TAG => {
                notifications_read(rbuf, deliver)?;
                return Ok(true);
            }
            b::ERROR_RESPONSE_TAG => *error = b::parse_error(frame.body()).ok(),
            b::NOTIFICATION_RESPONSE_TAG => deliver(frame.bytes),
            _ => {}
        }
    }
    Ok(false)
}

/// Hands every whole notification in `rbuf` to `deliver`; an error (a FATAL: the server is
/// going) is `Err`.
fn notifications_read(rbuf: &mut BytesMut, mut deliver: impl FnMut(Bytes)) -> Result<(), ()> {
    while let Some(frame) = frame::cut(rbuf, MAX_MESSAGE).map_err(|_| ())? {
        match frame.tag {
            b::NOTIFICATION_RESPONSE_TAG => deliver(frame.bytes),
            b::ERROR_RESPONSE_TAG => return Err(()),
            _ => {}
        }
    }
    Ok(())
}

fn closed() -> ErrorFields {
    crate::relay::error_fields(
        sqlstate::CONNECTION_FAILURE,
        "the pooler's listening connection failed; try again".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn notification(channel: &str) -> Vec<u8> {
        let body = [&7i32.to_be_bytes()[..], channel.as_bytes(), b"\0p\0"].concat();
        [
            &[b::NOTIFICATION_RESPONSE_TAG][..],
            &(body.len() as u32 + 4).to_be_bytes(),
            &body,
        ]
        .concat()
    }

    #[test]
    fn a_notification_read_with_the_ready_for_query_goes_out_at_once() {
        let mut rbuf = BytesMut::new();
        rbuf.put_slice(&notification("a"));
        rbuf.put_slice(&[b'C', 0, 0, 0, 13]);
        rbuf.put_slice(b"UNLISTEN\0");
        rbuf.put_slice(&[b::READY_FOR_QUERY_TAG, 0, 0, 0, 5, b'I']);
        rbuf.put_slice(&notification("b"));
        let half = notification("c");
        rbuf.put_slice(&half[..6]);
        let mut got = Vec::new();
        let mut error = None;
        let done = answer_read(&mut rbuf, &mut error, |m| {
            got.push(
                parse_notification(&m[frame::HEADER_LEN..])
                    .unwrap()
                    .1
                    .to_vec(),
            )
        });
        assert_eq!(done, Ok(true));
        assert_eq!(got, [b"a".to_vec(), b"b".to_vec()]);
        assert!(error.is_none());
        // The notification not wholly read stays for the next read.
        assert_eq!(&rbuf[..], &half[..6]);

        // No ReadyForQuery yet: more must be read.
        let mut rbuf = BytesMut::from(&notification("d")[..]);
        assert_eq!(answer_read(&mut rbuf, &mut error, |_| {}), Ok(false));
    }
}
