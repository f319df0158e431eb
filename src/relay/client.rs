//! Client → server: each whole message the client sent is forwarded, rewritten, or answered
//! by the pooler, and what the server will owe for it is queued.

use bytes::{Buf, BytesMut};

use super::error::ClientFault;
use super::pass::Pass;
use super::pin::state_refusal;
use super::subscribe;
use super::tracking::{DeallocateKept, ExecuteKept};
use super::{error_fields, Io, KeptTexts, Next, Relay, StateRule, Subscribe};
use crate::listen::Note;
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frontend as f;
use crate::protocol::{frame, sqlstate};
use crate::server::{Owed, Request, ServerState};

/// First bytes of a text that may be a `DROP DATABASE`, `ALTER DATABASE` or `CREATE
/// DATABASE` (or begins with a blank): one load decides for every other text.
static MAY_NAME_DATABASE: [bool; 256] = {
    let mut t = [false; 256];
    let firsts = *b"dDaAcC \t\n\r";
    let mut i = 0;
    while i < firsts.len() {
        t[firsts[i] as usize] = true;
        i += 1;
    }
    t
};

/// Whether a Query text beginning with byte `b` may be a `DEALLOCATE`, `EXECUTE`, `LISTEN`
/// or `UNLISTEN` (or begins with a blank or a comment): every other text skips those looks.
#[inline(always)]
fn may_begin_hooked(b: u8) -> bool {
    matches!(
        b,
        b'd' | b'D'
            | b'e'
            | b'E'
            | b'l'
            | b'L'
            | b'u'
            | b'U'
            | b' '
            | b'\t'
            | b'\n'
            | b'\r'
            | b'/'
            | b'-'
    )
}

/// At most this many replies owed by one server before the client's next message waits:
/// a client that pipelines without reading is pushed back instead of queued.
const MAX_OWED: usize = 1024;

