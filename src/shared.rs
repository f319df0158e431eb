//! The context every task shares, built once in the composition root and passed by handle.
//! It holds the lower layers (config, pools, cancel registry, lifecycle, metrics, credentials)
//! and imports nothing above them: the tasks that use it (client, login, admin, reload, app)
//! sit above it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::auth::AuthStore;
use crate::cancel::{CancelSender, Cancels};
use crate::config::{Config, ConfigCell};
use crate::counters::Counters;
use crate::events::Events;
use crate::lifecycle::Lifecycle;
use crate::logs::LogLimit;
use crate::metrics::{Metrics, SnapshotCollector, SnapshotSource};
use crate::net::TlsCell;
use crate::pool::Pools;
use tokio::sync::Notify;

/// Everything a client task needs from the rest of the pooler.
pub struct Shared {
    pub config: Arc<ConfigCell>,
    pub events: Events,
    pub counters: Arc<Counters>,
    pub pools: Arc<Pools>,
    pub metrics: Arc<Metrics>,
    pub cancels: Cancels,
    /// Startup, readiness, PAUSE and the drain: what every task ends by.
    pub lifecycle: Arc<Lifecycle>,
    /// Rung by SIGHUP and `POST /reload`.
    pub reload: Notify,
    /// TLS configurations for both directions; empty until [`Shared::load_secrets`].
    pub tls: Arc<TlsCell>,
    /// Client credentials from files and the auth_query cache.
    pub auth: Arc<AuthStore>,
    /// Connections accepted and not yet logged in (`client.max_pending_logins`).
    pub pending_logins: Arc<crate::net::admission::PendingLogins>,
    /// The log lines of refused client logins: a flood of wrong passwords or made-up names
    /// cannot flood the log too.
    pub refused_logins: LogLimit,
    /// The log lines of refused admin control requests.
    pub refused_admin: LogLimit,
    /// This host's name (a pod's name), read once: finds this pooler's `peers` entry.
    pub hostname: Option<String>,
}

impl Shared {
    pub fn new(config: Config) -> Arc<Shared> {
        let events = Events::new(config.log.events);
        let pgbouncer_names = config.admin.pgbouncer_metric_names;
        let config = Arc::new(ConfigCell::new(config));
        let counters = Arc::new(Counters::default());
        let metrics = Arc::new(Metrics::new());
        metrics
            .lifecycle
            .set_config_hash(config.load().file_hash.as_deref());
        let tls = Arc::new(TlsCell::default());
        let lifecycle = Arc::new(Lifecycle::new(metrics.lifecycle.drain_state.clone()));
        let pools = Arc::new(Pools::new(
            config.clone(),
            events,
            counters.clone(),
            metrics.clone(),
            tls.clone(),
            lifecycle.clone(),
        ));
        let collector = SnapshotCollector::new(Arc::downgrade(&pools), pgbouncer_names);
        if let Err(e) = metrics.registry.register(Box::new(collector)) {
            tracing::warn!(error = %e, "pool gauges unavailable");
        }
        Arc::new(Shared {
            pools,
            metrics,
            config,
            events,
            counters,
            cancels: Cancels::default(),
            lifecycle,
            reload: Notify::new(),
            tls,
            auth: Arc::new(AuthStore::default()),
            pending_logins: Arc::default(),
            refused_logins: LogLimit::refusals("client login refused"),
            refused_admin: LogLimit::refusals("admin control request refused"),
            hostname: hostname(),
        })
    }
}

