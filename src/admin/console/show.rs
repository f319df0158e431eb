//! The admin console's `SHOW` commands, with PgBouncer's column names where the concept is the
//! same (`DATABASES`, `USERS`, `LISTS`, `STATE` and `TOTALS` as PgBouncer 1.18 prints them), so
//! pgbouncer_exporter and the scripts written for PgBouncer read them unchanged.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use crate::metrics::PoolSnapshot;
use crate::shared::Shared;

/// Column names and rows.
pub type Table = (&'static [&'static str], Vec<Vec<String>>);

/// The table `SHOW what` prints (`what` upper-cased); `None` for an unknown one.
pub fn table(shared: &Shared, what: &str) -> Option<Table> {
    Some(match what {
        "POOLS" => (POOLS, pools(shared)),
        "STATS" => (STATS, stats(shared)),
        "CLIENTS" => (CLIENTS, clients(shared)),
        "SERVERS" => (SERVERS, servers(shared)),
        "CONFIG" => (&["key", "value"], config_rows(shared)),
        "VERSION" => (
            &["version"],
            vec![vec![format!("droid-pool {}", env!("CARGO_PKG_VERSION"))]],
        ),
        "DATABASES" => (DATABASES, databases(shared)),
        "USERS" => (USERS, users(shared)),
        "LISTS" => (LISTS, lists(shared)),
        "STATE" => (STATE, state(shared)),
        "TOTALS" => (TOTALS, totals(shared)),
        _ => return None,
    })
}

const POOLS: &[&str] = &[
    "database",
    "user",
    "cl_active",
    "cl_waiting",
    "sv_active",
    "sv_idle",
    "sv_used",
    "sv_login",
    "maxwait",
    "pool_mode",
    "pool_size",
    "reserve_pool",
    "sv_reserve",
    "max_db_connections",
    "db_connections",
    "max_user_connections",
    "user_connections",
];
const STATS: &[&str] = &[
    "database",
    "total_xact_count",
    "total_query_count",
    "total_received",
    "total_sent",
];
const CLIENTS: &[&str] = &[
    "type", "id", "database", "user", "state", "server", "pinned",
];
/// `close_needed`: 1 for a server opened before a `RECONNECT`, closed when released.
const SERVERS: &[&str] = &[
    "type",
    "id",
    "database",
    "user",
    "state",
    "close_needed",
    "client",
];

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
/// PgBouncer 1.18's two columns first, then its later ones (1.24's names).
pub const USERS: &[&str] = &[
    "name",
    "pool_mode",
    "pool_size",
    "reserve_pool_size",
    "max_user_connections",
    "current_connections",
    "max_user_client_connections",
    "current_client_connections",
];
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
                r.settings.reserve_size.to_string(),
                r.settings.mode.as_str().into(),
                crate::pool::PoolSettings::max_db_connections(&cfg, &name).to_string(),
                open.to_string(),
                flag(shared.lifecycle.is_paused_for(&name)),
                flag(shared.lifecycle.is_disabled(&name)),
            ]
        })
        .collect()
}

