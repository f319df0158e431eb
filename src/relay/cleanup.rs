//! The pooler's own conversation with a server a client has just taken, before the client's
//! first message runs there: the clean-up of a session another client left work the pooler
//! could not see into (or any session, with `pool.reset_query_always`), then the client's
//! settings brought onto it. A state of the machine ([`Prelude`]): the client's messages wait
//! in its buffer while the server answers, and the simulation runs it as the driver does.
//!
//! `DISCARD ALL` is the one statement that takes off everything a session can hold
//! (settings, role and session authorization, temporary objects, cursors, advisory locks,
//! listens, prepared statements, cached plans, sequence values); the random seed a
//! `setseed` left is not among them, so a fresh one follows. Work that touched sequences
//! alone (`nextval`) needs only `DISCARD SEQUENCES`, which keeps the server's prepared
//! statements.

use super::error::ServerFault;
use super::{Io, Relay};
use crate::params::ClientParams;
use crate::protocol::backend::ErrorFields;
use crate::protocol::frontend;
use crate::server::{Cleanup, CleanupReason, Owed, ServerState};
use crate::session_state::detect::{self, Effect, Unseen};
use crate::session_state::settings::{Kind, Settings};

/// Where the pooler's conversation with the held server stands. One byte, no payload: the
/// idle client task stays in its allocation class.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prelude {
    /// None: the client's messages go to the server as they come.
    #[default]
    Idle,
    /// The server was taken and needs a clean-up, which starts at the next call: of the
    /// sequences, or of everything for unseen work or for `pool.reset_query_always`.
    DueSequences,
    DueAny,
    DueAlways,
    /// The server was taken and may need the client's settings; they are sent at the next
    /// call.
    Sync,
    /// The clean-up was sent (of the sequences, or of everything).
    CleaningSequences,
    CleaningAny,
    /// The client's settings were sent (after a clean-up).
    Syncing,
    /// The idle check (`server.check_query`) was sent to a server idle past
    /// `server.check_delay`; what comes after it once it passes (`check`).
    Checking(Then),
}

/// What follows a passed idle check: the states a server is taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Then {
    Idle,
    DueSequences,
    DueAny,
    DueAlways,
    Sync,
}

impl From<Then> for Prelude {
    fn from(t: Then) -> Prelude {
        match t {
            Then::Idle => Prelude::Idle,
            Then::DueSequences => Prelude::DueSequences,
            Then::DueAny => Prelude::DueAny,
            Then::DueAlways => Prelude::DueAlways,
            Then::Sync => Prelude::Sync,
        }
    }
}

impl Then {
    /// The state for a server taken that needs clean-up `c`.
    pub(super) fn due(c: Cleanup) -> Then {
        match (c.reason, c.what) {
            (CleanupReason::Always, _) => Then::DueAlways,
            (CleanupReason::Opaque, Unseen::Sequences) => Then::DueSequences,
            (CleanupReason::Opaque, Unseen::Any) => Then::DueAny,
        }
    }
}

/// The Query that brings `srv`'s session settings in line with a client's (`params`, and
/// `wanted` made by SQL under `track`), and whether it replays settings made by SQL; `None`
/// when they agree already. Settings made by SQL are taken off first (a `RESET` goes to the
/// server's default, which the startup part then corrects), and the client's replayed last
/// (a `SET` overrides a startup value, as it did for the client). One Query, one implicit
/// transaction: a statement the server rejects undoes the others.
pub fn sync_query(
    srv: &ServerState,
    params: &ClientParams,
    wanted: &Settings,
) -> Option<(String, bool)> {
    let replay = srv.settings != *wanted;
    let mut sql = String::new();
    if replay {
        srv.settings.push_resets(&mut sql);
    }
    if let Some(startup) = params.sync_sql(srv.params(), &srv.applied) {
        sql.push_str(&startup);
        sql.push(';');
    } else if !replay {
        return None;
    }
    if replay {
        wanted.push_replays(&mut sql);
    }
    Some((sql, replay))
}

/// What `srv` holds once [`sync_query`]'s Query succeeded: the client's settings made by
/// SQL, and the startup settings it applied that the server does not report (a setting made
/// by SQL overrides its startup value there).
pub fn synced(srv: &mut ServerState, params: &ClientParams, wanted: &Settings) {
    srv.settings = wanted.clone();
    let mut applied = params.unreported(srv.params());
    for (name, _) in applied.clone().iter() {
        if wanted.has_setting(name) {
            applied.remove(name);
        }
    }
    srv.applied = applied;
}

