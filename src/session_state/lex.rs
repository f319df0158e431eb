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

mod scan;

pub use scan::Scan;

use memchr::{memchr, memchr2, memmem};

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

/// scan.l `op_chars`: the bytes an operator is made of.
fn op_byte(b: u8) -> bool {
    matches!(
        b,
        b'~' | b'!'
            | b'@'
            | b'#'
            | b'^'
            | b'&'
            | b'|'
            | b'`'
            | b'?'
            | b'+'
            | b'-'
            | b'*'
            | b'/'
            | b'%'
            | b'<'
            | b'>'
            | b'='
    )
}

/// How a quoted literal reads its body (scan.l's start conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// `xq` (and `xus`, `U&''`): `''` is a quote; a backslash is an ordinary byte.
    Standard,
    /// `xe`: `''` is a quote and a backslash takes the next character with it.
    Escape,
    /// `xb`, `xh` (`B''`, `X''`): the first quote ends the segment.
    Bits,
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
        let (end, token): (usize, fn(&'a [u8]) -> Token<'a>) = match b {
            b';' => return Some((self.single(Token::Punct(b';')), true)),
            b'(' | b')' | b',' | b'[' | b']' => return Some((self.single(Token::Punct(b)), false)),
            b'.' if next == Some(b'.') => (start + 2, Token::Other),
            b'.' if !next.is_some_and(|n| n.is_ascii_digit()) => {
                return Some((self.single(Token::Punct(b'.')), false))
            }
            b'0'..=b'9' | b'.' => (number_end(sql, start), Token::Other),
            b'"' => return Some((self.quoted_identifier(), false)),
            b'\'' => (self.literal_end(start, self.scan.plain()), Token::Str),
            b'$' => self.dollar(start),
            b':' => (
                start + 1 + usize::from(matches!(next, Some(b':' | b'='))),
                Token::Other,
            ),
            b if word_start(b) => self.word(start),
            b if op_byte(b) => {
                let end = operator_end(sql, start);
                if end == start + 1 && b == b'=' {
                    return Some((self.single(Token::Punct(b'=')), false));
                }
                (end, Token::Other)
            }
            _ => (start + 1, Token::Other),
        };
        self.at = end;
        Some((token(&sql[start..end]), false))
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
    fn word(&self, start: usize) -> (usize, fn(&'a [u8]) -> Token<'a>) {
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
            Some((quote, body)) => (self.literal_end(start + quote, body), Token::Str),
            None => (self.word_end(start), Token::Word),
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
    fn dollar(&self, start: usize) -> (usize, fn(&'a [u8]) -> Token<'a>) {
        let sql = self.sql;
        match self.dollar_tag_end(start) {
            Some(body) => {
                let tag = &sql[start..body];
                let end =
                    memmem::find(&sql[body..], tag).map_or(sql.len(), |n| body + n + tag.len());
                (end, Token::Str)
            }
            None => (digits_end(sql, start + 1, false), Token::Other),
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

    /// The end of the quoted literal whose (first) opening quote is at `open`, read as
    /// `body`, segments continued across a newline included (scan.l `xqs`).
    fn literal_end(&self, open: usize, body: Body) -> usize {
        let sql = self.sql;
        let mut from = open + 1;
        loop {
            let close = match body {
                Body::Bits => memchr(b'\'', &sql[from..]).map(|n| from + n),
                Body::Standard => standard_close(sql, from),
                Body::Escape => self.escaped_close(from),
            };
            let Some(close) = close else {
                return sql.len();
            };
            match continued_at(sql, close + 1) {
                Some(quote) => from = quote + 1,
                None => return close + 1,
            }
        }
    }

    /// The closing quote of an `xe` segment from `i`: `''` and a backslash with the
    /// character after it are inside.
    fn escaped_close(&self, mut i: usize) -> Option<usize> {
        let sql = self.sql;
        while i < sql.len() {
            if self.scan.ascii_safe() {
                i += memchr2(b'\\', b'\'', &sql[i..])?;
            }
            match sql[i] {
                b'\\' => i += 1 + self.scan.char_len(sql, i + 1),
                b'\'' if sql.get(i + 1) == Some(&b'\'') => i += 2,
                b'\'' => return Some(i),
                _ => i += self.scan.char_len(sql, i),
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

/// The closing quote of an `xq` segment from `i`: `''` is inside.
fn standard_close(sql: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let q = i + memchr(b'\'', &sql[i..])?;
        if sql.get(q + 1) != Some(&b'\'') {
            return Some(q);
        }
        i = q + 2;
    }
}

/// Where a quoted literal goes on after its closing quote (scan.l `quotecontinue`): white
/// space and `--` comments holding at least one newline, then a quote; that quote's index.
fn continued_at(sql: &[u8], mut i: usize) -> Option<usize> {
    let mut newline = false;
    loop {
        match *sql.get(i)? {
            b' ' | b'\t' | b'\x0b' | b'\x0c' => i += 1,
            b'\n' | b'\r' => {
                newline = true;
                i += 1;
            }
            b'-' if sql.get(i + 1) == Some(&b'-') => i = line_end(sql, i),
            b'\'' if newline => return Some(i),
            _ => return None,
        }
    }
}

/// Where a `--` comment from `from` ends: at its CR or LF (scan.l `newline`), or the end.
fn line_end(sql: &[u8], from: usize) -> usize {
    memchr2(b'\n', b'\r', &sql[from..]).map_or(sql.len(), |n| from + n)
}

/// The end of the (nested) block comment starting at `start` (or of `sql`, unterminated):
/// each `/*` opens a level, each `*/` closes one, and neither shares a byte with the other.
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

/// The end of the operator starting at `start` (scan.l `operator`): a run of `op_chars`
/// cut before a `/*` or `--` inside it, then, unless it holds one of ``~!@#^&|`?%``,
/// without its trailing `+` and `-` (`=-` is `=` then `-`).
fn operator_end(sql: &[u8], start: usize) -> usize {
    let run = start + sql[start..].iter().take_while(|&&b| op_byte(b)).count();
    let cut = (start + 1..run.saturating_sub(1))
        .find(|&i| matches!(&sql[i..i + 2], b"/*" | b"--"))
        .unwrap_or(run);
    let mut end = cut;
    let body = &sql[start..cut];
    if body.len() > 1
        && !body[..body.len() - 1]
            .iter()
            .any(|b| b"~!@#^&|`?%".contains(b))
    {
        while end > start + 1 && matches!(sql[end - 1], b'+' | b'-') {
            end -= 1;
        }
    }
    end
}

/// The end of a number starting at `start` (a digit, or `.` before one): scan.l's
/// `decinteger`, `hexinteger` (and octal, binary), `numeric` and `real`. What follows
/// is a token of its own (`1e'x'` is `1` then `e'x'`, as PostgreSQL before 15 reads it;
/// from 15 on it is an error, so nothing of such a text runs).
fn number_end(sql: &[u8], start: usize) -> usize {
    if let Some(end) = radix_end(sql, start) {
        return end;
    }
    let mut i = digits_end(sql, start, true);
    if sql.get(i) == Some(&b'.') && sql.get(i + 1) != Some(&b'.') {
        i = digits_end(sql, i + 1, true);
    }
    if matches!(sql.get(i), Some(b'e' | b'E')) {
        let j = i + 1 + usize::from(matches!(sql.get(i + 1), Some(b'+' | b'-')));
        if sql.get(j).is_some_and(u8::is_ascii_digit) {
            i = digits_end(sql, j, true);
        }
    }
    i
}

/// `0x1F`, `0o17`, `0b1` (with `_` between digits), PostgreSQL 16's integers.
fn radix_end(sql: &[u8], start: usize) -> Option<usize> {
    if sql[start] != b'0' {
        return None;
    }
    let digit: fn(&u8) -> bool = match sql.get(start + 1)?.to_ascii_lowercase() {
        b'x' => u8::is_ascii_hexdigit,
        b'o' => |b| (b'0'..=b'7').contains(b),
        b'b' => |b| matches!(b, b'0' | b'1'),
        _ => return None,
    };
    let mut i = start + 2;
    loop {
        let skip = usize::from(sql.get(i) == Some(&b'_'));
        match sql.get(i + skip) {
            Some(d) if digit(d) => i += skip + 1,
            _ => break,
        }
    }
    (i > start + 2).then_some(i)
}

/// The end of the digits from `from`; with `underscores`, a `_` between two digits is
/// part of them (scan.l `decinteger`; parameters take none).
fn digits_end(sql: &[u8], from: usize, underscores: bool) -> usize {
    let mut i = from;
    while let Some(&b) = sql.get(i) {
        let digit_after = |n: usize| sql.get(n).is_some_and(u8::is_ascii_digit);
        if b.is_ascii_digit() {
            i += 1;
        } else if underscores && b == b'_' && i > from && digit_after(i + 1) {
            i += 2;
        } else {
            break;
        }
    }
    i
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
