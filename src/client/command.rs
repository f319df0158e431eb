//! The admin console's command language, parsed: what a console user may ask for, PgBouncer's
//! spelling (case-insensitive keywords, an optional trailing `;`). Pure: no I/O, no state.

/// One console command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `SHOW <what>`; `what` upper-cased (`POOLS`, `STATS`, ...), checked by the caller.
    Show(String),
    /// `PAUSE` (everything) or `PAUSE db`.
    Pause(Option<String>),
    /// `RESUME` or `RESUME db`.
    Resume(Option<String>),
    /// `DISABLE db`: new clients of the database are refused.
    Disable(String),
    /// `ENABLE db`.
    Enable(String),
    Reload,
    Shutdown,
}

impl Command {
    /// Parses one statement; `None` if it is no command the console knows.
    pub fn parse(sql: &str) -> Option<Command> {
        // Trailing semicolons and blanks in any mix end the statement.
        let cmd = sql
            .trim_start()
            .trim_end_matches(|c: char| c == ';' || c.is_whitespace());
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let (keyword, args) = words.split_first()?;
        // Keywords in any case; a database name as written (PostgreSQL's names are
        // case-sensitive once quoted, and a pool is keyed by the name the client sent).
        // A name, bare or in one pair of double quotes; none with quotes, semicolons or
        // control characters inside (no database a client can name has them here).
        let name = |a: &str| {
            let n = a
                .strip_prefix('"')
                .and_then(|r| r.strip_suffix('"'))
                .unwrap_or(a);
            let bad = |c: char| c == '"' || c == ';' || c.is_control();
            (!n.is_empty() && !n.contains(bad)).then(|| n.to_owned())
        };
        Some(match (keyword.to_ascii_uppercase().as_str(), args) {
            ("SHOW", [what]) => Command::Show(what.to_ascii_uppercase()),
            ("PAUSE", []) => Command::Pause(None),
            ("PAUSE", [d]) => Command::Pause(Some(name(d)?)),
            ("RESUME", []) => Command::Resume(None),
            ("RESUME", [d]) => Command::Resume(Some(name(d)?)),
            ("DISABLE", [d]) => Command::Disable(name(d)?),
            ("ENABLE", [d]) => Command::Enable(name(d)?),
            ("RELOAD", []) => Command::Reload,
            ("SHUTDOWN", []) => Command::Shutdown,
            _ => return None,
        })
    }

    /// The command in its canonical spelling (parses back to itself).
    pub fn to_sql(&self) -> String {
        match self {
            Command::Show(what) => format!("SHOW {what}"),
            Command::Pause(Some(db))
            | Command::Resume(Some(db))
            | Command::Disable(db)
            | Command::Enable(db) => format!("{} {db}", self.tag()),
            other => other.tag().to_owned(),
        }
    }

    /// The command as the console prints it back (its CommandComplete tag, or `SHOW`).
    pub fn tag(&self) -> &'static str {
        match self {
            Command::Show(_) => "SHOW",
            Command::Pause(_) => "PAUSE",
            Command::Resume(_) => "RESUME",
            Command::Disable(_) => "DISABLE",
            Command::Enable(_) => "ENABLE",
            Command::Reload => "RELOAD",
            Command::Shutdown => "SHUTDOWN",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_are_case_insensitive_and_a_semicolon_is_optional() {
        assert_eq!(
            Command::parse(" show pools; "),
            Some(Command::Show("POOLS".into()))
        );
        assert_eq!(Command::parse("PAUSE"), Some(Command::Pause(None)));
        assert_eq!(Command::parse("resume;"), Some(Command::Resume(None)));
        assert_eq!(Command::parse("show"), None);
        assert_eq!(
            Command::parse("pause Orders"),
            Some(Command::Pause(Some("Orders".into())))
        );
        assert_eq!(
            Command::parse("disable \"app\";"),
            Some(Command::Disable("app".into()))
        );
        assert_eq!(Command::parse("enable"), None);
        assert_eq!(Command::parse("enable \"\""), None);
        for c in [
            "PAUSE",
            "PAUSE Orders",
            "DISABLE x",
            "SHOW POOLS",
            "RESUME y",
        ] {
            let cmd = Command::parse(c).unwrap();
            assert_eq!(Command::parse(&cmd.to_sql()), Some(cmd));
        }
        assert_eq!(Command::parse("pause a b"), None);
        assert_eq!(Command::parse(""), None);
        // Found by the console fuzz target: semicolons and blanks mixed at the end.
        assert_eq!(
            Command::parse("SHOW x;\t;\t"),
            Some(Command::Show("X".into()))
        );
    }
}
