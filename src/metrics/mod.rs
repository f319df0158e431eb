//! The pooler's metrics: an owned `prometheus::Registry` (never the global default) and one
//! struct per subsystem. Hot-path counters are atomics; pool gauges are read from snapshots at
//! scrape time (see `snapshot`). Labels are bounded: pool, result, reason, class, state.

mod snapshot;

pub use snapshot::{LimitCounts, PoolSnapshot, SnapshotCollector, SnapshotSource};

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// Every metric of one pooler instance.
pub struct Metrics {
    pub registry: Registry,
    pub clients: ClientMetrics,
    pub servers: ServerMetrics,
    pub prepared: PreparedMetrics,
    pub retries: RetryMetrics,
    pub lifecycle: LifecycleMetrics,
    pub admin: AdminMetrics,
}

/// The admin server's own load: what a flood of its port costs and what it was refused.
pub struct AdminMetrics {
    /// Admin connections open now.
    pub connections: IntGauge,
    /// Admin connections the pooler closed, by reason (evicted: the oldest idle one, for a
    /// newer one over `admin.max_connections`; refused: over the cap with none idle; idle:
    /// `admin.idle_timeout`).
    pub closed: IntCounterVec,
    /// Requests to the control routes by result (ok, off, unauthenticated, forbidden,
    /// cross_site, bad_body).
    pub control: IntCounterVec,
}

pub struct ClientMetrics {
    pub connections: IntCounter,
    /// Clients refused or shed, by reason (too_many_clients, waiting_full, wait_timeout,
    /// circuit_open, shutting_down).
    pub shed: IntCounterVec,
    /// Clients pinned to their server by session state (`pool.session_state: pin`), by reason.
    pub session_pins: IntCounterVec,
    /// Session state the pooler brought onto a client's new server
    /// (`pool.session_state: track`), by kind (setting: one per setting replayed).
    pub session_replays: IntCounterVec,
    /// Server sessions cleaned before a client ran there (`pool.session_state` unseen work,
    /// `pool.reset_query_always`) or after a pinned client left, by reason.
    pub session_resets: IntCounterVec,
    /// Notifications from a pool's listening connection, by result (queued for a client,
    /// dropped from a full queue).
    pub notifications: IntCounterVec,
    /// Errors the pooler itself answered, by SQLSTATE class (two characters).
    pub pooler_errors: IntCounterVec,
    /// What the pooler's timeouts did, by timeout (query: cancelled; idle_transaction and
    /// transaction: client and server closed).
    pub timeouts: IntCounterVec,
    /// CancelRequests the pooler sent to servers (for clients, its timeouts, KILL, the drain)
    /// by what became of them (done: the server closed the cancel connection, it acted;
    /// timeout: `pool.cancel_wait_timeout` passed first; failed: it could not be reached).
    pub server_cancels: IntCounterVec,
    /// Client authentications by method and result (ok, failed).
    pub auth: IntCounterVec,
    /// auth_query lookups by result (cached, found, missing, error).
    pub auth_lookups: IntCounterVec,
    /// First packets refused (bad_length: closed without a reply, as PostgreSQL does;
    /// unsupported_protocol, malformed: PostgreSQL's FATAL).
    pub bad_startup: IntCounterVec,
    /// CancelRequests received, by result (local, forwarded, forward_failed, unknown).
    pub cancels: IntCounterVec,
    pub transactions: IntCounter,
    pub queries: IntCounter,
    pub bytes_in: IntCounter,
    pub bytes_out: IntCounter,
    pub wait_seconds: Histogram,
    /// From a request to the pool's immediate refusal of it (circuit open, waiting full),
    /// measured in the pooler: what a refusal costs whatever load the clients' machine has.
    pub refusal_seconds: Histogram,
    pub transaction_seconds: Histogram,
    pub query_seconds: Histogram,
    /// Idle clients kept without a task of their own (`client::park`).
    pub parked: IntGauge,
}

