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
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn set(&mut self, name: &str, value: &str) {
        match self
            .0
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
        {
            Some((_, v)) => {
                if v != value {
                    value.clone_into(v);
                }
            }
            None => self.0.push((name.to_owned(), value.to_owned())),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `SET` statements that give `server` the client's values where they differ, or `None`
    /// when they already agree. Values are quoted as E'' literals, which treat `\` and `'` the
    /// same whatever `standard_conforming_strings` says.
    pub fn sync_sql(client: &Params, server: &Params) -> Option<String> {
        let mut sql = String::new();
        for (name, want) in client.iter() {
            if NOT_SETTABLE.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                continue;
            }
            if server.get(name) == Some(want) {
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
        let mut c = Params::default();
        c.set("TimeZone", "Asia/Tokyo");
        c.set("application_name", "it's\\x");
        c.set("server_version", "1");
        let mut s = Params::default();
        s.set("timezone", "UTC");
        s.set("application_name", "it's\\x");
        assert_eq!(
            Params::sync_sql(&c, &s).unwrap(),
            "SET TimeZone TO E'Asia/Tokyo';"
        );
        s.set("TimeZone", "Asia/Tokyo");
        assert_eq!(Params::sync_sql(&c, &s), None);
        c.set("application_name", "a'b\\");
        assert_eq!(
            Params::sync_sql(&c, &s).unwrap(),
            "SET application_name TO E'a''b\\\\';"
        );
    }
}