impl Relay {
    /// Handles every message buffered from the client (whole ones, and the header of one too
    /// large to hold, whose rest is passed on as it arrives) until one needs what the driver
    /// must do first; `srv` is the held server, if any.
    pub fn on_client<I: Io>(
        &mut self,
        mut srv: Option<&mut ServerState>,
        io: &mut I,
    ) -> Result<Next, ClientFault> {
        if self.batch.server_fatal || self.in_prelude() {
            // The server ended the session (its FATAL passed on): as directly, nothing the
            // client sent after it is run or answered; the close follows. Or the pooler's own
            // conversation with the server comes first, and the client's messages wait.
            if self.batch.server_fatal || self.prelude_turn(srv.as_deref_mut(), io) {
                return Ok(Next::Done);
            }
        }
        loop {
            if !self.client.cpass.is_idle() {
                if self.client.cbuf.is_empty() {
                    break;
                }
                self.pass_client();
                continue;
            }
            if self.sout.len() >= self.policy.buffer() && srv.is_some() {
                // A long pipeline goes out as it is read, not after all of it.
                return Ok(Next::FlushServer);
            }
            let Some((tag, len)) = frame::peek_header(&self.client.cbuf) else {
                break;
            };
            let mut total = frame::checked_total(len, f::LARGE_MESSAGE_LIMIT + frame::HEADER_LEN)?;
            if f::exceeds_small_limit(tag, total) {
                return Err(ClientFault::Length { len, tag });
            }
            let whole = self.client.cbuf.len() >= total;
            if !whole && !self.streams(tag, total) {
                if total > self.policy.max_message() {
                    let e = frame::FrameError::TooLarge {
                        len: total,
                        max: self.policy.max_message(),
                    };
                    return Err(e.into());
                }
                break;
            }
            let mut seen = if whole { total } else { self.client.cbuf.len() };
            if tag == f::TERMINATE_TAG {
                return Ok(Next::Quit);
            }
            if !f::is_known_tag(tag) {
                return Err(ClientFault::UnknownTag(tag));
            }
            if self.must_wait(srv.as_deref()) {
                break;
            }
            if self.client.refused_bytes > 0 {
                self.client.refused_bytes = self
                    .client
                    .refused_bytes
                    .saturating_sub(u32::try_from(total).unwrap_or(u32::MAX));
                self.drop_client(seen, total);
                self.answer_refused(srv.as_deref_mut(), tag);
                continue;
            }
            if self.client.skipping {
                if tag != f::SYNC_TAG {
                    self.drop_client(seen, total);
                    continue;
                }
                self.client.skipping = false;
            }
            if self.policy.tracking && self.fate_waits(srv.as_deref(), tag, seen) {
                break;
            }
            // A whole Query the pooler may answer or rewrite under `track` (`DEALLOCATE` or
            // `EXECUTE` of a statement made with Parse, a lone `LISTEN`/`UNLISTEN`): only a
            // text whose first byte could begin one is read further.
            let hooked = self.policy.track_settings
                && tag == f::QUERY_TAG
                && whole
                && self
                    .client
                    .cbuf
                    .get(frame::HEADER_LEN)
                    .is_some_and(|&b| may_begin_hooked(b));
            if hooked && self.policy.tracking {
                match self.deallocate_kept(srv.as_deref_mut(), seen) {
                    DeallocateKept::No => {}
                    DeallocateKept::Answered => {
                        self.drop_client(seen, total);
                        continue;
                    }
                    DeallocateKept::Rewritten(query) => {
                        (seen, total) = self.put_in_place(seen, query)
                    }
                }
            }
            let Some(held) = srv.as_deref_mut() else {
                if self.policy.session_state == StateRule::Refuse
                    && (tag == f::QUERY_TAG || tag == f::PARSE_TAG)
                {
                    let track = self.policy.track_settings;
                    if let Some(fields) =
                        state_refusal(tag, &self.client.cbuf[..seen], track, self.scan())
                    {
                        self.metrics.pooler_error(&fields.code);
                        self.refuse(tag, &fields);
                        continue;
                    }
                }
                if hooked {
                    if let Some(subs) = subscribe::of_query(&self.client.cbuf[..seen]) {
                        self.drop_client(seen, total);
                        self.client.subscribe = Some(subscribe::Subscribes::of(subs));
                        return Ok(self.subscribe_next());
                    }
                }
                if self.policy.track_settings
                    && whole
                    && self.may_subscribe_extended(tag)
                    && self.extended_subscription()
                {
                    return Ok(self.subscribe_next());
                }
                if self.needs_server(tag, &self.client.cbuf[..seen], whole)? {
                    if tag == f::QUERY_TAG && whole {
                        self.note_plain_front(seen);
                    }
                    return Ok(Next::NeedServer {
                        tag,
                        spare: self.spare(),
                    });
                }
                self.on_unheld(tag, seen, total, io)?;
                continue;
            };
            if self.policy.track_settings && self.batch.status == backend::TX_IN_BLOCK {
                match self.subscribes_in_block(held, tag, hooked, whole, seen) {
                    None => {}
                    Some(false) => continue,
                    Some(true) => return Ok(self.subscribe_next()),
                }
            }
            if tag == f::BIND_TAG
                && self.kept_texts.has(KeptTexts::SIGNALS)
                && whole
                && self.leave_signalled(held, seen)
            {
                break;
            }
            if hooked && self.policy.tracking {
                match self.execute_kept(held, seen) {
                    ExecuteKept::No => {}
                    ExecuteKept::Wait => break,
                    ExecuteKept::Failed => {
                        self.drop_client(seen, total);
                        backend::ready_for_query(&mut self.client.cout, self.batch.status);
                        continue;
                    }
                    ExecuteKept::Rewritten(query) => (seen, total) = self.put_in_place(seen, query),
                }
            }
            if whole {
                if let Some(db) = self.names_database(tag) {
                    return Ok(Next::FreeDatabase(Box::new(db)));
                }
            }
            // Handled in place (no split of the buffer per message): the buffer is lent out
            // for the call, which needs the relay mutably.
            let cbuf = std::mem::take(&mut self.client.cbuf);
            if self.sout.capacity() == 0 {
                // Room for this batch in one allocation rather than growth by doubling.
                self.sout.reserve(cbuf.len());
            }
            let res = self.on_request(held, tag, &cbuf[..seen], total, io);
            self.client.cbuf = cbuf;
            self.client.cbuf.advance(seen);
            let passed = res?;
            if !whole {
                // The rest follows the first bytes: to the server, or (a Bind the pooler
                // refused, COPY data with no COPY running) nowhere.
                self.client.cpass = Pass::rest(total, seen, passed);
            }
        }
        Ok(Next::Done)
    }

