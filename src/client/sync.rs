//! Bringing a server's session settings in line with a client's before the client's first
//! message runs on it: the startup parameters, and under `pool.session_state: track` the
//! settings the client made by SQL.

use bytes::BytesMut;

use super::error::ClientError;
use super::session::Session;
use crate::net::read::read_some;
use crate::protocol::{backend, frontend};
use crate::server::{read_frame, Server};
use crate::session_state::settings::Kind;

impl Session<'_> {
    /// Runs the sync on a freshly checked-out server and waits for its answer, so nothing of
    /// the client's runs with the wrong settings. A setting the server rejects ends the session
    /// with the server's own error, as a direct login with that setting would.
    pub(super) async fn sync_settings(&mut self, conn: &mut Server) -> Result<(), ClientError> {
        let wanted = self.relay.settings();
        if conn.in_sync_with(self.relay.params(), wanted) {
            return Ok(());
        }
        let replay = conn.settings != *wanted;
        // Settings made by SQL are taken off first (a RESET goes to the server's default,
        // which the startup sync then corrects), and the client's replayed last (a SET
        // overrides a startup value, as it did for the client).
        let mut sql = String::new();
        if replay {
            conn.settings.push_resets(&mut sql);
        }
        if let Some(startup) = self.relay.params().sync_sql(conn.params(), &conn.applied) {
            sql.push_str(&startup);
            sql.push(';');
        } else if !replay {
            conn.state.set_in_sync(self.relay.params());
            return Ok(());
        }
        if replay {
            wanted.push_replays(&mut sql);
        }
        // One Query, one implicit transaction: a statement the server rejects undoes the
        // others, and the server keeps what it held (its `settings` stay true).
        let mut out = BytesMut::new();
        frontend::query(&mut out, &sql);
        conn.stream
            .send(&out)
            .await
            .map_err(|e| ClientError::ServerLost(e.into()))?;
        let mut rejected = None;
        loop {
            // The client is watched meanwhile: one that leaves while a server does not answer
            // (a network partition) must not keep that server checked out until it does.
            let f = tokio::select! {
                f = read_frame(conn) => f.map_err(|e| ClientError::ServerLost(e.into()))?,
                r = read_some(self.client, self.relay.client_in()), if self.relay.client_has_room() => {
                    if r? == 0 {
                        return Err(ClientError::Gone);
                    }
                    continue;
                }
            };
            match f.tag {
                backend::PARAMETER_STATUS_TAG => {
                    if let Ok((k, v)) = backend::parse_parameter_status(f.body()) {
                        conn.state.set_param(k, v);
                        // The server's spelling of the value is what the client now has.
                        self.relay.params_mut().set(k, v);
                    }
                }
                backend::ERROR_RESPONSE_TAG => {
                    let fields = backend::parse_error(f.body())
                        .map_err(|e| ClientError::from(crate::relay::ServerFault::from(e)))?;
                    rejected = Some(fields);
                }
                backend::READY_FOR_QUERY_TAG => break,
                _ => {}
            }
        }
        if let Some(fields) = rejected {
            tracing::info!(client = self.relay.id(), code = %fields.code, "a client setting was rejected by the server");
            return Err(ClientError::Rejected(Box::new(fields)));
        }
        let wanted = self.relay.settings();
        if replay {
            for kind in [Kind::Setting, Kind::Prepared] {
                let n = wanted.count(kind);
                if n > 0 {
                    let m = &self.shared.metrics.clients.session_replays;
                    m.with_label_values(&[kind.label()]).inc_by(n as u64);
                }
            }
        }
        conn.state.settings = wanted.clone();
        let mut applied = self.relay.params().unreported(conn.params());
        // A setting the client made by SQL overrides its startup value there.
        for (name, _) in applied.clone().iter() {
            if wanted.has_setting(name) {
                applied.remove(name);
            }
        }
        conn.state.applied = applied;
        Ok(())
    }
}
