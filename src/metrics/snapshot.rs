//! Pool gauges read at scrape time from snapshots, so nothing is double-booked on the hot
//! path; optionally also under pgbouncer_exporter's names so existing dashboards work.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

/// Counts of one pool at one moment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PoolSnapshot {
    pub pool: String,
    pub database: String,
    pub user: String,
    pub mode: &'static str,
    pub clients_active: i64,
    pub clients_waiting: i64,
    pub clients_idle: i64,
    pub servers_active: i64,
    pub servers_idle: i64,
    pub servers_login: i64,
    /// Released by their client and being reset (session mode's reset query) before reuse.
    pub servers_used: i64,
    pub pool_size: i64,
    /// Clients allowed to wait for a server (`pool.max_waiting_clients`).
    pub max_waiting: i64,
    pub max_wait_seconds: f64,
    /// `pool.reserve_size` in force for this pool, and its servers open from the reserve.
    pub reserve_size: i64,
    pub servers_reserve: i64,
    #[serde(flatten)]
    pub limits: LimitCounts,
    /// Clients pinned to their server by session state (`pool.session_state: pin`).
    pub clients_pinned: i64,
}

/// The limits a pool shares with the other pools of its database and of its user.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LimitCounts {
    /// Server connections of every pool of the database, and their limit (0: none).
    pub db_connections: i64,
    pub max_db_connections: i64,
    /// Server connections of every pool of the user, and their limit (0: none).
    pub user_connections: i64,
    pub max_user_connections: i64,
    /// Client sessions of the user (`client.max_user_connections` bounds them).
    pub user_clients: i64,
}

/// Which labels a gauge family has.
#[derive(Clone, Copy)]
enum By {
    Pool,
    Database,
    User,
    /// pgbouncer_exporter's (database, user).
    Compat,
}

/// A gauge family and how one snapshot sets it.
type Family = (IntGaugeVec, By, fn(&PoolSnapshot) -> i64);

/// Whatever can list the pools (the pool registry).
pub trait SnapshotSource: Send + Sync {
    fn snapshots(&self) -> Vec<PoolSnapshot>;
}

/// A collector that builds the pool gauges from fresh snapshots on every scrape.
pub struct SnapshotCollector<S: SnapshotSource> {
    source: std::sync::Weak<S>,
    pgbouncer_names: bool,
    descs: Vec<Desc>,
}

impl<S: SnapshotSource> SnapshotCollector<S> {
    pub fn new(source: std::sync::Weak<S>, pgbouncer_names: bool) -> Self {
        let descs = Self::families(pgbouncer_names)
            .iter()
            .flat_map(|(g, _, _)| g.desc().into_iter().cloned())
            .collect();
        SnapshotCollector {
            source,
            pgbouncer_names,
            descs,
        }
    }

