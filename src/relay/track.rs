//! `pool.session_state: track`: the settings a client makes by SQL, followed with
//! PostgreSQL's transaction semantics, so that the driver can bring them onto every server
//! the client gets (`client::sync`) and take them off for the next client.
//!
//! A statement's effect counts only once its transaction commits. The machine notes the
//! effects of what the client sends (a simple Query's statements; an unnamed Parse's,
//! counted when a portal bound to it is executed) and walks them, in order, once the batch
//! has been answered: with no error every statement ran, so the walk is exact (an implicit
//! transaction commits at the end of its Query or at Sync, `BEGIN` turns it into a block,
//! `COMMIT` and `ROLLBACK` end one, savepoints cut it), and the server's transaction status
//! must agree with it. A batch that failed is exact in the plain cases (one implicit
//! transaction: all of it is undone; a failed block: nothing of the batch survives).
//! Anywhere else the pooler cannot know what the server now holds, so it does not guess: it
//! pins the client to that server, as `pin` would, and the settings stay where they are.

use std::sync::Arc;

use super::pin::Pin;
use super::{Relay, Subscribe};
use crate::protocol::backend as b;
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend as f;
use crate::server::ServerState;
use crate::session_state::detect::{Discard, Effect};
use crate::session_state::lex::Scan;
use crate::session_state::settings::{changes_privileges, Kind, Settings};

/// One step of a batch, as far as settings are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    Set {
        name: String,
        replay: Arc<str>,
    },
    Reset {
        name: String,
    },
    /// `RESET ALL`.
    ResetAll,
    /// `PREPARE`: not transactional, made when the statement succeeds.
    Prepare {
        name: String,
        sql: Arc<str>,
    },
    /// `DEALLOCATE name` / `DEALLOCATE ALL`: not transactional either.
    Deallocate(Option<String>),
    /// `DISCARD ALL`: settings and statements (outside a block only).
    DiscardAll,
    /// `UNLISTEN ch` / `UNLISTEN *` (`None`) run by a server for a client that listens
    /// through the pool's listening connection (or answered by the pooler in a block):
    /// that subscription ends when it commits.
    Unlisten(Option<String>),
    /// A lone `LISTEN` in a block, done with the pool's listening connection when it came
    /// (no server runs it; `new`: the client did not listen on that channel before): a
    /// rollback ends a new subscription, and a commit makes it again after an `UNLISTEN` of
    /// the same block.
    Listen {
        channel: String,
        new: bool,
    },
    Begin,
    Commit,
    Rollback,
    Savepoint(String),
    RollbackTo(String),
    Release(String),
    /// The end of a simple Query or a Sync: an implicit transaction commits here.
    End,
}

impl Step {
    /// The step for an effect, if it matters to settings.
    fn of(e: &Effect) -> Option<Step> {
        Some(match e {
            Effect::Set { name, replay } if !changes_privileges(name) => Step::Set {
                name: name.clone(),
                replay: replay.as_str().into(),
            },
            Effect::Reset { name } if !changes_privileges(name) => {
                Step::Reset { name: name.clone() }
            }
            Effect::ResetAll => Step::ResetAll,
            Effect::Discard(Discard::All) => Step::DiscardAll,
            Effect::Prepare { name, sql } => Step::Prepare {
                name: name.clone(),
                sql: sql.as_str().into(),
            },
            Effect::Deallocate { name } => Step::Deallocate(name.clone()),
            Effect::Unlisten { channel } => Step::Unlisten(channel.clone()),
            Effect::Begin => Step::Begin,
            Effect::Commit => Step::Commit,
            Effect::Rollback => Step::Rollback,
            Effect::Savepoint { name } => Step::Savepoint(name.clone()),
            Effect::RollbackTo { name } => Step::RollbackTo(name.clone()),
            Effect::Release { name } => Step::Release(name.clone()),
            _ => return None,
        })
    }

