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
    /// `KILL db` (or `KILL`, every database): its clients and servers closed at once, its new
    /// clients held until `RESUME`.
    Kill(Option<String>),
    /// `KILL_CLIENT id`: one client (the `id` of `SHOW CLIENTS`) and the server it holds.
    KillClient(i32),
    /// `RECONNECT [db]`: servers closed when next released instead of reused.
    Reconnect(Option<String>),
    /// `WAIT_CLOSE [db]`: answered once no server is still to be closed after a RECONNECT.
    WaitClose(Option<String>),
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
            ("KILL", []) => Command::Kill(None),
            ("KILL", [d]) => Command::Kill(Some(name(d)?)),
            // SHOW CLIENTS' ids are positive, as PostgreSQL's process ids are.
            ("KILL_CLIENT", [id]) => Command::KillClient(id.parse().ok().filter(|i| *i > 0)?),
            ("RECONNECT", []) => Command::Reconnect(None),
            ("RECONNECT", [d]) => Command::Reconnect(Some(name(d)?)),
            ("WAIT_CLOSE", []) => Command::WaitClose(None),
            ("WAIT_CLOSE", [d]) => Command::WaitClose(Some(name(d)?)),
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
            | Command::Enable(db)
            | Command::Kill(Some(db))
            | Command::Reconnect(Some(db))
            | Command::WaitClose(Some(db)) => format!("{} {db}", self.tag()),
            Command::KillClient(id) => format!("{} {id}", self.tag()),
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
            Command::Kill(_) => "KILL",
            Command::KillClient(_) => "KILL_CLIENT",
            Command::Reconnect(_) => "RECONNECT",
            Command::WaitClose(_) => "WAIT_CLOSE",
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

    #[test]
    fn kill_reconnect_and_wait_close_take_pgbouncers_arguments() {
        let p = Command::parse;
        assert_eq!(p("KILL app;"), Some(Command::Kill(Some("app".into()))));
        assert_eq!(p("kill"), Some(Command::Kill(None)));
        assert_eq!(p("kill_client 1234"), Some(Command::KillClient(1234)));
        assert_eq!(p("KILL_CLIENT +7"), Some(Command::KillClient(7)));
        for bad in [
            "KILL_CLIENT",
            "KILL_CLIENT 0",
            "KILL_CLIENT -3",
            "KILL_CLIENT x",
            "KILL_CLIENT 99999999999",
            "KILL_CLIENT 1 2",
            "KILL a b",
            "RECONNECT a b",
            "WAIT_CLOSE \"\"",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert_eq!(p("reconnect"), Some(Command::Reconnect(None)));
        assert_eq!(
            p("RECONNECT \"Orders\""),
            Some(Command::Reconnect(Some("Orders".into())))
        );
        assert_eq!(p("wait_close ;"), Some(Command::WaitClose(None)));
        assert_eq!(
            p("WAIT_CLOSE db1"),
            Some(Command::WaitClose(Some("db1".into())))
        );
        for c in [
            "KILL",
            "KILL x",
            "KILL_CLIENT 42",
            "RECONNECT",
            "RECONNECT y",
            "WAIT_CLOSE",
            "WAIT_CLOSE z",
        ] {
            let cmd = p(c).unwrap();
            assert_eq!(cmd.to_sql(), c);
            assert_eq!(p(&cmd.to_sql()), Some(cmd));
        }
    }

    proptest::proptest! {
        /// What the console fuzz target checks, on command-shaped text: a command that parses
        /// prints back to text that parses to the same command.
        #[test]
        fn printed_commands_parse_back(
            text in "(?i)(kill|kill_client|reconnect|wait_close|pause|disable|show)\
                     ( {1,2}[A-Za-z0-9_\"+;-]{0,6}){0,2} ?;?"
        ) {
            if let Some(cmd) = Command::parse(&text) {
                proptest::prop_assert_eq!(Command::parse(&cmd.to_sql()), Some(cmd));
            }
        }
    }
}
