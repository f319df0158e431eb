//! A purpose lexer for the SQL the pooler must understand to see session state: it splits a
//! query text into statements at the semicolons PostgreSQL splits at and yields each
//! statement's tokens, with comments (`--` to CR or LF, nested `/* */`), quoted identifiers,
//! string literals (standard, `E''`, `N''`, `U&''`, `B''`, `X''`, continued across a
//! newline) and dollar-quoted strings each taken whole, so nothing inside a literal or a
//! comment is ever read as a keyword. Where a token ends follows PostgreSQL's scanner
//! (`src/backend/parser/scan.l`) rule for rule, under the session's
//! `standard_conforming_strings` and client encoding ([`Scan`]). It is not a parser: the
//! classifier (`detect`) reads the few statement shapes that matter from the tokens. Bytes,
//! not characters: keywords are ASCII, and any other byte is part of a word (PostgreSQL's
//! identifier rule for bytes >= 0x80), so a multi-byte character cannot end a token early.
//! No length limit: a text is read to its end.

mod ends;
mod scan;

pub use scan::Scan;

use ends::{
    block_comment_end, digits_end, line_end, literal_end, number_end, op_byte, operator_end, Body,
};
use memchr::{memchr, memmem};

/// One token of a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    /// An unquoted identifier or keyword, as written (compare with [`Token::is`]).
    Word(&'a [u8]),
    /// A quoted identifier, without its quotes (`""` still doubled).
    Quoted(&'a [u8]),
    /// A string literal, its prefix and quotes included (`'a'`, `E'a\'b'`, `$$x$$`); a
    /// literal continued across a newline (`'a'` LF `'b'`) is one token, the gap included.
    Str(&'a [u8]),
    /// A number, a parameter (`$1`), an operator (`::`, `<=`, `..` included) or another
    /// single byte.
    Other(&'a [u8]),
    /// A single punctuation byte: `(`, `)`, `,`, `=` (alone), `.`, `[`, `]`.
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

/// Whether `b` continues an unquoted identifier (scan.l `ident_cont`: letters, digits, `_`,
/// `$`, bytes >= 0x80).
fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Whether `b` starts an unquoted identifier (scan.l `ident_start`).
fn word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// The kind of a token that spans bytes (what [`Token`] wraps them in).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Word,
    Str,
    Other,
}

impl Kind {
    fn token(self, text: &[u8]) -> Token<'_> {
        match self {
            Kind::Word => Token::Word(text),
            Kind::Str => Token::Str(text),
            Kind::Other => Token::Other(text),
        }
    }
}

/// The tokens of one statement's text, in order.
#[derive(Debug, Clone)]
pub struct Tokens<'a> {
    sql: &'a [u8],
    at: usize,
    scan: Scan,
}

impl<'a> Tokens<'a> {
    /// The tokens of `sql` read as PostgreSQL does by default ([`Scan::STANDARD`]).
    pub fn new(sql: &'a [u8]) -> Self {
        Tokens::with(sql, 0, Scan::STANDARD)
    }

    /// The tokens of `sql` from byte `at` on (the start of a token, or white space), read
    /// with [`Scan::STANDARD`].
    pub fn from(sql: &'a [u8], at: usize) -> Self {
        Tokens::with(sql, at, Scan::STANDARD)
    }

    /// The tokens of `sql` from byte `at` on (the start of a token, or white space), read
    /// as a session with the settings `scan` reads it.
    pub fn with(sql: &'a [u8], at: usize, scan: Scan) -> Self {
        Tokens { sql, at, scan }
    }

    /// Skips white space and comments; false at the end of the text.
    #[inline]
    fn skip_blank(&mut self) -> bool {
        let sql = self.sql;
        let mut at = self.at;
        let more = loop {
            let Some(&b) = sql.get(at) else {
                break false;
            };
            match b {
                // scan.l `space`: `\v` since PostgreSQL 16 (before, it is a syntax error).
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c' => at += 1,
                b'-' if sql.get(at + 1) == Some(&b'-') => at = line_end(sql, at),
                b'/' if sql.get(at + 1) == Some(&b'*') => at = block_comment_end(sql, at),
                _ => break true,
            }
        };
        self.at = at;
        more
    }

    /// The next token, and whether it is a top-level `;` ending the statement.
    fn next_token(&mut self) -> Option<(Token<'a>, bool)> {
        if !self.skip_blank() {
            return None;
        }
        let (sql, start) = (self.sql, self.at);
        let b = sql[start];
        let next = sql.get(start + 1).copied();
        let (end, kind) = match b {
            b';' => return Some((self.single(Token::Punct(b';')), true)),
            b'(' | b')' | b',' | b'[' | b']' => return Some((self.single(Token::Punct(b)), false)),
            b'.' if next == Some(b'.') => (start + 2, Kind::Other),
            b'.' if !next.is_some_and(|n| n.is_ascii_digit()) => {
                return Some((self.single(Token::Punct(b'.')), false))
            }
            b'0'..=b'9' | b'.' => (number_end(sql, start), Kind::Other),
            b'"' => return Some((self.quoted_identifier(), false)),
            b'\'' => (
                literal_end(sql, start, self.scan.plain(), self.scan),
                Kind::Str,
            ),
            b'$' => self.dollar(start),
            b':' => (
                start + 1 + usize::from(matches!(next, Some(b':' | b'='))),
                Kind::Other,
            ),
            b if word_start(b) => self.word(start),
            b if op_byte(b) => {
                let end = operator_end(sql, start);
                if end == start + 1 && b == b'=' {
                    return Some((self.single(Token::Punct(b'=')), false));
                }
                (end, Kind::Other)
            }
            _ => (start + 1, Kind::Other),
        };
        self.at = end;
        Some((kind.token(&sql[start..end]), false))
    }

    fn single(&mut self, token: Token<'a>) -> Token<'a> {
        self.at += 1;
        token
    }

    /// `"..."` (`""` inside is part of it), as its inside; unterminated, to the end.
    fn quoted_identifier(&mut self) -> Token<'a> {
        let (sql, start) = (self.sql, self.at);
        let mut i = start + 1;
        let inner_end = loop {
            match memchr(b'"', &sql[i..]) {
                Some(n) if sql.get(i + n + 1) == Some(&b'"') => i += n + 2,
                Some(n) => break i + n,
                None => break sql.len(),
            }
        };
        self.at = (inner_end + 1).min(sql.len());
        Token::Quoted(&sql[start + 1..inner_end])
    }

    /// A word, or a literal a word's letters prefix: `E''`, `B''`, `X''`, `N''`, `U&''`.
    #[inline]
    fn word(&self, start: usize) -> (usize, Kind) {
        let sql = self.sql;
        let quote_at = |n: usize| sql.get(start + n) == Some(&b'\'');
        let body = match sql[start].to_ascii_lowercase() {
            b'e' if quote_at(1) => Some((1, Body::Escape)),
            b'b' | b'x' if quote_at(1) => Some((1, Body::Bits)),
            // `N` is NCHAR, then an ordinary literal under the session's rules.
            b'n' if quote_at(1) => Some((1, self.scan.plain())),
            b'u' if sql.get(start + 1) == Some(&b'&') && quote_at(2) => Some((2, Body::Standard)),
            _ => None,
        };
        match body {
            Some((quote, body)) => (
                literal_end(self.sql, start + quote, body, self.scan),
                Kind::Str,
            ),
            None => (self.word_end(start), Kind::Word),
        }
    }

    /// The end of the identifier starting at `start`; a multi-byte character is taken
    /// whole, so a trail byte that looks like ASCII stays inside it.
    #[inline]
    fn word_end(&self, start: usize) -> usize {
        let sql = self.sql;
        if self.scan.ascii_safe() {
            let rest = &sql[start..];
            return start
                + rest
                    .iter()
                    .position(|&b| !word_byte(b))
                    .unwrap_or(rest.len());
        }
        let mut i = start;
        while sql.get(i).is_some_and(|&b| word_byte(b)) {
            i += self.scan.char_len(sql, i);
        }
        i
    }

    /// A dollar-quoted string (`$$...$$`, `$tag$...$tag$`), a parameter (`$1`) or a lone
    /// `$` (scan.l `dolqfailed`: what follows is read again as a word).
    fn dollar(&self, start: usize) -> (usize, Kind) {
        let sql = self.sql;
        match self.dollar_tag_end(start) {
            Some(body) => {
                let tag = &sql[start..body];
                let end =
                    memmem::find(&sql[body..], tag).map_or(sql.len(), |n| body + n + tag.len());
                (end, Kind::Str)
            }
            None => (digits_end(sql, start + 1, false), Kind::Other),
        }
    }

    /// The end of the opening tag at `start` (scan.l `dolqdelim`: `$`, an optional name in
    /// the shape of an identifier without `$`, `$`), if it is one.
    fn dollar_tag_end(&self, start: usize) -> Option<usize> {
        let sql = self.sql;
        let mut i = start + 1;
        match sql.get(i) {
            Some(b'$') => return Some(i + 1),
            Some(&b) if word_start(b) => {}
            _ => return None,
        }
        while let Some(&b) = sql.get(i) {
            match b {
                b'$' => return Some(i + 1),
                b if word_byte(b) => i += self.scan.char_len(sql, i),
                _ => return None,
            }
        }
        None
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let (token, _) = self.next_token()?;
        Some(token)
    }
}

/// The statements of a query text read with [`Scan::STANDARD`]: see [`statements_with`].
pub fn statements(sql: &[u8]) -> Statements<'_> {
    statements_with(sql, Scan::STANDARD)
}

