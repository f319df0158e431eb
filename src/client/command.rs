//! The admin console's command language, parsed: what a console user may ask for, PgBouncer's
//! spelling (case-insensitive keywords, an optional trailing `;`). Pure: no I/O, no state.

/// One console command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `SHOW <what>`; `what` upper-cased (`POOLS`, `STATS`, ...), checked by the caller.
    Show(String),
    Pause,
    Resume,
    Reload,
    Shutdown,
}

impl Command {
    /// Parses one statement; `None` if it is no command the console knows.
    pub fn parse(sql: &str) -> Option<Command> {
        // Trailing semicolons and blanks in any mix end the statement.
        let cmd = sql
            .trim_start()
            .trim_end_matches(|c: char| c == ';' || c.is_whitespace())
            .to_ascii_uppercase();
        let words: Vec<&str> = cmd.split_whitespace().collect();
        Some(match words.as_slice() {
            ["SHOW", what] => Command::Show((*what).to_owned()),
            ["PAUSE"] => Command::Pause,
            ["RESUME"] => Command::Resume,
            ["RELOAD"] => Command::Reload,
            ["SHUTDOWN"] => Command::Shutdown,
            _ => return None,
        })
    }

    /// The command as the console prints it back (its CommandComplete tag, or `SHOW`).
    pub fn tag(&self) -> &'static str {
        match self {
            Command::Show(_) => "SHOW",
            Command::Pause => "PAUSE",
            Command::Resume => "RESUME",
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
        assert_eq!(Command::parse("PAUSE"), Some(Command::Pause));
        assert_eq!(Command::parse("resume;"), Some(Command::Resume));
        assert_eq!(Command::parse("show"), None);
        assert_eq!(Command::parse("pause now"), None);
        assert_eq!(Command::parse(""), None);
        // Found by the console fuzz target: semicolons and blanks mixed at the end.
        assert_eq!(
            Command::parse("SHOW x;\t;\t"),
            Some(Command::Show("X".into()))
        );
    }
}
