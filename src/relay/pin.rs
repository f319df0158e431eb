//! `pool.session_state: pin`: a Query or Parse whose text creates session state pins the
//! client to the server it holds, so that no other client inherits that state and the
//! client finds it again in its next transaction. The driver resets (or closes) a pinned
//! client's server when the client leaves. In statement mode such a statement is refused
//! (0A000) instead: no server outlives a statement there.

use bytes::BytesMut;

use super::{error_fields, Relay, StateRule, Subscribe};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::{self, HEADER_LEN};
use crate::protocol::frontend as f;
use crate::protocol::sqlstate;
use crate::server::ServerState;
use crate::session_state::detect::{effects, plainly_nothing, Discard, Effect, PinReason};
use crate::session_state::lex::Scan;
use crate::session_state::settings::changes_privileges;

/// The longest Parse text a server remembers as making no session state.
const PLAIN_PARSE_MAX: usize = 1024;

/// Why a client keeps its server past its transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    /// `SET` (not `LOCAL`), `SET SESSION CHARACTERISTICS`, `set_config(.., .., false)`.
    Setting,
    /// SQL `PREPARE`.
    Prepare,
    /// `LISTEN`.
    Listen,
    /// A temp table, a `WITH HOLD` cursor, a session advisory lock, `LOAD`, a setting the
    /// pooler cannot read, `SET ROLE`.
    State(PinReason),
}

impl Pin {
    /// What creates the state, for a client's error message.
    pub fn what(self) -> &'static str {
        match self {
            Pin::Setting => "a session setting (SET)",
            Pin::Prepare => "SQL PREPARE",
            Pin::Listen => "LISTEN",
            Pin::State(PinReason::TempTable) => "a temporary table",
            Pin::State(PinReason::HoldCursor) => "a WITH HOLD cursor",
            Pin::State(PinReason::AdvisoryLock) => "a session advisory lock",
            Pin::State(PinReason::Load) => "LOAD",
            Pin::State(PinReason::DynamicSetting) => "set_config(.., .., false)",
            Pin::State(PinReason::Role) => "SET ROLE / SET SESSION AUTHORIZATION",
        }
    }

    /// The `reason` label of `droidpool_session_pins_total` and the event line's reason.
    pub fn label(self) -> &'static str {
        match self {
            Pin::Setting => "setting",
            Pin::Prepare => "prepare",
            Pin::Listen => "listen",
            Pin::State(r) => r.label(),
        }
    }
}

/// The statement text of a Query or Parse, or as much of it as `msg` holds (a message passed
/// on in pieces shows its start, where the statements' first words are).
fn sql_of(tag: u8, msg: &[u8]) -> &[u8] {
    let body = msg.get(HEADER_LEN..).unwrap_or_default();
    let whole = frame::peek_header(msg).is_some_and(|(_, len)| len as usize + 1 == msg.len());
    if tag == f::QUERY_TAG && whole {
        // A whole Query ends with its text's NUL: no scan for it. (A text with a NUL
        // inside is refused by PostgreSQL, whatever the pooler reads of it.)
        if let Some((0, text)) = body.split_last() {
            return text;
        }
    }
    let text = match tag {
        f::PARSE_TAG => after_name(body).unwrap_or_default(),
        _ => body,
    };
    match memchr::memchr(0, text) {
        Some(end) => &text[..end],
        None => text,
    }
}

/// Whether the whole Parse `msg` has exactly `text` as its statement text (the server's
/// last Parse text known to make no session state): settled without looking for the text's
/// end.
fn parse_text_is(msg: &[u8], text: &[u8]) -> bool {
    let Some(t) = after_name(msg.get(HEADER_LEN..).unwrap_or_default()) else {
        return false;
    };
    t.get(text.len()) == Some(&0) && t.get(..text.len()) == Some(text)
}

/// What follows the statement name of a Parse body. A name is short (a driver's usual one
/// empty): read bytewise, without `memchr`'s set-up.
fn after_name(body: &[u8]) -> Option<&[u8]> {
    let end = body.iter().position(|&b| b == 0)?;
    Some(&body[end + 1..])
}

