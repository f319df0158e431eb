//! The one typed configuration: YAML file + command-line flags, defaults, and validation.
//! Loaded once, immutable afterwards; a reload builds and validates a new value.

mod admin;
mod auth;
mod cli;
mod failover;
pub mod policy;
mod secret;
mod shared_pooler;
mod tls;

pub use admin::AdminConfig;
pub use auth::{AuthConfig, AuthMethod, DEFAULT_AUTH_DATABASE, DEFAULT_AUTH_QUERY};
pub use cli::Cli;
pub use failover::{
    DatabaseConfig, Databases, FailoverConfig, HostAddr, LoadBalanceHosts, TargetSessionAttrs,
};
pub use secret::Secret;
pub use shared_pooler::{
    PeerConfig, UserConfig, CAPABILITIES, MAX_PEER_ID, READS_ADMIN_TOKEN_FILE,
    READS_MAX_DB_CONNECTIONS, READS_MOCK_SECRET_FILE,
};
pub use tls::{ClientTlsConfig, ClientTlsMode, ServerTlsConfig, SslMode, TlsConfig};

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// A backoff, retry budget or breaker setting out of range.
    #[error("invalid configuration: {0}")]
    Resilience(#[from] crate::resilience::ResilienceConfigError),
}

/// How long a client keeps a server connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "snake_case")]
pub enum PoolMode {
    /// A server for the client's whole connection.
    Session,
    /// A server per transaction, released at ReadyForQuery `I`.
    #[default]
    Transaction,
    /// A server per statement; multi-statement transactions are refused.
    Statement,
}

/// What a pool's transactions run under, as one checkout reads it: the pool's mode,
/// `pool.session_state` and `pool.reset_query_always` (its alias's or user's, if set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolRule {
    pub mode: PoolMode,
    pub session_state: SessionState,
    pub reset_always: bool,
}

/// What transaction pooling does with state a client leaves on its server (`pool.session_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Nothing: statements are forwarded as they are (the prepared-statement contract's
    /// behaviour; SQL `SET` or a temp table stays on the server for its next client).
    #[default]
    Off,
    /// A statement that creates session state (a setting, SQL `PREPARE`, a temp table, a
    /// `WITH HOLD` cursor, a session advisory lock, `LOAD`, `LISTEN`) pins the client to its
    /// server until it leaves; the server is then reset (`pool.reset_query`) or closed. In
    /// statement mode those statements are refused (0A000).
    Pin,
    /// Settings (`SET`, `RESET`, `set_config(.., .., false)`) are tracked with PostgreSQL's
    /// transaction semantics and brought onto every server the client gets, and taken off
    /// again for the next client; what cannot be moved pins (transaction mode) or is refused
    /// (statement mode), as with `pin`.
    Track,
}

impl SessionState {
    /// The value named `s` (`off`, `pin`, `track`), as the configuration file spells it.
    pub fn parse(s: &str) -> Option<SessionState> {
        match s {
            "off" => Some(SessionState::Off),
            "pin" => Some(SessionState::Pin),
            "track" => Some(SessionState::Track),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Off => "off",
            SessionState::Pin => "pin",
            SessionState::Track => "track",
        }
    }
}

impl PoolMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub listen: ListenConfig,
    pub server: ServerConfig,
    pub pool: PoolConfig,
    pub client: ClientConfig,
    pub auth: AuthConfig,
    pub tls: TlsConfig,
    pub log: LogConfig,
    pub admin: AdminConfig,
    pub drain: DrainConfig,
    /// Backoff between retries of a server login.
    pub backoff: crate::resilience::BackoffConfig,
    /// How many login retries may be added on top of first attempts.
    pub retry_budget: crate::resilience::BudgetConfig,
    /// The circuit breaker around each server host.
    pub breaker: crate::resilience::BreakerConfig,
    /// Settings of named users that override the `pool` and `client` ones (PgBouncer's
    /// `[users]`): user name → overrides.
    pub users: std::collections::BTreeMap<String, UserConfig>,
    /// This pooler's number among `peers` (1 to 16383; 0: not a peer). Unset, a pooler whose
    /// host name is a `peers` entry's `name` takes that entry's id.
    pub peer_id: u16,
    /// Every pooler that shares cancel keys with this one (this one included): a cancel
    /// request for a key another peer issued is forwarded there.
    pub peers: Vec<PeerConfig>,
    /// Aliases clients connect to (PgBouncer's `[databases]`): each maps to a server
    /// database, its hosts and which of them fit, and optional pool size and mode.
    pub databases: Databases,
    /// What happens while no host fits.
    pub failover: FailoverConfig,
    /// Not a setting: FNV-1a 64 (hex) of the config file as it was read, reported in
    /// `/status` and `droidpool_config_info` so the operator can tell which file a pooler
    /// has loaded (its `status.configHash` is the same hash of what it wrote).
    #[serde(skip)]
    pub file_hash: Option<String>,
}

