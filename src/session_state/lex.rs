//! A purpose lexer for the SQL the pooler must understand to see session state: it splits a
//! query text into statements at the semicolons PostgreSQL splits at and yields each
//! statement's tokens, with comments (`--`, nested `/* */`), quoted identifiers, string
//! literals (standard, `E''`, `U&''`, `B''`, `X''`) and dollar-quoted strings each taken
//! whole, so nothing inside a literal or a comment is ever read as a keyword. It is not a
//! parser: the classifier (`detect`) reads the few statement shapes that matter from the
//! tokens. Bytes, not characters: keywords are ASCII, and any other byte is part of a word
//! (PostgreSQL's identifier rule for bytes >= 0x80), so a multi-byte character cannot end a
//! token early.

/// One token of a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    /// An unquoted identifier or keyword, as written (compare with [`Token::is`]).
    Word(&'a [u8]),
    /// A quoted identifier, without its quotes (`""` still doubled).
    Quoted(&'a [u8]),
    /// A string literal, its prefix and quotes included (`'a'`, `E'a\'b'`, `$$x$$`).
    Str(&'a [u8]),
    /// A number, a parameter (`$1`) or an operator: one or more bytes.
    Other(&'a [u8]),
    /// A single punctuation byte: `(`, `)`, `,`, `=`, `.`, `[`, `]`.
    Punct(u8),
}

impl Token<'_> {
    /// Whether this is the keyword `kw` (lower-case ASCII), in any case.
    pub fn is(&self, kw: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(kw.as_bytes()))
    }

    /// The bytes as written.
    pub fn text(&self) -> &[u8] {
        match *self {
            Token::Word(t) | Token::Quoted(t) | Token::Str(t) | Token::Other(t) => t,
            Token::Punct(_) => &[],
        }
    }
}

/// Whether `b` continues an unquoted identifier (letters, digits, `_`, `$`, non-ASCII).
fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

fn word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// The tokens of one statement's text, in order.
#[derive(Debug, Clone)]
pub struct Tokens<'a> {
    sql: &'a [u8],
    at: usize,
}

impl<'a> Tokens<'a> {
    pub fn new(sql: &'a [u8]) -> Self {
        Tokens { sql, at: 0 }
    }

    /// The tokens of `sql` from byte `at` on (the start of a token, or white space).
    pub fn from(sql: &'a [u8], at: usize) -> Self {
        Tokens { sql, at }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let (token, _) = next_token(self.sql, &mut self.at)?;
        Some(token)
    }
}

/// Skips whitespace and comments from `*at`; returns false at the end of `sql`.
fn skip_blank(sql: &[u8], at: &mut usize) -> bool {
    loop {
        let Some(&b) = sql.get(*at) else {
            return false;
        };
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => *at += 1,
            b'-' if sql.get(*at + 1) == Some(&b'-') => {
                *at = memchr::memchr(b'\n', &sql[*at..]).map_or(sql.len(), |n| *at + n + 1);
            }
            b'/' if sql.get(*at + 1) == Some(&b'*') => *at = block_comment_end(sql, *at),
            _ => return true,
        }
    }
}

