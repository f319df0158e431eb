//! Which backend a statement signals by pid (`pg_terminate_backend`, `pg_cancel_backend`).
//!
//! Directly, a client that signals another session's backend never signals its own. Through
//! a transaction pooler the pid it read elsewhere (`pg_backend_pid()` of another client) may
//! belong to the very idle server the pool would hand this statement: the backend would end
//! or cancel the statement that ended it, and the caller would get `57P01` or `57014` for a
//! kill that succeeded. The pool spares that server when it takes one for such a statement.

use super::detect::has_word;
use super::lex::{Token, Tokens};

/// The backend a statement names: a literal pid, or the parameter (`$n`, from 1) that
/// carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Pid(i32),
    Param(u16),
}

/// The first backend `sql` signals, if it calls one of the functions with a literal pid or a
/// parameter as its first argument. Cheap for any other text: a `memchr` pass or two.
pub fn target(sql: &[u8]) -> Option<Target> {
    if memchr::memchr(b'(', sql).is_none() || !has_word(sql, b"_backend", 4) {
        return None;
    }
    scan(sql)
}

fn scan(sql: &[u8]) -> Option<Target> {
    let mut tokens = Tokens::new(sql).peekable();
    while let Some(tok) = tokens.next() {
        let named = match tok {
            Token::Word(w) => {
                w.eq_ignore_ascii_case(b"pg_terminate_backend")
                    || w.eq_ignore_ascii_case(b"pg_cancel_backend")
            }
            // A quoted name is the function only as written in lower case.
            Token::Quoted(q) => q == b"pg_terminate_backend" || q == b"pg_cancel_backend",
            _ => false,
        };
        if !named || tokens.peek() != Some(&Token::Punct(b'(')) {
            continue;
        }
        tokens.next();
        let Some(Token::Other(arg)) = tokens.next() else {
            continue;
        };
        // The argument alone (`(1234)`, `(1234, 5000)`, `($1::int)`), not the start of an
        // expression.
        if tokens.peek() == Some(&Token::Other(b"::")) {
            tokens.next();
            if !matches!(tokens.next(), Some(Token::Word(_))) {
                continue;
            }
        }
        if !matches!(tokens.peek(), Some(Token::Punct(b')' | b','))) {
            continue;
        }
        let found = match arg {
            [b'$', n @ ..] => std::str::from_utf8(n).ok()?.parse().ok().map(Target::Param),
            digits => std::str::from_utf8(digits)
                .ok()?
                .parse()
                .ok()
                .map(Target::Pid),
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// A parameter value as a pid: text (format 0) or a binary `int4`/`int8` (format 1).
pub fn pid_of(format: i16, value: &[u8]) -> Option<i32> {
    match (format, value.len()) {
        (0, _) => std::str::from_utf8(value).ok()?.trim().parse().ok(),
        (1, 4) => Some(i32::from_be_bytes(value.try_into().ok()?)),
        (1, 8) => i32::try_from(i64::from_be_bytes(value.try_into().ok()?)).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_read_from_a_call_with_a_lone_argument() {
        let cases: &[(&str, Option<Target>)] = &[
            ("SELECT pg_terminate_backend(1234)", Some(Target::Pid(1234))),
            (
                "select pg_catalog.pg_cancel_backend( 77 )",
                Some(Target::Pid(77)),
            ),
            ("SELECT PG_TERMINATE_BACKEND(5)", Some(Target::Pid(5))),
            (
                "SELECT pg_terminate_backend($2, 1000)",
                Some(Target::Param(2)),
            ),
            (
                "SELECT \"pg_terminate_backend\"($1)",
                Some(Target::Param(1)),
            ),
            (
                "SELECT pg_terminate_backend($1::int)::text",
                Some(Target::Param(1)),
            ),
            (
                "SELECT pg_cancel_backend(42::integer, 10)",
                Some(Target::Pid(42)),
            ),
            // Not a literal or a parameter alone: nothing to spare.
            (
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
                None,
            ),
            ("SELECT pg_terminate_backend(1 + 2)", None),
            ("SELECT pg_terminate_backend($1::int + 1)", None),
            // Look-alikes in a literal, a comment or another function's name.
            ("SELECT 'pg_terminate_backend(12)'", None),
            ("SELECT 1 -- pg_terminate_backend(12)\n", None),
            ("SELECT my_pg_terminate_backend(12)", None),
            ("SELECT \"PG_TERMINATE_BACKEND\"(12)", None),
            ("SELECT abalance FROM pgbench_accounts WHERE aid = 12", None),
        ];
        for (sql, want) in cases {
            assert_eq!(target(sql.as_bytes()), *want, "{sql}");
        }
    }

    #[test]
    fn a_pid_is_read_in_either_format() {
        assert_eq!(pid_of(0, b"4242"), Some(4242));
        assert_eq!(pid_of(1, &4242i32.to_be_bytes()), Some(4242));
        assert_eq!(pid_of(1, &4242i64.to_be_bytes()), Some(4242));
        assert_eq!(pid_of(1, &(1i64 << 40).to_be_bytes()), None);
        assert_eq!(pid_of(1, b"abc"), None);
        assert_eq!(pid_of(0, b"x"), None);
        assert_eq!(pid_of(2, b"1"), None);
    }
}
