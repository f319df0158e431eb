//! Reported session parameters (ParameterStatus), as a small ordered list, and the SQL that
//! brings a server's values in line with a client's.

/// Parameters PostgreSQL reports that a client cannot change with SET; never synced.
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

    /// `SET` statements that give `server` this client's values where they differ, or `None`
    /// when they already agree. Values are quoted as E'' literals, which treat `\` and `'` the
    /// same whatever `standard_conforming_strings` says.
    pub fn sync_sql(&self, server: &Params) -> Option<String> {
        let mut sql = String::new();
        for (name, want) in self.iter() {
            if server.get(name) == Some(want) {
                continue;
            }
            if NOT_SETTABLE.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                continue;
            }
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            {
                continue;
            }
            sql.push_str("SET ");
            sql.push_str(name);
            sql.push_str(" TO E'");
            for ch in want.chars() {
                match ch {
                    '\'' => sql.push_str("''"),
                    '\\' => sql.push_str("\\\\"),
                    c => sql.push(c),
                }
            }
            sql.push_str("';");
        }
        (!sql.is_empty()).then_some(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_only_differences_and_quotes() {
        let mut c = ClientParams::default();
        c.set("TimeZone", "Asia/Tokyo");
        c.set("application_name", "it's\\x");
        c.set("server_version", "1");
        let mut s = Params::default();
        s.set("timezone", "UTC");
        s.set("application_name", "it's\\x");
        assert_eq!(c.sync_sql(&s).unwrap(), "SET TimeZone TO E'Asia/Tokyo';");
        s.set("TimeZone", "Asia/Tokyo");
        assert_eq!(c.sync_sql(&s), None);
        c.set("application_name", "a'b\\");
        assert_eq!(
            c.sync_sql(&s).unwrap(),
            "SET application_name TO E'a''b\\\\';"
        );
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
        assert_eq!(c.sync_sql(&base).unwrap(), "SET TimeZone TO E'Asia/Tokyo';");
        c.set("TimeZone", "UTC");
        assert!(c.overrides.is_empty());
        assert_eq!(c.sync_sql(&base), None);
    }
}