/// The statements of a query text as a session with the settings `scan` has them read,
/// split at top-level semicolons; empty ones are skipped. Each is the text from its first
/// token to the end of its last (the semicolon excluded); read its tokens with
/// [`Tokens::with`] and the same `scan`.
///
/// One difference from PostgreSQL is deliberate: the `;`s inside a `BEGIN ATOMIC ... END`
/// function body end statements here too (PostgreSQL's grammar, not its scanner, keeps
/// them in), so such a body's statements are also yielded on their own. Splitting more
/// never hides a statement PostgreSQL runs; guessing the body's end by keywords (as psql
/// does) could, since `CASE` and `END` may also be column labels.
pub fn statements_with(sql: &[u8], scan: Scan) -> Statements<'_> {
    Statements {
        tokens: Tokens::with(sql, 0, scan),
    }
}

/// The statements of a query text (see [`statements_with`]).
#[derive(Debug, Clone)]
pub struct Statements<'a> {
    tokens: Tokens<'a>,
}

impl<'a> Iterator for Statements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let t = &mut self.tokens;
        loop {
            if !t.skip_blank() {
                return None;
            }
            let start = t.at;
            let mut end = start;
            while let Some((_, semicolon)) = t.next_token() {
                if semicolon {
                    break;
                }
                end = t.at;
            }
            if end > start {
                return Some(&t.sql[start..end]);
            }
        }
    }
}

#[cfg(test)]
mod tests;
