//! Hot reload: on SIGHUP, `POST /reload`, or a change of the config file on disk (including a
//! Kubernetes ConfigMap update, which swaps a `..data` symlink instead of writing the file),
//! the file is parsed, validated and diffed; a valid one is applied (pool sizes at once, mode
//! and track-prepared for new transactions, each pool's hosts and roles as its servers are next
//! released), an invalid one is refused with a clear log line
//! and the old configuration stays. The credential files (users file, passwords directory) and
//! TLS files are watched the same way and re-read on their own when they change (cert-manager
//! rotates a Secret in place): new logins and handshakes use them, connected clients stay.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::config::{Cli, Config, ConfigError};
use crate::shared::Shared;

/// What identifies the file's content without reading it: the resolved path (a ConfigMap
/// swap changes it), modification time and size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(Option<(PathBuf, SystemTime, u64)>);

fn fingerprint(path: &Path) -> Fingerprint {
    let resolved = std::fs::canonicalize(path).ok();
    let meta = std::fs::metadata(path).ok();
    Fingerprint(match (resolved, meta) {
        (Some(p), Some(m)) => m.modified().ok().map(|t| (p, t, m.len())),
        _ => None,
    })
}

/// The fingerprints of every credential and TLS file the configuration names (a directory
/// counts by each of its entries).
fn secret_fingerprints(cfg: &Config) -> Vec<Fingerprint> {
    let mut paths: Vec<PathBuf> = cfg.tls.files();
    paths.extend(cfg.auth.users_file.clone());
    if let Some(dir) = &cfg.auth.passwords_dir {
        paths.push(dir.clone());
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            names.sort();
            paths.extend(names);
        }
    }
    paths.iter().map(|p| fingerprint(p)).collect()
}

/// The fingerprints of the files the configuration resolves into itself (server and
/// auth_query passwords, the admin token, the mock secret): a change reloads the whole
/// configuration, so a rotated password reaches every pool's next server login.
fn resolved_fingerprints(cfg: &Config) -> Vec<Fingerprint> {
    [
        &cfg.server.password_file,
        &cfg.auth.auth_password_file,
        &cfg.admin.token_file,
        &cfg.auth.mock_secret_file,
    ]
    .into_iter()
    .flatten()
    .map(|p| fingerprint(p))
    .collect()
}

/// Re-reads credentials and certificates; on error the loaded ones stay.
fn reload_secrets(shared: &Shared, cfg: &Config) {
    if let Err(e) = shared.load_secrets(cfg) {
        shared
            .metrics
            .lifecycle
            .reloads
            .with_label_values(&["rejected"])
            .inc();
        tracing::error!(error = %e, "credential or certificate reload rejected; the loaded ones stay");
    }
}

/// Watches for reload requests and file changes until shutdown.
pub fn spawn(shared: Arc<Shared>, cli: Arc<Cli>) {
    let mut shutdown = shared.lifecycle.shutdown();
    tokio::spawn(async move {
        let mut last = cli.config.as_deref().map(fingerprint);
        let mut secrets = secret_fingerprints(&shared.config.load());
        let mut resolved = resolved_fingerprints(&shared.config.load());
        let mut ticks = shared.lifecycle.ticks.clone();
        loop {
            tokio::select! {
                _ = shutdown.stopped() => return,
                _ = shared.reload.notified() => {}
                _ = ticks.tick() => {
                    let cfg = shared.config.load();
                    let now = secret_fingerprints(&cfg);
                    if now != secrets {
                        secrets = now;
                        tracing::info!("credential or certificate files changed on disk");
                        reload_secrets(&shared, &cfg);
                    }
                    let files = resolved_fingerprints(&cfg);
                    let changed = match cli.config.as_deref() {
                        Some(path) => {
                            let now = fingerprint(path);
                            let changed = last.as_ref() != Some(&now);
                            if changed {
                                tracing::info!(path = %path.display(), "config file changed on disk");
                            }
                            last = Some(now);
                            changed
                        }
                        None => false,
                    };
                    if files != resolved {
                        tracing::info!("a password, token or secret file changed on disk");
                    } else if !changed {
                        continue;
                    }
                }
            }
            if let Some(path) = cli.config.as_deref() {
                last = Some(fingerprint(path));
            }
            reload(&shared, &cli);
            let cfg = shared.config.load();
            secrets = secret_fingerprints(&cfg);
            resolved = resolved_fingerprints(&cfg);
            reload_secrets(&shared, &cfg);
        }
    });
}

/// Loads, validates and applies the configuration; returns whether anything changed.
pub fn reload(shared: &Shared, cli: &Cli) -> bool {
    let metrics = &shared.metrics.lifecycle;
    match apply(shared, Config::load(cli)) {
        Ok(changed) => {
            metrics.reloads.with_label_values(&["applied"]).inc();
            changed
        }
        Err(e) => {
            metrics.reloads.with_label_values(&["rejected"]).inc();
            tracing::error!(error = %e, "config reload rejected; the running configuration stays");
            false
        }
    }
}

fn apply(shared: &Shared, loaded: Result<Config, ConfigError>) -> Result<bool, ConfigError> {
    let mut new = loaded?;
    let old = shared.config.load();
    // The listeners are bound once: keep their addresses and say so.
    if new.listen != old.listen
        || new.admin.addr != old.admin.addr
        || new.admin.port != old.admin.port
    {
        tracing::warn!(
            "listen and admin addresses change only at restart; keeping the current ones"
        );
        new.listen = old.listen.clone();
        new.admin.addr = old.admin.addr;
        new.admin.port = old.admin.port;
        // The file was validated against the address it names; its security settings must
        // hold for the one the process listens on (trust on a network listener, say).
        new.validate().map_err(|e| {
            ConfigError::Invalid(format!(
                "{e} (checked against the running listen address {}, which changes only at \
                 restart)",
                old.listen.addr
            ))
        })?;
    }
    if new == *old {
        tracing::info!("config reload: nothing changed");
        return Ok(false);
    }
    tracing::info!(
        pool_size = new.pool.size,
        mode = new.pool.mode.as_str(),
        track_prepared = new.pool.track_prepared,
        "config reload applied"
    );
    let new = Arc::new(new);
    shared.config.store(new.clone());
    shared.pools.apply(&new);
    shared.metrics.lifecycle.config_generation.inc();
    // The file is compared whole (its hash included): a change of its comment alone, such as
    // the operator version that wrote it, is a new file in force.
    shared
        .metrics
        .lifecycle
        .set_config_hash(new.file_hash.as_deref());
    Ok(true)
}
