//! The admin console's `SHOW DATABASES`, `USERS`, `LISTS`, `STATE` and `TOTALS`, with
//! PgBouncer's column names (as PgBouncer 1.18 prints them), so pgbouncer_exporter and the
//! scripts written for PgBouncer read them unchanged.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::metrics::PoolSnapshot;
use crate::shared::Shared;

pub const DATABASES: &[&str] = &[
    "name",
    "host",
    "port",
    "database",
    "force_user",
    "pool_size",
    "min_pool_size",
    "reserve_pool",
    "pool_mode",
    "max_connections",
    "current_connections",
    "paused",
    "disabled",
];
pub const USERS: &[&str] = &["name", "pool_mode"];
pub const LISTS: &[&str] = &["list", "items"];
pub const STATE: &[&str] = &["key", "value"];
pub const TOTALS: &[&str] = &["name", "value"];

fn snapshots(shared: &Shared) -> Vec<PoolSnapshot> {
    shared.pools.all().iter().map(|p| p.snapshot()).collect()
}

fn servers_open(s: &PoolSnapshot) -> i64 {
    s.servers_active + s.servers_idle + s.servers_used + s.servers_login
}

fn flag(b: bool) -> String {
    u8::from(b).to_string()
}

/// One row per `databases:` alias and per database clients have asked for, each as its
/// pools are resolved (the host column: the first of its hosts).
pub fn databases(shared: &Shared) -> Vec<Vec<String>> {
    let cfg = shared.config.load();
    let mut by_db: BTreeMap<String, i64> = cfg.databases.keys().map(|k| (k.clone(), 0)).collect();
    for s in snapshots(shared) {
        *by_db.entry(s.database.clone()).or_insert(0) += servers_open(&s);
    }
    by_db
        .into_iter()
        .map(|(name, open)| {
            let key = crate::pool::PoolKey {
                database: name.clone(),
                user: String::new(),
            };
            let r = crate::pool::resolve(&cfg, &key);
            let (host, port) = r
                .route
                .hosts
                .first()
                .map(|h| (h.host.clone(), h.port.to_string()))
                .unwrap_or_default();
            vec![
                name.clone(),
                host,
                port,
                r.route.dbname,
                cfg.server.user.clone().unwrap_or_default(),
                r.settings.size.to_string(),
                cfg.pool.min_size.to_string(),
                "0".into(),
                r.settings.mode.as_str().into(),
                "0".into(),
                open.to_string(),
                flag(shared.lifecycle.is_paused_for(&name)),
                flag(shared.lifecycle.is_disabled(&name)),
            ]
        })
        .collect()
}

/// One row per user clients have logged in as.
pub fn users(shared: &Shared) -> Vec<Vec<String>> {
    let mut users: BTreeMap<String, &'static str> = BTreeMap::new();
    for s in snapshots(shared) {
        users.entry(s.user.clone()).or_insert(s.mode);
    }
    users
        .into_iter()
        .map(|(u, mode)| vec![u, mode.into()])
        .collect()
}

pub fn lists(shared: &Shared) -> Vec<Vec<String>> {
    let snaps = snapshots(shared);
    let sum = |f: fn(&PoolSnapshot) -> i64| snaps.iter().map(f).sum::<i64>();
    let dbs: std::collections::BTreeSet<_> = snaps.iter().map(|s| &s.database).collect();
    let users: std::collections::BTreeSet<_> = snaps.iter().map(|s| &s.user).collect();
    let clients = shared.counters.clients_open.load(Ordering::Relaxed);
    let rows: [(&str, String); 12] = [
        ("databases", dbs.len().to_string()),
        ("users", users.len().to_string()),
        ("pools", snaps.len().to_string()),
        ("free_clients", "0".into()),
        ("used_clients", clients.to_string()),
        ("login_clients", shared.pending_logins.len().to_string()),
        ("free_servers", sum(|s| s.servers_idle).to_string()),
        (
            "used_servers",
            sum(|s| s.servers_active + s.servers_used).to_string(),
        ),
        ("dns_names", "0".into()),
        ("dns_zones", "0".into()),
        ("dns_queries", "0".into()),
        ("dns_pending", "0".into()),
    ];
    rows.into_iter().map(|(k, v)| vec![k.into(), v]).collect()
}

pub fn state(shared: &Shared) -> Vec<Vec<String>> {
    let l = &shared.lifecycle;
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
    vec![
        vec!["active".into(), yes_no(!l.is_paused())],
        vec!["paused".into(), yes_no(l.is_paused())],
        vec!["suspended".into(), yes_no(false)],
        vec!["draining".into(), yes_no(l.drain.is_cancelled())],
        vec!["paused_databases".into(), l.paused_dbs().join(",")],
    ]
}

/// PgBouncer's totals; times in microseconds; the `avg_` rows are per second over the
/// pooler's uptime (PgBouncer's are over its last stats period).
pub fn totals(shared: &Shared) -> Vec<Vec<String>> {
    let m = &shared.metrics.clients;
    let up = shared.lifecycle.uptime().as_secs_f64().max(1.0);
    let us = |h: &prometheus::Histogram| (h.get_sample_sum() * 1e6) as u64;
    let avg_of = |h: &prometheus::Histogram| {
        let n = h.get_sample_count();
        if n == 0 {
            0
        } else {
            (h.get_sample_sum() * 1e6 / n as f64) as u64
        }
    };
    let per_s = |v: u64| ((v as f64) / up) as u64;
    let (xacts, queries) = (m.transactions.get(), m.queries.get());
    let (recv, sent) = (m.bytes_in.get(), m.bytes_out.get());
    let rows: [(&str, u64); 14] = [
        ("total_xact_count", xacts),
        ("total_query_count", queries),
        ("total_client_bytes", recv),
        ("total_server_bytes", sent),
        ("total_xact_time", us(&m.transaction_seconds)),
        ("total_query_time", us(&m.query_seconds)),
        ("total_wait_time", us(&m.wait_seconds)),
        ("avg_xact_count", per_s(xacts)),
        ("avg_query_count", per_s(queries)),
        ("avg_client_bytes", per_s(recv)),
        ("avg_server_bytes", per_s(sent)),
        ("avg_xact_time", avg_of(&m.transaction_seconds)),
        ("avg_query_time", avg_of(&m.query_seconds)),
        ("avg_wait_time", avg_of(&m.wait_seconds)),
    ];
    rows.into_iter()
        .map(|(k, v)| vec![k.into(), v.to_string()])
        .collect()
}