/// The first pin the statements of `sql` make, if any (`track`: settings are followed, not
/// pinned). A failed or rolled-back statement pins too: pinning more than needed costs a
/// server, never correctness.
pub(super) fn pin_of(sql: &[u8], track: bool, scan: Scan) -> Option<Pin> {
    let mut found = Vec::new();
    effects(sql, scan, &mut found);
    found.into_iter().find_map(|(_, e)| pin_for(&e, track))
}

fn pin_for(e: &Effect, track: bool) -> Option<Pin> {
    match e {
        Effect::Set { name, .. } if track => {
            changes_privileges(name).then_some(Pin::State(PinReason::Role))
        }
        Effect::Set { .. } => Some(Pin::Setting),
        Effect::Prepare { .. } if track => None,
        Effect::Prepare { .. } => Some(Pin::Prepare),
        Effect::Listen { .. } => Some(Pin::Listen),
        Effect::Pin(r) => Some(Pin::State(*r)),
        _ => None,
    }
}

/// The kinds of session state a pinned client may have left on its server, as bits: a pin
/// ends when every kind it made is gone again.
mod kind {
    pub const SETTING: u8 = 1;
    pub const PREPARE: u8 = 2;
    pub const LISTEN: u8 = 4;
    pub const TEMP: u8 = 8;
    pub const HOLD_CURSOR: u8 = 16;
    pub const LOCK: u8 = 32;
    /// `SET ROLE` / `SET SESSION AUTHORIZATION`, `set_config` with a parameter: only
    /// `DISCARD ALL` is known to undo them.
    pub const ROLE: u8 = 64;
    /// `LOAD`: a loaded library stays loaded; the pin lasts until the client leaves.
    pub const LOADED: u8 = 128;
    /// What the server can be asked about ([`super::PIN_CHECK_SQL`]).
    pub const CHECKABLE: u8 = TEMP | HOLD_CURSOR | LOCK;
}

/// Asks a pinned client's server, between transactions, which of the state kinds the pooler
/// cannot name piece by piece are left: bit 1 a temporary object (a relation, a function, a
/// type, an operator or a collation in the session's temporary schema: one a function made,
/// or `CREATE FUNCTION pg_temp.f`, outlives a `DROP` of the last table), 2 a `WITH HOLD`
/// cursor, 4 a session advisory lock. Run after something that may have removed the last of them
/// (`CLOSE name`, `DROP`, `pg_advisory_unlock`, a rollback, an error): the server knows
/// what a statement dropped, in a block, in a function or under a name the pooler never
/// saw, where reading the statements could only guess.
pub const PIN_CHECK_SQL: &str = "SELECT \
    (EXISTS (SELECT FROM pg_catalog.pg_class \
        WHERE relnamespace = pg_catalog.pg_my_temp_schema()) \
     OR EXISTS (SELECT FROM pg_catalog.pg_proc \
        WHERE pronamespace = pg_catalog.pg_my_temp_schema()) \
     OR EXISTS (SELECT FROM pg_catalog.pg_type \
        WHERE typnamespace = pg_catalog.pg_my_temp_schema()) \
     OR EXISTS (SELECT FROM pg_catalog.pg_operator \
        WHERE oprnamespace = pg_catalog.pg_my_temp_schema()) \
     OR EXISTS (SELECT FROM pg_catalog.pg_collation \
        WHERE collnamespace = pg_catalog.pg_my_temp_schema()))::int \
    + 2 * (EXISTS (SELECT FROM pg_catalog.pg_cursors WHERE is_holdable))::int \
    + 4 * (EXISTS (SELECT FROM pg_catalog.pg_locks \
        WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()))::int";

/// The name of the pooler's own statement: spaces keep it apart from any name a driver
/// generates (tracked clients' names are `p<c>_...` there anyway).
const CHECK_STATEMENT: &[u8] = b"droid-pool value";

/// The kinds [`PIN_CHECK_SQL`]'s answer says are left.
fn checked_kinds(answer: &[u8]) -> Option<u8> {
    let bits: u8 = std::str::from_utf8(answer).ok()?.parse().ok()?;
    let mut left = 0;
    for (bit, k) in [(1, kind::TEMP), (2, kind::HOLD_CURSOR), (4, kind::LOCK)] {
        if bits & bit != 0 {
            left |= k;
        }
    }
    Some(left)
}