    fn changes(&self) -> bool {
        matches!(
            self,
            Step::Set { .. } | Step::Reset { .. } | Step::ResetAll | Step::DiscardAll
        ) || self.immediate()
    }

    /// Made when its statement succeeds, whatever becomes of the transaction.
    fn immediate(&self) -> bool {
        matches!(self, Step::Prepare { .. } | Step::Deallocate(_))
    }

    fn controls(&self) -> bool {
        matches!(
            self,
            Step::Begin
                | Step::Commit
                | Step::Rollback
                | Step::Savepoint(_)
                | Step::RollbackTo(_)
                | Step::Release(_)
        )
    }
}

/// Settings and SQL prepared statements followed for one client: beyond, the client is pinned
/// (its server keeps them) rather than the pooler holding and replaying them without bound.
pub(super) const MAX_FOLLOWED: usize = 1000;
/// Named statements whose text makes a setting, followed per client; a Parse of one more
/// pins the client instead.
const MAX_NAMED: usize = 64;

/// A client's settings journal: created at its first setting, kept for the session.
#[derive(Debug, Default)]
pub(super) struct Log {
    /// The client's settings, committed.
    settings: Settings,
    /// Steps of the batch in flight (everything sent since the last answered batch).
    batch: Vec<Step>,
    /// Simple Queries and Syncs in that batch: one means one implicit transaction at most.
    units: u32,
    /// The batch met an ErrorResponse.
    failed: bool,
    /// A setting in a message the pooler could not read whole.
    unsure: bool,
    /// Changes made in the open transaction (explicit block or implicit), not yet committed.
    open: Vec<Step>,
    /// Savepoints of the open block: name and how many changes preceded it.
    marks: Vec<(String, usize)>,
    /// An explicit block is open (the last ReadyForQuery was `T` or `E`).
    explicit: bool,
    /// That block has failed (`E`): its COMMIT rolls back.
    aborted: bool,
    /// The unnamed statement's steps, and the portal bound to it with its steps.
    parsed: Option<Vec<Step>>,
    portal: Option<(Vec<u8>, Vec<Step>)>,
    /// The names of the client's named statements (`track_prepared`) whose text, when last
    /// parsed, made a setting: a Bind of one reads the kept text's steps again.
    named: Vec<Vec<u8>>,
    /// Committed `LISTEN`s and `UNLISTEN`s, in order, not yet handed to the driver
    /// ([`super::PinChange::subscriptions`]).
    subscriptions: Vec<Subscribe>,
}

/// The step effect `e` is for the journal: an `UNLISTEN` matters only to a client that
/// listens through the pool's connection (`listening`; a server's own `LISTEN`s are the
/// server's to end).
fn followed(e: &Effect, listening: bool) -> Option<Step> {
    Step::of(e).filter(|s| listening || !matches!(s, Step::Unlisten(_)))
}

/// The steps statement text `sql` makes, as a Parse of it was read.
fn steps_of(sql: &[u8], listening: bool, scan: Scan) -> Vec<Step> {
    let mut found = Vec::new();
    crate::session_state::detect::effects(sql, scan, &mut found);
    found
        .iter()
        .filter_map(|(_, e)| followed(e, listening))
        .collect()
}

/// The portal name at the start of a Bind or Execute body.
fn first_name(msg: &[u8]) -> &[u8] {
    let body = msg.get(HEADER_LEN..).unwrap_or_default();
    match body.iter().position(|&b| b == 0) {
        Some(end) => &body[..end],
        None => body,
    }
}

impl Log {
    /// Whether the client holds an SQL prepared statement `name`.
    pub(super) fn sql_prepared(&self, name: &str) -> bool {
        self.settings.has(Kind::Prepared, name)
    }

    /// The `PREPARE` text of the client's SQL prepared statement `name`, if it holds one.
    pub(super) fn sql_prepared_text(&self, name: &str) -> Option<&str> {
        self.settings.sql(Kind::Prepared, name)
    }

