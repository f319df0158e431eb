//! Tokens of the model's SQL: words (folded to lower case, as PostgreSQL folds unquoted
//! identifiers), integers, quoted strings, dollar-quoted bodies, `$n` parameters and
//! punctuation; comments and white space dropped. Anything else is a syntax error.

use super::super::error::PgError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    Word(String),
    Int(i64),
    Str(String),
    /// The body of a dollar-quoted string (`$$...$$` or `$tag$...$tag$`).
    Dollar(String),
    Param(usize),
    Sym(&'static str),
}

const SYMBOLS: [&str; 11] = ["::", "(", ")", ",", ";", "*", "=", "/", "-", "+", "."];

/// Cuts `sql` into tokens; a character the vocabulary has no use for is a syntax error.
pub fn lex(sql: &str) -> Result<Vec<Tok>, PgError> {
    let mut toks = Vec::new();
    let b = sql.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if sql[i..].starts_with("--") {
            i = sql[i..].find('\n').map_or(b.len(), |n| i + n);
        } else if sql[i..].starts_with("/*") {
            i = sql[i + 2..]
                .find("*/")
                .map(|n| i + 2 + n + 2)
                .ok_or_else(|| PgError::syntax("/*"))?;
        } else if (c == b'e' || c == b'E') && b.get(i + 1) == Some(&b'\'') {
            let (s, end) = escaped(sql, i + 1)?;
            toks.push(Tok::Str(s));
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = scan(b, i, |c| {
                c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
            });
            toks.push(Tok::Word(sql[i..end].to_ascii_lowercase()));
            i = end;
        } else if c.is_ascii_digit() {
            let end = scan(b, i, |c| c.is_ascii_digit());
            let n = sql[i..end]
                .parse()
                .map_err(|_| PgError::syntax(&sql[i..end]))?;
            toks.push(Tok::Int(n));
            i = end;
        } else if c == b'\'' {
            let (s, end) = quoted(sql, i, '\'')?;
            toks.push(Tok::Str(s));
            i = end;
        } else if c == b'"' {
            let (s, end) = quoted(sql, i, '"')?;
            toks.push(Tok::Word(s));
            i = end;
        } else if c == b'$' {
            i = dollar(sql, i, &mut toks)?;
        } else if let Some(s) = SYMBOLS.iter().find(|s| sql[i..].starts_with(**s)) {
            toks.push(Tok::Sym(s));
            i += s.len();
        } else {
            return Err(PgError::syntax(&sql[i..i + utf8_len(c)]));
        }
    }
    Ok(toks)
}

fn scan(b: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    b[from..]
        .iter()
        .position(|&c| !keep(c))
        .map_or(b.len(), |n| from + n)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0.. => 4,
        0xe0.. => 3,
        0xc0.. => 2,
        _ => 1,
    }
}

/// A string quoted by `q`, a doubled `q` standing for itself; returns it and where it ends.
fn quoted(sql: &str, start: usize, q: char) -> Result<(String, usize), PgError> {
    let mut s = String::new();
    let mut chars = sql[start + 1..].char_indices();
    while let Some((n, c)) = chars.next() {
        if c != q {
            s.push(c);
            continue;
        }
        if sql[start + 1 + n + 1..].starts_with(q) {
            s.push(q);
            chars.next();
            continue;
        }
        return Ok((s, start + 1 + n + 1));
    }
    Err(PgError::new(
        super::super::error::SYNTAX_ERROR,
        "unterminated quoted string",
    ))
}

/// An escape string constant's body (`E'...'`, the quote at `start`): backslash escapes
/// (`\\`, `\'`, `\n`, `\t`) and doubled quotes; returns it and where it ends.
fn escaped(sql: &str, start: usize) -> Result<(String, usize), PgError> {
    let mut s = String::new();
    let mut chars = sql[start + 1..].char_indices().peekable();
    while let Some((n, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, 'n')) => s.push('\n'),
                Some((_, 't')) => s.push('\t'),
                Some((_, e)) => s.push(e),
                None => break,
            },
            '\'' if chars.peek().is_some_and(|(_, c)| *c == '\'') => {
                s.push('\'');
                chars.next();
            }
            '\'' => return Ok((s, start + 1 + n + 1)),
            c => s.push(c),
        }
    }
    Err(PgError::new(
        super::super::error::SYNTAX_ERROR,
        "unterminated quoted string",
    ))
}

/// `$n` or a dollar-quoted string starting at `start`; returns where it ends.
fn dollar(sql: &str, start: usize, toks: &mut Vec<Tok>) -> Result<usize, PgError> {
    let b = sql.as_bytes();
    let digits = scan(b, start + 1, |c| c.is_ascii_digit());
    if digits > start + 1 {
        let n = sql[start + 1..digits]
            .parse()
            .map_err(|_| PgError::syntax(&sql[start..digits]))?;
        toks.push(Tok::Param(n));
        return Ok(digits);
    }
    let tag_end = scan(b, start + 1, |c| c.is_ascii_alphanumeric() || c == b'_');
    if b.get(tag_end) != Some(&b'$') {
        return Err(PgError::syntax("$"));
    }
    let tag = &sql[start..=tag_end];
    let body_start = tag_end + 1;
    let Some(len) = sql[body_start..].find(tag) else {
        return Err(PgError::new(
            super::super::error::SYNTAX_ERROR,
            "unterminated dollar-quoted string",
        ));
    };
    toks.push(Tok::Dollar(sql[body_start..body_start + len].to_owned()));
    Ok(body_start + len + tag.len())
}

/// Splits tokens into statements at `;`, dropping empty ones (`select 1;;` is one statement).
pub fn split(toks: Vec<Tok>) -> Vec<Vec<Tok>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for t in toks {
        if t == Tok::Sym(";") {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(t);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Tok {
        Tok::Word(s.into())
    }

    #[test]
    fn tokens_of_the_vocabulary() {
        assert_eq!(
            lex("SELECT $1::text, 'it''s', 1/0 -- c\n").unwrap(),
            vec![
                w("select"),
                Tok::Param(1),
                Tok::Sym("::"),
                w("text"),
                Tok::Sym(","),
                Tok::Str("it's".into()),
                Tok::Sym(","),
                Tok::Int(1),
                Tok::Sym("/"),
                Tok::Int(0),
            ]
        );
        assert_eq!(
            lex("do $$ begin raise notice 'n'; end $$").unwrap(),
            vec![w("do"), Tok::Dollar(" begin raise notice 'n'; end ".into())]
        );
        assert_eq!(
            lex(r"E'a''b\\c\'d'").unwrap(),
            vec![Tok::Str(r"a'b\c'd".into())]
        );
        assert!(lex("select 'open").is_err());
        assert!(lex("select #").is_err());
    }

    #[test]
    fn statements_split_at_semicolons() {
        let parts = split(lex("select 1; ; select 'a;b';").unwrap());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1], vec![w("select"), Tok::Str("a;b".into())]);
    }
}