/// A statement that may remove a pinned kind the pooler cannot follow by name: the server is
/// asked once the transaction is over. A rollback counts only after a statement that pinned
/// (`fresh`): a pinned client's every `ROLLBACK` does not cost a question.
fn may_end_state(e: &Effect, fresh: bool) -> bool {
    match e {
        Effect::Close { name: Some(_) } | Effect::Unlock | Effect::Drop => true,
        Effect::Rollback | Effect::RollbackTo { .. } => fresh,
        _ => false,
    }
}

fn kind_of(pin: Pin) -> u8 {
    match pin {
        Pin::Setting => kind::SETTING,
        Pin::Prepare => kind::PREPARE,
        Pin::Listen => kind::LISTEN,
        Pin::State(PinReason::TempTable) => kind::TEMP,
        Pin::State(PinReason::HoldCursor) => kind::HOLD_CURSOR,
        Pin::State(PinReason::AdvisoryLock) => kind::LOCK,
        Pin::State(PinReason::Load) => kind::LOADED,
        Pin::State(PinReason::DynamicSetting | PinReason::Role) => kind::ROLE,
    }
}

/// The kinds of state a statement removes entirely (what `DISCARD ALL` runs, piece by piece).
fn cleared_by(e: &Effect) -> u8 {
    match e {
        Effect::Discard(Discard::All) => !kind::LOADED,
        Effect::Discard(Discard::Temp) => kind::TEMP,
        Effect::ResetAll => kind::SETTING,
        Effect::Deallocate { name: None } => kind::PREPARE,
        Effect::Close { name: None } => kind::HOLD_CURSOR,
        Effect::UnlockAll => kind::LOCK,
        Effect::Unlisten { channel: None } => kind::LISTEN,
        _ => 0,
    }
}

/// A statement that begins or ends a transaction block (whatever it removes may be undone).
fn opens_block(e: &Effect) -> bool {
    matches!(
        e,
        Effect::Begin
            | Effect::Commit
            | Effect::Rollback
            | Effect::Savepoint { .. }
            | Effect::RollbackTo { .. }
            | Effect::Release { .. }
    )
}

/// What a pinned client has made, and what a statement in flight would leave if it succeeds.
#[derive(Debug, Default)]
pub(super) struct Pinning {
    /// Why the client keeps its server (the first pin reported), `None` while it does not.
    pub(super) reason: Option<Pin>,
    /// The kinds of state made since the pin ([`kind`]).
    kinds: u8,
    /// The kinds left once the simple Queries in flight succeed: set by a Query that removes
    /// state, taken at the ReadyForQuery that ends the transaction, dropped by any error.
    pending: Option<u8>,
    /// `DISCARD ALL` of a simple Query: 1 sent, 2 done (the driver ends the client's
    /// subscriptions with the pool's listening connection, as it ends a server's `LISTEN`s).
    discard: u8,
    /// Whether the pin changed, and where the question to the server ([`PIN_CHECK_SQL`])
    /// stands: [`check`] bits, in one byte (the idle client's future is kept small).
    check: u8,
}

/// [`Pinning::check`]'s bits.
mod check {
    /// Something that may have removed pinned state was sent: the server is asked what is
    /// left at the end of the transaction.
    pub const RECHECK: u8 = 1;
    /// A statement that pins was sent since the last check: if it fails, it may have made
    /// nothing.
    pub const FRESH: u8 = 2;
    /// The server is to be asked before the client's next message.
    pub const DUE: u8 = 4;
    /// The pin started or ended since the driver last looked (or `discard` reached 2).
    pub const CHANGED: u8 = 8;
}

impl Pinning {
    /// The batch met an error: nothing it would have removed counts.
    pub(super) fn on_error(&mut self) {
        self.pending = None;
        if self.discard == 1 {
            self.discard = 0;
        }
        if self.check & check::FRESH != 0 && self.reason.is_some() {
            self.check |= check::RECHECK;
        }
    }