    /// Puts `query` in place of the client's first `seen` bytes (a whole message), to be
    /// handled as the client's would have been; returns its size as `(seen, total)`.
    fn put_in_place(&mut self, seen: usize, mut query: BytesMut) -> (usize, usize) {
        let rest = self.client.cbuf.split_off(seen);
        let len = query.len();
        query.unsplit(rest);
        self.client.cbuf = query;
        (len, len)
    }

    /// The pool could not give the message in front (of type `tag`) a server: it is dropped
    /// and answered with `fields` (ERROR); after a simple Query a ReadyForQuery follows,
    /// otherwise the client's messages are skipped to its Sync.
    pub(super) fn refuse(&mut self, tag: u8, fields: &ErrorFields) {
        self.client.plain_front = 0;
        self.kept_texts.take(KeptTexts::LEFT);
        if let Some((_, len)) = frame::peek_header(&self.client.cbuf) {
            let total = len as usize + 1;
            let seen = total.min(self.client.cbuf.len());
            self.drop_client(seen, total);
        }
        backend::error_response(&mut self.client.cout, fields);
        if tag == f::QUERY_TAG || tag == f::FUNCTION_CALL_TAG {
            backend::ready_for_query(&mut self.client.cout, backend::TX_IDLE);
        } else {
            self.client.skipping = true;
        }
    }

    /// Whether the held server `srv` is between requests: it owes nothing, no transaction is
    /// open and the client has sent nothing more (a notification may go out now).
    pub(super) fn quiet(&self, srv: &ServerState) -> bool {
        srv.replies.is_empty()
            && self.batch.status == backend::TX_IDLE
            && self.client.cbuf.is_empty()
    }

    /// A lone `LISTEN`/`UNLISTEN` in front (a whole Query of `seen` bytes when `hooked`, or
    /// an extended-protocol batch that does nothing else) in the client's open block, in
    /// transaction mode, with nothing in flight on `held` and no pin: taken from the client
    /// (`Relay::subscribe_in_block`). Returns `None` if it is not one, otherwise whether the
    /// driver does it now ([`Next::Subscribe`]).
    #[cold]
    fn subscribes_in_block(
        &mut self,
        held: &ServerState,
        tag: u8,
        hooked: bool,
        whole: bool,
        seen: usize,
    ) -> Option<bool> {
        if self.policy.session_state != StateRule::Pin
            || !held.replies.is_empty()
            || self.pinned().is_some()
        {
            return None;
        }
        let sub = if hooked {
            let mut subs = subscribe::of_query(&self.client.cbuf[..seen])?;
            self.client.cbuf.advance(seen);
            if subs.len() > 1 {
                // Several in one Query: the driver makes each LISTEN, and this relay notes
                // each statement when answering (`Relay::subscribed`).
                self.client.subscribe = Some(subscribe::Subscribes::of(subs));
                return Some(true);
            }
            subs.pop()?
        } else if whole
            // (Untracked, the server's unnamed statement would no longer be the client's.)
            && self.policy.tracking
            && self.may_subscribe_extended(tag)
            && self.extended_subscription()
        {
            if self
                .client
                .subscribe
                .as_ref()
                .is_some_and(|s| s.subs.len() > 1)
            {
                // Several in one batch: as several in one Query.
                return Some(true);
            }
            self.take_subscribes().pop()?
        } else {
            return None;
        };
        Some(self.subscribe_in_block(sub))
    }