impl Relay {
    /// The prelude's turn at the start of a call: a clean-up or a sync due is sent (the
    /// client's messages wait meanwhile). Returns whether the client's messages must wait.
    #[cold]
    pub(super) fn prelude_turn<I: Io>(
        &mut self,
        srv: Option<&mut ServerState>,
        io: &mut I,
    ) -> bool {
        let Some(srv) = srv else {
            self.prelude = Prelude::Idle;
            return false;
        };
        match self.prelude {
            Prelude::Idle => false,
            Prelude::DueSequences | Prelude::DueAny | Prelude::DueAlways => {
                let (reason, what) = match self.prelude {
                    Prelude::DueSequences => (CleanupReason::Opaque, Unseen::Sequences),
                    Prelude::DueAny => (CleanupReason::Opaque, Unseen::Any),
                    _ => (CleanupReason::Always, Unseen::Any),
                };
                self.begin_cleanup(srv, Cleanup { reason, what }, io);
                true
            }
            Prelude::Sync => self.begin_sync(srv),
            Prelude::CleaningSequences
            | Prelude::CleaningAny
            | Prelude::Syncing
            | Prelude::Checking(_) => true,
        }
    }

    /// Sends the client's settings to `srv` where they differ; returns whether they were
    /// (then the client's messages wait for the answer).
    fn begin_sync(&mut self, srv: &mut ServerState) -> bool {
        match sync_query(srv, &self.client.params, self.settings()) {
            Some((sql, replay)) => {
                if replay {
                    self.count_replays();
                }
                frontend::query(&mut self.sout, &sql);
                self.owe(srv, Owed::Internal);
                self.prelude = Prelude::Syncing;
                self.batch.release_due = false;
                true
            }
            None => {
                srv.set_in_sync(&self.client.params);
                self.prelude = Prelude::Idle;
                false
            }
        }
    }

    /// Sends the clean-up `c` to `srv`, and the client's settings right behind it (one
    /// round trip): what the server holds after `DISCARD ALL` is known beforehand (nothing of
    /// any client's, the parameters it logged in with), so the settings are computed against
    /// that. Their replies are the pooler's.
    fn begin_cleanup<I: Io>(&mut self, srv: &mut ServerState, c: Cleanup, io: &mut I) {
        self.metrics
            .clients
            .session_resets
            .with_label_values(&[c.reason.label()])
            .inc();
        let mut sql = match c.what {
            Unseen::Sequences => {
                frontend::query(&mut self.sout, "DISCARD SEQUENCES");
                String::new()
            }
            Unseen::Any => {
                frontend::query(&mut self.sout, "DISCARD ALL");
                srv.reset_as_new();
                // A value in [-1, 1] the previous client cannot know.
                format!("SELECT pg_catalog.setseed({});", io.seed())
            }
        };
        self.owe(srv, Owed::Internal);
        srv.unseen = None;
        match sync_query(srv, &self.client.params, self.settings()) {
            Some((sync, replay)) => {
                if replay {
                    self.count_replays();
                }
                sql.push_str(&sync);
            }
            None => srv.set_in_sync(&self.client.params),
        }
        if !sql.is_empty() {
            frontend::query(&mut self.sout, &sql);
            self.owe(srv, Owed::Internal);
        }
        self.batch.release_due = false;
        self.prelude = match c.what {
            Unseen::Sequences => Prelude::CleaningSequences,
            Unseen::Any => Prelude::CleaningAny,
        };
        self.events
            .server_cleaned(srv.id, self.id, c.reason.label());
    }

    /// A ReadyForQuery answered one of the prelude's queries on `srv`: the clean-up's moves
    /// the prelude on to the settings; the last one (nothing left owed) ends it, and the
    /// client's messages go on.
    #[cold]
    pub(super) fn prelude_ready(&mut self, srv: &mut ServerState) {
        if let Prelude::Checking(then) = self.prelude {
            // The check's answer (the first ReadyForQuery since the server was taken; one
            // that left a transaction open failed it before this).
            self.prelude = then.into();
            return;
        }
        if !srv.replies.is_empty() {
            self.prelude = Prelude::Syncing;
            return;
        }
        let wanted = self.settings().clone();
        synced(srv, &self.client.params, &wanted);
        self.prelude = Prelude::Idle;
        self.batch.release_due = false;
        self.batch.clean = true;
    }

