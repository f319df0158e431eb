//! `pool.session_state: pin`: a Query or Parse whose text creates session state pins the
//! client to the server it holds, so that no other client inherits that state and the
//! client finds it again in its next transaction. The driver resets (or closes) a pinned
//! client's server when the client leaves. In statement mode such a statement is refused
//! (0A000) instead: no server outlives a statement there.

use bytes::BytesMut;

use super::{error_fields, Relay, StateRule};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend as f;
use crate::protocol::sqlstate;
use crate::server::ServerState;
use crate::session_state::detect::{effects, Effect, PinReason};

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
    let text = match tag {
        f::PARSE_TAG => match body.iter().position(|&b| b == 0) {
            Some(end) => &body[end + 1..],
            None => &[],
        },
        _ => body,
    };
    match text.iter().position(|&b| b == 0) {
        Some(end) => &text[..end],
        None => text,
    }
}

/// The first pin the statements of `sql` make, if any. A failed or rolled-back statement
/// pins too: pinning more than needed costs a server, never correctness.
pub(super) fn pin_of(sql: &[u8]) -> Option<Pin> {
    let mut found = Vec::new();
    effects(sql, &mut found);
    found.into_iter().find_map(|(_, e)| match e {
        Effect::Set { .. } => Some(Pin::Setting),
        Effect::Prepare { .. } => Some(Pin::Prepare),
        Effect::Listen { .. } => Some(Pin::Listen),
        Effect::Pin(r) => Some(Pin::State(r)),
        _ => None,
    })
}

/// Statement mode's answer to a Query or Parse whose text creates session state: 0A000, as
/// PgBouncer answers a transaction block there. `None` for any other statement.
pub(super) fn state_refusal(tag: u8, msg: &[u8]) -> Option<ErrorFields> {
    let pin = pin_of(sql_of(tag, msg))?;
    let mut fields = error_fields(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!(
            "{} is not allowed in statement pooling mode (pool.session_state: pin)",
            pin.what()
        ),
    );
    fields.hint = Some("use transaction pooling, where it pins the client to its server".into());
    Some(fields)
}

impl Relay {
    /// A Query or Parse on held server `srv` under a policy that reads statements for session
    /// state: pins the client (transaction mode) or refuses the message (statement mode).
    /// Returns whether it was refused (then it is not sent).
    pub(super) fn on_state(&mut self, srv: &mut ServerState, tag: u8, msg: &[u8]) -> bool {
        if self.policy.session_state == StateRule::Pin {
            self.check_pin(srv, tag, msg);
            return false;
        }
        let Some(fields) = state_refusal(tag, msg) else {
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

    /// Pins the client to `srv` if the Query or Parse `msg` creates session state (pinning
    /// policy only; the first pin is the one reported).
    pub(super) fn check_pin(&mut self, srv: &ServerState, tag: u8, msg: &[u8]) {
        if self.client.pinned.is_some() {
            return;
        }
        let Some(pin) = pin_of(sql_of(tag, msg)) else {
            return;
        };
        self.client.pinned = Some(pin);
        self.metrics
            .clients
            .session_pins
            .with_label_values(&[pin.label()])
            .inc();
        self.events.client_pinned(self.id, srv.id, pin.label());
    }

    /// Why the client keeps its server until it leaves, if it does.
    pub fn pinned(&self) -> Option<Pin> {
        self.client.pinned
    }
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
            assert_eq!(pin_of(sql.as_bytes()), Some(pin), "{sql}");
        }
        for sql in [
            "select 'SET search_path TO a'",
            "-- SET search_path TO a\nselect 1",
            "SET LOCAL search_path TO a",
            "select pg_advisory_xact_lock(1)",
            "begin; select 1; commit",
        ] {
            assert_eq!(pin_of(sql.as_bytes()), None, "{sql}");
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
}