    /// The database the whole Query or Parse in front needs free of other sessions
    /// ([`Next::FreeDatabase`]), if the driver has not been told yet. Every other text costs
    /// a look at its first byte (a named Parse's, at its name's).
    #[inline(always)]
    fn names_database(&mut self, tag: u8) -> Option<String> {
        let cbuf = &self.client.cbuf;
        let first = match tag {
            f::QUERY_TAG => cbuf.get(frame::HEADER_LEN),
            // An unnamed statement's text follows its name's terminator.
            f::PARSE_TAG => match cbuf.get(frame::HEADER_LEN) {
                Some(0) => cbuf.get(frame::HEADER_LEN + 1),
                _ => Some(&b' '),
            },
            _ => return None,
        };
        if !first.is_some_and(|&b| MAY_NAME_DATABASE[b as usize]) {
            return None;
        }
        self.names_database_cold()
    }

    #[cold]
    fn names_database_cold(&mut self) -> Option<String> {
        // Told already: this call passes it on.
        if std::mem::take(&mut self.batch.freeing) {
            return None;
        }
        let db = self.database_to_free();
        self.batch.freeing = db.is_some();
        db
    }

    /// The database the whole Query or Parse in front needs free of other sessions (a
    /// `DROP DATABASE`, an `ALTER DATABASE ... RENAME`, a `CREATE DATABASE ... TEMPLATE`).
    fn database_to_free(&self) -> Option<String> {
        let (tag, len) = frame::peek_header(&self.client.cbuf)?;
        let msg = self.client.cbuf.get(..len as usize + 1)?;
        let text = match tag {
            f::QUERY_TAG => f::query_text(msg).ok()?,
            f::PARSE_TAG => f::parse_parts(msg).ok()?.1,
            _ => return None,
        };
        crate::session_state::detect::database_needed_free(text)
    }

    /// The driver's [`Next::Subscribe`] for the subscriptions just noted.
    #[cold]
    fn subscribe_next(&mut self) -> Next {
        Next::Subscribe(Box::new(super::Subscriptions {
            subs: self.take_subscribes(),
            in_block: self.in_block(),
        }))
    }

    /// The `LISTEN`s/`UNLISTEN`s noted for the driver, in order.
    fn take_subscribes(&mut self) -> Vec<Subscribe> {
        match self.client.subscribe.as_deref_mut() {
            // What an extended batch answers before each later statement's CommandComplete
            // stays for [`Relay::subscribed`].
            Some(s) if !s.later_replies.is_empty() => std::mem::take(&mut s.subs),
            _ => self
                .client
                .subscribe
                .take()
                .map_or_else(Vec::new, |b| b.subs),
        }
    }

    /// Whether the client's transaction block is open (not failed).
    pub(super) fn in_block(&self) -> bool {
        self.batch.status == backend::TX_IN_BLOCK
    }