    fn new(status: u8) -> Log {
        Log {
            explicit: status != b::TX_IDLE,
            aborted: status == b::TX_FAILED,
            ..Log::default()
        }
    }

    /// Commits `change` into `settings` (the client's) and onto `srv`, unless the server
    /// reports the parameter itself and the startup-parameter sync moves it
    /// (ParameterStatus keeps those). False for a new entry
    /// beyond [`MAX_FOLLOWED`]: not followed (the caller pins).
    /// A `DEALLOCATE name` of no SQL statement of the client's is put in `dropped`: it may
    /// be one the client made with Parse.
    fn apply(
        change: &Step,
        settings: &mut Settings,
        srv: &mut ServerState,
        dropped: &mut Vec<String>,
    ) -> bool {
        let full = |kind, name: &str| settings.len() >= MAX_FOLLOWED && !settings.has(kind, name);
        match change {
            Step::Set { name, replay } => {
                if srv.params().get(name).is_some() && crate::params::is_synced(name) {
                    return true;
                }
                if full(Kind::Setting, name) {
                    return false;
                }
                settings.set(Kind::Setting, name, replay.clone());
                srv.settings.set(Kind::Setting, name, replay.clone());
                srv.applied.remove(name);
            }
            Step::Reset { name } => {
                settings.reset(Kind::Setting, name);
                srv.settings.reset(Kind::Setting, name);
                srv.applied.remove(name);
            }
            Step::Prepare { name, sql } => {
                if full(Kind::Prepared, name) {
                    return false;
                }
                settings.set(Kind::Prepared, name, sql.clone());
                srv.settings.set(Kind::Prepared, name, sql.clone());
            }
            Step::Deallocate(Some(name)) => {
                if !settings.has(Kind::Prepared, name) {
                    dropped.push(name.clone());
                }
                settings.reset(Kind::Prepared, name);
                srv.settings.reset(Kind::Prepared, name);
            }
            Step::Deallocate(None) => {
                settings.clear(Kind::Prepared);
                srv.settings.clear(Kind::Prepared);
            }
            Step::ResetAll | Step::DiscardAll => {
                settings.clear(Kind::Setting);
                srv.settings.clear(Kind::Setting);
                if *change == Step::DiscardAll {
                    settings.clear(Kind::Prepared);
                    srv.settings.clear(Kind::Prepared);
                }
                // The startup values a sync set are gone too: the next sync sets them again.
                srv.applied = Default::default();
            }
            _ => {}
        }
        true
    }

    /// The batch was answered (its last ReadyForQuery, `status`): commits what it committed.
    /// Returns false when what the server now holds cannot be known (the caller pins).
    fn settle(&mut self, status: u8, srv: &mut ServerState, dropped: &mut Vec<String>) -> bool {
        let batch = std::mem::take(&mut self.batch);
        let units = std::mem::take(&mut self.units);
        let failed = std::mem::take(&mut self.failed);
        let unsure = std::mem::take(&mut self.unsure);
        let changes = batch.iter().any(Step::changes);
        let controls = batch.iter().any(Step::controls);
        let explicit = status != b::TX_IDLE;
        let mut sure = !unsure;
        let mut committed = Vec::new();
        let mut listens_unknown = false;
        if failed {
            if batch.iter().any(Step::immediate) {
                // Made if its own statement ran, whatever the transaction: which one failed
                // is unknown.
                sure = false;
            } else if controls || (!self.explicit && units > 1) {
                // Which statement failed, and so on which side of a boundary, is unknown.
                // (An `UNLISTEN` of unknown fate is dropped and a `LISTEN` of unknown fate
                // stays: the client may hear more than it would, never less.)
                sure &= !changes && !self.open.iter().any(Step::changes);
                listens_unknown = true;
            } else if self.explicit {
                // The block has failed: what this batch changed is undone by its end, or by
                // a rollback to a savepoint made before this batch.
                sure &= status == b::TX_FAILED || !changes;
            } else {
                // One implicit transaction, undone whole.
                self.undo(0);
            }
        } else if sure {
            sure = self.walk(batch, &mut committed) && self.explicit == explicit;
        }
        if sure {
            for c in committed {
                match c {
                    Step::Unlisten(channel) => {
                        self.subscriptions.push(Subscribe::Unlisten(channel))
                    }
                    // Subscribed when it came: made again only after an `UNLISTEN` of it
                    // that this commit counts too.
                    Step::Listen { channel, .. } => {
                        let ended = self.subscriptions.iter().any(|s| {
                            matches!(s, Subscribe::Unlisten(c) if c.as_ref().map_or(true, |c| *c == channel))
                        });
                        if ended {
                            self.subscriptions.push(Subscribe::Listen(channel));
                        }
                    }
                    c => sure &= Self::apply(&c, &mut self.settings, srv, dropped),
                }
            }
        }
        if !explicit || !sure {
            if sure && !listens_unknown {
                self.undo(0);
            }
            // (Otherwise a `LISTEN` of unknown fate stays.)
            self.open.clear();
            self.marks.clear();
        }
        self.explicit = explicit;
        self.aborted = status == b::TX_FAILED;
        sure
    }