pub struct ServerMetrics {
    /// Server login attempts by result (success, failure, config_error).
    pub connects: IntCounterVec,
    /// Server connections closed, by why (`pool::CloseReason`).
    pub closed: IntCounterVec,
    /// 1 for each host's role as last learned (`primary` or `standby`), 0 for the other.
    pub role: IntGaugeVec,
}

pub struct PreparedMetrics {
    pub kept: IntGauge,
    pub replays: IntCounter,
    pub evictions: IntCounter,
    pub plan_retries: IntCounter,
}

pub struct RetryMetrics {
    pub retries: IntCounter,
    pub overflow: IntCounter,
    /// 0 closed, 1 half-open, 2 open.
    pub breaker_state: IntGaugeVec,
    pub breaker_transitions: IntCounterVec,
}

impl LifecycleMetrics {
    /// The config file in force changed (or was first read).
    pub fn set_config_hash(&self, hash: Option<&str>) {
        self.config_info.reset();
        if let Some(h) = hash {
            self.config_info.with_label_values(&[h]).set(1);
        }
    }
}

pub struct LifecycleMetrics {
    pub config_generation: IntGauge,
    /// 1 for the hash of the config file in force (`hash` label; none without a file).
    config_info: IntGaugeVec,
    pub reloads: IntCounterVec,
    /// 0 serving, 1 draining (accepting), 2 draining (listener closed), 3 stopped.
    pub drain_state: IntGauge,
    /// Clients by how the drain ended them (completed, closed_at_boundary, cancelled, aborted).
    pub drain_clients: IntCounterVec,
    pub paused: IntGauge,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("metric names are valid constants");
    r.register(Box::new(c.clone()))
        .expect("each metric is registered once");
    c
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .expect("metric names are valid constants");
    r.register(Box::new(c.clone()))
        .expect("each metric is registered once");
    c
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("metric names are valid constants");
    r.register(Box::new(g.clone()))
        .expect("each metric is registered once");
    g
}

