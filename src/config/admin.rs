//! The admin HTTP server's settings: where it listens, the credential its control routes
//! need, and the bounds that keep a flood of it from costing a client login or a probe.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Secret;

/// The admin HTTP server: probes, metrics, status, and the control routes (`POST /console`,
/// `/reload`, `/drain`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    pub addr: IpAddr,
    pub port: u16,
    /// Bearer token the control routes need from every address (`Authorization: Bearer
    /// <token>`); with none configured they answer 403. It also shows user names in
    /// `/status` and `/metrics`.
    pub token: Option<Secret>,
    /// A file holding the token (a mounted Secret; surrounding whitespace is ignored): read
    /// at load and at every reload, so a rotated token takes effect without a restart.
    pub token_file: Option<PathBuf>,
    /// Show user names in `/status` and `/metrics` to readers without the token too.
    pub show_users: bool,
    /// Admin connections open at once; beyond it the oldest idle one is closed, or the
    /// newcomer when none is idle.
    pub max_connections: usize,
    /// A request's line and headers must arrive within this.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Largest request accepted, headers and body together (bytes).
    pub max_request_size: usize,
    /// Also report not-ready while no server login has succeeded recently (off: a shared
    /// database outage must not withdraw every replica).
    pub readiness_checks_backend: bool,
    /// Also export pool gauges under pgbouncer_exporter's names.
    pub pgbouncer_metric_names: bool,
    /// Users allowed into the SQL admin console (`psql -d droidpool`); empty: console off.
    #[serde(alias = "admin_users")]
    pub console_users: Vec<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            addr: IpAddr::from([127, 0, 0, 1]),
            port: 9127,
            token: None,
            token_file: None,
            show_users: false,
            max_connections: 64,
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_request_size: 64 * 1024,
            readiness_checks_backend: false,
            pgbouncer_metric_names: true,
            console_users: Vec::new(),
        }
    }
}

impl AdminConfig {
    /// Refuses bounds that cannot work, saying why.
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.max_connections < 4 {
            return Err("admin.max_connections must be at least 4".into());
        }
        if self.header_read_timeout.is_zero() || self.idle_timeout.is_zero() {
            return Err("admin.header_read_timeout and admin.idle_timeout must be positive".into());
        }
        if !(1024..=16 << 20).contains(&self.max_request_size) {
            return Err("admin.max_request_size must be between 1024 and 16777216".into());
        }
        if self.token.as_ref().is_some_and(|t| t.expose().len() < 16) {
            return Err("admin.token must be at least 16 characters".into());
        }
        Ok(())
    }
}
