//! The connection budget: `maxServerConnections` split over the poolers counted, and where
//! each pooler holds its share. `pool.size` bounds one pool, and a pooler opens a pool per
//! (database, user) its clients name (also with `server.user` set: that changes only the
//! server login), so the share is also written as `pool.max_db_connections`, which bounds
//! all pools of a database together. Only once every running pooler says it reads that
//! setting, though: a 0.1.0 pooler refuses the whole file (on reload it keeps its old config,
//! at a restart it does not start), and sidecars keep their image until their application
//! is redeployed.

use crate::config::{Config, READS_MAX_DB_CONNECTIONS};
use crate::operator::crd::{BudgetScope, PoolConfigSpec};

use super::RenderError;

/// The per-pooler pool size and how it was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// `pool.size` in each pooler's config.
    pub pool_size: u32,
    /// Poolers the budget was split over (at least 1).
    pub poolers: u32,
    /// The budget is smaller than the number of poolers, so 1 each exceeds it.
    pub over_budget: bool,
    /// With a budget: whether the rendered file holds the share per database too.
    pub scope: Option<BudgetScope>,
}

/// The pool size for `poolers` poolers: `poolSize` as given, or `floor(budget / poolers)` but
/// at least 1 (a pooler without a server connection serves nobody).
pub fn sizing(spec: &PoolConfigSpec, poolers: u32) -> Result<Sizing, RenderError> {
    let poolers = poolers.max(1);
    match (spec.pool_size, spec.max_server_connections) {
        (Some(size), None) if size >= 1 => Ok(Sizing {
            pool_size: size,
            poolers,
            over_budget: false,
            scope: None,
        }),
        (None, Some(budget)) if budget >= 1 => Ok(Sizing {
            pool_size: (budget / poolers).max(1),
            poolers,
            over_budget: poolers > budget,
            scope: Some(BudgetScope::Pool),
        }),
        _ => Err(RenderError::PoolSizeChoice),
    }
}

/// What the running poolers of a PoolConfig said about reading `pool.max_db_connections`
/// (`/status`, `capabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readers {
    /// Running pooler pods asked.
    pub asked: usize,
    /// Poolers that answered listing the setting.
    pub reading: usize,
    /// Poolers that answered without it: an older release.
    pub older: usize,
    /// Pods whose pooler keeps failing to start (restarted, not running now): perhaps an
    /// older pooler refusing a file that holds the setting.
    pub failing: usize,
}

impl Readers {
    /// Whether the setting may be written: no pooler is known not to read it, and a running
    /// pooler said it does, or the file holds it already (`written`), so that a pooler not
    /// answering for a moment (just started, busy) does not take it out and put it back.
    pub fn all_read(&self, written: bool) -> bool {
        self.older == 0 && self.failing == 0 && (self.reading > 0 || written)
    }

    /// Why the share is held where it is (`scope`, from [`Sizing`]), for the status.
    pub fn explain(&self, scope: Option<BudgetScope>) -> Option<String> {
        let per_pool = "the share bounds each (database, user) pool only";
        let setting = READS_MAX_DB_CONNECTIONS;
        Some(match scope? {
            BudgetScope::Database => format!("the share is held per database ({setting})"),
            BudgetScope::Pool if self.older > 0 => format!(
                "{per_pool}: {} of {} running poolers do not read {setting} (an older image)",
                self.older, self.asked
            ),
            BudgetScope::Pool if self.failing > 0 => format!(
                "{per_pool}: {} pooler pod(s) keep failing to start (an older image refusing \
                 {setting}?)",
                self.failing
            ),
            BudgetScope::Pool => {
                format!("{per_pool}: no running pooler has said yet that it reads {setting}")
            }
        })
    }
}

/// Writes the share as the per-database limit too when every pooler reads it (`readable`),
/// never above a `limits.maxDbConnections` the spec sets, and records where the share is held.
pub(super) fn hold_share(c: &mut Config, sizing: &mut Sizing, readable: bool) {
    let Some(scope) = sizing.scope.as_mut() else {
        return;
    };
    let share = sizing.pool_size as usize;
    if readable {
        c.pool.max_db_connections = match c.pool.max_db_connections {
            0 => share,
            set => set.min(share),
        };
    }
    *scope = if (1..=share).contains(&c.pool.max_db_connections) {
        BudgetScope::Database
    } else {
        BudgetScope::Pool
    };
}