    /// Answers the `LISTEN`s/`UNLISTEN`s the driver did, as PostgreSQL does: one result per
    /// statement up to the first that failed (`Ok(new)`: the client did not listen on the
    /// channel before). Inside a block each is noted: a `LISTEN` to end if the block rolls
    /// back, an `UNLISTEN` to count if it commits. One the listening connection could not
    /// make fails the block on `srv` (the client's server), as the statement failing
    /// directly would: the server's transaction is failed with that error, and the server's
    /// ReadyForQuery answers.
    pub(super) fn subscribed(
        &mut self,
        srv: Option<&mut ServerState>,
        subs: &[Subscribe],
        results: Vec<subscribe::Outcome>,
    ) {
        let in_block = self.in_block();
        let later = self
            .client
            .subscribe
            .take()
            .map(|s| s.later_replies)
            .unwrap_or_default();
        for (i, (sub, res)) in subs.iter().zip(results).enumerate() {
            if let Some(tags) = i.checked_sub(1).and_then(|i| later.get(i)) {
                subscribe::answer(&mut self.client.cout, tags);
            }
            match (sub, res) {
                (Subscribe::Listen(channel), Ok(new)) => {
                    backend::command_complete(&mut self.client.cout, "LISTEN");
                    if in_block {
                        self.listened_in_block(channel, new);
                    }
                }
                (Subscribe::Unlisten(channel), Ok(_)) => {
                    backend::command_complete(&mut self.client.cout, "UNLISTEN");
                    if in_block && self.client.listening {
                        self.note_subscription(super::track::Step::Unlisten(channel.clone()));
                    }
                }
                (_, Err(fields)) => {
                    self.metrics.pooler_error(&fields.code);
                    if let Some(srv) = srv.filter(|_| in_block) {
                        // The block fails, as the statement failing directly would fail it:
                        // the server's transaction is failed with this error, and its
                        // ReadyForQuery answers.
                        self.fail_on(srv, &fields);
                        f::sync(&mut self.sout);
                        self.owe(srv, Owed::Client(Request::Sync));
                        return;
                    }
                    backend::error_response(&mut self.client.cout, &fields);
                    break;
                }
            }
        }
        let status = if in_block {
            backend::TX_IN_BLOCK
        } else {
            backend::TX_IDLE
        };
        backend::ready_for_query(&mut self.client.cout, status);
    }

    /// Runs `deliver`, which adds notifications and notices for the client, so that what it
    /// adds goes out before a ReadyForQuery that ends the client's output now: PostgreSQL
    /// delivers a transaction's own notifications before the ReadyForQuery that ends it.
    pub(super) fn before_ready(&mut self, deliver: impl FnOnce(&mut Deliver)) {
        let cout = &mut self.client.cout;
        let n = cout.len();
        let ready = n >= 6 && cout[n - 6..n - 1] == [backend::READY_FOR_QUERY_TAG, 0, 0, 0, 5];
        if !ready {
            return deliver(&mut Deliver { cout });
        }
        let rfq = cout.split_off(n - 6);
        deliver(&mut Deliver { cout });
        cout.unsplit(rfq);
    }

    /// Passes on (or drops) the next bytes of the client message in progress.
    fn pass_client(&mut self) {
        let n = self.client.cpass.take(self.client.cbuf.len());
        if self.client.cpass.keeps() {
            self.sout.extend_from_slice(&self.client.cbuf[..n]);
        }
        self.client.cbuf.advance(n);
    }

    /// Drops a message the pooler does not pass on: the `seen` bytes buffered now, and the
    /// rest of it as it arrives.
    fn drop_client(&mut self, seen: usize, total: usize) {
        self.client.cbuf.advance(seen);
        if seen < total {
            self.client.cpass = Pass::rest(total, seen, false);
        }
    }

    /// Whether the next message must stay buffered until the held server has answered more:
    /// statement mode runs one statement at a time (while a COPY FROM STDIN runs, what the
    /// client sends belongs to it, or ends it with an error, as the server decides), and a
    /// server owes at most [`MAX_OWED`] replies (then it is asked to flush what it holds).
    fn must_wait(&mut self, srv: Option<&ServerState>) -> bool {
        let Some(srv) = srv else {
            return false;
        };
        if self.policy.is_statement() && srv.replies.owes_ready() && !srv.replies.in_copy_in() {
            return true;
        }
        if srv.replies.len() >= MAX_OWED {
            // PostgreSQL holds replies until Sync, Flush or a full buffer: without a Flush a
            // pipeline of small requests would wait for replies the server keeps.
            f::flush(&mut self.sout);
            return true;
        }
        false
    }

