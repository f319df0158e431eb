//! Prepared-statement tracking (`--track-prepared`, transaction and statement modes): named
//! statements are renamed `p<c>_<name>` on servers, replayed where missing, and unknown or
//! duplicate names are answered by the pooler (26000 / 42P05).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::error::ClientFault;
use super::{error_fields, owe_on, subscribe, Io, KeptTexts, Relay, StateRule};
use crate::prepared::{self, Kept};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::{begin, finish, HEADER_LEN};
use crate::protocol::frontend as f;
use crate::protocol::{sqlstate, Cursor};
use crate::server::{Owed, Request, ServerState};

/// The clients that left having prepared statements (`--track-prepared`), numbered as they
/// left: a server name carries its client's number, so no one binds those copies again, and
/// the next client to hold a server closes the ones it has ([`Relay::hold`]). The pool keeps
/// the record (`pool::orphans`).
pub trait Departed {
    /// How far the record goes now.
    fn mark(&self) -> u64;
    /// The clients recorded since mark `seen` (those still remembered), and the new mark;
    /// `None` when none were.
    fn since(&self, seen: u64) -> Option<(Vec<u64>, u64)>;
}
use crate::session_state::detect::{self, effects, Effect};
use crate::session_state::lex;
use crate::session_state::signal;

const HELD: &str = "a message that needs a server is handled only while one is held";

impl Relay {
    /// A tracked message needs a server unless the pooler answers it alone.
    pub(super) fn tracked_needs_server(&self, tag: u8, msg: &[u8]) -> Result<bool, ClientFault> {
        Ok(match tag {
            f::PARSE_TAG => {
                let span = f::parse_statement(msg)?;
                // A taken name (42P05) or one name too many (53400) is answered here.
                span.len == 0
                    || (self.statements.get(span.get(msg)).is_none()
                        && self.statements.len() < self.policy.max_client_prepared())
            }
            f::BIND_TAG => {
                let span = f::bind_statement(msg)?;
                span.len == 0 || self.statements.get(span.get(msg)).is_some()
            }
            f::DESCRIBE_TAG => match f::describe_or_close_target(msg)? {
                (b'S', span) if span.len > 0 => self.statements.get(span.get(msg)).is_some(),
                _ => true,
            },
            f::CLOSE_TAG => !matches!(
                f::describe_or_close_target(msg)?,
                (b'S', span) if span.len > 0
            ),
            _ => true,
        })
    }

    /// A tracked message: `msg` is all of it, or (a Bind passed on in pieces) its first
    /// bytes, which hold both names; `total` is its whole size. `srv` is `None` only for a
    /// message the pooler answers alone ([`Relay::tracked_needs_server`]).
    /// Returns whether the message went to the server (a refused one did not).
    pub(super) fn on_tracked<I: Io>(
        &mut self,
        srv: Option<&mut ServerState>,
        tag: u8,
        msg: &[u8],
        total: usize,
        io: &mut I,
    ) -> Result<bool, ClientFault> {
        let whole = msg.len();
        Ok(match tag {
            f::PARSE_TAG => {
                self.tracked_parse(srv, msg, io)?;
                true
            }
            f::BIND_TAG => {
                let span = f::bind_statement(msg)?;
                self.tracked_use(srv, msg, span, Request::Bind, total, io)
            }
            f::DESCRIBE_TAG => match f::describe_or_close_target(msg)? {
                (b'S', span) => self.tracked_use(srv, msg, span, Request::Describe, whole, io),
                _ => {
                    self.forward(srv.expect(HELD), msg, Request::Describe, whole, io);
                    true
                }
            },
            f::CLOSE_TAG => match f::describe_or_close_target(msg)? {
                (b'S', span) if span.len > 0 => self.tracked_close(srv, msg, span),
                (b'S', _) => {
                    self.forget_unnamed();
                    self.forward(srv.expect(HELD), msg, Request::Close, whole, io);
                    true
                }
                _ => {
                    self.forward(srv.expect(HELD), msg, Request::Close, whole, io);
                    true
                }
            },
            _ => false,
        })
    }