    /// A ReadyForQuery ended the batch with nothing owed: state removed by a statement that
    /// succeeded outside a transaction block is gone; with none left the pin ends.
    pub(super) fn on_ready(&mut self, idle: bool) {
        if self.discard == 1 {
            // It cannot run in a block: idle after it, it ran.
            self.discard = if idle { 2 } else { 0 };
            if idle {
                self.check |= check::CHANGED;
            }
        }
        if !idle {
            self.pending = None;
            return;
        }
        if let Some(left) = self.pending.take() {
            self.kinds = left;
            if left == 0 && self.reason.is_some() {
                self.reason = None;
                self.check |= check::CHANGED;
            }
        }
        if self.check & check::RECHECK != 0 {
            let due = self.reason.is_some() && self.kinds & !kind::CHECKABLE == 0;
            self.check &= check::CHANGED;
            if due {
                self.check |= check::DUE;
            }
        }
    }

    /// Something the driver follows changed (a committed `UNLISTEN`): it looks, as it does
    /// at a pin's change.
    pub(super) fn look(&mut self) {
        self.check |= check::CHANGED;
    }

    pub(super) fn has_pending(&self) -> bool {
        self.pending.is_some() || self.discard == 1 || self.check & check::RECHECK != 0
    }
}

/// Statement mode's answer to a Query or Parse whose text creates session state: 0A000, as
/// PgBouncer answers a transaction block there. `None` for any other statement.
pub(super) fn state_refusal(tag: u8, msg: &[u8], track: bool, scan: Scan) -> Option<ErrorFields> {
    refusal(pin_of(sql_of(tag, msg), track, scan)?, track)
}

fn refusal(pin: Pin, track: bool) -> Option<ErrorFields> {
    let mut fields = error_fields(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!(
            "{} is not allowed in statement pooling mode (pool.session_state: {})",
            pin.what(),
            if track { "track" } else { "pin" }
        ),
    );
    fields.hint = Some("use transaction pooling, where it pins the client to its server".into());
    Some(fields)
}

impl Relay {
    /// The usual whole Query (a plain `SELECT`) of a client with no session state in play:
    /// nothing for [`Relay::on_state`] to do, settled here without calling it. `front`: the
    /// size of a Query in front already found plain when a server was asked for it (0: none).
    #[inline(always)]
    pub(super) fn plain_query(&self, tag: u8, msg: &[u8], whole: bool, front: u16) -> bool {
        // (What `front` notes was found with the same client state: nothing changes it
        // between the note and this.)
        tag == f::QUERY_TAG
            && whole
            && (front as usize == msg.len()
                || (self.client.log.is_none()
                    && !self.client.pin.has_pending()
                    && msg
                        .get(HEADER_LEN..msg.len().saturating_sub(1))
                        .is_some_and(plainly_nothing)))
    }

    /// The usual Parse (the text the server last parsed and found to make no session state,
    /// as a driver sends one statement again and again), of a client with no session state
    /// in play: settled here, without calling [`Relay::on_state`].
    #[inline(always)]
    pub(super) fn plain_parse(&self, srv: &ServerState, tag: u8, msg: &[u8], whole: bool) -> bool {
        tag == f::PARSE_TAG
            && whole
            && !srv.plain_parse.is_empty()
            && self.client.log.is_none()
            && !self.client.pin.has_pending()
            && parse_text_is(msg, &srv.plain_parse)
    }

