//! Session state that `pool.session_state: track` moves between servers: settings made by
//! SQL (`SET`, `RESET`, `set_config(.., .., false)`) and SQL prepared statements (`PREPARE`).
//! What a client has made (committed) and what a server holds have the same shape, so
//! bringing a server in line with a client is a comparison and, when they differ, a few
//! statements.

use std::sync::Arc;

/// The name [`crate::session_state::detect`] gives `SET SESSION CHARACTERISTICS AS
/// TRANSACTION ...`, which sets the three `default_transaction_*` settings.
pub const CHARACTERISTICS: &str = "session characteristics";

/// Whether setting `name` changes what the client may do (`SET ROLE`, `SET SESSION
/// AUTHORIZATION`): never moved between servers. A server that kept one through a missed
/// reset would hand the privileges to its next client; `track` pins instead.
pub fn changes_privileges(name: &str) -> bool {
    name == "role" || name == "session_authorization"
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A setting: undone by `RESET`.
    Setting,
    /// An SQL prepared statement: undone by `DEALLOCATE`.
    Prepared,
}

impl Kind {
    /// The `kind` label of `droidpool_session_replays_total`.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Setting => "setting",
            Kind::Prepared => "prepare",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: Kind,
    /// A setting's name lower-case; a statement's name as PostgreSQL folded it.
    name: Box<str>,
    /// The statement that makes it again, as the client wrote it.
    sql: Arc<str>,
}

/// Entries in the order they were last made. Order matters where two settings set the same
/// thing (`SET SESSION CHARACTERISTICS` and `default_transaction_isolation`): replayed in
/// order, the last one wins, as it did for the client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings(Vec<Entry>);

impl Settings {
    pub const fn new() -> Settings {
        Settings(Vec::new())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether `name` of `kind` is among them.
    pub fn has(&self, kind: Kind, name: &str) -> bool {
        self.0.iter().any(|e| e.kind == kind && &*e.name == name)
    }

    /// The statement that makes `name` of `kind`, if it is among them.
    pub fn sql(&self, kind: Kind, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|e| e.kind == kind && &*e.name == name)
            .map(|e| &*e.sql)
    }

    /// How many entries of `kind`.
    pub fn count(&self, kind: Kind) -> usize {
        self.0.iter().filter(|e| e.kind == kind).count()
    }

    /// `name` of `kind` is now what `sql` makes: it moves to the end.
    pub fn set(&mut self, kind: Kind, name: &str, sql: Arc<str>) {
        self.reset(kind, name);
        self.0.push(Entry {
            kind,
            name: name.into(),
            sql,
        });
    }

    /// `name` of `kind` is gone (a setting back at the server's default).
    pub fn reset(&mut self, kind: Kind, name: &str) {
        self.0.retain(|e| e.kind != kind || &*e.name != name);
    }

    /// Everything is gone (`DISCARD ALL`).
    pub fn clear_all(&mut self) {
        self.0.clear();
    }

    /// Every entry of `kind` is gone.
    pub fn clear(&mut self, kind: Kind) {
        self.0.retain(|e| e.kind != kind);
    }

    /// Whether setting `name` is among them (names are lower-case; `name` may not be).
    pub fn has_setting(&self, name: &str) -> bool {
        self.0
            .iter()
            .any(|e| e.kind == Kind::Setting && e.name.eq_ignore_ascii_case(name))
    }

    /// Appends to `sql` what takes a server holding `self` back to its defaults: a `RESET`
    /// per setting, a `DEALLOCATE` per statement (each ending in `;`).
    pub fn push_resets(&self, sql: &mut String) {
        for e in &self.0 {
            match e.kind {
                Kind::Setting if &*e.name == CHARACTERISTICS => sql.push_str(
                    "RESET default_transaction_isolation;RESET default_transaction_read_only;\
                     RESET default_transaction_deferrable;",
                ),
                Kind::Setting => {
                    sql.push_str("RESET ");
                    push_setting_name(sql, &e.name);
                    sql.push(';');
                }
                Kind::Prepared => {
                    sql.push_str("DEALLOCATE ");
                    push_identifier(sql, &e.name);
                    sql.push(';');
                }
            }
        }
    }

    /// Appends to `sql` the statements that make these again on a server at its defaults.
    pub fn push_replays(&self, sql: &mut String) {
        for e in &self.0 {
            sql.push_str(&e.sql);
            sql.push(';');
        }
    }
}

/// A setting name as SQL: each dotted part quoted when it is not a plain lower-case word.
fn push_setting_name(sql: &mut String, name: &str) {
    for (i, part) in name.split('.').enumerate() {
        if i > 0 {
            sql.push('.');
        }
        let plain = part
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if plain {
            sql.push_str(part);
        } else {
            push_identifier(sql, part);
        }
    }
}

/// A quoted identifier: exactly `name`.
fn push_identifier(sql: &mut String, name: &str) {
    sql.push('"');
    sql.push_str(&name.replace('"', "\"\""));
    sql.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_made_wins_and_resets_undo_each() {
        let mut s = Settings::default();
        s.set(Kind::Setting, "work_mem", "SET work_mem = '3MB'".into());
        s.set(
            Kind::Setting,
            CHARACTERISTICS,
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY".into(),
        );
        s.set(Kind::Prepared, "q", "PREPARE q AS select 1".into());
        s.set(Kind::Setting, "work_mem", "SET work_mem TO '4MB'".into());
        s.set(
            Kind::Setting,
            "app.User Id",
            "SET \"app\".\"User Id\" = 'x'".into(),
        );
        let mut sql = String::new();
        s.push_replays(&mut sql);
        assert_eq!(
            sql,
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY;PREPARE q AS select 1;\
             SET work_mem TO '4MB';SET \"app\".\"User Id\" = 'x';"
        );
        let mut sql = String::new();
        s.push_resets(&mut sql);
        assert_eq!(
            sql,
            "RESET default_transaction_isolation;RESET default_transaction_read_only;\
             RESET default_transaction_deferrable;DEALLOCATE \"q\";RESET work_mem;\
             RESET app.\"User Id\";"
        );
        assert!(s.has_setting("WORK_MEM"));
        s.reset(Kind::Setting, "work_mem");
        assert!(!s.has_setting("work_mem"));
        // A statement and a setting may share a name.
        s.set(Kind::Setting, "q", "SET q.x = 1".into());
        s.clear(Kind::Setting);
        assert_eq!(s.count(Kind::Prepared), 1);
        assert_eq!(s.count(Kind::Setting), 0);
    }
}