    /// Close S: forget the statement. With nothing owed, the pooler answers CloseComplete
    /// itself and the server copies stay until evicted (or the client leaves); under
    /// `session_state: track`, a copy on the held server is closed there instead (the Close
    /// goes on, renamed), so the server lists only what the client has. After replies owed,
    /// an earlier error may make the server skip this point of the batch, and then the
    /// statement must still exist (a later Parse of the name gets 42P05, a Bind runs it): the
    /// Close goes to the server, renamed, where it runs or is skipped exactly as it would
    /// without a pooler.
    /// Returns whether the message went to the server.
    fn tracked_close(
        &mut self,
        srv: Option<&mut ServerState>,
        msg: &[u8],
        span: f::NameSpan,
    ) -> bool {
        let name = span.get(msg);
        let removed = self.statements.remove(name);
        // Under `session_state: track` the held server's copy goes with it, so the server
        // lists only what the client has (the contract's `--track-prepared` forwards nothing).
        let drop_copy = self.policy.track_settings;
        let to_server = |k: &Kept| {
            srv.as_deref()
                .is_some_and(|s| !s.replies.is_empty() || (drop_copy && holds(s, k)))
        };
        let Some(kept) = removed.filter(|k| to_server(k)) else {
            let mut reply = BytesMut::new();
            backend::empty(&mut reply, backend::CLOSE_COMPLETE_TAG);
            self.answer(srv, reply.freeze());
            return false;
        };
        let srv = srv.expect("pending replies mean a held server");
        // The copy the Close would leave on a skip must be there (a failed block refuses the
        // replay, but it also refuses any later Parse of the name: 25P02 either way).
        if self.batch.status != backend::TX_FAILED {
            self.replay_if_missing(srv, &kept, name);
        }
        let start = self.sout.len();
        f::write_renamed(&mut self.sout, msg, span, &kept.server_name);
        self.batch
            .retry
            .record_close(&self.sout[start..], name, &kept);
        let had = srv.statements.held(&kept.server_name);
        srv.statements.remove(&kept.server_name);
        self.owe(
            srv,
            Owed::ClientClose {
                name: Bytes::copy_from_slice(name),
                kept,
                had,
            },
        );
        true
    }

    /// `DEALLOCATE name` as a whole simple Query (`pool.session_state: track`), where `name`
    /// is a statement the client made with Parse: as PostgreSQL shares one namespace between
    /// the two, it is a Close S of that statement, whose server copies have other names. The
    /// pooler forgets it and answers (`DEALLOCATE`, ReadyForQuery) itself, as it answers
    /// Close S; only with nothing owed (else the Query goes on and meets the server's answer).
    /// psycopg 3 with libpq before 17 evicts its statements this way. A held server's copy
    /// goes with it: the Query goes on as `DEALLOCATE <server name>`, so the server lists
    /// only what the client still has (copies elsewhere stay until evicted or the client
    /// leaves).
    pub(super) fn deallocate_kept(
        &mut self,
        srv: Option<&mut ServerState>,
        seen: usize,
    ) -> DeallocateKept {
        let msg = &self.client.cbuf[..seen];
        // Cheap first: a text that does not begin with the word's first letter is not read.
        // In a failed block PostgreSQL refuses it (25P02): the server says so.
        if !matches!(msg.get(HEADER_LEN), Some(b'd' | b'D'))
            || self.batch.status == backend::TX_FAILED
            || srv.as_deref().is_some_and(|s| !s.replies.is_empty())
        {
            return DeallocateKept::No;
        }
        let Ok(sql) = f::query_text(msg) else {
            return DeallocateKept::No;
        };
        let Some((name, kept)) = self.deallocated(sql) else {
            return DeallocateKept::No;
        };
        self.statements.remove(&name);
        if let Some(srv) = srv.filter(|s| holds(s, &kept)) {
            srv.statements.remove(&kept.server_name);
            let mut query = BytesMut::new();
            let at = begin(&mut query, f::QUERY_TAG);
            query.put_slice(b"DEALLOCATE ");
            put_ident(&mut query, &kept.server_name);
            query.put_u8(0);
            finish(&mut query, at);
            return DeallocateKept::Rewritten(query);
        }
        // A simple Query drops the unnamed statement too.
        self.forget_unnamed();
        // Nothing is owed (checked above): the answer goes straight to the client.
        backend::command_complete(&mut self.client.cout, "DEALLOCATE");
        backend::ready_for_query(&mut self.client.cout, self.batch.status);
        DeallocateKept::Answered
    }

