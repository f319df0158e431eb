//! The pooling policy of a pool's transactions, made in one place from the configuration
//! ([`Policy::of`], when a pool's settings are resolved at its creation and at each reload),
//! published by the pool, and read by the relay wherever the mode or tracking matter
//! (instead of `mode != Session && track` at each use): a reloaded setting reaches a client's
//! next transaction.

use std::time::Duration;

use super::{Config, PoolMode, PoolRule, SessionState};

/// What the relay does with a statement that creates session state (a setting, SQL
/// `PREPARE`, a temp table, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRule {
    /// Forwarded as it is: session mode (the client owns its server), or
    /// `pool.session_state: off`.
    Forward,
    /// Pins the client to its server (transaction mode with `pin`, or `track` for what it
    /// cannot replay).
    Pin,
    /// Refused with 0A000 (statement mode with `pin`, or `track` for what it cannot
    /// replay): no server outlives a statement there,
    /// as transaction blocks are refused.
    Refuse,
}

/// What a checkout's transaction may do and how the relay treats it. Small (every session
/// carries one, idle ones too): limits as `u32`, timeouts in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub mode: PoolMode,
    /// Named prepared statements are tracked (renamed, replayed where missing): pooled modes
    /// with `pool.track_prepared`. A reload that turns it off keeps it on for a client that
    /// holds statements (none of its names is stranded).
    pub tracking: bool,
    /// What the configuration asks for `tracking`, which the client gets once it holds no
    /// statements.
    pub tracking_configured: bool,
    /// What a statement that creates session state does.
    pub session_state: StateRule,
    /// Settings made by SQL are followed and replayed (`track`, pooled modes).
    pub track_settings: bool,
    /// A server another client held is cleaned before this client runs there
    /// (`pool.reset_query_always`; session mode resets at the client's end instead).
    pub reset_always: bool,
    /// `pool.max_prepared_statements`, `pool.max_client_prepared_statements`,
    /// `client.max_message_size`, `client.buffer_size` (see the accessors).
    limits: [u32; 4],
    /// The transaction timeouts (see [`Policy::has_timeouts`]), then `client.idle_timeout`.
    timeouts_ms: [u32; 4],
}

/// A size as the policy keeps it, saturating at 4 GiB.
fn small(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A duration in whole milliseconds, saturating at about 49 days.
fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

impl Policy {
    /// The policy for a pool whose transactions run under `rule` with `cfg`.
    pub fn of(cfg: &Config, rule: PoolRule) -> Policy {
        let mut p = Policy::new(cfg, rule.mode, rule.session_state);
        p.reset_always = rule.reset_always;
        p
    }

    /// The policy for a pool in `mode` with `pool.session_state` `state` under `cfg` (and
    /// `pool.reset_query_always` as the `pool:` section sets it).
    pub fn new(cfg: &Config, mode: PoolMode, state: SessionState) -> Policy {
        let p = &cfg.pool;
        Policy {
            reset_always: p.reset_query_always,
            mode,
            tracking: p.track_prepared && mode != PoolMode::Session,
            tracking_configured: p.track_prepared && mode != PoolMode::Session,
            track_settings: state == SessionState::Track && mode != PoolMode::Session,
            session_state: match (state, mode) {
                (SessionState::Off, _) | (_, PoolMode::Session) => StateRule::Forward,
                (_, PoolMode::Transaction) => StateRule::Pin,
                (_, PoolMode::Statement) => StateRule::Refuse,
            },
            limits: [
                small(p.max_prepared_statements),
                small(p.max_client_prepared_statements),
                small(cfg.client.max_message_size),
                small(cfg.client.buffer_size),
            ],
            timeouts_ms: [
                millis(p.query_timeout),
                millis(p.idle_transaction_timeout),
                millis(p.transaction_timeout),
                millis(cfg.client.idle_timeout),
            ],
        }
    }

    /// `pool.max_prepared_statements`: statements one server keeps for tracked clients.
    pub fn max_prepared(&self) -> usize {
        self.limits[0] as usize
    }

    /// `pool.max_client_prepared_statements`: statements one client may keep.
    pub fn max_client_prepared(&self) -> usize {
        self.limits[1] as usize
    }

    /// `client.max_message_size`: the largest message held whole.
    pub fn max_message(&self) -> usize {
        self.limits[2] as usize
    }

    /// `client.buffer_size`: how much is read at a time, and the size above which a message
    /// that need not be held whole is passed on in pieces.
    pub fn buffer(&self) -> usize {
        self.limits[3] as usize
    }

    /// `pool.query_timeout` (zero: off).
    pub fn query_timeout(&self) -> Duration {
        Duration::from_millis(self.timeouts_ms[0].into())
    }

    /// `pool.idle_transaction_timeout` (zero: off).
    pub fn idle_transaction_timeout(&self) -> Duration {
        Duration::from_millis(self.timeouts_ms[1].into())
    }

    /// `pool.transaction_timeout` (zero: off).
    pub fn transaction_timeout(&self) -> Duration {
        Duration::from_millis(self.timeouts_ms[2].into())
    }

    /// Whether any of the pooler's own timeouts is on.
    pub fn has_timeouts(&self) -> bool {
        self.timeouts_ms[..3] != [0; 3]
    }

    /// `client.idle_timeout`, if one is set: read here rather than from the configuration
    /// on each idle wait (a reload applies from the client's next transaction).
    pub fn client_idle_timeout(&self) -> Option<Duration> {
        let ms = self.timeouts_ms[3];
        (ms != 0).then(|| Duration::from_millis(ms.into()))
    }

    /// Whether every handoff of a server to another client cleans it.
    pub fn cleans_always(&self) -> bool {
        self.reset_always && !self.is_session()
    }

    pub fn is_session(&self) -> bool {
        self.mode == PoolMode::Session
    }

    pub fn is_statement(&self) -> bool {
        self.mode == PoolMode::Statement
    }
}
