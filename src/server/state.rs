//! What the relay reads and changes of a server connection it holds: the bytes read and not
//! yet handled, what the server still owes, the prepared statements it holds and the
//! parameters it reported. No stream: the connection's driver does the I/O, so the relay
//! and the simulation work on this alone.

use std::sync::Arc;

use bytes::BytesMut;

use super::{HostRecord, Replies};
use crate::params::{ClientParams, Params, SettingsKey};
use crate::prepared::ServerStatements;
use crate::session_state::detect::Unseen;
use crate::session_state::settings::Settings;

/// Why a server's session is cleaned before a client runs there
/// (`droidpool_session_resets_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupReason {
    /// Another client ran work the pooler could not see into there.
    Opaque,
    /// `pool.reset_query_always`: another client held it.
    Always,
}

impl CleanupReason {
    pub fn label(self) -> &'static str {
        match self {
            CleanupReason::Opaque => "opaque",
            CleanupReason::Always => "always",
        }
    }
}

/// A clean-up a server needs before a client runs there: why, and how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleanup {
    pub reason: CleanupReason,
    pub what: Unseen,
}

/// The protocol state of one server connection.
#[derive(Debug, Default)]
pub struct ServerState {
    /// Number in order of successful login, from 1 (the `[POOL] server N` number).
    pub id: u64,
    /// Its backend's process id (from BackendKeyData).
    pub pid: i32,
    /// Bytes read from the server and not yet handled.
    pub rbuf: BytesMut,
    /// What this connection still owes, in request order.
    pub replies: Replies,
    /// Prepared statements this connection holds for tracked clients.
    pub statements: ServerStatements,
    /// Values the server last reported with ParameterStatus (written through
    /// [`ServerState::set_param`], which keeps `in_sync` honest).
    params: Params,
    /// The client settings these parameters were last found to need no sync for (with
    /// nothing applied); cleared by any reported change.
    in_sync: Option<SettingsKey>,
    /// Settings a client sync applied that the server does not report.
    pub applied: Params,
    /// Settings made by SQL that it holds (`pool.session_state: track`): its client's, or
    /// those a sync replayed; the next client's sync takes them off.
    pub settings: Settings,
    /// The host it is connected to (set once the login fits), which its reports keep current.
    pub host: Option<Arc<HostRecord>>,
    /// It answered a statement with 25006 (read-only transaction): before another client
    /// gets it, a pool that needs writes asks whether its host is still writable.
    pub read_only_error: bool,
    /// The last Parse text read for session state that had none (`pin`, `track`): the same
    /// text again (a driver's unnamed statement, every transaction) is not read again.
    pub plain_parse: Vec<u8>,
    /// How far in its pool's list of departed clients' statements this connection has looked
    /// (`pool::orphans`).
    pub orphans_seen: u64,
    /// The client that held it last (0: none since it was opened or reset).
    pub last_client: u64,
    /// The parameters it reported at login: what `DISCARD ALL` brings back.
    login_params: Params,
    /// What work the pooler could not see into may have left here since it was last
    /// cleaned (`None`: nothing).
    pub unseen: Option<Unseen>,
}

impl ServerState {
    /// A fresh connection's state, its read buffer sized for a first answer.
    pub fn new() -> ServerState {
        ServerState {
            rbuf: BytesMut::with_capacity(8192),
            ..ServerState::default()
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Records a ParameterStatus from the server. `in_hot_standby` turning off is a
    /// promotion (protocol docs, "ParameterStatus"; PostgreSQL 14+): the host's record learns
    /// it at once.
    pub fn set_param(&mut self, name: &str, value: &str) {
        if name == "in_hot_standby" {
            if let Some(h) = &self.host {
                h.reported_hot_standby(value == "on");
            }
        }
        self.params.set(name, value);
        self.in_sync = None;
    }

    /// Whether a client with `client`'s settings (and `settings` made by SQL) needs no sync here: an earlier check found
    /// none needed for the same settings and nothing reported since has changed. Saves
    /// comparing every setting on each checkout.
    #[inline(always)]
    pub fn in_sync_with(&self, client: &ClientParams, settings: &Settings) -> bool {
        self.applied.is_empty()
            && self.settings == *settings
            && self.in_sync.as_ref().is_some_and(|k| client.has_key(k))
    }

    /// Remembers that a client with `client`'s settings needed no sync here.
    pub fn set_in_sync(&mut self, client: &ClientParams) {
        if self.applied.is_empty() {
            self.in_sync = Some(client.key());
        }
    }

    /// The clean-up client `client` needs before it runs here, if any: after another client,
    /// when that client's work could not be seen into, or always (`always`:
    /// `pool.reset_query_always`). The client that held it last gets it back as it left it.
    #[inline]
    pub fn cleanup_for(&self, client: u64, always: bool) -> Option<Cleanup> {
        if self.last_client == 0 || self.last_client == client {
            return None;
        }
        if always {
            return Some(Cleanup {
                reason: CleanupReason::Always,
                what: Unseen::Any,
            });
        }
        self.unseen.map(|what| Cleanup {
            reason: CleanupReason::Opaque,
            what,
        })
    }

    /// Notes that work the pooler cannot see into ran here.
    #[inline]
    pub fn mark_unseen(&mut self, what: Unseen) {
        self.unseen = self.unseen.max(Some(what));
    }

    /// The login is over: what it reported is what a reset brings back.
    pub fn note_login(&mut self) {
        self.login_params = self.params.clone();
    }

    /// The session was reset as a new one (`DISCARD ALL`): nothing of any client's is left,
    /// and its settings are those it logged in with (`in_hot_standby`, which says what the
    /// host is now, aside).
    pub fn reset_as_new(&mut self) {
        self.statements.clear();
        self.applied = Params::default();
        self.settings.clear_all();
        self.unseen = None;
        for (k, v) in self.login_params.clone().iter() {
            if k != "in_hot_standby" {
                self.params.set(k, v);
            }
        }
        self.in_sync = None;
    }

    /// Gives back what a large message or a long pipeline grew (the read buffer, the reply
    /// queue) before the connection waits in the pool: idle servers stay small.
    #[inline]
    pub fn trim_buffers(&mut self) {
        if self.rbuf.capacity() > 64 << 10 && self.rbuf.is_empty() {
            self.rbuf = BytesMut::with_capacity(8192);
        }
        self.replies.trim();
    }
}