    /// `droidpool_session_replays_total` for the settings brought onto a server.
    fn count_replays(&self) {
        let wanted = self.settings();
        for kind in [Kind::Setting, Kind::Prepared] {
            let n = wanted.count(kind);
            if n > 0 {
                let m = &self.metrics.clients.session_replays;
                m.with_label_values(&[kind.label()]).inc_by(n as u64);
            }
        }
    }

    /// An ErrorResponse during the prelude: a failed clean-up leaves the server in a state
    /// no client may have, and a rejected setting ends the session with the server's own
    /// error, as a direct login with that setting would.
    #[cold]
    pub(super) fn prelude_error(&mut self, body: &[u8]) -> ServerFault {
        // (A FATAL here was the pooler's to read, not passed on: the client is told.)
        self.batch.server_fatal = false;
        let fields = crate::protocol::backend::parse_error(body).unwrap_or_else(|_| ErrorFields {
            severity: "ERROR".into(),
            code: crate::protocol::sqlstate::CONNECTION_FAILURE.into(),
            message: "malformed error from the server".into(),
            detail: None,
            hint: None,
        });
        match self.prelude {
            Prelude::Syncing => ServerFault::Rejected(Box::new(fields)),
            Prelude::Checking(_) => {
                ServerFault::CheckFailed(format!("{} ({})", fields.message, fields.code))
            }
            _ => ServerFault::Cleanup(fields.message),
        }
    }

    /// Whether the pooler's own conversation with the held server is under way.
    #[inline(always)]
    pub(super) fn in_prelude(&self) -> bool {
        self.prelude != Prelude::Idle
    }

    /// Whether a clean-up or the idle check is being answered: what the server reports
    /// meanwhile is its own, not the client's.
    pub(super) fn cleaning(&self) -> bool {
        matches!(
            self.prelude,
            Prelude::CleaningSequences | Prelude::CleaningAny | Prelude::Checking(_)
        )
    }

    /// Whether the idle check is being answered.
    #[inline(always)]
    pub(super) fn checking(&self) -> bool {
        matches!(self.prelude, Prelude::Checking(_))
    }
}

impl Relay {
    /// Marks `srv` with what the unseen work among `found` (a Query's or Parse's effects) may
    /// leave there: a call the pooler cannot see into, an `EXECUTE` of an SQL prepared
    /// statement whose text it does not hold or that does more than read, a text it did not
    /// read to its end (`whole`: it read all of it).
    pub(super) fn note_unseen(
        &self,
        srv: &mut ServerState,
        found: &[(usize, Effect)],
        whole: bool,
    ) {
        if !whole {
            srv.mark_unseen(Unseen::Any);
        }
        for (_, e) in found {
            match e {
                Effect::Unseen(u) => srv.mark_unseen(*u),
                Effect::Execute { name } => {
                    let body = self
                        .client
                        .log
                        .as_deref()
                        .and_then(|l| l.sql_prepared_text(name));
                    match body {
                        Some(sql) => {
                            if let Some(u) = detect::unseen_by_execute(sql.as_bytes(), self.scan())
                            {
                                srv.mark_unseen(u);
                            }
                        }
                        None => srv.mark_unseen(Unseen::Any),
                    }
                }
                _ => {}
            }
        }
    }
}

/// The large-object functions libpq calls through FunctionCall (`fe-lobj.c`), by their
/// fixed object ids: they leave nothing in the session past the transaction (a descriptor
/// ends with it).
const LARGE_OBJECT_FUNCTIONS: [u32; 13] = [
    715, 952, 953, 954, 955, 956, 957, 958, 964, 1004, 3170, 3171, 3172,
];

impl Relay {
    /// A fastpath FunctionCall (`msg`, its first bytes at least) about to run on `srv`: a
    /// call of anything but libpq's large-object functions is work the pooler cannot see
    /// into.
    pub(super) fn note_function_call(&self, srv: &mut ServerState, msg: &[u8]) {
        let oid = msg
            .get(5..9)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_be_bytes);
        if !oid.is_some_and(|o| LARGE_OBJECT_FUNCTIONS.contains(&o)) {
            srv.mark_unseen(Unseen::Any);
        }
    }
}
