//! What the relay reads and changes of a server connection it holds: the bytes read and not
//! yet handled, what the server still owes, the prepared statements it holds and the
//! parameters it reported. No stream: the connection's driver does the I/O, so the relay
//! and the simulation work on this alone.

use std::sync::Arc;

use bytes::BytesMut;

use super::{HostRecord, Replies};
use crate::params::{ClientParams, Params, SettingsKey};
use crate::prepared::ServerStatements;
use crate::session_state::settings::Settings;

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