/// FNV-1a 64 as 16 hex digits: stable across Rust releases and machines (unlike
/// `DefaultHasher`), so the operator and every pooler compute the same hash of a file.
pub fn fnv1a_hex(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What SIGTERM does to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DrainMode {
    /// Serve every client until it disconnects (the application drains itself): sidecars.
    #[default]
    WaitForClients,
    /// Close each client at its next transaction boundary with 57P01: shared poolers.
    TransactionBoundary,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DrainConfig {
    pub mode: DrainMode,
    /// New connections are still accepted this long after SIGTERM (endpoint removal is late).
    #[serde(with = "humantime_serde")]
    pub accept_window: Duration,
    /// The whole drain's deadline; set it a few seconds below terminationGracePeriodSeconds.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// Address of the client listener.
    pub addr: IpAddr,
    pub port: u16,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// Several `host:port`, instead of `host`/`port`: tried in order (or at random, see
    /// `load_balance_hosts`) until one fits `target_session_attrs`.
    pub hosts: Vec<String>,
    /// Which servers fit (libpq's meanings): any, read-write, read-only, primary, standby,
    /// prefer-standby.
    pub target_session_attrs: TargetSessionAttrs,
    /// `disable`: hosts in the order listed; `random`: in a random order per login.
    pub load_balance_hosts: LoadBalanceHosts,
    /// Login user for server connections; defaults to the client's user.
    pub user: Option<String>,
    /// Password for server logins (cleartext, md5 or SCRAM); never printed.
    pub password: Option<Secret>,
    /// File holding the password (first line), as a mounted Kubernetes Secret would be.
    pub password_file: Option<PathBuf>,
    /// Database to connect to; defaults to the client's database.
    pub database: Option<String>,
    /// Send the password when a server asks for it in cleartext over a connection without
    /// TLS (off: such a login is refused, 28000, and the password never crosses in the clear).
    pub allow_cleartext_password: bool,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Close servers idle longer than this (0 = never).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Close servers older than this when they are next idle (0 = never).
    #[serde(with = "humantime_serde")]
    pub lifetime: Duration,
    /// Random extra lifetime per connection, up to this fraction of `lifetime`, so connections
    /// opened together do not expire together.
    pub lifetime_jitter: f64,
    /// Run on an idle server unused for `check_delay` before a client gets it (PgBouncer's
    /// `server_check_query`); a server that fails it (an error, a closed connection, no
    /// answer within `connect_timeout`) is closed and the client gets another one. Empty:
    /// only the passive check (an idle server that closed or spoke is not handed out).
    pub check_query: String,
    /// How long a released server is reused without `check_query` (PgBouncer's
    /// `server_check_delay`; 0 = check every time a server is taken from the idle list).
    #[serde(with = "humantime_serde")]
    pub check_delay: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    pub mode: PoolMode,
    /// Server connections per (database, user) pool.
    pub size: usize,
    /// Server connections kept open even when idle.
    pub min_size: usize,
    /// Clients allowed to wait for a server per pool; beyond it they get 53300 at once.
    pub max_waiting_clients: usize,
    /// Longest wait for a server before the client gets 57014 (0 = wait forever).
    #[serde(with = "humantime_serde")]
    pub query_wait_timeout: Duration,
    /// A query running longer is cancelled (CancelRequest): the client gets the server's
    /// 57014 and keeps its session (0 = off).
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
    /// A client idle inside a transaction longer than this loses its server (closed, so
    /// PostgreSQL rolls back) and is closed with FATAL 25P03 (0 = off).
    #[serde(with = "humantime_serde")]
    pub idle_transaction_timeout: Duration,
    /// A transaction running longer than this is ended the same way, with FATAL 25P04
    /// (0 = off).
    #[serde(with = "humantime_serde")]
    pub transaction_timeout: Duration,
    /// Run on a session-mode server when its client leaves (empty = none).
    pub reset_query: String,
    /// Hand out idle servers in rotation instead of most-recently-used first.
    pub server_round_robin: bool,
    /// Track named prepared statements across server connections (transaction mode).
    pub track_prepared: bool,
    /// Session state in transaction mode: `off` (forwarded as it is) or `pin` (the client
    /// keeps its server until it leaves; the server is reset before anyone else gets it).
    pub session_state: SessionState,
    /// Transaction and statement pooling: a server that another client held is cleaned
    /// (`DISCARD ALL`) before a client runs there, and the client's own settings brought
    /// back, whatever its statements showed (PgBouncer's `server_reset_query_always`): for
    /// state that code no statement names (a trigger, a rule, a view) makes.
    pub reset_query_always: bool,
    /// Prepared statements kept per server connection before the least recently used is closed.
    pub max_prepared_statements: usize,
    /// Named statements one client may keep (tracking on); the Parse of one more new name is
    /// refused with 53400 and the session stays usable.
    pub max_client_prepared_statements: usize,
    /// Server logins in flight at once per pool, so a recovering database sees no burst.
    pub max_connecting: usize,
    /// How long a forwarded CancelRequest may take, until the server closes the cancel
    /// connection (it has acted on it); then the pooler gives up and closes the client's
    /// cancel connection (PgBouncer's `cancel_wait_timeout`; 0 = no limit).
    #[serde(with = "humantime_serde")]
    pub cancel_wait_timeout: Duration,
    /// Server connections across all pools of one database (0 = no limit). A pool at the
    /// limit waits as a full pool does (bounded by `query_wait_timeout`).
    pub max_db_connections: usize,
    /// Server connections across all pools of one user (0 = no limit).
    pub max_user_connections: usize,
    /// Extra server connections a pool may open once a client has waited `reserve_timeout`
    /// (PgBouncer's `reserve_pool_size`); they close when released with nobody waiting.
    pub reserve_size: usize,
    /// How long a client waits before the reserve opens (`reserve_pool_timeout`).
    #[serde(with = "humantime_serde")]
    pub reserve_timeout: Duration,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Client connections accepted at once; beyond it: 53300 and close.
    pub max_connections: usize,
    /// Client connections per user (0 = no limit); beyond it 53300 "too many connections for
    /// role", as PostgreSQL answers.
    pub max_user_connections: usize,
    /// Connections accepted and not yet authenticated, in all. Beyond it the oldest pending
    /// login is closed with 53300, so sockets that never log in cannot lock real clients out.
    pub max_pending_logins: usize,
    /// Connections not yet authenticated from one address; beyond it a new one from there
    /// gets 53300 and is closed at once.
    pub max_pending_logins_per_ip: usize,
    /// A client that has not finished startup by then is dropped.
    #[serde(with = "humantime_serde")]
    pub login_timeout: Duration,
    /// Close clients idle (no transaction) longer than this (0 = never).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Largest message the pooler holds whole, in bytes: the ones it must rewrite or keep (a
    /// tracked Parse). A larger one gets 08P01 and a close. Messages passed on unchanged (rows,
    /// COPY data, queries, binds) stream through in pieces whatever their size.
    pub max_message_size: usize,
    /// TCP keepalive on client sockets (PgBouncer's `tcp_keepalive`), so a client whose
    /// network path died is noticed while it holds a server: probes after `tcp_keepidle` of
    /// silence, every `tcp_keepintvl`, `tcp_keepcnt` of them unanswered close it.
    pub tcp_keepalive: bool,
    #[serde(with = "humantime_serde")]
    pub tcp_keepidle: Duration,
    #[serde(with = "humantime_serde")]
    pub tcp_keepintvl: Duration,
    pub tcp_keepcnt: u32,
    /// TCP_USER_TIMEOUT on client sockets: data (or keepalive probes) unacknowledged this
    /// long closes the connection (0 = the kernel's default).
    #[serde(with = "humantime_serde")]
    pub tcp_user_timeout: Duration,
    /// How much a session reads from either side at a time, in bytes. A message larger than
    /// this is forwarded in pieces as it arrives unless it must be held whole; while the
    /// receiving side does not read, the sending side is not read either. A busy session
    /// holds a few of these buffers; an idle one holds none.
    pub buffer_size: usize,
    /// Largest startup packet accepted.
    pub max_startup_packet: usize,
    /// Most parameters accepted in a startup packet.
    pub max_startup_params: usize,
    /// Sessions that keep their buffers and working future between transactions: about
    /// 1 KiB each after small requests, at most 64 KiB per buffer (larger ones are always
    /// given back). The rest take them fresh per transaction. Applies to new clients. At
    /// most 65,535 are kept (a larger value counts as that).
    pub warm_sessions: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
    /// Which `[POOL] ...` event lines go to stdout.
    pub events: EventLevel,
}

/// Which `[POOL] ...` event lines are printed. `true` and `false` (the older form) mean
/// `all` and `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventLevel {
    /// Every line, two per transaction among them (the CLI's default; its test kit reads them).
    #[default]
    All,
    /// Listening, connects, disconnects, prepares and the shutdown summary; not the
    /// per-transaction `uses server` / `released server` lines (those facts are in metrics).
    Lifecycle,
    Off,
}

impl EventLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            EventLevel::All => "all",
            EventLevel::Lifecycle => "lifecycle",
            EventLevel::Off => "off",
        }
    }
}