/// One row per user clients have logged in as.
pub fn users(shared: &Shared) -> Vec<Vec<String>> {
    let cfg = shared.config.load();
    let mut users: BTreeMap<String, PoolSnapshot> = BTreeMap::new();
    for s in snapshots(shared) {
        users.entry(s.user.clone()).or_insert(s);
    }
    users
        .into_iter()
        .map(|(u, s)| {
            let size = cfg.users.get(&u).and_then(|c| c.pool_size);
            vec![
                u,
                s.mode.into(),
                size.unwrap_or(cfg.pool.size).to_string(),
                cfg.pool.reserve_size.to_string(),
                s.limits.max_user_connections.to_string(),
                s.limits.user_connections.to_string(),
                cfg.client.max_user_connections.to_string(),
                s.limits.user_clients.to_string(),
            ]
        })
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
        vec!["draining".into(), yes_no(l.is_draining())],
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

fn pools(shared: &Shared) -> Vec<Vec<String>> {
    snapshots(shared)
        .into_iter()
        .map(|s| {
            vec![
                s.database,
                s.user,
                s.clients_active.to_string(),
                s.clients_waiting.to_string(),
                s.servers_active.to_string(),
                s.servers_idle.to_string(),
                s.servers_used.to_string(),
                s.servers_login.to_string(),
                format!("{}", s.max_wait_seconds as u64),
                s.mode.into(),
                s.pool_size.to_string(),
                s.reserve_size.to_string(),
                s.servers_reserve.to_string(),
                s.limits.max_db_connections.to_string(),
                s.limits.db_connections.to_string(),
                s.limits.max_user_connections.to_string(),
                s.limits.user_connections.to_string(),
            ]
        })
        .collect()
}

fn stats(shared: &Shared) -> Vec<Vec<String>> {
    let m = &shared.metrics.clients;
    vec![vec![
        "*".into(),
        m.transactions.get().to_string(),
        m.queries.get().to_string(),
        m.bytes_in.get().to_string(),
        m.bytes_out.get().to_string(),
    ]]
}

/// `database/user` split back (at the first `/`, as the pool name was joined).
fn db_user(pool: &str) -> (&str, &str) {
    pool.split_once('/').unwrap_or((pool, ""))
}

fn clients(shared: &Shared) -> Vec<Vec<String>> {
    shared
        .cancels
        .clients()
        .into_iter()
        .map(|c| {
            let (db, user) = db_user(&c.pool);
            vec![
                "C".into(),
                c.pid.to_string(),
                db.to_owned(),
                user.to_owned(),
                if c.server.is_some() { "active" } else { "idle" }.into(),
                c.server.map(|s| s.0.to_string()).unwrap_or_default(),
                // Why it keeps its server (pool.session_state: pin), empty if it does not.
                c.pin.unwrap_or_default().into(),
            ]
        })
        .collect()
}

fn servers(shared: &Shared) -> Vec<Vec<String>> {
    let pools = shared.pools.all();
    let generation: HashMap<&str, u64> = pools.iter().map(|p| (p.name(), p.generation())).collect();
    let mut rows = Vec::new();
    for c in shared.cancels.clients() {
        if let Some((id, g)) = c.server {
            let (db, user) = db_user(&c.pool);
            let stale = generation.get(c.pool.as_str()).is_some_and(|now| g != *now);
            rows.push(vec![
                "S".into(),
                id.to_string(),
                db.to_owned(),
                user.to_owned(),
                "active".into(),
                flag(stale),
                c.pid.to_string(),
            ]);
        }
    }
    for p in &pools {
        for (id, stale) in p.idle_servers() {
            rows.push(vec![
                "S".into(),
                id.to_string(),
                p.database().to_owned(),
                p.user().to_owned(),
                "idle".into(),
                flag(stale),
                String::new(),
            ]);
        }
    }
    rows
}

/// Every setting as `section.key = value`, secrets redacted.
fn config_rows(shared: &Shared) -> Vec<Vec<String>> {
    let cfg = shared.config.load();
    let value = serde_yaml::to_value(&*cfg).unwrap_or_default();
    let mut rows = Vec::new();
    if let serde_yaml::Value::Mapping(sections) = value {
        for (section, body) in sections {
            let section = section.as_str().unwrap_or("").to_owned();
            if let serde_yaml::Value::Mapping(keys) = body {
                for (k, v) in keys {
                    let key = format!("{section}.{}", k.as_str().unwrap_or(""));
                    let secret = matches!(
                        key.as_str(),
                        "server.password" | "admin.token" | "auth.auth_password"
                    );
                    let text = if secret && !v.is_null() {
                        "<redacted>".to_owned()
                    } else {
                        serde_yaml::to_string(&v)
                            .unwrap_or_default()
                            .trim()
                            .to_owned()
                    };
                    rows.push(vec![key, text]);
                }
            }
        }
    }
    rows
}