    /// Walks a batch that met no error (every statement ran), collecting in `committed` the
    /// changes that were committed. False where a savepoint is unknown.
    fn walk(&mut self, batch: Vec<Step>, committed: &mut Vec<Step>) -> bool {
        for step in batch {
            match step {
                Step::Begin => self.explicit = true,
                // COMMIT of a failed block rolls it back.
                Step::Commit if !self.aborted => {
                    committed.append(&mut self.open);
                    self.marks.clear();
                    self.explicit = false;
                }
                Step::Commit | Step::Rollback => {
                    self.undo(0);
                    self.marks.clear();
                    self.explicit = false;
                    self.aborted = false;
                }
                Step::End if !self.explicit => committed.append(&mut self.open),
                immediate if immediate.immediate() => committed.push(immediate),
                Step::End => {}
                Step::Savepoint(name) => self.marks.push((name, self.open.len())),
                Step::RollbackTo(name) => {
                    let Some(i) = self.marks.iter().rposition(|(n, _)| *n == name) else {
                        return false;
                    };
                    self.undo(self.marks[i].1);
                    self.marks.truncate(i + 1);
                    self.aborted = false;
                }
                Step::Release(name) => {
                    let Some(i) = self.marks.iter().rposition(|(n, _)| *n == name) else {
                        return false;
                    };
                    self.marks.truncate(i);
                }
                change => self.open.push(change),
            }
        }
        true
    }

    /// Drops the open transaction's changes from the `at`th on (rolled back): a
    /// subscription a `LISTEN` among them made anew ends.
    fn undo(&mut self, at: usize) {
        for step in self.open.drain(at.min(self.open.len())..) {
            if let Step::Listen { channel, new: true } = step {
                self.subscriptions.push(Subscribe::Unlisten(Some(channel)));
            }
        }
    }
}