    /// A Query or Parse on held server `srv` under a policy that reads statements for session
    /// state: follows its settings (`track`), pins the client (transaction mode) or refuses
    /// the message (statement mode). `whole`: `msg` is all of the message. Returns whether
    /// it was refused (then it is not sent).
    pub(super) fn on_state(
        &mut self,
        srv: &mut ServerState,
        tag: u8,
        msg: &[u8],
        whole: bool,
    ) -> bool {
        let quiet = self.client.log.is_none() && !self.client.pin.has_pending();
        let sql = sql_of(tag, msg);
        // (A Parse of `srv.plain_parse`'s text was settled by `plain_parse` before the call.)
        let parse = tag == f::PARSE_TAG;
        let mut found = Vec::new();
        let scan = self.scan();
        effects(sql, scan, &mut found);
        self.note_unseen(srv, &found, whole);
        if !srv.replies.is_empty() && memchr::memchr(b'\\', sql).is_some() {
            // A `SET standard_conforming_strings` still in flight (or a function that made
            // one) changes how PostgreSQL reads this text, and its ParameterStatus has not
            // come yet: a text that reads otherwise under the other value is unseen work.
            let mut other = Vec::new();
            effects(
                sql,
                scan.standard_strings(!scan.is_standard_strings()),
                &mut other,
            );
            if other != found {
                srv.mark_unseen(crate::session_state::detect::Unseen::Any);
            }
        }
        if parse && whole && self.made_lone_subscription(msg, &found) {
            // Pins where a server runs it (`Relay::pin_if_listens`), not where it is made.
            found.clear();
        }
        if tag == f::QUERY_TAG
            && found
                .iter()
                .any(|(_, e)| matches!(e, Effect::Discard(Discard::All)))
        {
            self.client.pin.discard = 1;
        }
        if found.is_empty() && parse && whole && sql.len() <= PLAIN_PARSE_MAX {
            srv.plain_parse.clear();
            srv.plain_parse.extend_from_slice(sql);
        }
        if found.is_empty() && quiet {
            // The usual statement: nothing to note, nothing that pins or ends a pin.
            return false;
        }
        let track = self.policy.track_settings;
        let unfollowed = if track {
            self.note_settings(tag, msg, whole, &found)
        } else {
            None
        };
        if self.policy.session_state == StateRule::Pin {
            self.check_pin(srv, tag, &found, unfollowed);
            return false;
        }
        let first = unfollowed.or_else(|| found.iter().find_map(|(_, e)| pin_for(e, track)));
        let Some(fields) = first.and_then(|p| refusal(p, track)) else {
            return false;
        };
        self.metrics.pooler_error(&fields.code);
        let mut m = BytesMut::new();
        backend::error_response(&mut m, &fields);
        if tag == f::QUERY_TAG {
            // A statement of an unfinished extended batch still holds the server: the error
            // and its ReadyForQuery follow that batch's replies.
            backend::ready_for_query(&mut m, self.batch.status);
            self.answer(Some(srv), m.freeze());
        } else {
            self.answer(Some(srv), m.freeze());
            self.client.skipping = true;
        }
        true
    }

    /// Pins the client to `srv` if the Query or Parse whose effects are `found` creates
    /// session state (pinning policy only; the first pin is the one reported), or if
    /// `unfollowed` (a setting `track` could not follow). A pinned client's simple Query that
    /// removes all of a kind of state (`DISCARD ALL`, `RESET ALL`, `DEALLOCATE ALL`, `CLOSE
    /// ALL`, `UNLISTEN *`, `pg_advisory_unlock_all()`, `DISCARD TEMP`) outside a transaction
    /// block ends the pin once it succeeds and nothing else is left. A Parse never does: its
    /// statement may never be executed.
    pub(super) fn check_pin(
        &mut self,
        srv: &ServerState,
        tag: u8,
        found: &[(usize, Effect)],
        unfollowed: Option<Pin>,
    ) {
        let track = self.policy.track_settings;
        let pin = &mut self.client.pin;
        // Removal counts only for a Query run alone (nothing else in flight) outside a
        // transaction block: then its success, seen at its ReadyForQuery, is final.
        let can_remove = pin.reason.is_some()
            && tag == f::QUERY_TAG
            && self.batch.status == backend::TX_IDLE
            && srv.replies.is_empty()
            && !found.iter().any(|(_, e)| opens_block(e));
        let mut left = pin.pending.unwrap_or(pin.kinds);
        let mut removes = false;
        let mut may_end = false;
        let mut first = unfollowed;
        if let Some(p) = unfollowed {
            pin.kinds |= kind_of(p);
            left |= kind_of(p);
        }
        for (_, e) in found {
            if let Some(p) = pin_for(e, track) {
                pin.kinds |= kind_of(p);
                left |= kind_of(p);
                first = first.or(Some(p));
                pin.check |= check::FRESH;
            } else {
                may_end |= may_end_state(e, pin.check & check::FRESH != 0);
                if can_remove {
                    let gone = cleared_by(e);
                    left &= !gone;
                    removes |= gone != 0;
                }
            }
        }
        if removes || pin.pending.is_some() {
            pin.pending = Some(left);
        }
        if may_end && (pin.reason.is_some() || first.is_some()) {
            pin.check |= check::RECHECK;
        }
        if let Some(p) = first {
            self.pin_to(srv.id, p);
        }
    }