    /// `EXECUTE name [(args)]` as a whole simple Query (`pool.session_state: track`), where
    /// `name` is a statement the client made with Parse: PostgreSQL runs it by that name (one
    /// namespace for the two), while the server holds it under its `p<c>_` name, and maybe
    /// not at all. Where it is missing it is replayed first, alone (its own Sync), and the
    /// Query waits for the answer: a replay that fails has told the client why (as the
    /// EXECUTE would have directly) and the Query is only answered with ReadyForQuery. Then
    /// the Query goes on with the server's name in place of the client's.
    pub(super) fn execute_kept(&mut self, srv: &mut ServerState, seen: usize) -> ExecuteKept {
        let msg = &self.client.cbuf[..seen];
        // Cheap first: a text that does not begin with the word's first letter (or blank
        // space, or a comment) is not read.
        if !matches!(
            msg.get(HEADER_LEN),
            Some(b'e' | b'E' | b' ' | b'\t' | b'\n' | b'\r' | b'/' | b'-')
        ) {
            return ExecuteKept::No;
        }
        if !srv.replies.is_empty() {
            // Its own replay still being answered, or (anything else owed) the server
            // answers as it would.
            return if self.batch.execute_replay {
                ExecuteKept::Wait
            } else {
                ExecuteKept::No
            };
        }
        if self.batch.status == backend::TX_FAILED {
            // A replay that failed in a block failed the block, as the EXECUTE would have.
            return if std::mem::take(&mut self.batch.execute_replay) {
                ExecuteKept::Failed
            } else {
                ExecuteKept::No
            };
        }
        let Ok(sql) = f::query_text(msg) else {
            return ExecuteKept::No;
        };
        let Some(run) = self.executed(sql) else {
            return ExecuteKept::No;
        };
        let replayed = std::mem::take(&mut self.batch.execute_replay);
        let kept = run.kept.clone();
        if srv.statements.presence(&kept.server_name, kept.id) != prepared::Presence::Present {
            if replayed {
                // The server stays or goes as the ReadyForQuery before said.
                self.batch.release_due = self.may_release();
                return ExecuteKept::Failed;
            }
            self.replay_if_missing(srv, &kept, &run.name);
            f::sync(&mut self.sout);
            owe_on(srv, &mut self.statements, Owed::Internal);
            self.batch.execute_replay = true;
            return ExecuteKept::Wait;
        }
        let mut query = BytesMut::with_capacity(msg.len() + kept.server_name.len());
        let at = begin(&mut query, f::QUERY_TAG);
        run.write_renamed(&mut query, sql);
        query.put_u8(0);
        finish(&mut query, at);
        if kept.subscribes {
            self.pin_if_listens(srv.id, &kept.parse);
        }
        ExecuteKept::Rewritten(query)
    }

    /// Whether `name` is a statement the client made with SQL `PREPARE` (one namespace with
    /// those made with Parse: such a name is the server's to answer).
    fn sql_prepared(&self, name: &str) -> bool {
        self.client
            .log
            .as_ref()
            .is_some_and(|l| l.sql_prepared(name))
    }

    /// The statement made with Parse that an `EXECUTE name ...` text runs, if that is what
    /// `sql` is (one namespace: a name the client made with SQL `PREPARE` is not one).
    fn executed(&self, sql: &[u8]) -> Option<Executed> {
        let mut found = Vec::new();
        effects(sql, self.scan(), &mut found);
        let [(0, Effect::Execute { name })] = found.as_slice() else {
            return None;
        };
        if self.sql_prepared(name) {
            return None;
        }
        let kept = self.statements.get(name.as_bytes())?.clone();
        let span = execute_name_span(sql)?;
        Some(Executed {
            name: Bytes::copy_from_slice(name.as_bytes()),
            kept,
            span,
        })
    }

    /// The statement made with Parse that a `DEALLOCATE [PREPARE] name` text drops, with its
    /// client name, if that is what `sql` is (one namespace: a name the client made with SQL
    /// `PREPARE` is not one).
    fn deallocated(&self, sql: &[u8]) -> Option<(Bytes, Arc<Kept>)> {
        let mut found = Vec::new();
        effects(sql, self.scan(), &mut found);
        let [(0, Effect::Deallocate { name: Some(name) })] = found.as_slice() else {
            return None;
        };
        if self.sql_prepared(name) {
            return None;
        }
        let kept = self.statements.get(name.as_bytes())?.clone();
        Some((Bytes::copy_from_slice(name.as_bytes()), kept))
    }

