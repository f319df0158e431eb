//! Hot reload: on SIGHUP, `POST /reload`, or a change of the config file on disk (including a
//! Kubernetes ConfigMap update, which swaps a `..data` symlink instead of writing the file),
//! the file is parsed, validated and diffed; a valid one is applied (pool sizes at once, mode
//! and track-prepared for new transactions), an invalid one is refused with a clear log line
//! and the old configuration stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::{Cli, Config, ConfigError};
use crate::shared::Shared;

/// How often the file is checked for changes.
const POLL: Duration = Duration::from_secs(1);

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

/// Watches for reload requests and file changes until shutdown.
pub fn spawn(shared: Arc<Shared>, cli: Arc<Cli>) {
    tokio::spawn(async move {
        let mut last = cli.config.as_deref().map(fingerprint);
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shared.shutdown.cancelled() => return,
                _ = shared.reload.notified() => {}
                _ = tick.tick() => {
                    let Some(path) = cli.config.as_deref() else { continue };
                    let now = fingerprint(path);
                    if last.as_ref() == Some(&now) {
                        continue;
                    }
                    last = Some(now);
                    tracing::info!(path = %path.display(), "config file changed on disk");
                }
            }
            if let Some(path) = cli.config.as_deref() {
                last = Some(fingerprint(path));
            }
            reload(&shared, &cli);
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
    Ok(true)
}
