//! The `[POOL] ...` event lines on stdout: the only place that formats them. One line per
//! event, written and flushed at once so a reader of stdout sees events in order.

use std::io::Write;
use std::net::SocketAddr;

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
        self.emit(format_args!(
            "server {server} cleaned for client {client}: {reason}"
        ));
    }

    pub fn client_prepares(&self, client: u64, name: &[u8], server: u64) {
        let name = printable(name);
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

/// The longest client-supplied name an event line shows.
const NAME_MAX: usize = 64;

/// A client-supplied name as an event line may show it: control characters escaped (a
/// newline cannot forge a line), at most [`NAME_MAX`] characters, then `...`.
fn printable(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut out = String::with_capacity(text.len().min(NAME_MAX + 3));
    for (i, c) in text.chars().enumerate() {
        if i == NAME_MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod printable_tests {
    use super::printable;

    #[test]
    fn names_cannot_forge_lines_or_grow_without_bound() {
        assert_eq!(printable(b"p"), "p");
        assert_eq!(
            printable(b"a\n[POOL] client 9 connected"),
            "a\\n[POOL] client 9 connected"
        );
        let long = printable(&[b'x'; 500]);
        assert_eq!(long.len(), 64 + 3);
        assert!(long.ends_with("..."));
    }
}

/// At most `per_second` log lines of one kind each second; the rest are counted and the count
/// is reported with the next line that is logged.
#[derive(Debug)]
pub struct LogLimit {
    per_second: u32,
    state: std::sync::Mutex<(std::time::Instant, u32, u64)>,
}

impl LogLimit {
    pub fn per_second(per_second: u32) -> LogLimit {
        LogLimit {
            per_second,
            state: std::sync::Mutex::new((std::time::Instant::now(), 0, 0)),
        }
    }

    /// `Some(lines suppressed since the last logged one)` if a line may be logged now.
    pub fn admit(&self) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (since, used, suppressed) = &mut *st;
        if since.elapsed() >= std::time::Duration::from_secs(1) {
            *since = std::time::Instant::now();
            *used = 0;
        }
        if *used >= self.per_second {
            *suppressed += 1;
            return None;
        }
        *used += 1;
        Some(std::mem::take(suppressed))
    }
}

#[cfg(test)]
mod limit_tests {
    use super::LogLimit;

    #[test]
    fn lines_beyond_the_rate_are_counted_not_logged() {
        let l = LogLimit::per_second(2);
        assert_eq!(l.admit(), Some(0));
        assert_eq!(l.admit(), Some(0));
        assert_eq!(l.admit(), None);
        assert_eq!(l.admit(), None);
        l.state.lock().unwrap().0 -= std::time::Duration::from_secs(2);
        assert_eq!(
            l.admit(),
            Some(2),
            "the next line says how many were dropped"
        );
    }
}