    /// A Parse whose text is `EXECUTE name ...` (asyncpg runs `EXECUTE` so) or `DEALLOCATE
    /// name` (psycopg 3 in pipeline mode with libpq before 17 evicts so) of a statement the
    /// client made with Parse (`pool.session_state: track`): the Parse with the server's name
    /// in the text, and that statement's client name (the server must hold it wherever this
    /// one is used). A `DEALLOCATE` takes the client's statement away when it has run
    /// ([`Relay::settle_settings`]). `None` for any other Parse: the first byte of the text
    /// rules out almost all of them.
    fn kept_parse(&self, msg: &[u8], span: f::NameSpan) -> Option<(BytesMut, Bytes)> {
        let text_at = span.start + span.len + 1;
        if !self.policy.track_settings
            || !matches!(
                msg.get(text_at),
                Some(b'e' | b'E' | b'd' | b'D' | b' ' | b'\t' | b'\n' | b'\r' | b'/' | b'-')
            )
        {
            return None;
        }
        let first = msg[text_at];
        let rest = &msg[text_at..];
        let end = memchr::memchr(0, rest)?;
        let sql = &rest[..end];
        // Read once for the word its first letter names (twice only after a blank or a
        // comment); a `DELETE` is not lexed here at all.
        let found = if matches!(first, b'd' | b'D') {
            if !sql
                .get(..10)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"deallocate"))
            {
                return None;
            }
            KeptUse::Deallocate(self.deallocated(sql)?)
        } else if let Some(run) = self.executed(sql) {
            KeptUse::Execute(run)
        } else if matches!(first, b'e' | b'E') {
            return None;
        } else {
            KeptUse::Deallocate(self.deallocated(sql)?)
        };
        let dep = match &found {
            KeptUse::Execute(run) => run.name.clone(),
            KeptUse::Deallocate((name, _)) => name.clone(),
        };
        if dep == span.get(msg) {
            return None;
        }
        let mut out = BytesMut::with_capacity(msg.len() + prepared::MAX_NAME + 16);
        let at = begin(&mut out, f::PARSE_TAG);
        out.put_slice(&msg[HEADER_LEN..text_at]);
        match found {
            KeptUse::Execute(run) => run.write_renamed(&mut out, sql),
            KeptUse::Deallocate((_, kept)) => {
                out.put_slice(b"DEALLOCATE ");
                put_ident(&mut out, &kept.server_name);
            }
        }
        out.put_slice(&rest[end..]);
        finish(&mut out, at);
        Some((out, dep))
    }

    fn tracked_parse<I: Io>(
        &mut self,
        mut srv: Option<&mut ServerState>,
        msg: &[u8],
        io: &mut I,
    ) -> Result<(), ClientFault> {
        let span = f::parse_statement(msg)?;
        let rewritten = self.kept_parse(msg, span);
        let (msg, needs) = match &rewritten {
            Some((m, dep)) => (&m[..], Some(dep.clone())),
            None => (msg, None),
        };
        if let (Some(dep), Some(held)) = (&needs, srv.as_deref_mut()) {
            if let Some(d) = self.statements.get(dep).cloned() {
                self.replay_if_missing(held, &d, dep);
            }
        }
        if span.len == 0 {
            // Copied into the same buffer each time: no allocation once it has grown.
            let kept = self.unnamed.get_or_insert_with(Box::default);
            if kept.capacity() > super::SHRINK_ABOVE && msg.len() <= super::SHRINK_ABOVE {
                // A long statement's room is not kept for the short ones after it.
                **kept = Vec::new();
            }
            kept.clear();
            kept.extend_from_slice(msg);
            self.batch.unnamed_here = true;
            self.forward(srv.expect(HELD), msg, Request::Parse, msg.len(), io);
            return Ok(());
        }
        let name = Bytes::copy_from_slice(span.get(msg));
        let mut close_stale = true;
        let existing = self.statements.get(&name);
        let max = self.policy.max_client_prepared();
        if existing.is_none() && self.statements.len() >= max {
            let text = format!(
                "too many prepared statements: the pooler keeps at most {max} per client \
                 (pool.max_client_prepared_statements); close some before preparing \"{}\"",
                String::from_utf8_lossy(&name)
            );
            self.refuse_tracked(srv, sqlstate::CONFIGURATION_LIMIT_EXCEEDED, text);
            return Ok(());
        }
        let mut same_name = None;
        if existing.is_none() {
            // A Close of this name still owed may be skipped, and then the name is taken: the
            // server decides, under the closed statement's name (a long name's `P` form
            // differs per statement).
            if let Some(closed) = srv.as_deref().and_then(|s| s.replies.pending_close(&name)) {
                same_name = Some(closed.server_name.clone());
            }
        }
        if let Some(existing) = existing.cloned() {
            // Let the server decide, under the name the statement has there, as it would
            // without a pooler, when the name may not be taken by the time this Parse runs
            // (its Parse still in flight in an earlier batch may fail) or PostgreSQL would
            // refuse the Parse first (the transaction block has failed, or an earlier batch
            // still in flight may open a block and fail it: 25P02). Otherwise the name is
            // taken, and the pooler says so.
            let status = self.batch.status;
            let undecided = srv.as_deref().is_some_and(|s| {
                status == backend::TX_FAILED
                    || s.replies.owes_ready()
                    || (!existing.is_confirmed() && s.replies.made_before_sync(existing.id))
            });
            if !undecided {
                let text = format!(
                    "prepared statement \"{}\" already exists",
                    String::from_utf8_lossy(&name)
                );
                self.refuse_tracked(srv, sqlstate::DUPLICATE_PREPARED_STATEMENT, text);
                return Ok(());
            }
            // The server must hold the statement to find the name taken.
            let held = srv.as_deref_mut().expect(HELD);
            self.replay_if_missing(held, &existing, &name);
            close_stale = false;
            same_name = Some(existing.server_name.clone());
        }
        let client = self.id;
        // (Statement mode refuses such a statement instead.)
        let subscribes = self.policy.track_settings
            && self.policy.session_state == StateRule::Pin
            && subscribe::is_lone(msg);
        if subscribes {
            self.kept_texts.add(KeptTexts::SUBSCRIBES);
        }
        // What its text does where it runs: on whichever server a later transaction binds it.
        let text = (self.policy.session_state != StateRule::Forward)
            .then(|| f::parse_parts(msg).ok().map(|(_, sql, _)| sql))
            .flatten();
        let signal = text.and_then(signal::target);
        if signal.is_some() {
            self.kept_texts.add(KeptTexts::SIGNALS);
        }
        let scan = self.scan();
        let unseen = text.and_then(|t| detect::unseen(t, scan));
        let kept = self
            .statements
            .insert(name.clone(), needs, subscribes, signal, unseen, |id| {
                let server_name =
                    same_name.unwrap_or_else(|| prepared::server_name(client, &name, id));
                let mut renamed = BytesMut::with_capacity(msg.len() + server_name.len());
                f::write_renamed(&mut renamed, msg, span, &server_name);
                (server_name, renamed.freeze())
            });
        self.batch.retry.disable();
        let owed = Owed::TrackedParse {
            name: name.clone(),
            server_name: kept.server_name.clone(),
            id: kept.id,
        };
        self.send_parse(srv.expect(HELD), &kept, &name, owed, close_stale);
        Ok(())
    }

    /// Bind or Describe of a named statement: 26000 if the client has no such statement,
    /// otherwise replay it where missing and forward the message renamed. `msg` may be the
    /// first bytes of a Bind of `total` bytes passed on in pieces.
    /// Returns whether the message went to the server (not when refused).
    fn tracked_use<I: Io>(
        &mut self,
        srv: Option<&mut ServerState>,
        msg: &[u8],
        span: f::NameSpan,
        req: Request,
        total: usize,
        io: &mut I,
    ) -> bool {
        if span.len == 0 {
            let Some(srv) = self.unnamed_ready(srv) else {
                return false;
            };
            self.forward(srv, msg, req, total, io);
            return true;
        }
        let name = span.get(msg);
        let Some(kept) = self.statements.get(name).cloned() else {
            let text = format!(
                "prepared statement \"{}\" does not exist",
                String::from_utf8_lossy(name)
            );
            self.refuse_tracked(srv, sqlstate::INVALID_SQL_STATEMENT_NAME, text);
            return false;
        };
        let srv = srv.expect(HELD);
        if let Some(dep) = &kept.needs {
            if let Some(d) = self.statements.get(dep).cloned() {
                self.replay_if_missing(srv, &d, dep);
            }
        }
        self.replay_if_missing(srv, &kept, name);
        if kept.subscribes && req == Request::Bind {
            self.pin_if_listens(srv.id, &kept.parse);
        }
        if let Some(u) = kept.unseen.filter(|_| req == Request::Bind) {
            srv.mark_unseen(u);
        }
        let start = self.sout.len();
        if msg.len() < total {
            f::write_renamed_head(&mut self.sout, msg, span, &kept.server_name, total);
        } else {
            f::write_renamed(&mut self.sout, msg, span, &kept.server_name);
        }
        if req == Request::Bind {
            let clean = self.batch.clean;
            self.batch.clean = false;
            self.owe(srv, Owed::TrackedBind { id: kept.id });
            if msg.len() < total {
                // Not kept whole, so the batch could not be sent again.
                self.batch.retry.disable();
            } else {
                self.batch.retry.start(&kept, &self.sout[start..], clean);
            }
        } else {
            self.owe(srv, Owed::Client(req));
            let sent = self.sout.split_off(start);
            self.batch.retry.record(&sent, Some(req));
            self.sout.unsplit(sent);
        }
        true
    }

    /// Before a Bind or Describe of the unnamed statement: if the held server does not have
    /// the client's, its last unnamed Parse goes first (ParseComplete swallowed). Another
    /// client's unnamed statement may be there: it is never bound. With none kept, the
    /// client gets PostgreSQL's 26000 and `None`.
    fn unnamed_ready<'s>(
        &mut self,
        srv: Option<&'s mut ServerState>,
    ) -> Option<&'s mut ServerState> {
        // A server skipping to Sync would skip the replay too.
        if self.batch.unnamed_here || srv.as_deref().is_some_and(|s| s.replies.skips_to_sync()) {
            return Some(srv.expect(HELD));
        }
        let Some(parse) = self.unnamed.take() else {
            let text = "unnamed prepared statement does not exist".to_owned();
            self.refuse_tracked(srv, sqlstate::INVALID_SQL_STATEMENT_NAME, text);
            return None;
        };
        let srv = srv.expect(HELD);
        if self.kept_texts.has(KeptTexts::SUBSCRIBES) {
            // A `LISTEN` the pool's listening connection served, run by a server now.
            self.pin_if_listens(srv.id, &parse);
        }
        if self.policy.session_state != StateRule::Forward {
            // Parsed in an earlier transaction, bound here: what it does is done here.
            if let Some(u) = f::parse_parts(&parse)
                .ok()
                .and_then(|(_, sql, _)| detect::unseen(sql, self.scan()))
            {
                srv.mark_unseen(u);
            }
        }
        self.sout.extend_from_slice(&parse);
        self.unnamed = Some(parse);
        self.batch.unnamed_here = true;
        self.batch.retry.disable();
        self.metrics.prepared.replays.inc();
        if owe_on(srv, &mut self.statements, Owed::UnnamedReplay) {
            self.batch.release_due = false;
        }
        Some(srv)
    }

    /// PostgreSQL has dropped the client's unnamed statement (a simple Query, a Close, a
    /// Parse too long to keep).
    pub(super) fn forget_unnamed(&mut self) {
        self.unnamed = None;
        self.batch.unnamed_here = false;
    }

    /// Closes `srv`'s copies of the statements of the clients that left since it last
    /// looked (`departed`), their CloseComplete swallowed: called as the client takes the
    /// server, so they go before its first message.
    pub(super) fn close_departed(&mut self, srv: &mut ServerState, departed: &impl Departed) {
        if srv.statements.is_empty() {
            srv.orphans_seen = departed.mark();
            return;
        }
        let Some((gone, mark)) = departed.since(srv.orphans_seen) else {
            return;
        };
        srv.orphans_seen = mark;
        for (name, id) in srv.statements.of_clients(&gone) {
            f::close_statement(&mut self.sout, &name);
            srv.statements.remove(&name);
            let close = Owed::InjectedClose {
                server_name: name,
                id,
            };
            owe_on(srv, &mut self.statements, close);
        }
    }

    /// Whether this client ever prepared a statement: when it leaves, its server copies are
    /// for the next clients to close.
    pub fn left_statements(&self) -> bool {
        self.policy.tracking && self.statements.ever_kept()
    }

    /// Sends `srv` `kept`'s Parse first if it does not hold that statement (its
    /// ParseComplete swallowed).
    pub(super) fn replay_if_missing(
        &mut self,
        srv: &mut ServerState,
        kept: &Kept,
        client_name: &[u8],
    ) {
        if srv.statements.presence(&kept.server_name, kept.id) != prepared::Presence::Present {
            let replay = Owed::Replay {
                server_name: kept.server_name.clone(),
                id: kept.id,
            };
            self.metrics.prepared.replays.inc();
            self.send_parse(srv, kept, client_name, replay, true);
        }
    }

    /// The pooler refuses a message (unknown or duplicate name). Holding no server, it
    /// answers itself and skips to Sync. Holding one, it sends the server a message that fails
    /// and puts its own error in place of the server's, so a transaction fails as it would.
    fn refuse_tracked(&mut self, srv: Option<&mut ServerState>, code: &str, text: String) {
        let Some(srv) = srv else {
            self.pooler_error(None, code, text);
            return;
        };
        self.metrics.pooler_error(code);
        self.fail_on(srv, &error_fields(code, text));
    }

    /// Sends `srv` a message that fails, with `fields` put in place of the server's error,
    /// so the server's transaction fails as it would have.
    pub(super) fn fail_on(&mut self, srv: &mut ServerState, fields: &ErrorFields) {
        let mut error = BytesMut::new();
        backend::error_response(&mut error, fields);
        // A Bind of a name no client can have: `P` names are only numbered ones.
        let missing = format!("P{}_missing", self.id);
        let mut fail = BytesMut::new();
        let at = begin(&mut fail, f::BIND_TAG);
        fail.put_u8(0);
        fail.put_slice(missing.as_bytes());
        fail.put_u8(0);
        fail.put_slice(&[0, 0, 0, 0, 0, 0]);
        finish(&mut fail, at);
        self.sout.extend_from_slice(&fail);
        self.batch.retry.disable();
        self.owe(
            srv,
            Owed::Substitute {
                error: error.freeze(),
                req: Request::Bind,
            },
        );
    }

    /// Sends a kept Parse to `srv`: closes a stale copy of the same name (unless told not to)
    /// and the least recently used statements beyond the bound first (their replies
    /// swallowed).
    pub(super) fn send_parse(
        &mut self,
        srv: &mut ServerState,
        kept: &Kept,
        client_name: &[u8],
        owed: Owed,
        close_stale: bool,
    ) {
        if close_stale {
            if let Some(old) = srv.statements.holds(&kept.server_name) {
                if old != kept.id {
                    f::close_statement(&mut self.sout, &kept.server_name);
                    srv.statements.remove(&kept.server_name);
                    let close = Owed::InjectedClose {
                        server_name: kept.server_name.clone(),
                        id: old,
                    };
                    owe_on(srv, &mut self.statements, close);
                }
            }
        }
        while srv.statements.len() >= self.policy.max_prepared() {
            let Some((victim, id)) = srv.statements.lru_victim(&kept.server_name) else {
                break;
            };
            f::close_statement(&mut self.sout, &victim);
            self.metrics.prepared.evictions.inc();
            srv.statements.remove(&victim);
            let close = Owed::InjectedClose {
                server_name: victim.clone(),
                id,
            };
            owe_on(srv, &mut self.statements, close);
        }
        self.sout.extend_from_slice(&kept.parse);
        srv.statements.add(kept.server_name.clone(), kept.id);
        if owe_on(srv, &mut self.statements, owed) {
            self.batch.release_due = false;
        }
        self.events.client_prepares(self.id, client_name, srv.id);
    }
}