impl Relay {
    /// Notes the effects `found` of a Query or Parse (`msg`; `whole`: all of it) under
    /// `track`. Returns a pin when a setting cannot be followed (it then stays on this
    /// server): one in a named statement without `track_prepared` (it may run in any later
    /// batch, on whichever server holds it), or in more than [`MAX_NAMED`] of them.
    pub(super) fn note_settings(
        &mut self,
        tag: u8,
        msg: &[u8],
        whole: bool,
        found: &[(usize, Effect)],
    ) -> Option<Pin> {
        let listening = self.client.listening;
        let steps = || {
            found
                .iter()
                .filter_map(move |(_, e)| followed(e, listening))
        };
        let changes = steps().any(|s| s.changes());
        if self.client.log.is_none() {
            if !changes && !steps().any(|s| matches!(s, Step::Unlisten(_))) {
                return None;
            }
            self.client.log = Some(Box::new(Log::new(self.batch.status)));
        }
        let log = self.client.log.as_deref_mut()?;
        if changes && !whole {
            log.unsure = true;
        }
        if tag == f::QUERY_TAG {
            log.batch.extend(steps());
            log.batch.push(Step::End);
            log.units += 1;
            return None;
        }
        // A Parse: its steps count when a portal bound to it runs. A named one's text is
        // kept (`track_prepared`) and read again when bound, as it may run in any later batch.
        if let Some(name) = f::parse_statement_prefix(msg).filter(|s| s.len > 0) {
            let name = name.get(msg);
            if !changes || log.named.iter().any(|n| n == name) {
                return None;
            }
            if !whole || !self.policy.tracking || log.named.len() >= MAX_NAMED {
                return Some(Pin::Setting);
            }
            log.named.push(name.to_vec());
            return None;
        }
        let steps: Vec<Step> = steps().collect();
        log.parsed = (!steps.is_empty()).then_some(steps);
        None
    }

    /// A Bind, Execute or Sync of a client with a settings journal (`track`): an unnamed
    /// statement's steps count when a portal bound to it runs, and a Sync ends an implicit
    /// transaction.
    pub(super) fn note_extended(&mut self, tag: u8, msg: &[u8]) {
        let scan = self.scan();
        let Some(log) = self.client.log.as_deref_mut() else {
            return;
        };
        match tag {
            f::BIND_TAG
                if log.parsed.is_some() || log.portal.is_some() || !log.named.is_empty() =>
            {
                let portal = first_name(msg);
                let statement = f::bind_statement(msg).map(|s| s.get(msg)).ok();
                log.portal = match (statement, &log.parsed) {
                    (Some(b""), Some(steps)) => Some((portal.to_vec(), steps.clone())),
                    (Some(name), _) if !name.is_empty() && log.named.iter().any(|n| n == name) => {
                        // The text the client's statement of that name has now.
                        let listening = self.client.listening;
                        self.statements
                            .get(name)
                            .and_then(|k| f::parse_parts(&k.parse).ok())
                            .map(|(_, sql, _)| (portal.to_vec(), steps_of(sql, listening, scan)))
                            .filter(|(_, steps)| !steps.is_empty())
                    }
                    _ => None,
                };
            }
            f::EXECUTE_TAG => {
                if let Some((portal, steps)) = &log.portal {
                    if portal.as_slice() == first_name(msg) {
                        log.batch.extend(steps.iter().cloned());
                    }
                }
            }
            f::SYNC_TAG => {
                log.batch.push(Step::End);
                log.units += 1;
                // The unnamed portal does not outlive its transaction.
                log.portal = None;
            }
            _ => {}
        }
    }

    /// The batch met an ErrorResponse.
    pub(super) fn note_settings_error(&mut self) {
        if let Some(log) = self.client.log.as_deref_mut() {
            log.failed = true;
        }
    }

    /// The batch in flight on `srv` has been answered: commits its settings; pins the
    /// client where their fate cannot be known.
    pub(super) fn settle_settings(&mut self, srv: &mut ServerState) {
        let Some(log) = self.client.log.as_deref_mut() else {
            return;
        };
        let mut dropped = Vec::new();
        let sure = log.settle(self.batch.status, srv, &mut dropped);
        if !log.subscriptions.is_empty() {
            self.client.pin.look();
        }
        if !sure {
            self.pin_to(srv.id, Pin::Setting);
        }
        // A `DEALLOCATE` that ran on `srv` of a statement made with Parse (the Parse's text
        // was given the server's name): the client's statement and this server's copy are gone.
        for name in dropped {
            if let Some(kept) = self.statements.remove(name.as_bytes()) {
                srv.statements.remove(&kept.server_name);
            }
        }
    }

    /// The `LISTEN`s and `UNLISTEN`s of the client's that committed since the last call, in
    /// order ([`super::PinChange::subscriptions`]).
    pub(super) fn take_subscriptions(&mut self) -> Vec<Subscribe> {
        self.client
            .log
            .as_deref_mut()
            .map(|l| std::mem::take(&mut l.subscriptions))
            .unwrap_or_default()
    }