impl Serialize for EventLevel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Flag(bool),
            Name(String),
        }
        match Given::deserialize(d)? {
            Given::Flag(true) => Ok(EventLevel::All),
            Given::Flag(false) => Ok(EventLevel::Off),
            Given::Name(n) => match n.as_str() {
                "all" => Ok(EventLevel::All),
                "lifecycle" => Ok(EventLevel::Lifecycle),
                "off" => Ok(EventLevel::Off),
                other => Err(serde::de::Error::custom(format!(
                    "log.events: {other:?} is not one of all, lifecycle, off (or true, false)"
                ))),
            },
        }
    }
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            mode: DrainMode::WaitForClients,
            accept_window: Duration::from_secs(5),
            timeout: Duration::from_secs(25),
        }
    }
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            addr: IpAddr::from([127, 0, 0, 1]),
            port: 6432,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 5432,
            hosts: Vec::new(),
            target_session_attrs: TargetSessionAttrs::Any,
            load_balance_hosts: LoadBalanceHosts::Disable,
            user: None,
            password: None,
            password_file: None,
            database: None,
            allow_cleartext_password: false,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(600),
            lifetime: Duration::from_secs(3600),
            lifetime_jitter: 0.1,
            check_query: "select 1".into(),
            check_delay: Duration::from_secs(30),
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            mode: PoolMode::Transaction,
            size: 20,
            min_size: 0,
            max_waiting_clients: 10_000,
            query_wait_timeout: Duration::from_secs(30),
            query_timeout: Duration::ZERO,
            idle_transaction_timeout: Duration::ZERO,
            transaction_timeout: Duration::ZERO,
            reset_query: "DISCARD ALL".into(),
            server_round_robin: false,
            track_prepared: false,
            session_state: SessionState::Off,
            reset_query_always: false,
            max_prepared_statements: 200,
            max_client_prepared_statements: 1000,
            max_connecting: 2,
            cancel_wait_timeout: Duration::from_secs(10),
            max_db_connections: 0,
            max_user_connections: 0,
            reserve_size: 0,
            reserve_timeout: Duration::from_secs(5),
        }
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_connections: 10_000,
            max_user_connections: 0,
            max_pending_logins: 1024,
            max_pending_logins_per_ip: 512,
            login_timeout: Duration::from_secs(15),
            idle_timeout: Duration::ZERO,
            max_message_size: 64 << 20,
            buffer_size: 16 << 10,
            tcp_keepalive: true,
            tcp_keepidle: Duration::from_secs(30),
            tcp_keepintvl: Duration::from_secs(10),
            tcp_keepcnt: 3,
            tcp_user_timeout: Duration::from_secs(60),
            max_startup_packet: 10_000,
            max_startup_params: 64,
            warm_sessions: 1024,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            events: EventLevel::All,
        }
    }
}