/// What a Parse's text does with a statement the client made with Parse
/// ([`Relay::kept_parse`]).
enum KeptUse {
    Execute(Executed),
    /// The client's name and the statement.
    Deallocate((Bytes, Arc<Kept>)),
}

/// What [`Relay::deallocate_kept`] made of a simple Query.
pub(super) enum DeallocateKept {
    /// Not a `DEALLOCATE` of a statement made with Parse: handled as any Query.
    No,
    /// Answered by the pooler: the Query is dropped.
    Answered,
    /// The Query to send in its place (the held server's copy goes too).
    Rewritten(BytesMut),
}

/// What [`Relay::execute_kept`] made of a simple Query.
pub(super) enum ExecuteKept {
    /// Not an `EXECUTE` of a statement made with Parse: handled as any Query.
    No,
    /// The statement is being replayed: the Query waits for the answer.
    Wait,
    /// The replay failed (the client has its error): the Query is answered with
    /// ReadyForQuery alone.
    Failed,
    /// The Query to send in its place.
    Rewritten(BytesMut),
}

/// An `EXECUTE` text's statement: the client's name, what it is, and where the name lies in
/// the text.
struct Executed {
    name: Bytes,
    kept: Arc<Kept>,
    span: (usize, usize),
}

impl Executed {
    /// `sql` with the server's name in place of the client's, quoted (the client's may have
    /// been, and a server name keeps the client's case).
    fn write_renamed(&self, out: &mut BytesMut, sql: &[u8]) {
        let (start, end) = self.span;
        out.put_slice(&sql[..start]);
        put_ident(out, &self.kept.server_name);
        out.put_slice(&sql[end..]);
    }
}