    /// Whether the tracked message in front (`seen` bytes) names a statement whose fate on
    /// the server an earlier batch still in flight decides, where the pooler would answer
    /// for it or pick what to send on what it believes now. An error in that batch skips
    /// the rest of it up to its Sync, so a Parse of the name (the client's, a replay, or the
    /// Close of a stale copy before it) or a Close of the name may not run. Such a message
    /// waits for that batch's answer: a Parse of a name the client holds, a Bind or Describe
    /// of a statement still being parsed there, a Close of one the server lacks (replayed
    /// first unless the block has failed), and a Bind, Describe or Close of a name whose
    /// Close is still owed. Sent at once, a re-Parse met the server's old copy (42P05), a use
    /// relied on a replay that failed (26000 under the server's name), a Close replayed into
    /// a block that failed was refused (25P02), and a use after a skipped Close was answered
    /// 26000, where PostgreSQL has the statement.
    fn fate_waits(&self, srv: Option<&ServerState>, tag: u8, seen: usize) -> bool {
        // Checked first: a server that owes nothing (a client waiting for each answer) costs
        // one comparison.
        let Some(srv) = srv.filter(|s| !s.replies.is_empty() && !s.replies.in_copy_in()) else {
            return false;
        };
        let msg = &self.client.cbuf[..seen];
        let span = match tag {
            f::PARSE_TAG => f::parse_statement(msg).ok(),
            f::BIND_TAG => f::bind_statement(msg).ok(),
            f::DESCRIBE_TAG | f::CLOSE_TAG => match f::describe_or_close_target(msg) {
                Ok((b'S', span)) => Some(span),
                _ => None,
            },
            _ => return false,
        };
        let Some(span) = span.filter(|s| s.len > 0) else {
            return false;
        };
        let name = span.get(msg);
        match self.statements.get(name) {
            Some(_) if tag == f::PARSE_TAG => srv.replies.owes_ready(),
            // The Close needs the copy replayed first unless the block has failed, which
            // only the earlier batch's answer tells.
            Some(kept) if tag == f::CLOSE_TAG => {
                srv.statements.holds(&kept.server_name).is_none() && srv.replies.owes_ready()
            }
            Some(kept) => srv.replies.made_before_sync(kept.id),
            // A name whose Close an earlier batch still carries: if that batch fails, the
            // Close is skipped and the name is back (a Parse of it is then 42P05).
            None => srv.replies.pending_close(name).is_some() && srv.replies.owes_ready(),
        }
    }

    /// Whether a message not yet wholly buffered is passed on in pieces: it is larger than a
    /// buffer and the pooler needs no more of it than its first bytes.
    fn streams(&self, tag: u8, total: usize) -> bool {
        if total <= self.policy.buffer() {
            return false;
        }
        match tag {
            f::QUERY_TAG | f::FUNCTION_CALL_TAG | f::COPY_DATA_TAG => true,
            f::PARSE_TAG if self.policy.tracking => {
                // A named Parse is kept whole for replays; the unnamed one is not.
                f::parse_statement_prefix(&self.client.cbuf).is_some_and(|span| span.len == 0)
            }
            // A tracked Bind is renamed in its first bytes: both names must be there.
            f::BIND_TAG if self.policy.tracking => f::bind_statement(&self.client.cbuf).is_ok(),
            f::PARSE_TAG | f::BIND_TAG => true,
            _ => false,
        }
    }

    /// Whether reading the client now could help: its buffer has room, or the message in
    /// front must be held whole and is not complete yet.
    pub(super) fn wants_client(&self) -> bool {
        let cbuf = &self.client.cbuf;
        if cbuf.len() < self.policy.buffer() {
            return true;
        }
        if !self.client.cpass.is_idle() {
            return false;
        }
        match frame::peek_header(cbuf) {
            Some((tag, len)) => {
                let total = len as usize + 1;
                total > cbuf.len()
                    && total <= self.policy.max_message()
                    && !self.streams(tag, total)
            }
            None => true,
        }
    }