impl Config {
    /// The client authentication method in force (unset: by the listen address).
    pub fn auth_method(&self) -> AuthMethod {
        self.auth.method_on(self.listen.addr)
    }

    /// The method in force for one user (`auth.user_methods`, else [`Config::auth_method`]).
    pub fn auth_method_for(&self, user: &str) -> AuthMethod {
        self.auth.method_for(user, self.listen.addr)
    }

    /// Parses a YAML document (an empty one gives the defaults).
    pub fn from_yaml(text: &str, path: &std::path::Path) -> Result<Config, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        serde_yaml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Loads the file named by `--config` (if any), applies the flags, resolves the password file
    /// and validates the result.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut cfg = match &cli.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                let mut cfg = Config::from_yaml(&text, path)?;
                cfg.file_hash = Some(fnv1a_hex(text.as_bytes()));
                cfg
            }
            None => Config::default(),
        };
        cli.apply(&mut cfg);
        cfg.resolve_password()?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn resolve_password(&mut self) -> Result<(), ConfigError> {
        if let (None, Some(path)) = (&self.server.password, &self.server.password_file) {
            self.server.password = Some(read_secret_file(path)?);
        }
        if let (None, Some(path)) = (&self.auth.auth_password, &self.auth.auth_password_file) {
            self.auth.auth_password = Some(read_secret_file(path)?);
        }
        if let (None, Some(path)) = (&self.admin.token, &self.admin.token_file) {
            let token = read_secret_file(path)?;
            let trimmed = token.expose().trim();
            self.admin.token = (!trimmed.is_empty()).then(|| Secret::new(trimmed.to_owned()));
        }
        if let (None, Some(path)) = (&self.auth.mock_secret, &self.auth.mock_secret_file) {
            self.auth.mock_secret = Some(read_secret_file(path)?);
        }
        Ok(())
    }

    /// Refuses settings that cannot work together, saying why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        let p = &self.pool;
        if p.size == 0 {
            return bad("pool.size must be at least 1".into());
        }
        if p.min_size > p.size {
            return bad(format!(
                "pool.min_size ({}) exceeds pool.size ({})",
                p.min_size, p.size
            ));
        }
        if p.track_prepared && p.max_prepared_statements == 0 {
            return bad("pool.max_prepared_statements must be at least 1".into());
        }
        if !p.query_wait_timeout.is_zero() && self.server.connect_timeout >= p.query_wait_timeout {
            return bad(format!(
                "server.connect_timeout ({:?}) must be shorter than pool.query_wait_timeout ({:?}): \
                 timeouts must shrink down the stack",
                self.server.connect_timeout, p.query_wait_timeout
            ));
        }
        if self.server.connect_timeout.is_zero() {
            return bad("server.connect_timeout must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.server.lifetime_jitter) {
            return bad("server.lifetime_jitter must be between 0 and 1".into());
        }
        if self.server.check_query.contains('\0') {
            return bad("server.check_query must not contain a NUL character".into());
        }
        self.admin.validate().map_err(ConfigError::Invalid)?;
        let c = &self.client;
        if c.max_message_size < 1024 {
            return bad("client.max_message_size must be at least 1024".into());
        }
        if !(1024..=16 << 20).contains(&c.buffer_size) {
            return bad("client.buffer_size must be between 1024 and 16777216".into());
        }
        if c.tcp_keepalive
            && (c.tcp_keepidle.as_secs() == 0
                || c.tcp_keepintvl.as_secs() == 0
                || c.tcp_keepcnt == 0)
        {
            return bad(
                "client.tcp_keepidle and client.tcp_keepintvl must be at least 1s and \
                 client.tcp_keepcnt at least 1"
                    .into(),
            );
        }
        if p.max_client_prepared_statements == 0 {
            return bad("pool.max_client_prepared_statements must be at least 1".into());
        }
        if c.max_startup_packet < 64 || c.max_startup_packet > 1 << 20 {
            return bad("client.max_startup_packet must be between 64 and 1048576".into());
        }
        for check in [
            self.backoff.validate(),
            self.retry_budget.validate(),
            self.breaker.validate(),
        ] {
            check?;
        }
        if p.max_connecting == 0 {
            return bad("pool.max_connecting must be at least 1".into());
        }
        self.validate_limits()?;
        self.validate_peers()?;
        if self.drain.accept_window >= self.drain.timeout {
            return bad(format!(
                "drain.accept_window ({:?}) must be shorter than drain.timeout ({:?})",
                self.drain.accept_window, self.drain.timeout
            ));
        }
        if c.max_connections == 0 {
            return bad("client.max_connections must be at least 1".into());
        }
        if c.max_pending_logins == 0 || c.max_pending_logins_per_ip == 0 {
            return bad(
                "client.max_pending_logins and client.max_pending_logins_per_ip must be at least 1"
                    .into(),
            );
        }
        self.auth
            .validate(self.listen.addr)
            .map_err(ConfigError::Invalid)?;
        self.tls.validate().map_err(ConfigError::Invalid)?;
        failover::validate(self).map_err(ConfigError::Invalid)?;
        if self.auth_method() == AuthMethod::Trust
            && !self.listen.addr.is_loopback()
            && !self.auth.allow_trust_on_network
        {
            return bad(format!(
                "auth.method trust on non-loopback address {} would let anyone on the network in; \
                 listen on loopback or set auth.allow_trust_on_network: true",
                self.listen.addr
            ));
        }
        Ok(())
    }
}