/// Whether `srv` holds this very statement (not an older one under the same name).
fn holds(srv: &ServerState, kept: &Kept) -> bool {
    srv.statements
        .held(&kept.server_name)
        .is_some_and(|h| h.id == kept.id)
}

/// `name` as an SQL identifier: double-quoted, quotes doubled, byte by byte (a statement name
/// is in the client's encoding, as the text around it is).
fn put_ident(out: &mut BytesMut, name: &[u8]) {
    out.put_u8(b'"');
    for &b in name {
        if b == b'"' {
            out.put_u8(b'"');
        }
        out.put_u8(b);
    }
    out.put_u8(b'"');
}

/// Where the statement name of `EXECUTE name ...` (the statement's second token, quotes
/// included) lies in `sql`.
fn execute_name_span(sql: &[u8]) -> Option<(usize, usize)> {
    let stmt = lex::statements(sql).next()?;
    let mut t = lex::Tokens::new(stmt);
    let _ = t.next()?;
    let (quoted, text) = match t.next()? {
        lex::Token::Word(w) => (0, w),
        lex::Token::Quoted(q) => (1, q),
        _ => return None,
    };
    let start = (text.as_ptr() as usize).checked_sub(sql.as_ptr() as usize)?;
    Some((start - quoted, start + text.len() + quoted))
}