fn histogram(r: &Registry, name: &str, help: &str) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()))
        .expect("metric names are valid constants");
    r.register(Box::new(h.clone()))
        .expect("each metric is registered once");
    h
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let clients = ClientMetrics {
            connections: counter(
                &r,
                "droidpool_client_connections_total",
                "Client connections accepted.",
            ),
            session_pins: counter_vec(
                &r,
                "droidpool_session_pins_total",
                "Clients pinned to their server by the session state they created, by reason.",
                &["reason"],
            ),
            session_replays: counter_vec(
                &r,
                "droidpool_session_replays_total",
                "Session state replayed onto a client's new server, by kind.",
                &["kind"],
            ),
            session_resets: counter_vec(
                &r,
                "droidpool_session_resets_total",
                "Server sessions cleaned before another client ran there, by reason (opaque: work the pooler could not see into; always: pool.reset_query_always; leave: a pinned client left).",
                &["reason"],
            ),
            notifications: counter_vec(
                &r,
                "droidpool_notifications_total",
                "Notifications a pool's listening connection received, per subscribed client, by result.",
                &["result"],
            ),
            shed: counter_vec(
                &r,
                "droidpool_clients_shed_total",
                "Clients refused or shed by the pooler, by reason.",
                &["reason"],
            ),
            pooler_errors: counter_vec(
                &r,
                "droidpool_pooler_errors_total",
                "Errors answered by the pooler itself, by SQLSTATE class.",
                &["class"],
            ),
            timeouts: counter_vec(
                &r,
                "droidpool_timeouts_total",
                "Queries cancelled and transactions ended by the pooler's timeouts, by timeout.",
                &["timeout"],
            ),
            server_cancels: counter_vec(
                &r,
                "droidpool_server_cancels_total",
                "CancelRequests sent to servers (for clients, timeouts, KILL, the drain), by result.",
                &["result"],
            ),
            auth: counter_vec(
                &r,
                "droidpool_client_auth_total",
                "Client password authentications, by method and result.",
                &["method", "result"],
            ),
            auth_lookups: counter_vec(
                &r,
                "droidpool_auth_query_lookups_total",
                "auth_query lookups of users missing from the files, by result.",
                &["result"],
            ),
            bad_startup: counter_vec(
                &r,
                "droidpool_client_bad_startup_total",
                "First packets refused by reason (bad_length ones closed without a reply).",
                &["reason"],
            ),
            cancels: counter_vec(
                &r,
                "droidpool_cancel_requests_total",
                "CancelRequests received: for a client here (local), sent on to the peer that \
                 issued the key (forwarded, forward_failed), or for no known key (unknown).",
                &["result"],
            ),
            transactions: counter(
                &r,
                "droidpool_transactions_total",
                "Transactions completed through the pooler (server released).",
            ),
            queries: counter(
                &r,
                "droidpool_queries_total",
                "Requests completed with ReadyForQuery.",
            ),
            bytes_in: counter(
                &r,
                "droidpool_client_bytes_received_total",
                "Bytes received from clients.",
            ),
            bytes_out: counter(
                &r,
                "droidpool_client_bytes_sent_total",
                "Bytes sent to clients.",
            ),
            wait_seconds: histogram(
                &r,
                "droidpool_wait_seconds",
                "Time clients waited for a server connection.",
            ),
            refusal_seconds: histogram(
                &r,
                "droidpool_refusal_seconds",
                "Time from a request to the pool's immediate refusal of it (57P03, 53300).",
            ),
            transaction_seconds: histogram(
                &r,
                "droidpool_transaction_duration_seconds",
                "Time a client held a server connection.",
            ),
            query_seconds: histogram(
                &r,
                "droidpool_query_duration_seconds",
                "Time from a request to its ReadyForQuery.",
            ),
            parked: gauge(
                &r,
                "droidpool_clients_parked",
                "Idle clients kept without a task of their own (plain TCP, holding no server).",
            ),
        };
        let servers = ServerMetrics {
            connects: counter_vec(
                &r,
                "droidpool_server_connect_attempts_total",
                "Server login attempts by result.",
                &["result"],
            ),
            closed: counter_vec(
                &r,
                "droidpool_servers_closed_total",
                "Server connections closed, by reason.",
                &["reason"],
            ),
            role: gauge_vec(
                &r,
                "droidpool_server_role",
                "1 for the role each server host was last found in (primary or standby), 0 for the other.",
                &["host", "role"],
            ),
        };
        let prepared = PreparedMetrics {
            kept: gauge(
                &r,
                "droidpool_prepared_statements_kept",
                "Prepared statements kept for clients.",
            ),
            replays: counter(
                &r,
                "droidpool_prepared_replays_total",
                "Kept Parse messages replayed on a server that lacked them.",
            ),
            evictions: counter(
                &r,
                "droidpool_prepared_evictions_total",
                "Server copies closed to stay within max_prepared_statements.",
            ),
            plan_retries: counter(
                &r,
                "droidpool_prepared_plan_retries_total",
                "Transparent retries after a cached plan changed result type.",
            ),
        };
        let retries = RetryMetrics {
            retries: counter(
                &r,
                "droidpool_retries_total",
                "Server connection attempts that were retries.",
            ),
            overflow: counter(
                &r,
                "droidpool_retry_overflow_total",
                "Retries not made because the retry budget was exhausted.",
            ),
            breaker_state: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "droidpool_breaker_state",
                        "Circuit breaker state per server host: 0 closed, 1 half-open, 2 open.",
                    ),
                    &["pool"],
                )
                .expect("valid metric");
                r.register(Box::new(g.clone())).expect("registered once");
                g
            },
            breaker_transitions: counter_vec(
                &r,
                "droidpool_breaker_transitions_total",
                "Circuit breaker transitions by target state.",
                &["state"],
            ),
        };
        let admin = AdminMetrics {
            connections: gauge(
                &r,
                "droidpool_admin_connections",
                "Admin HTTP connections open.",
            ),
            closed: counter_vec(
                &r,
                "droidpool_admin_connections_closed_total",
                "Admin HTTP connections closed by the pooler, by reason.",
                &["reason"],
            ),
            control: counter_vec(
                &r,
                "droidpool_admin_control_requests_total",
                "Requests to the admin control routes (POST /console, /reload, /drain) by result.",
                &["result"],
            ),
        };
        let lifecycle = LifecycleMetrics {
            config_generation: gauge(&r, "droidpool_config_generation", "Generation of the configuration in force (1 at start)."),
            config_info: gauge_vec(&r, "droidpool_config_info", "1 for the FNV-1a hash of the config file in force (the PoolConfig status.configHash when the operator wrote it).", &["hash"]),
            reloads: counter_vec(&r, "droidpool_config_reloads_total", "Configuration reloads by result.", &["result"]),
            drain_state: gauge(&r, "droidpool_drain_state", "0 serving, 1 draining and accepting, 2 draining with the listener closed, 3 stopped."),
            drain_clients: counter_vec(&r, "droidpool_drain_clients_total", "Clients ended by a drain, by outcome.", &["outcome"]),
            paused: gauge(&r, "droidpool_paused", "1 while PAUSE holds new transactions."),
        };
        lifecycle.config_generation.set(1);
        Metrics {
            registry: r,
            clients,
            servers,
            prepared,
            retries,
            lifecycle,
            admin,
        }
    }

    /// Counts an error the pooler answered, by SQLSTATE class.
    pub fn pooler_error(&self, sqlstate: &str) {
        let class = sqlstate.get(..2).unwrap_or("XX");
        self.clients.pooler_errors.with_label_values(&[class]).inc();
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        Self::encode(&self.registry.gather())
    }

    /// As [`Metrics::render`], with each `user` label (and the user part of the `pool` label
    /// beside it, `database/user`) replaced by `pseudonym(user)`.
    pub fn render_redacted(&self, pseudonym: &dyn Fn(&str) -> String) -> String {
        let mut families = self.registry.gather();
        for family in &mut families {
            for metric in family.mut_metric() {
                let labels = metric.mut_label();
                let Some(user) = labels
                    .iter()
                    .find(|l| l.name() == "user")
                    .map(|l| l.value().to_owned())
                else {
                    continue;
                };
                let alias = pseudonym(&user);
                for label in labels.iter_mut() {
                    if label.name() == "user" {
                        label.set_value(alias.clone());
                    } else if label.name() == "pool" {
                        if let Some(db) = label.value().strip_suffix(&format!("/{user}")) {
                            let renamed = format!("{db}/{alias}");
                            label.set_value(renamed);
                        }
                    }
                }
            }
        }
        Self::encode(&families)
    }

    fn encode(families: &[prometheus::proto::MetricFamily]) -> String {
        use prometheus::Encoder;
        let mut out = Vec::new();
        let enc = prometheus::TextEncoder::new();
        if let Err(e) = enc.encode(families, &mut out) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    /// The shipped Grafana dashboard only queries metrics this module defines.
    #[test]
    fn dashboard_uses_defined_metrics() {
        let dashboard = include_str!("../../deploy/grafana/droid-pool.json");
        let defined = [include_str!("mod.rs"), include_str!("snapshot.rs")].concat();
        let mut checked = 0;
        for (i, _) in dashboard.match_indices("droidpool_") {
            let name: String = dashboard[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let base = name.strip_suffix("_bucket").unwrap_or(&name);
            assert!(
                defined.contains(&format!("\"{base}\"")),
                "dashboard queries {name}, which is not defined"
            );
            checked += 1;
        }
        assert!(checked > 10);
    }

    #[test]
    fn renders_prometheus_text() {
        let m = super::Metrics::new();
        m.clients.transactions.inc();
        m.pooler_error("26000");
        let text = m.render();
        assert!(text.contains("droidpool_transactions_total 1"));
        assert!(text.contains("droidpool_pooler_errors_total{class=\"26\"} 1"));
    }
}