/// The first line of a password file (a mounted Secret key), as a secret.
pub fn read_secret_file(path: &std::path::Path) -> Result<Secret, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(Secret::new(text.lines().next().unwrap_or("").to_owned()))
}

/// The configuration in force, replaced whole by a reload; readers take a snapshot. Its
/// generation counts the replacements, so a reader that keeps what it derived from one
/// snapshot knows without a lock whether it is still current.
#[derive(Debug)]
pub struct ConfigCell {
    cell: std::sync::RwLock<std::sync::Arc<Config>>,
    generation: std::sync::atomic::AtomicU64,
}

impl ConfigCell {
    pub fn new(c: Config) -> Self {
        ConfigCell {
            cell: std::sync::RwLock::new(std::sync::Arc::new(c)),
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn load(&self) -> std::sync::Arc<Config> {
        self.cell.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn store(&self, c: std::sync::Arc<Config>) {
        *self.cell.write().unwrap_or_else(|p| p.into_inner()) = c;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Read before [`ConfigCell::load`]: a snapshot loaded after it is at least this new.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("droid-pool").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn flags_override_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "pool:\n  size: 7\n  mode: session\nserver:\n  port: 1234\n  password: hunter2\n",
        )
        .unwrap();
        let cli = parse(&["--config", path.to_str().unwrap(), "--pool-size", "3"]);
        let cfg = Config::load(&cli).unwrap();
        assert_eq!(cfg.pool.size, 3);
        assert_eq!(cfg.pool.mode, PoolMode::Session);
        assert_eq!(cfg.server.port, 1234);
        assert!(!format!("{cfg:?}").contains("hunter2"));
    }

    #[test]
    fn reference_cli_is_accepted() {
        let cli = parse(&[
            "--port",
            "6432",
            "--server-port",
            "5433",
            "--pool-size",
            "2",
            "--mode",
            "transaction",
            "--track-prepared",
        ]);
        let cfg = Config::load(&cli).unwrap();
        assert_eq!(cfg.server.port, 5433);
        assert_eq!(cfg.pool.size, 2);
        assert!(cfg.pool.track_prepared);
    }

    #[test]
    fn trust_on_network_refused() {
        // Unset off loopback, the method is scram-sha-256, which needs a credential source.
        let cli = parse(&["--listen-addr", "0.0.0.0"]);
        let err = Config::load(&cli).unwrap_err().to_string();
        assert!(
            err.contains("scram-sha-256") && err.contains("users_file"),
            "{err}"
        );
        let load = |yaml: &str| {
            let cfg = Config::from_yaml(yaml, "x".as_ref()).unwrap();
            cfg.validate().map(|()| cfg).map_err(|e| e.to_string())
        };
        let err = load("listen:\n  addr: 0.0.0.0\nauth:\n  method: trust\n").unwrap_err();
        assert!(err.contains("allow_trust_on_network"), "{err}");
        let cfg =
            load("listen:\n  addr: 0.0.0.0\nauth:\n  allow_trust_on_network: true\n").unwrap();
        assert_eq!(cfg.auth_method(), AuthMethod::Trust);
        assert_eq!(Config::default().auth_method(), AuthMethod::Trust);
        // Per user: trust off loopback is refused by name; other methods need a source.
        let err = load(
            "listen:\n  addr: 0.0.0.0\nauth:\n  users_file: /u\n  user_methods:\n    mon: trust\n",
        )
        .unwrap_err();
        assert!(
            err.contains("user_methods.mon") && err.contains("allow_trust_on_network"),
            "{err}"
        );
        let err = load("auth:\n  user_methods:\n    old: md5\n").unwrap_err();
        assert!(
            err.contains("user_methods.old") && err.contains("users_file"),
            "{err}"
        );
        let cfg = load("auth:\n  users_file: /u\n  user_methods:\n    old: md5\n").unwrap();
        assert_eq!(cfg.auth_method_for("old"), AuthMethod::Md5);
        assert_eq!(cfg.auth_method_for("new"), AuthMethod::Trust);
    }

    #[test]
    fn auth_and_tls_combinations() {
        let load = |yaml: &str| {
            let cfg = Config::from_yaml(yaml, "x".as_ref()).unwrap();
            cfg.validate().map_err(|e| e.to_string())
        };
        let err = load("auth:\n  method: scram-sha-256\n").unwrap_err();
        assert!(err.contains("users_file"), "{err}");
        load("auth:\n  method: md5\n  users_file: /u\nlisten:\n  addr: 0.0.0.0\n").unwrap();
        let err = load("tls:\n  client:\n    mode: require\n").unwrap_err();
        assert!(err.contains("cert_file"), "{err}");
        let err = load("tls:\n  server:\n    sslmode: verify-full\n").unwrap_err();
        assert!(err.contains("ca_file"), "{err}");
        let err = load("auth:\n  auth_user: a\n  auth_query: select 1\n").unwrap_err();
        assert!(err.contains("$1"), "{err}");
        let cfg = Config::from_yaml("auth:\n  auth_password: s3cr3t\n", "x".as_ref()).unwrap();
        assert!(!format!("{cfg:?}").contains("s3cr3t"));
    }

    #[test]
    fn check_query_and_cancel_wait_timeout() {
        let cfg = Config::from_yaml(
            "server:\n  check_query: \"\"\n  check_delay: 0s\npool:\n  cancel_wait_timeout: 0s\n",
            "x".as_ref(),
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.server.check_query, "");
        assert_eq!(cfg.pool.cancel_wait_timeout, Duration::ZERO);
        let mut nul = Config::default();
        nul.server.check_query = "select 1\0".into();
        let err = nul.validate().unwrap_err().to_string();
        assert!(err.contains("server.check_query"), "{err}");
    }

    #[test]
    fn inverted_timeouts_refused() {
        let mut cfg = Config::default();
        cfg.server.connect_timeout = Duration::from_secs(60);
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn unknown_keys_rejected() {
        assert!(Config::from_yaml("pool:\n  sise: 3\n", "x".as_ref()).is_err());
        let cfg = Config::from_yaml("client:\n  login_timeout: 250ms\n", "x".as_ref()).unwrap();
        assert_eq!(cfg.client.login_timeout, Duration::from_millis(250));
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// The documented example holds every setting at its default.
    #[test]
    fn documented_example_is_the_defaults() {
        let text = include_str!("../../docs/droid-pool.example.yaml");
        let cfg = Config::from_yaml(text, "example".as_ref()).unwrap();
        assert_eq!(cfg, Config::default());
        cfg.validate().unwrap();
    }

    #[test]
    fn event_levels_take_names_and_the_older_booleans() {
        let level = |v: &str| Config::from_yaml(&format!("log:\n  events: {v}\n"), "x".as_ref());
        assert_eq!(
            level("lifecycle").unwrap().log.events,
            EventLevel::Lifecycle
        );
        assert_eq!(level("all").unwrap().log.events, EventLevel::All);
        assert_eq!(level("off").unwrap().log.events, EventLevel::Off);
        assert_eq!(level("true").unwrap().log.events, EventLevel::All);
        assert_eq!(level("false").unwrap().log.events, EventLevel::Off);
        let err = level("some").unwrap_err().to_string();
        assert!(err.contains("all, lifecycle, off"), "{err}");
    }
}