/// A server ErrorResponse that names a renamed statement (`"p<c>_name"`) is rewritten to the
/// client's name, so clients never see the pooler's names. `None` when there is nothing to do.
pub(super) fn unrename_error(msg: &[u8], client: u64) -> Option<BytesMut> {
    let needle = format!("\"p{client}_");
    let body = msg.get(HEADER_LEN..)?;
    if !body.windows(needle.len()).any(|w| w == needle.as_bytes()) {
        return None;
    }
    let mut out = BytesMut::with_capacity(msg.len());
    let at = begin(&mut out, msg[0]);
    let mut c = Cursor::new(body);
    loop {
        let kind = c.u8().ok()?;
        out.put_u8(kind);
        if kind == 0 {
            break;
        }
        let value = String::from_utf8_lossy(c.cstr().ok()?).replace(&needle, "\"");
        out.put_slice(value.as_bytes());
        out.put_u8(0);
    }
    finish(&mut out, at);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_hidden_in_errors() {
        let mut m = BytesMut::new();
        backend::error_response(
            &mut m,
            &error_fields("42P05", "prepared statement \"p7_q\" already exists".into()),
        );
        let out = unrename_error(&m, 7).expect("rewritten");
        let fields = backend::parse_error(&out[HEADER_LEN..]).expect("an ErrorResponse");
        assert_eq!(fields.message, "prepared statement \"q\" already exists");
        assert_eq!(fields.code, "42P05");
        assert!(unrename_error(&m, 8).is_none());
    }
}