    /// Pins the client to server `server` for `pin`, unless it is pinned already (the first
    /// pin is the one reported).
    pub(super) fn pin_to(&mut self, server: u64, pin: Pin) {
        let state = &mut self.client.pin;
        state.kinds |= kind_of(pin);
        if let Some(left) = &mut state.pending {
            *left |= kind_of(pin);
        }
        if state.reason.is_some() {
            return;
        }
        state.reason = Some(pin);
        state.check |= check::CHANGED;
        self.metrics
            .clients
            .session_pins
            .with_label_values(&[pin.label()])
            .inc();
        self.events.client_pinned(self.id, server, pin.label());
    }

    /// The client's transaction is over, after something that may have removed the last of
    /// the state it is pinned for, and nothing is in flight on `srv`: the server is asked
    /// ([`PIN_CHECK_SQL`]) before anything more of the client's runs there.
    pub(super) fn pin_check_due(&self, srv: &ServerState) -> bool {
        self.client.pin.check & check::DUE != 0
            && srv.replies.is_empty()
            && self.client.cpass.is_idle()
            && self.batch.status == backend::TX_IDLE
    }

    /// Asks `srv` what session state is left ([`PIN_CHECK_SQL`]), as a named statement of
    /// the pooler's own closed at once (a simple Query would drop the client's unnamed
    /// statement, which a pinned client may still bind). Its row is read as it comes
    /// ([`Relay::pin_checked`]); its ReadyForQuery ends the transaction again.
    pub(super) fn ask_pin_check(&mut self, srv: &mut ServerState) {
        self.client.pin.check &= !check::DUE;
        f::parse(&mut self.sout, CHECK_STATEMENT, PIN_CHECK_SQL);
        f::bind_unnamed(&mut self.sout, CHECK_STATEMENT);
        f::execute_unnamed(&mut self.sout);
        // Skipped with the rest if the Parse fails (a statement of that name is not ours).
        f::close_statement(&mut self.sout, CHECK_STATEMENT);
        f::sync(&mut self.sout);
        self.owe(srv, crate::server::Owed::Check);
    }

    /// The answer to [`PIN_CHECK_SQL`] (its first column): with nothing left the pin ends,
    /// and the server may go back to the pool once the check's ReadyForQuery is in.
    pub(super) fn pin_checked(&mut self, answer: &[u8]) {
        let Some(left) = checked_kinds(answer) else {
            return;
        };
        let pin = &mut self.client.pin;
        pin.kinds = (pin.kinds & !kind::CHECKABLE) | left;
        if pin.kinds == 0 && pin.reason.is_some() {
            pin.reason = None;
            pin.check |= check::CHANGED;
        }
    }

    /// The pinned state went with its server ([`Relay::lose_idle_server`]): the pin ends.
    pub(super) fn end_pin(&mut self) {
        let pin = &mut self.client.pin;
        pin.kinds = 0;
        pin.pending = None;
        pin.check &= !check::DUE;
        if pin.reason.take().is_some() {
            pin.check |= check::CHANGED;
        }
    }

    /// Why the client keeps its server, if it does.
    pub fn pinned(&self) -> Option<Pin> {
        self.client.pin.reason
    }

    /// What changed of the client's pin and committed subscriptions since the last call, if
    /// anything did (the driver's SHOW CLIENTS, pinned gauge and listening connection follow
    /// it). One flag's test when nothing did.
    #[inline]
    pub(super) fn take_pin_change(&mut self) -> Option<PinChange> {
        if self.client.pin.check & check::CHANGED == 0 {
            return None;
        }
        Some(self.pin_change())
    }

