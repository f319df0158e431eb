//! Several hosts, roles and failover against a real streaming pair (a primary and its
//! `pg_basebackup -R` standby, `support::shared_pair()`), shared by this module's tests: each
//! holds the pair's lock for its whole run, since some stop, promote and rebuild its nodes.
//!
//! - [`roles`]: `read-write` finds the primary whatever the host order, `prefer-standby`
//!   aliases read from the standby and fall back to the primary, a role is asked where it
//!   is not reported, nothing fitting is 57P03 (at once, or after the hold).
//! - [`switchover`]: the primary stopped and the standby promoted while clients write:
//!   writes resume within 1 s of the promotion; with the hold no client sees an error.
//! - [`following`]: a server that answers 25006 is not handed out again; a reload moves an
//!   alias to other hosts.

mod following;
mod roles;
mod switchover;

use crate::support::Pooler;

pub const USER: &str = "droid";

/// `server.hosts` on 127.0.0.1 with these ports, then `extra` (more YAML).
pub fn hosts_yaml(ports: &[u16], extra: &str) -> String {
    let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!("server:\n  hosts: [{}]\n{extra}", list.join(", "))
}

/// The port of the server that answered and whether it is in recovery.
pub async fn whoami(c: &tokio_postgres::Client) -> Result<(u16, bool), tokio_postgres::Error> {
    let rows = c
        .simple_query("select inet_server_port(), pg_is_in_recovery()")
        .await?;
    let row = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("a row");
    let port = row.get(0).and_then(|p| p.parse().ok()).expect("a port");
    Ok((port, row.get(1) == Some("t")))
}

/// The `[POOL]` lines that announce host roles.
pub fn role_lines(p: &Pooler) -> Vec<String> {
    p.lines()
        .into_iter()
        .filter(|l| l.starts_with("[POOL] host "))
        .collect()
}
