//! The `[POOL] ...` event lines on stdout: the only place that formats them. One line per
//! event, written and flushed at once so a reader of stdout sees events in order; a name a
//! client chose is written through [`Escaped`], so it cannot end the line or forge another.

use std::io::Write;
use std::net::SocketAddr;

use crate::logs::Escaped;

pub use crate::config::EventLevel;

/// Writer of event lines; a line not printed costs one branch.
#[derive(Debug, Clone, Copy)]
pub struct Events {
    lifecycle: bool,
    transactions: bool,
}

impl Events {
    pub fn new(level: EventLevel) -> Self {
        Events {
            lifecycle: level != EventLevel::Off,
            transactions: level == EventLevel::All,
        }
    }

    pub fn listening(&self, addr: SocketAddr) {
        self.emit(format_args!("listening on {addr}"));
    }

    pub fn client_connected(&self, client: u64) {
        self.emit(format_args!("client {client} connected"));
    }

    pub fn client_disconnected(&self, client: u64) {
        self.emit(format_args!("client {client} disconnected"));
    }

    pub fn server_connected(&self, server: u64) {
        self.emit(format_args!("server {server} connected"));
    }

    pub fn server_closed(&self, server: u64) {
        self.emit(format_args!("server {server} closed"));
    }

    /// A host's role changed, as a login or a report found it: the primary changed when a
    /// host turns `primary`.
    pub fn host_role(&self, host: &str, role: &str, was: &str) {
        self.emit(format_args!("host {host} is {role} (was {was})"));
    }

    pub fn client_uses_server(&self, client: u64, server: u64) {
        if self.transactions {
            self.emit(format_args!("client {client} uses server {server}"));
        }
    }

    pub fn client_released_server(&self, client: u64, server: u64) {
        if self.transactions {
            self.emit(format_args!("client {client} released server {server}"));
        }
    }

    /// `reason` is one of [`crate::relay::Pin::label`]'s fixed words.
    pub fn client_pinned(&self, client: u64, server: u64, reason: &str) {
        self.emit(format_args!(
            "client {client} pinned to server {server}: {reason}"
        ));
    }

    /// A server's session cleaned before client `client` runs there (`reason`: why).
    pub fn server_cleaned(&self, server: u64, client: u64, reason: &str) {
        if self.transactions {
            self.emit(format_args!(
                "server {server} cleaned for client {client}: {reason}"
            ));
        }
    }

    /// `name` is the client's: escaped and cut ([`Escaped::name`]).
    pub fn client_prepares(&self, client: u64, name: &[u8], server: u64) {
        let name = Escaped::name(String::from_utf8_lossy(name));
        self.emit(format_args!(
            "client {client} prepares {name} on server {server}"
        ));
    }

    /// The last line of a drain.
    pub fn shutdown_summary(&self, accepted: u64, completed: u64, refused: u64, aborted: u64) {
        tracing::info!(accepted, completed, refused, aborted, "stopped");
        self.emit(format_args!(
            "shutdown: accepted {accepted}, completed {completed}, refused {refused}, aborted {aborted}"
        ));
    }

    fn emit(&self, line: std::fmt::Arguments<'_>) {
        if !self.lifecycle {
            return;
        }
        let mut out = std::io::stdout().lock();
        // A closed stdout must not take the pooler down; the line is lost, nothing else.
        let _ = writeln!(out, "[POOL] {line}").and_then(|_| out.flush());
    }
}