    /// A lone `LISTEN`/`UNLISTEN` in the client's open block, with nothing in flight on its
    /// server and no pin (`track`). No server runs it, so none is left listening and the
    /// client is not pinned. A `LISTEN` is handed to the driver, done with the pool's
    /// listening connection at once (so a `NOTIFY` of the same block reaches the client
    /// at its commit, as directly) and noted by [`Relay::subscribed`]; a rollback ends it. An
    /// `UNLISTEN` is answered here, as PostgreSQL answers it, and noted, to count if the
    /// block commits. Returns whether the driver has work ([`super::Next::Subscribe`]).
    pub(super) fn subscribe_in_block(&mut self, sub: Subscribe) -> bool {
        if let Subscribe::Listen(_) = sub {
            self.client.subscribe = Some(super::subscribe::Subscribes::of(vec![sub]));
            return true;
        }
        self.subscribed(None, &[sub], vec![Ok(false)]);
        false
    }

    /// Notes a `LISTEN`/`UNLISTEN` of the client's open block in its journal.
    /// It is done (no server owes anything, so every earlier step has been walked): a change
    /// of the open transaction from here on, which a failure later in the block leaves there
    /// for the block's end to undo.
    pub(super) fn note_subscription(&mut self, step: Step) {
        let status = self.batch.status;
        let log = self
            .client
            .log
            .get_or_insert_with(|| Box::new(Log::new(status)));
        log.open.push(step);
    }

    /// Notes a `LISTEN` of the client's open block that the driver did (`new`: the client
    /// did not listen on `channel` before).
    pub(super) fn listened_in_block(&mut self, channel: &str, new: bool) {
        self.note_subscription(Step::Listen {
            channel: channel.to_owned(),
            new,
        });
    }