    fn families(pgb: bool) -> Vec<Family> {
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let state = ["pool", "database", "user", "state"];
        let pool = ["pool", "database", "user"];
        let mut v: Vec<Family> = vec![
            (
                gauge("droidpool_clients", "Clients by state.", &state),
                By::Pool,
                |_| 0,
            ),
            (
                gauge("droidpool_servers", "Server connections by state.", &state),
                By::Pool,
                |_| 0,
            ),
            (
                gauge(
                    "droidpool_pool_pinned_clients",
                    "Clients pinned to their server by session state (pool.session_state: pin).",
                    &pool,
                ),
                By::Pool,
                |s| s.clients_pinned,
            ),
            (
                gauge(
                    "droidpool_pool_size",
                    "Configured server connections per pool.",
                    &pool,
                ),
                By::Pool,
                |s| s.pool_size,
            ),
            (
                gauge(
                    "droidpool_pool_max_waiting_clients",
                    "Clients allowed to wait for a server per pool; beyond it they get 53300.",
                    &pool,
                ),
                By::Pool,
                |s| s.max_waiting,
            ),
            (
                gauge(
                    "droidpool_pool_reserve_size",
                    "Extra servers a pool may open once a client waited pool.reserve_timeout.",
                    &pool,
                ),
                By::Pool,
                |s| s.reserve_size,
            ),
            (
                gauge(
                    "droidpool_pool_reserve_servers",
                    "Server connections open from the pool's reserve.",
                    &pool,
                ),
                By::Pool,
                |s| s.servers_reserve,
            ),
            (
                gauge(
                    "droidpool_database_server_connections",
                    "Server connections of every pool of the database.",
                    &["database"],
                ),
                By::Database,
                |s| s.limits.db_connections,
            ),
            (
                gauge(
                    "droidpool_database_max_connections",
                    "pool.max_db_connections in force (0: no limit).",
                    &["database"],
                ),
                By::Database,
                |s| s.limits.max_db_connections,
            ),
            (
                gauge(
                    "droidpool_user_server_connections",
                    "Server connections of every pool of the user.",
                    &["user"],
                ),
                By::User,
                |s| s.limits.user_connections,
            ),
            (
                gauge(
                    "droidpool_user_max_connections",
                    "pool.max_user_connections (or the user's own) in force (0: no limit).",
                    &["user"],
                ),
                By::User,
                |s| s.limits.max_user_connections,
            ),
            (
                gauge(
                    "droidpool_user_clients",
                    "Client connections of the user (client.max_user_connections bounds them).",
                    &["user"],
                ),
                By::User,
                |s| s.limits.user_clients,
            ),
        ];
        if pgb {
            let compat = |name: &str, help: &str, f: fn(&PoolSnapshot) -> i64| -> Family {
                (gauge(name, help, &["database", "user"]), By::Compat, f)
            };
            v.push(compat(
                "pgbouncer_pools_client_active_connections",
                "Client connections linked to a server connection.",
                |s| s.clients_active,
            ));
            v.push(compat(
                "pgbouncer_pools_client_waiting_connections",
                "Client connections waiting for a server connection.",
                |s| s.clients_waiting,
            ));
            v.push(compat(
                "pgbouncer_pools_server_active_connections",
                "Server connections linked to a client.",
                |s| s.servers_active,
            ));
            v.push(compat(
                "pgbouncer_pools_server_idle_connections",
                "Server connections idle and ready for a client.",
                |s| s.servers_idle,
            ));
            v.push(compat(
                "pgbouncer_pools_server_login_connections",
                "Server connections logging in.",
                |s| s.servers_login,
            ));
            v.push(compat(
                "pgbouncer_pools_server_used_connections",
                "Server connections released and being reset before reuse.",
                |s| s.servers_used,
            ));
        }
        v
    }
}

impl<S: SnapshotSource> Collector for SnapshotCollector<S> {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(source) = self.source.upgrade() else {
            return Vec::new();
        };
        let snaps = source.snapshots();
        let fams = Self::families(self.pgbouncer_names);
        for s in &snaps {
            let (clients, servers) = (&fams[0].0, &fams[1].0);
            let base = [s.pool.as_str(), s.database.as_str(), s.user.as_str()];
            for (state, v) in [
                ("active", s.clients_active),
                ("waiting", s.clients_waiting),
                ("idle", s.clients_idle),
            ] {
                clients
                    .with_label_values(&[base[0], base[1], base[2], state])
                    .set(v);
            }
            for (state, v) in [
                ("active", s.servers_active),
                ("idle", s.servers_idle),
                ("login", s.servers_login),
                ("used", s.servers_used),
            ] {
                servers
                    .with_label_values(&[base[0], base[1], base[2], state])
                    .set(v);
            }
            for (g, by, f) in &fams[2..] {
                let labels: &[&str] = match by {
                    By::Pool => &base,
                    By::Database => &base[1..2],
                    By::User => &base[2..],
                    By::Compat => &base[1..],
                };
                g.with_label_values(labels).set(f(s));
            }
        }
        fams.iter().flat_map(|(g, _, _)| g.collect()).collect()
    }
}
