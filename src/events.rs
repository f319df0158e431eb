//! The `[POOL] ...` event lines on stdout: the only place that formats them. One line per
//! event, written and flushed at once so a reader of stdout sees events in order.

use std::io::Write;
use std::net::SocketAddr;

/// Writer of event lines; disabled, it costs one branch per event.
#[derive(Debug, Clone, Copy)]
pub struct Events {
    enabled: bool,
}

impl Events {
    pub fn new(enabled: bool) -> Self {
        Events { enabled }
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

    pub fn client_uses_server(&self, client: u64, server: u64) {
        self.emit(format_args!("client {client} uses server {server}"));
    }

    pub fn client_released_server(&self, client: u64, server: u64) {
        self.emit(format_args!("client {client} released server {server}"));
    }

    pub fn client_prepares(&self, client: u64, name: &[u8], server: u64) {
        let name = String::from_utf8_lossy(name);
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
        if !self.enabled {
            return;
        }
        let mut out = std::io::stdout().lock();
        // A closed stdout must not take the pooler down; the line is lost, nothing else.
        let _ = writeln!(out, "[POOL] {line}").and_then(|_| out.flush());
    }
}