    #[cold]
    fn pin_change(&mut self) -> PinChange {
        let pin = &mut self.client.pin;
        pin.check &= !check::CHANGED;
        let discarded = std::mem::take(&mut pin.discard) == 2;
        PinChange {
            pinned: pin.reason,
            discarded,
            subscriptions: self.take_subscriptions(),
        }
    }
}

/// A change of the client's pin or subscriptions ([`super::Event::Pin`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PinChange {
    /// Why the client keeps its server now, if it does.
    pub pinned: Option<Pin>,
    /// A `DISCARD ALL` of the client's succeeded: it includes `UNLISTEN *`.
    pub discarded: bool,
    /// The `LISTEN`s and `UNLISTEN`s of the client's that committed, in order (run by a
    /// server, or answered by the pooler in a block): the driver makes them with the pool's
    /// listening connection before the client hears of the commit.
    pub subscriptions: Vec<Subscribe>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frontend as fe;
    use bytes::BytesMut;

    #[test]
    fn what_pins_and_what_does_not() {
        let pins = [
            ("SET search_path TO a", Pin::Setting),
            ("select 1; set statement_timeout = 5", Pin::Setting),
            ("PREPARE q AS select 1", Pin::Prepare),
            ("LISTEN ch", Pin::Listen),
            (
                "create temp table t (a int)",
                Pin::State(PinReason::TempTable),
            ),
            (
                "select pg_advisory_lock(1)",
                Pin::State(PinReason::AdvisoryLock),
            ),
            (
                "declare c cursor with hold for select 1",
                Pin::State(PinReason::HoldCursor),
            ),
        ];
        for (sql, pin) in pins {
            assert_eq!(
                pin_of(sql.as_bytes(), false, Scan::STANDARD),
                Some(pin),
                "{sql}"
            );
        }
        for sql in [
            "select 'SET search_path TO a'",
            "-- SET search_path TO a\nselect 1",
            "SET LOCAL search_path TO a",
            "select pg_advisory_xact_lock(1)",
            "begin; select 1; commit",
        ] {
            assert_eq!(pin_of(sql.as_bytes(), false, Scan::STANDARD), None, "{sql}");
        }
    }

    #[test]
    fn the_text_of_a_query_and_of_a_parse() {
        let mut q = BytesMut::new();
        fe::query(&mut q, "set a.b = 1");
        assert_eq!(sql_of(f::QUERY_TAG, &q), b"set a.b = 1");
        // A message passed on in pieces: its first bytes only.
        assert_eq!(sql_of(f::QUERY_TAG, &q[..9]), b"set ");
        let body = b"s1\0LISTEN x\0\0\0";
        let mut p = BytesMut::from(&b"P"[..]);
        p.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        p.extend_from_slice(body);
        assert_eq!(sql_of(f::PARSE_TAG, &p), b"LISTEN x");
        assert_eq!(sql_of(f::PARSE_TAG, &p[..7]), b"");
    }

    #[test]
    fn a_parse_of_the_known_text() {
        let parse = |name: &[u8], text: &[u8]| {
            let mut body = name.to_vec();
            body.push(0);
            body.extend_from_slice(text);
            body.extend_from_slice(b"\0\0\x01\0\0\0\0");
            let mut p = BytesMut::from(&b"P"[..]);
            p.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
            p.extend_from_slice(&body);
            p
        };
        assert!(parse_text_is(&parse(b"", b"select $1"), b"select $1"));
        assert!(parse_text_is(&parse(b"s1", b"select $1"), b"select $1"));
        // A longer or shorter text, another text, a message cut short.
        assert!(!parse_text_is(&parse(b"", b"select $1 "), b"select $1"));
        assert!(!parse_text_is(&parse(b"", b"select $"), b"select $1"));
        assert!(!parse_text_is(&parse(b"", b"select $2"), b"select $1"));
        assert!(!parse_text_is(&parse(b"", b"select $1")[..9], b"select $1"));
        assert!(!parse_text_is(b"P", b"select $1"));
    }
}
