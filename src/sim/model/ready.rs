//! What a session sends besides replies: ReadyForQuery with what goes before it (pending
//! notifications, ParameterStatus for changed reported settings), notifications to an idle
//! session, and the greeting that ends a login.

use bytes::{BufMut, BytesMut};

use crate::protocol::backend::{self as b, READY_FOR_QUERY_TAG};
use crate::protocol::frame;

use super::tx::Block;
use super::wire::Io;
use super::{ModelServer, State};

impl ModelServer {
    /// The end of a successful login, as PostgreSQL 15 sends it after AuthenticationOk:
    /// ParameterStatus for the reported settings, BackendKeyData, ReadyForQuery.
    pub fn greet(&mut self, secret: i32, out: &mut BytesMut) {
        b::auth_ok(out);
        // Reported settings no client can change.
        let fixed = [
            ("in_hot_standby", "off"),
            ("integer_datetimes", "on"),
            ("is_superuser", "on"),
            ("server_encoding", "UTF8"),
            ("server_version", "15.0 (model)"),
            ("session_authorization", "droid"),
        ];
        for (k, v) in self.settings.reported().chain(fixed) {
            b::parameter_status(out, k, v);
        }
        b::backend_key_data(out, self.pid, secret);
        b::ready_for_query(out, self.tx_status());
    }

    /// ReadyForQuery, preceded (outside a transaction) by the notifications waiting for the
    /// session and by ParameterStatus for each reported setting whose value the client has not
    /// seen (PostgreSQL 14+ reports changes just before ReadyForQuery).
    pub(super) fn ready(&mut self, io: &mut Io) {
        if self.block == Block::Idle {
            self.deliver(io);
        }
        let changed = std::mem::take(&mut self.settings_changed);
        for (name, value) in self.settings.reported().filter(|_| changed) {
            let seen = self.reported.iter_mut().find(|(k, _)| *k == name);
            match seen {
                Some((_, v)) if v == value => {}
                Some((_, v)) => {
                    value.clone_into(v);
                    io.parameter_status(name, value);
                }
                None => {
                    self.reported.push((name, value.to_owned()));
                    io.parameter_status(name, value);
                }
            }
        }
        let status = self.tx_status();
        io.message(|buf| {
            let at = frame::begin(buf, READY_FOR_QUERY_TAG);
            buf.put_u8(status);
            frame::finish(buf, at);
        });
        io.flush();
    }

    /// An idle session waiting for input sends notifications as they come.
    pub(super) fn deliver_if_idle(&mut self, io: &mut Io) {
        let idle = matches!(self.state, State::Ready | State::SkipToSync)
            && self.work.is_none()
            && self.block == Block::Idle;
        if idle {
            self.deliver(io);
        }
    }

    fn deliver(&mut self, io: &mut Io) {
        for n in io.db.take_notifications(self.pid) {
            io.notification(n.pid, &n.channel, &n.payload);
        }
    }
}