    /// A message of a transaction block that statement mode refused: not run, answered as a
    /// server answers inside a failed block.
    fn answer_refused(&mut self, srv: Option<&mut ServerState>, tag: u8) {
        let message = "current transaction is aborted, commands ignored until end of \
                       transaction block (transaction blocks are not allowed in statement pooling mode)";
        match tag {
            f::QUERY_TAG | f::FUNCTION_CALL_TAG => {
                let fields = error_fields(sqlstate::IN_FAILED_SQL_TRANSACTION, message.into());
                backend::error_response(&mut self.client.cout, &fields);
                backend::ready_for_query(&mut self.client.cout, backend::TX_IDLE);
            }
            f::SYNC_TAG => {
                self.client.skipping = false;
                backend::ready_for_query(&mut self.client.cout, backend::TX_IDLE);
            }
            _ if !self.client.skipping => {
                self.pooler_error(srv, sqlstate::IN_FAILED_SQL_TRANSACTION, message.into())
            }
            _ => {}
        }
    }

    /// Whether this message has to reach a server (so one must be taken first). `whole`:
    /// `msg` is the whole message, not its first bytes.
    fn needs_server(&self, tag: u8, msg: &[u8], whole: bool) -> Result<bool, ClientFault> {
        Ok(match tag {
            f::SYNC_TAG | f::FLUSH_TAG => false,
            f::COPY_DATA_TAG | f::COPY_DONE_TAG | f::COPY_FAIL_TAG => false,
            // Passed on in pieces: unnamed (the check in `streams`).
            f::PARSE_TAG if !whole => true,
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.policy.tracking => {
                self.tracked_needs_server(tag, msg)?
            }
            _ => true,
        })
    }

    /// A message handled without a server (one that needs none, or a tracked one the pooler
    /// answers alone).
    fn on_unheld<I: Io>(
        &mut self,
        tag: u8,
        seen: usize,
        total: usize,
        io: &mut I,
    ) -> Result<(), ClientFault> {
        let cbuf = std::mem::take(&mut self.client.cbuf);
        let res = match tag {
            // Nothing of this batch reached a server: the pool answers the Sync itself.
            f::SYNC_TAG => {
                backend::ready_for_query(&mut self.client.cout, backend::TX_IDLE);
                Ok(false)
            }
            // Refused (26000, 42P05, 53400) or a Close answered by the pooler.
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.policy.tracking => {
                self.on_tracked(None, tag, &cbuf[..seen], total, io)
            }
            // Flush, and COPY messages with no server: a server would drop them too.
            _ => Ok(false),
        };
        self.client.cbuf = cbuf;
        self.client.cbuf.advance(seen);
        if seen < total {
            self.client.cpass = Pass::rest(total, seen, false);
        }
        res.map(|_| ())
    }