/// The end of the (nested) block comment starting at `start` (or of `sql`, unterminated).
fn block_comment_end(sql: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < sql.len() {
        match (sql[i], sql[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    sql.len()
}

/// The end of the quoted run starting at `start` (`quote` doubled inside it is part of it);
/// with `backslash`, a backslash escapes the next byte (`E''` strings).
fn quoted_end(sql: &[u8], start: usize, quote: u8, backslash: bool) -> usize {
    let mut i = start + 1;
    while i < sql.len() {
        let b = sql[i];
        if backslash && b == b'\\' {
            i += 2;
        } else if b == quote {
            if sql.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return i + 1;
            }
        } else {
            i += 1;
        }
    }
    sql.len()
}

/// A dollar quote's opening tag at `start` (`$$`, `$tag$`), as its length.
fn dollar_tag(sql: &[u8], start: usize) -> Option<usize> {
    let rest = &sql[start + 1..];
    let end = rest.iter().position(|&b| !word_byte(b) || b == b'$')?;
    if rest[end] != b'$' || rest.first().is_some_and(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(end + 2)
}

/// The next token from `*at`, and whether a top-level `;` ends the statement before it
/// (then the token is `Punct(b';')`).
fn next_token<'a>(sql: &'a [u8], at: &mut usize) -> Option<(Token<'a>, bool)> {
    if !skip_blank(sql, at) {
        return None;
    }
    let start = *at;
    let b = sql[start];
    let quote = |from: usize, backslash: bool| (quoted_end(sql, from, b'\'', backslash), true);
    let (end, literal) = match b {
        b';' => {
            *at += 1;
            return Some((Token::Punct(b';'), true));
        }
        b'(' | b')' | b',' | b'=' | b'.' | b'[' | b']' => {
            *at += 1;
            return Some((Token::Punct(b), false));
        }
        b'"' => {
            let end = quoted_end(sql, start, b'"', false);
            *at = end;
            let inner_end = if end > start + 1 && sql[end - 1] == b'"' {
                end - 1
            } else {
                end
            };
            return Some((Token::Quoted(&sql[start + 1..inner_end]), false));
        }
        b'\'' => quote(start, false),
        b'$' => match dollar_tag(sql, start) {
            Some(tag_len) => {
                let tag = &sql[start..start + tag_len];
                let body = start + tag_len;
                let end = memchr::memmem::find(&sql[body..], tag)
                    .map_or(sql.len(), |n| body + n + tag_len);
                (end, true)
            }
            // `$1`: a parameter.
            None => (run_end(sql, start + 1, |b| b.is_ascii_digit()), false),
        },
        // E'..' (backslash escapes), B'..', X'..', N'..', U&'..': prefixed literals.
        b'e' | b'E' if sql.get(start + 1) == Some(&b'\'') => quote(start + 1, true),
        b'b' | b'B' | b'x' | b'X' | b'n' | b'N' if sql.get(start + 1) == Some(&b'\'') => {
            quote(start + 1, false)
        }
        b'u' | b'U' if sql.get(start + 1..start + 3) == Some(b"&'") => quote(start + 2, false),
        b if word_start(b) => (run_end(sql, start, word_byte), false),
        b if b.is_ascii_digit() => (
            run_end(sql, start, |b| b.is_ascii_alphanumeric() || b == b'.'),
            false,
        ),
        _ => (operator_end(sql, start), false),
    };
    *at = end;
    let text = &sql[start..end];
    let token = if literal {
        Token::Str(text)
    } else if word_start(b) {
        Token::Word(text)
    } else {
        Token::Other(text)
    };
    Some((token, false))
}

/// The end of an operator starting at `start`: a run of operator bytes, stopping before a
/// comment's start.
fn operator_end(sql: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < sql.len() && b"+-*/<>~!@#%^&|`?:".contains(&sql[i]) {
        let next = sql.get(i + 1);
        if (sql[i] == b'-' && next == Some(&b'-')) || (sql[i] == b'/' && next == Some(&b'*')) {
            break;
        }
        i += 1;
    }
    i
}

fn run_end(sql: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    from + sql[from..]
        .iter()
        .position(|&b| !keep(b))
        .unwrap_or(sql.len() - from)
}

/// The statements of a query text, split at top-level semicolons; empty ones are skipped.
/// Each is the text from its first token to its end (the semicolon excluded).
pub fn statements(sql: &[u8]) -> Statements<'_> {
    Statements { sql, at: 0 }
}

#[derive(Debug, Clone)]
pub struct Statements<'a> {
    sql: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Statements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            if !skip_blank(self.sql, &mut self.at) {
                return None;
            }
            let start = self.at;
            let mut end = start;
            while let Some((token, semicolon)) = next_token(self.sql, &mut self.at) {
                if semicolon {
                    break;
                }
                let _ = token;
                end = self.at;
            }
            if end > start {
                return Some(&self.sql[start..end]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(sql: &str) -> Vec<String> {
        Tokens::new(sql.as_bytes())
            .map(|t| match t {
                Token::Word(w) => format!("w:{}", String::from_utf8_lossy(w)),
                Token::Quoted(q) => format!("q:{}", String::from_utf8_lossy(q)),
                Token::Str(s) => format!("s:{}", String::from_utf8_lossy(s)),
                Token::Other(o) => format!("o:{}", String::from_utf8_lossy(o)),
                Token::Punct(p) => format!("p:{}", p as char),
            })
            .collect()
    }

    fn stmts(sql: &str) -> Vec<String> {
        statements(sql.as_bytes())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    }

    #[test]
    fn literals_and_comments_are_whole_tokens() {
        assert_eq!(
            words("SET search_path TO 'a;b' -- set x\n/* SET /* nested */ y */ , \"Q;\"\"x\""),
            [
                "w:SET",
                "w:search_path",
                "w:TO",
                "s:'a;b'",
                "p:,",
                "q:Q;\"\"x"
            ]
        );
        assert_eq!(
            words("select $f$ ; set x $f$, $$a$$, $1"),
            [
                "w:select",
                "s:$f$ ; set x $f$",
                "p:,",
                "s:$$a$$",
                "p:,",
                "o:$1"
            ]
        );
        assert_eq!(
            words("E'it\\'s; set' U&'d\\0061' x'1f' b'01'"),
            ["s:E'it\\'s; set'", "s:U&'d\\0061'", "s:x'1f'", "s:b'01'"]
        );
        assert_eq!(
            words("a::int<>-1 /*c*/"),
            ["w:a", "o:::", "w:int", "o:<>-", "o:1"]
        );
    }

    #[test]
    fn statements_split_at_top_level_semicolons_only() {
        assert_eq!(
            stmts("select 1; select ';' ; ;select $$;$$ -- ;\n;/*;*/select \"a;\""),
            ["select 1", "select ';'", "select $$;$$", "select \"a;\""]
        );
        assert_eq!(stmts("  -- only a comment\n ; "), Vec::<String>::new());
        // Unterminated literals and comments end with the text, never panic.
        assert_eq!(stmts("select 'abc"), ["select 'abc"]);
        assert_eq!(stmts("select /* x"), ["select"]);
        assert_eq!(stmts("select $a$ x"), ["select $a$ x"]);
    }

    #[test]
    fn keywords_in_any_case() {
        let t: Vec<_> = Tokens::new(b"sEt Reset").collect();
        assert!(t[0].is("set") && t[1].is("reset") && !t[0].is("reset"));
    }
}
