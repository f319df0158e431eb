//! Command-line flags; each one overrides the same setting of the config file.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Parser;

use super::{Config, LogFormat, PoolMode};

/// droid-pool: a PostgreSQL connection pooler built for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "droid-pool", version, about)]
pub struct Cli {
    /// YAML config file holding every setting; flags below override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Port for client connections [default: 6432].
    #[arg(long)]
    pub port: Option<u16>,
    /// Address for client connections [default: 127.0.0.1].
    #[arg(long)]
    pub listen_addr: Option<IpAddr>,
    /// PostgreSQL host [default: 127.0.0.1].
    #[arg(long)]
    pub server_host: Option<String>,
    /// PostgreSQL port [default: 5432].
    #[arg(long)]
    pub server_port: Option<u16>,
    /// Server connections per (database, user) pool [default: 20].
    #[arg(long)]
    pub pool_size: Option<usize>,
    /// Pooling mode [default: transaction].
    #[arg(long, value_enum)]
    pub mode: Option<PoolMode>,
    /// Track named prepared statements so they survive transaction pooling.
    #[arg(long)]
    pub track_prepared: bool,
    /// Port of the admin HTTP server (probes, /metrics, /status) [default: 9127].
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// Address of the admin HTTP server [default: 127.0.0.1].
    #[arg(long)]
    pub admin_addr: Option<IpAddr>,
    /// File holding the admin token the control routes need (`admin.token_file`).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Log format for diagnostics on stderr (filter with RUST_LOG) [default: text].
    #[arg(long, value_enum)]
    pub log_format: Option<CliLogFormat>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CliLogFormat {
    Text,
    Json,
}

impl Cli {
    /// Writes every flag that was given over the loaded file.
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(p) = self.port {
            cfg.listen.port = p;
        }
        if let Some(a) = self.listen_addr {
            cfg.listen.addr = a;
        }
        if let Some(h) = &self.server_host {
            cfg.server.host = h.clone();
        }
        if let Some(p) = self.server_port {
            cfg.server.port = p;
        }
        if let Some(s) = self.pool_size {
            cfg.pool.size = s;
        }
        if let Some(m) = self.mode {
            cfg.pool.mode = m;
        }
        if self.track_prepared {
            cfg.pool.track_prepared = true;
        }
        if let Some(f) = &self.admin_token_file {
            cfg.admin.token = None;
            cfg.admin.token_file = Some(f.clone());
        }
        if let Some(p) = self.admin_port {
            cfg.admin.port = p;
        }
        if let Some(a) = self.admin_addr {
            cfg.admin.addr = a;
        }
        if let Some(f) = self.log_format {
            cfg.log.format = match f {
                CliLogFormat::Text => LogFormat::Text,
                CliLogFormat::Json => LogFormat::Json,
            };
        }
    }
}