#[cfg(test)]
mod tests {
    use super::super::tests::{key_paths, POOLER_0_1_0_KEYS};
    use super::super::{render_with, Facts};
    use super::*;

    fn spec(yaml: &str) -> PoolConfigSpec {
        let value: serde_json::Value = serde_yaml::from_str(yaml).expect("test YAML parses");
        serde_json::from_value(value).expect("test spec parses")
    }

    fn budget(server: &str, extra: &str) -> PoolConfigSpec {
        spec(&format!(
            "maxServerConnections: 30\nserver: {server}\n\
             target: {{sidecar: {{configMapName: c, podSelector: {{matchLabels: {{app: w}}}}}}}}\n\
             {extra}"
        ))
    }

    fn readable(yes: bool) -> Facts {
        Facts {
            db_limit_readable: yes,
            ..Facts::default()
        }
    }

    /// Poolers that do not all read `pool.max_db_connections` get a file of 0.1.0 keys only,
    /// held per pool; once they all do, the share is the per-database limit as well, with or
    /// without `server.user` (pools are per client user and database either way).
    #[test]
    fn the_share_is_the_database_limit_only_when_every_pooler_reads_it() {
        for server in ["{host: db}", "{host: db, user: app, database: app}"] {
            let s = budget(server, "");
            let r = render_with(&s, 3, readable(false)).unwrap();
            assert_eq!(r.config.pool.max_db_connections, 0);
            assert_eq!(r.sizing.scope, Some(BudgetScope::Pool));
            let mut paths = Vec::new();
            key_paths("", &serde_yaml::from_str(&r.yaml).unwrap(), &mut paths);
            for p in &paths {
                assert!(POOLER_0_1_0_KEYS.contains(&p.as_str()), "{p}:\n{}", r.yaml);
            }
            let r = render_with(&s, 3, readable(true)).unwrap();
            assert_eq!(r.sizing.pool_size, 10);
            assert_eq!(r.sizing.scope, Some(BudgetScope::Database));
            let back = Config::from_yaml(&r.yaml, "cm".as_ref()).unwrap();
            back.validate().unwrap();
            assert_eq!(back.pool.max_db_connections, 10, "{}", r.yaml);
        }
        // A spec's own lower limit stays; a higher one comes down to the share.
        let own = |n: u32| budget("{host: db}", &format!("limits: {{maxDbConnections: {n}}}"));
        let limit = |s, ok| render_with(&s, 3, readable(ok)).unwrap();
        assert_eq!(limit(own(4), true).config.pool.max_db_connections, 4);
        assert_eq!(limit(own(40), true).config.pool.max_db_connections, 10);
        let (kept, scope) = (limit(own(40), false), limit(own(40), false).sizing.scope);
        assert_eq!(
            (kept.config.pool.max_db_connections, scope),
            (40, Some(BudgetScope::Pool))
        );
        assert_eq!(
            limit(own(4), false).sizing.scope,
            Some(BudgetScope::Database)
        );
        // A fixed poolSize is no budget: nothing is added.
        let fixed =
            spec("poolSize: 5\nserver: {host: db}\ntarget: {sidecar: {configMapName: c}}\n");
        let r = render_with(&fixed, 3, readable(true)).unwrap();
        assert_eq!(
            (r.config.pool.max_db_connections, r.sizing.scope),
            (0, None)
        );
    }

    #[test]
    fn one_older_or_failing_pooler_keeps_the_setting_out() {
        let all = Readers {
            asked: 2,
            reading: 2,
            ..Readers::default()
        };
        assert!(all.all_read(false));
        let older = Readers {
            reading: 1,
            older: 1,
            ..all
        };
        assert!(!older.all_read(true));
        let failing = Readers { failing: 1, ..all };
        assert!(!failing.all_read(true));
        // Nobody has answered: not written until one does, kept while nothing says otherwise.
        let silent = Readers {
            asked: 1,
            ..Readers::default()
        };
        assert!(!silent.all_read(false));
        assert!(silent.all_read(true));
        let why = older.explain(Some(BudgetScope::Pool)).unwrap();
        assert!(why.contains("1 of 2 running poolers do not read"), "{why}");
        assert!(silent
            .explain(Some(BudgetScope::Pool))
            .unwrap()
            .contains("no running pooler"));
        assert_eq!(all.explain(None), None);
    }
}