/// The host name: `$HOSTNAME` (a pod's name in Kubernetes), else the kernel's.
fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// Why credentials or certificates could not be (re)loaded.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("client credentials: {0}")]
    Auth(#[from] crate::auth::AuthError),
    #[error("TLS: {0}")]
    Tls(#[from] crate::net::TlsError),
}

impl Shared {
    /// (Re)reads the users file, the passwords directory and the TLS files named by `cfg`.
    /// All or nothing: on error what was loaded before stays in force.
    pub fn load_secrets(&self, cfg: &Config) -> Result<(), SecretsError> {
        let users = crate::auth::Users::load(cfg)?;
        self.tls.load(&cfg.tls)?;
        let n = users.len();
        // Server credentials learnt from a credential that changed go: a user found in the
        // files must still agree with them; one no longer there may still be looked up.
        let lookups = cfg.auth.auth_user.is_some();
        self.pools
            .learned()
            .retain(|user, secret| match users.get(user) {
                Some(c) => c.agrees_with(secret),
                None => lookups,
            });
        self.auth.replace(users);
        tracing::info!(
            users = n,
            tls = cfg.tls.client.cert_file.is_some(),
            "credentials and certificates loaded"
        );
        Ok(())
    }

    /// What `/status` shows: pools, clients, drain state, config generation and the settings
    /// this pooler reads beyond the 0.1.0 release's (`capabilities`).
    pub fn status(&self) -> serde_json::Value {
        let l = &self.lifecycle;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let cfg = self.config.load();
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "peer_id": crate::cancel::own_peer_id(&cfg, self.hostname.as_deref()),
            "config_generation": self.metrics.lifecycle.config_generation.get(),
            "config_hash": cfg.file_hash.clone(),
            "capabilities": crate::config::CAPABILITIES,
            "started": l.is_started(),
            "ready": l.is_ready(),
            "paused": l.is_paused(),
            "drain": {
                "state": l.state().as_str(),
                "accepted": load(&l.accepted),
                "completed": load(&l.completed),
                "refused": load(&l.refused),
                "aborted": load(&l.aborted),
            },
            "clients_open": self.counters.clients_open.load(Ordering::Relaxed),
            "warm_sessions": self.counters.warm_sessions(),
            "pools": self.pools.snapshots(),
        })
    }

    /// Logs how many lines each rate limit held back since its count last went out: once a
    /// second, from the heartbeat.
    pub fn flush_log_limits(&self) {
        self.refused_logins.flush();
        self.refused_admin.flush();
        self.pools.flush_log_limits();
    }

    /// Sends cancels to servers as `pool.cancel_wait_timeout` says, counted in
    /// `droidpool_server_cancels_total`.
    pub fn cancel_sender(&self) -> CancelSender {
        let wait = self.config.load().pool.cancel_wait_timeout;
        CancelSender::new(wait, self.metrics.clients.server_cancels.clone())
    }

    /// Whether every pool's last server login succeeded (for opt-in backend readiness).
    pub fn backend_reachable(&self) -> bool {
        self.pools.all().iter().all(|p| p.last_login_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Exchange, Verifier};
    use crate::server::ServerSecret;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

    /// The keys a client proving `password` against `verifier` gives.
    fn proved(verifier: &Verifier, password: &str) -> ServerSecret {
        let mut client = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        let (ex, first) = Exchange::start(verifier.clone(), client.message()).unwrap();
        client.update(first.as_bytes()).unwrap();
        let (_, keys) = ex.finish(client.message()).unwrap();
        ServerSecret::Scram(Arc::new(keys))
    }

    /// Passthrough credentials live as long as the stored credential they came from: a
    /// reloaded users file with a new verifier (or without the user) drops them, an
    /// unchanged one keeps them; nothing of them prints.
    #[test]
    fn learnt_server_credentials_go_when_their_verifier_changes() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("userlist.txt");
        let line = |u: &str, v: &str| format!("\"{u}\" \"{v}\"\n");
        let v1 = postgres_protocol::password::scram_sha_256(b"pw1");
        let other = postgres_protocol::password::scram_sha_256(b"pw9");
        std::fs::write(&list, line("app", &v1) + &line("ops", &other)).unwrap();
        let mut cfg = Config::default();
        cfg.auth.users_file = Some(list.clone());
        let shared = Shared::new(cfg.clone());
        shared.load_secrets(&cfg).unwrap();
        let secret = proved(&Verifier::parse(&v1).unwrap(), "pw1");
        assert!(!format!("{secret:?} {:?}", shared.pools.learned()).contains("pw1"));
        shared.pools.learn(&cfg, "app", secret.clone());
        shared.pools.learn(&cfg, "ops", secret.clone());
        assert_eq!(shared.pools.learned().len(), 2);
        // Reloaded unchanged for `app`; `ops` never agreed with what was learnt.
        shared.load_secrets(&cfg).unwrap();
        assert_eq!(shared.pools.learned().get("app"), Some(secret.clone()));
        assert_eq!(shared.pools.learned().get("ops"), None);
        // A rotated password: a new verifier for `app`.
        let v2 = postgres_protocol::password::scram_sha_256(b"pw2");
        std::fs::write(&list, line("app", &v2)).unwrap();
        shared.load_secrets(&cfg).unwrap();
        assert!(shared.pools.learned().is_empty());
        // With a configured server password nothing is learnt at all.
        let mut fixed = cfg.clone();
        fixed.server.password = Some(crate::config::Secret::new("x".into()));
        shared.pools.learn(&fixed, "app", secret);
        assert!(shared.pools.learned().is_empty());
    }
}
