//! Reported session parameters (ParameterStatus), as a small ordered list, and the SQL that
//! brings a server's values in line with a client's.

/// Parameters PostgreSQL reports that the startup-parameter sync never sets: a client cannot
/// change most of them with SET, and a login's `default_transaction_read_only` says what the
/// host is. A client's `SET` of one of those is followed as any setting is (`track`).
const NOT_SETTABLE: &[&str] = &[
    "server_version",
    "server_encoding",
    "integer_datetimes",
    "is_superuser",
    "session_authorization",
    "in_hot_standby",
    "default_transaction_read_only",
    "scram_iterations",
];

/// Whether the startup-parameter sync brings reported parameter `name` onto a server.
pub fn is_synced(name: &str) -> bool {
    !NOT_SETTABLE.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Name → value of reported parameters. A handful of entries, so a Vec beats a map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.position(name).map(|i| self.0[i].1.as_str())
    }

    fn position(&self, name: &str) -> Option<usize> {
        // Names come from the same server, so an exact match is the usual case.
        self.0.iter().position(|(k, _)| k == name).or_else(|| {
            self.0
                .iter()
                .position(|(k, _)| k.eq_ignore_ascii_case(name))
        })
    }

    pub fn set(&mut self, name: &str, value: &str) {
        match self.position(name) {
            Some(i) => {
                let v = &mut self.0[i].1;
                if v != value {
                    value.clone_into(v);
                }
            }
            None => self.0.push((name.to_owned(), value.to_owned())),
        }
    }

    pub fn remove(&mut self, name: &str) {
        if let Some(i) = self.position(name) {
            self.0.swap_remove(i);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A client's settings by identity (see [`ClientParams::key`]).
#[derive(Debug, Clone)]
pub struct SettingsKey {
    base: std::sync::Arc<Params>,
    overrides: Params,
}

/// A client's session settings: the pool's startup values, shared by every client of the
/// pool, plus the few this client set differently (so an idle client costs little).
#[derive(Debug, Clone, Default)]
pub struct ClientParams {
    base: std::sync::Arc<Params>,
    overrides: Params,
}

impl ClientParams {
    pub fn new(base: std::sync::Arc<Params>) -> Self {
        ClientParams {
            base,
            overrides: Params::default(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.overrides.get(name).or_else(|| self.base.get(name))
    }

    /// What identifies these settings, to remember that a server already has them.
    pub fn key(&self) -> SettingsKey {
        SettingsKey {
            base: self.base.clone(),
            overrides: self.overrides.clone(),
        }
    }

    /// Whether these are the settings `key` was taken from: the same shared startup values
    /// (a pointer compare) and the same few overrides.
    pub fn has_key(&self, key: &SettingsKey) -> bool {
        std::sync::Arc::ptr_eq(&self.base, &key.base) && self.overrides == key.overrides
    }

    pub fn set(&mut self, name: &str, value: &str) {
        if self.base.get(name) == Some(value) {
            if !self.overrides.is_empty() {
                self.overrides.remove(name);
            }
        } else {
            self.overrides.set(name, value);
        }
    }

    /// Every setting with its effective value.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.overrides.iter().chain(
            self.base
                .iter()
                .filter(|(k, _)| self.overrides.get(k).is_none()),
        )
    }

    /// The SQL that gives a server this client's settings where they differ, or `None` when
    /// they already agree. `server` is what the server reports (ParameterStatus); `applied` is
    /// what an earlier sync set that the server does not report, which is `RESET` when this
    /// client does not want it. Values go through `set_config`, so `options=-c
    /// search_path=a,b` means what it means at login; literals are E'' strings, which treat
    /// backslash and quote the same whatever `standard_conforming_strings` says.
    pub fn sync_sql(&self, server: &Params, applied: &Params) -> Option<String> {
        // The usual case on the hot path: a client with the pool's settings on a server that
        // still has them (servers report in login order, so the lists compare pairwise).
        if self.overrides.is_empty() && applied.is_empty() && *self.base == *server {
            return None;
        }
        let mut sql = String::new();
        for (name, _) in applied.iter() {
            if self.get(name).is_none() && valid_name(name) {
                sql.push_str("RESET ");
                sql.push_str(name);
                sql.push(';');
            }
        }
        let mut first = true;
        for (name, want) in self.iter() {
            let have = server.get(name).or_else(|| applied.get(name));
            if have == Some(want)
                || NOT_SETTABLE.iter().any(|n| n.eq_ignore_ascii_case(name))
                || !valid_name(name)
            {
                continue;
            }
            sql.push_str(if first { "SELECT " } else { ", " });
            first = false;
            sql.push_str("pg_catalog.set_config(");
            push_literal(&mut sql, name);
            sql.push_str(", ");
            push_literal(&mut sql, want);
            sql.push_str(", false)");
        }
        (!sql.is_empty()).then_some(sql)
    }

    /// The settings of this client that `reported` does not cover: what a sync leaves on a
    /// server without the server reporting it.
    pub fn unreported(&self, reported: &Params) -> Params {
        let mut p = Params::default();
        for (k, v) in self.iter() {
            if reported.get(k).is_none() {
                p.set(k, v);
            }
        }
        p
    }
}

/// PostgreSQL's names of the client encodings, as it reports them (`pg_enc2name_tbl`).
const ENCODINGS: &[&str] = &[
    "SQL_ASCII",
    "EUC_JP",
    "EUC_CN",
    "EUC_KR",
    "EUC_TW",
    "EUC_JIS_2004",
    "UTF8",
    "MULE_INTERNAL",
    "LATIN1",
    "LATIN2",
    "LATIN3",
    "LATIN4",
    "LATIN5",
    "LATIN6",
    "LATIN7",
    "LATIN8",
    "LATIN9",
    "LATIN10",
    "WIN1256",
    "WIN1258",
    "WIN866",
    "WIN874",
    "KOI8R",
    "WIN1251",
    "WIN1252",
    "ISO_8859_5",
    "ISO_8859_6",
    "ISO_8859_7",
    "ISO_8859_8",
    "WIN1250",
    "WIN1253",
    "WIN1254",
    "WIN1255",
    "WIN1257",
    "KOI8U",
    "SJIS",
    "BIG5",
    "GBK",
    "UHC",
    "GB18030",
    "JOHAB",
    "SHIFT_JIS_2004",
];

/// The other names PostgreSQL takes for them (`pg_encname_tbl`), as [`encoding_key`] has them.
const ENCODING_ALIASES: &[(&str, &str)] = &[
    ("unicode", "UTF8"),
    ("abc", "WIN1258"),
    ("tcvn", "WIN1258"),
    ("tcvn5712", "WIN1258"),
    ("vscii", "WIN1258"),
    ("alt", "WIN866"),
    ("win", "WIN1251"),
    ("koi8", "KOI8R"),
    ("mskanji", "SJIS"),
    ("shiftjis", "SJIS"),
    ("win932", "SJIS"),
    ("windows932", "SJIS"),
    ("win936", "GBK"),
    ("windows936", "GBK"),
    ("win949", "UHC"),
    ("windows949", "UHC"),
    ("win950", "BIG5"),
    ("windows950", "BIG5"),
    ("iso88591", "LATIN1"),
    ("iso88592", "LATIN2"),
    ("iso88593", "LATIN3"),
    ("iso88594", "LATIN4"),
    ("iso88599", "LATIN5"),
    ("iso885910", "LATIN6"),
    ("iso885913", "LATIN7"),
    ("iso885914", "LATIN8"),
    ("iso885915", "LATIN9"),
    ("iso885916", "LATIN10"),
];

/// An encoding name as PostgreSQL compares them: case and punctuation ignored.
fn encoding_key(name: &str) -> String {
    let alnum = name.chars().filter(char::is_ascii_alphanumeric);
    alnum.map(|c| c.to_ascii_lowercase()).collect()
}

/// The name PostgreSQL reports for client encoding `name` (`utf-8` is `UTF8`, `Unicode` too),
/// or `None` for a name it does not know (the server then answers for it). The pooler
/// greets a client before any server sees its settings, so it spells them as a server would.
pub fn canonical_encoding(name: &str) -> Option<&'static str> {
    let key = encoding_key(name);
    let alias = ENCODING_ALIASES.iter().find(|(a, _)| *a == key);
    alias.map(|(_, c)| *c).or_else(|| {
        let windows = key.strip_prefix("windows").map(|n| format!("win{n}"));
        let key = windows.as_deref().unwrap_or(&key);
        ENCODINGS.iter().copied().find(|c| encoding_key(c) == key)
    })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

fn push_literal(sql: &mut String, s: &str) {
    sql.push_str("E'");
    for ch in s.chars() {
        match ch {
            '\'' => sql.push_str("''"),
            '\\' => sql.push_str("\\\\"),
            c => sql.push(c),
        }
    }
    sql.push('\'');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_are_named_as_postgresql_reports_them() {
        for (given, reported) in [
            ("utf-8", "UTF8"),
            ("UTF8", "UTF8"),
            ("Unicode", "UTF8"),
            ("latin1", "LATIN1"),
            ("ISO-8859-1", "LATIN1"),
            ("iso_8859_5", "ISO_8859_5"),
            ("sql_ascii", "SQL_ASCII"),
            ("windows-1252", "WIN1252"),
            ("euc-jp", "EUC_JP"),
            ("shift_jis_2004", "SHIFT_JIS_2004"),
        ] {
            assert_eq!(canonical_encoding(given), Some(reported), "{given}");
        }
        assert_eq!(canonical_encoding("klingon"), None);
    }

    #[test]
    fn sync_only_differences_and_quotes() {
        let mut c = ClientParams::default();
        c.set("TimeZone", "Asia/Tokyo");
        c.set("application_name", "it's\\x");
        c.set("server_version", "1");
        let mut s = Params::default();
        s.set("timezone", "UTC");
        s.set("application_name", "it's\\x");
        let none = Params::default();
        assert_eq!(
            c.sync_sql(&s, &none).unwrap(),
            "SELECT pg_catalog.set_config(E'TimeZone', E'Asia/Tokyo', false)"
        );
        s.set("TimeZone", "Asia/Tokyo");
        assert_eq!(c.sync_sql(&s, &none), None);
        c.set("application_name", "a'b\\");
        assert_eq!(
            c.sync_sql(&s, &none).unwrap(),
            "SELECT pg_catalog.set_config(E'application_name', E'a''b\\\\', false)"
        );
        // A setting the server does not report, applied for another client, is reset.
        let mut applied = Params::default();
        applied.set("work_mem", "7MB");
        c.set("application_name", "it's\\x");
        assert_eq!(c.sync_sql(&s, &applied).unwrap(), "RESET work_mem;");
        c.set("work_mem", "7MB");
        assert_eq!(c.sync_sql(&s, &applied), None);
        assert_eq!(c.unreported(&s).get("work_mem"), Some("7MB"));
    }
}

#[cfg(test)]
mod client_tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn overrides_only_what_differs() {
        let mut base = Params::default();
        base.set("TimeZone", "UTC");
        base.set("DateStyle", "ISO, MDY");
        let mut c = ClientParams::new(Arc::new(base.clone()));
        c.set("TimeZone", "UTC");
        assert!(c.overrides.is_empty());
        c.set("TimeZone", "Asia/Tokyo");
        assert_eq!(c.get("timezone"), Some("Asia/Tokyo"));
        assert_eq!(c.iter().count(), 2);
        let none = Params::default();
        assert!(c.sync_sql(&base, &none).unwrap().contains("E'Asia/Tokyo'"));
        c.set("TimeZone", "UTC");
        assert!(c.overrides.is_empty());
        assert_eq!(c.sync_sql(&base, &none), None);
    }
}
