//! What a statement does to a session, as far as the pooler must know: the vocabulary the
//! classifier (`detect`) and the reader of calls (`calls`) share.

/// What a statement does, as far as the pooler must know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A session setting: `name` (lower-case) and the SQL that sets it again elsewhere.
    Set { name: String, replay: String },
    /// `RESET name` (or `SET name TO DEFAULT`).
    Reset { name: String },
    /// `RESET ALL`.
    ResetAll,
    /// `SET LOCAL` or `SET TRANSACTION`: this transaction only.
    Local,
    /// `PREPARE name AS ...`: the statement as written replays it.
    Prepare { name: String, sql: String },
    /// `EXECUTE name`.
    Execute { name: String },
    /// `DEALLOCATE [PREPARE] name` / `DEALLOCATE ALL`.
    Deallocate { name: Option<String> },
    /// State that cannot be moved to another server, and why.
    Pin(PinReason),
    /// `CLOSE name` / `CLOSE ALL`: may end a `WITH HOLD` cursor.
    Close { name: Option<String> },
    /// `pg_advisory_unlock_all()`.
    UnlockAll,
    /// `pg_advisory_unlock(..)` / `pg_advisory_unlock_shared(..)`: may end the last lock.
    Unlock,
    /// `DROP ...`: may drop the last temp table.
    Drop,
    /// `DISCARD ALL`, `DISCARD TEMP` (`TEMPORARY`), `DISCARD PLANS`, `DISCARD SEQUENCES`.
    Discard(Discard),
    /// `LISTEN channel`.
    Listen { channel: String },
    /// `UNLISTEN channel` / `UNLISTEN *`.
    Unlisten { channel: Option<String> },
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT` / `END` (and `COMMIT AND CHAIN`).
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SAVEPOINT name`.
    Savepoint { name: String },
    /// `ROLLBACK TO [SAVEPOINT] name`.
    RollbackTo { name: String },
    /// `RELEASE [SAVEPOINT] name`.
    Release { name: String },
    /// Work the pooler cannot see into (`DO`, `CALL`, a function of the database's own):
    /// whatever it left on the server is cleaned up before another client runs there.
    Unseen(Unseen),
}

/// What unseen work may have left on its server, as the clean-up it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unseen {
    /// `nextval`/`setval`: the session's sequence values (`currval`, `lastval`), which
    /// `DISCARD SEQUENCES` takes off.
    Sequences,
    /// Anything a session can hold: only `DISCARD ALL` is known to take it all off.
    Any,
}

/// Why a client is pinned to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PinReason {
    TempTable,
    HoldCursor,
    AdvisoryLock,
    Load,
    /// A setting whose name or value the pooler cannot read (`set_config($1, $2, false)`).
    DynamicSetting,
    /// `SET ROLE`/`SET SESSION AUTHORIZATION` where the policy pins them.
    Role,
}

impl PinReason {
    pub fn label(self) -> &'static str {
        match self {
            PinReason::TempTable => "temp_table",
            PinReason::HoldCursor => "hold_cursor",
            PinReason::AdvisoryLock => "advisory_lock",
            PinReason::Load => "load",
            PinReason::DynamicSetting => "dynamic_setting",
            PinReason::Role => "role",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    All,
    Temp,
    Plans,
    Sequences,
}