    /// The settings this client has made by SQL (`track`), to be brought onto its servers.
    pub fn settings(&self) -> &Settings {
        const NONE: &Settings = &Settings::new();
        self.client.log.as_ref().map_or(NONE, |l| &l.settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, v: &str) -> Step {
        Step::Set {
            name: name.into(),
            replay: format!("SET {name} = {v}").into(),
        }
    }

    /// Runs batches (steps, failed, status after) and returns the committed settings'
    /// replays and whether every batch was sure.
    fn run(batches: &[(&[Step], bool, u8)]) -> (Vec<String>, bool) {
        let mut log = Log::new(b::TX_IDLE);
        let mut srv = ServerState::new();
        let mut sure = true;
        for (steps, failed, status) in batches {
            log.batch = steps.to_vec();
            log.units = steps.iter().filter(|s| **s == Step::End).count() as u32;
            log.failed = *failed;
            sure &= log.settle(*status, &mut srv, &mut Vec::new());
        }
        assert_eq!(
            log.settings, srv.settings,
            "the server holds what the client has"
        );
        let mut sql = String::new();
        log.settings.push_replays(&mut sql);
        let replays = sql.split(';').filter(|s| !s.is_empty()).map(String::from);
        (replays.collect(), sure)
    }

    const I: u8 = b::TX_IDLE;
    const T: u8 = b::TX_IN_BLOCK;
    const E: u8 = b::TX_FAILED;

    #[test]
    fn listens_and_unlistens_count_when_they_commit_and_never_pin() {
        /// Batches (steps, failed, status after).
        type Batches = Vec<(Vec<Step>, bool, u8)>;
        let un = |c: &str| Step::Unlisten(Some(c.into()));
        let li = |c: &str, new| Step::Listen {
            channel: c.into(),
            new,
        };
        let sub_un = |c: &str| Subscribe::Unlisten(Some(c.into()));
        let sub_li = |c: &str| Subscribe::Listen(c.into());
        // The batches, and the subscriptions made and ended at the end, in order.
        let cases: Vec<(Batches, Vec<Subscribe>)> = vec![
            (
                vec![(vec![un("a"), Step::End], false, I)],
                vec![sub_un("a")],
            ),
            (
                vec![
                    (vec![Step::Begin, Step::End], false, T),
                    (vec![un("a"), Step::End], false, T),
                    (vec![Step::Rollback, Step::End], false, I),
                ],
                vec![],
            ),
            (
                vec![
                    (vec![Step::Begin, un("a"), Step::End], false, T),
                    (vec![Step::Unlisten(None), Step::End], false, T),
                    (vec![Step::Commit, Step::End], false, I),
                ],
                vec![sub_un("a"), Subscribe::Unlisten(None)],
            ),
            // Failed: which statement failed is unknown, so nothing counts, and no pin.
            (
                vec![
                    (vec![Step::Begin, un("a"), Step::End], true, E),
                    (vec![Step::Rollback, Step::End], false, I),
                ],
                vec![],
            ),
            (
                vec![(vec![un("a"), Step::End, un("b"), Step::End], true, I)],
                vec![],
            ),
            // A LISTEN done in a block, in order with an UNLISTEN: made again at the commit.
            (
                vec![
                    (vec![Step::Begin, Step::End], false, T),
                    (vec![li("a", true), Step::End, un("a"), Step::End], false, T),
                    (
                        vec![li("a", false), Step::End, Step::Commit, Step::End],
                        false,
                        I,
                    ),
                ],
                vec![sub_un("a"), sub_li("a")],
            ),
            // Committed alone: subscribed already, nothing to do.
            (
                vec![
                    (vec![Step::Begin, Step::End], false, T),
                    (vec![li("a", true), Step::End], false, T),
                    (vec![Step::Commit, Step::End], false, I),
                ],
                vec![],
            ),
            // Undone by a rollback, by a failed block (its COMMIT rolls back) and by a
            // savepoint's rollback: a new subscription ends, an older one stays.
            (
                vec![
                    (vec![Step::Begin, Step::End], false, T),
                    (
                        vec![li("a", true), Step::End, li("old", false), Step::End],
                        false,
                        T,
                    ),
                    (vec![Step::Rollback, Step::End], false, I),
                    (vec![Step::Begin, Step::End], false, T),
                    (vec![li("b", true), Step::End], false, T),
                    (vec![Step::End], true, E),
                    (vec![Step::Commit, Step::End], false, I),
                    (
                        vec![Step::Begin, Step::Savepoint("s".into()), Step::End],
                        false,
                        T,
                    ),
                    (vec![li("c", true), Step::End], false, T),
                    (
                        vec![Step::RollbackTo("s".into()), Step::Commit, Step::End],
                        false,
                        I,
                    ),
                ],
                vec![sub_un("a"), sub_un("b"), sub_un("c")],
            ),
            // A COMMIT beside a statement that failed: the LISTEN of unknown fate stays
            // (more heard than directly, never less).
            (
                vec![
                    (vec![Step::Begin, Step::End], false, T),
                    (vec![li("a", true), Step::End], false, T),
                    (vec![Step::Commit, Step::End], true, I),
                ],
                vec![],
            ),
        ];
        for (i, (batches, want)) in cases.into_iter().enumerate() {
            let mut log = Log::new(b::TX_IDLE);
            let mut srv = ServerState::new();
            for (steps, failed, status) in batches {
                log.units = steps.iter().filter(|s| **s == Step::End).count() as u32;
                log.batch = steps;
                log.failed = failed;
                assert!(
                    log.settle(status, &mut srv, &mut Vec::new()),
                    "case {i}: pinned"
                );
            }
            assert_eq!(log.subscriptions, want, "case {i}");
        }
    }

    #[test]
    fn settings_follow_transaction_semantics() {
        use Step::*;
        // Autocommit, then a block that commits, then one that rolls back.
        let (s, sure) = run(&[
            (&[set("a", "1"), End], false, I),
            (&[Begin, End], false, T),
            (&[set("b", "2"), End], false, T),
            (&[Commit, End], false, I),
            (&[Begin, set("c", "3"), End], false, T),
            (&[Rollback, End], false, I),
        ]);
        assert!(sure);
        assert_eq!(s, ["SET a = 1", "SET b = 2"]);
        // A failed implicit transaction is undone whole; so is a failed block's, whose
        // COMMIT rolls back.
        let (s, sure) = run(&[
            (&[set("a", "1"), End], true, I),
            (&[Begin, End], false, T),
            (&[set("b", "2"), End], false, T),
            (&[End], true, E),
            (&[Commit, End], false, I),
        ]);
        assert!(sure);
        assert!(s.is_empty(), "{s:?}");
        // A rollback to a savepoint recovers a failed block and keeps what preceded it.
        let (s, sure) = run(&[
            (
                &[Begin, set("a", "1"), Savepoint("s".into()), End],
                false,
                T,
            ),
            (&[set("b", "2"), End], true, E),
            (&[RollbackTo("s".into()), End], false, T),
            (&[Commit, End], false, I),
        ]);
        assert!(sure);
        assert_eq!(s, ["SET a = 1"]);
        // BEGIN in a Query takes what preceded it into the block; savepoints cut it.
        let (s, sure) = run(&[(
            &[
                set("a", "1"),
                Begin,
                Savepoint("s".into()),
                set("b", "2"),
                RollbackTo("s".into()),
                set("c", "3"),
                Commit,
                End,
            ],
            false,
            I,
        )]);
        assert!(sure);
        assert_eq!(s, ["SET a = 1", "SET c = 3"]);
        // RESET one; RESET ALL clears.
        let (s, _) = run(&[
            (&[set("a", "1"), set("b", "2"), End], false, I),
            (&[Reset { name: "a".into() }, End], false, I),
        ]);
        assert_eq!(s, ["SET b = 2"]);
        let (s, _) = run(&[(&[set("a", "1"), ResetAll, set("b", "2"), End], false, I)]);
        assert_eq!(s, ["SET b = 2"]);
    }

    #[test]
    fn followed_state_is_bounded() {
        let mut many: Vec<Step> = (0..MAX_FOLLOWED)
            .map(|i| set(&format!("x.s{i}"), "1"))
            .collect();
        many.push(Step::End);
        let (s, sure) = run(&[(&many, false, I)]);
        assert!(sure);
        assert_eq!(s.len(), MAX_FOLLOWED);
        // One more name is not followed (the client is pinned); a known name still is.
        let (s, sure) = run(&[
            (&many, false, I),
            (&[set("x.s0", "2"), Step::End], false, I),
            (&[set("x.more", "1"), Step::End], false, I),
        ]);
        assert!(!sure);
        assert_eq!(s.len(), MAX_FOLLOWED);
        assert_eq!(s.last().map(String::as_str), Some("SET x.s0 = 2"));
    }

    #[test]
    fn what_cannot_be_known_is_not_guessed() {
        use Step::*;
        // An error in a Query holding a COMMIT: which side of it failed is unknown.
        let (s, sure) = run(&[(&[Begin, set("a", "1"), Commit, End], true, I)]);
        assert!(!sure && s.is_empty());
        // A status the walk does not explain (a BEGIN it did not see), with a change.
        let (s, sure) = run(&[(&[set("a", "1"), End], false, T)]);
        assert!(!sure && s.is_empty());
        // Pipelined Queries, one failed: which is unknown.
        let (_, sure) = run(&[(&[set("a", "1"), End, set("b", "2"), End], true, I)]);
        assert!(!sure);
        // A rollback to a savepoint never seen.
        let (_, sure) = run(&[
            (&[Begin, End], false, T),
            (&[set("a", "1"), RollbackTo("x".into()), End], false, T),
        ]);
        assert!(!sure);
    }
}
