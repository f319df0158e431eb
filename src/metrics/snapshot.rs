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
    pub max_wait_seconds: f64,
}

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
            .flat_map(|(g, _)| g.desc().into_iter().cloned())
            .collect();
        SnapshotCollector {
            source,
            pgbouncer_names,
            descs,
        }
    }

    #[allow(clippy::type_complexity)]
    fn families(pgb: bool) -> Vec<(IntGaugeVec, fn(&PoolSnapshot) -> i64)> {
        let ours = |name: &str, help: &str| {
            IntGaugeVec::new(
                Opts::new(name, help),
                &["pool", "database", "user", "state"],
            )
            .expect("valid metric")
        };
        let mut v: Vec<(IntGaugeVec, fn(&PoolSnapshot) -> i64)> = vec![
            (ours("droidpool_clients", "Clients by state."), |_| 0),
            (
                ours("droidpool_servers", "Server connections by state."),
                |_| 0,
            ),
            (
                IntGaugeVec::new(
                    Opts::new(
                        "droidpool_pool_size",
                        "Configured server connections per pool.",
                    ),
                    &["pool", "database", "user"],
                )
                .expect("valid metric"),
                |s| s.pool_size,
            ),
        ];
        if pgb {
            let compat = |name: &str, help: &str| {
                IntGaugeVec::new(Opts::new(name, help), &["database", "user"]).expect("valid")
            };
            v.push((
                compat(
                    "pgbouncer_pools_client_active_connections",
                    "Client connections linked to a server connection.",
                ),
                |s| s.clients_active,
            ));
            v.push((
                compat(
                    "pgbouncer_pools_client_waiting_connections",
                    "Client connections waiting for a server connection.",
                ),
                |s| s.clients_waiting,
            ));
            v.push((
                compat(
                    "pgbouncer_pools_server_active_connections",
                    "Server connections linked to a client.",
                ),
                |s| s.servers_active,
            ));
            v.push((
                compat(
                    "pgbouncer_pools_server_idle_connections",
                    "Server connections idle and ready for a client.",
                ),
                |s| s.servers_idle,
            ));
            v.push((
                compat(
                    "pgbouncer_pools_server_login_connections",
                    "Server connections logging in.",
                ),
                |s| s.servers_login,
            ));
            v.push((
                compat(
                    "pgbouncer_pools_server_used_connections",
                    "Server connections released and being reset before reuse.",
                ),
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
            fams[2].0.with_label_values(&base).set(s.pool_size);
            for (g, f) in &fams[3..] {
                g.with_label_values(&[base[1], base[2]]).set(f(s));
            }
        }
        fams.iter().flat_map(|(g, _)| g.collect()).collect()
    }
}