    /// Handles one client message on held server `srv`: `msg` is all of it, or its first
    /// bytes when it is passed on in pieces (`total` is its whole size). Returns whether it
    /// went to the server (so the rest of a message passed on in pieces follows it there).
    fn on_request<I: Io>(
        &mut self,
        srv: &mut ServerState,
        tag: u8,
        msg: &[u8],
        total: usize,
        io: &mut I,
    ) -> Result<bool, ClientFault> {
        if self.client.listening
            && (tag == f::QUERY_TAG || tag == f::PARSE_TAG)
            && mentions_notify(msg)
        {
            self.batch.notified = true;
        }
        if self.policy.session_state != StateRule::Forward {
            let front = std::mem::take(&mut self.client.plain_front);
            if tag == f::QUERY_TAG || tag == f::PARSE_TAG {
                let whole = msg.len() == total;
                if !self.plain_query(tag, msg, whole, front)
                    && !self.plain_parse(srv, tag, msg, whole)
                    && self.on_state(srv, tag, msg, whole)
                {
                    return Ok(false);
                }
            } else if self.client.log.is_some() {
                self.note_extended(tag, msg);
            }
        }
        match tag {
            f::QUERY_TAG => {
                if self.policy.tracking {
                    // PostgreSQL drops the unnamed statement at a simple Query.
                    self.forget_unnamed();
                }
                self.forward(srv, msg, Request::Query, total, io)
            }
            f::FUNCTION_CALL_TAG => {
                if self.policy.session_state != StateRule::Forward {
                    self.note_function_call(srv, msg);
                }
                self.forward(srv, msg, Request::Query, total, io)
            }
            f::SYNC_TAG => self.forward(srv, msg, Request::Sync, total, io),
            f::COPY_DONE_TAG | f::COPY_FAIL_TAG => {
                self.sout.extend_from_slice(msg);
                self.batch.retry.record(msg, None);
                self.owe(srv, Owed::CopyEnd);
            }
            f::FLUSH_TAG | f::COPY_DATA_TAG => {
                self.sout.extend_from_slice(msg);
                if msg.len() == total {
                    self.batch.retry.record(msg, None);
                } else {
                    self.batch.retry.disable();
                }
            }
            f::EXECUTE_TAG => self.forward(srv, msg, Request::Execute, total, io),
            f::PARSE_TAG if self.policy.tracking && msg.len() < total => {
                // Too long to keep: not replayed elsewhere (a Bind there gets 26000).
                self.forget_unnamed();
                self.batch.unnamed_here = true;
                self.forward(srv, msg, Request::Parse, total, io)
            }
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.policy.tracking => {
                return self.on_tracked(Some(srv), tag, msg, total, io);
            }
            f::PARSE_TAG => self.forward(srv, msg, Request::Parse, total, io),
            f::BIND_TAG => self.forward(srv, msg, Request::Bind, total, io),
            f::DESCRIBE_TAG => self.forward(srv, msg, Request::Describe, total, io),
            f::CLOSE_TAG => self.forward(srv, msg, Request::Close, total, io),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Forwards a message unchanged (`msg` may be its first `msg.len()` of `total` bytes) and
    /// queues what the server owes for it.
    pub(super) fn forward<I: Io>(
        &mut self,
        srv: &mut ServerState,
        msg: &[u8],
        req: Request,
        total: usize,
        io: &mut I,
    ) {
        if self.clock.request_since.is_none() {
            self.clock.request_since = Some(io.now());
        }
        self.sout.extend_from_slice(msg);
        if matches!(req, Request::Bind | Request::Execute | Request::Query) {
            self.batch.clean = false;
        }
        let owed = match (self.policy.tracking, req) {
            (true, Request::Query | Request::Execute) => Owed::Marked {
                req,
                client_seq: self.statements.next_id(),
                server_seq: srv.statements.next_seq(),
            },
            _ => Owed::Client(req),
        };
        self.owe(srv, owed);
        if msg.len() == total {
            self.batch.retry.record(msg, Some(req));
        } else {
            // Not kept whole, so it could not be sent again.
            self.batch.retry.disable();
        }
    }
}

/// Whether a Query's or Parse's bytes mention `notify` in any case (`NOTIFY`, `pg_notify`, a
/// function of the client's): read only for a client that listens.
fn mentions_notify(msg: &[u8]) -> bool {
    memchr::memchr2_iter(b'n', b'N', msg).any(|i| {
        msg.get(i..i + 6)
            .is_some_and(|w| w.eq_ignore_ascii_case(b"notify"))
    })
}

/// What the driver may add for the client at a point [`Relay::before_ready`] chose.
pub(super) struct Deliver<'r> {
    cout: &'r mut BytesMut,
}

impl Deliver<'_> {
    /// A NoticeResponse of `fields`.
    pub(super) fn notice(&mut self, fields: &ErrorFields) {
        backend::notice_response(self.cout, fields);
    }

    /// A notification from the pool's listening connection, with its sender as the client
    /// knows it (`None`: the mark of a loss alone). `lost`: notifications meant for the
    /// client were dropped (it is warned first).
    pub(super) fn notify<I: Io>(&mut self, note: Option<&Note>, lost: bool, io: &mut I) {
        if lost {
            crate::listen::lost_notice(self.cout);
        }
        if let Some(note) = note {
            let msg = note.bytes(|m, at| super::replies::renumbered(m, Some(at), io));
            self.cout.extend_from_slice(msg);
        }
    }
}
