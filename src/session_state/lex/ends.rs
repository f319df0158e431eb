//! Where each kind of token ends, scan.l's rules one function each: quoted literals (with
//! their continuations), comments, operators and numbers.

use memchr::{memchr, memchr2};

use super::Scan;

/// scan.l `op_chars`: the bytes an operator is made of.
#[inline]
pub(super) fn op_byte(b: u8) -> bool {
    const OPS: [bool; 256] = {
        let (mut table, chars) = ([false; 256], b"~!@#^&|`?+-*/%<>=");
        let mut i = 0;
        while i < chars.len() {
            table[chars[i] as usize] = true;
            i += 1;
        }
        table
    };
    OPS[usize::from(b)]
}

/// How a quoted literal reads its body (scan.l's start conditions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// `xq` (and `xus`, `U&''`): `''` is a quote; a backslash is an ordinary byte.
    Standard,
    /// `xe`: `''` is a quote and a backslash takes the next character with it.
    Escape,
    /// `xb`, `xh` (`B''`, `X''`): the first quote ends the segment.
    Bits,
}

/// The end of the quoted literal whose (first) opening quote is at `open`, read as
/// `body`, segments continued across a newline included (scan.l `xqs`).
#[inline]
pub(super) fn literal_end(sql: &[u8], open: usize, body: Body, scan: Scan) -> usize {
    let mut from = open + 1;
    loop {
        let close = match body {
            Body::Bits => memchr(b'\'', &sql[from..]).map(|n| from + n),
            Body::Standard => standard_close(sql, from),
            Body::Escape => escaped_close(sql, from, scan),
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
fn escaped_close(sql: &[u8], mut i: usize, scan: Scan) -> Option<usize> {
    while i < sql.len() {
        if scan.ascii_safe() {
            i += memchr2(b'\\', b'\'', &sql[i..])?;
        }
        match sql[i] {
            b'\\' => i += 1 + scan.char_len(sql, i + 1),
            b'\'' if sql.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return Some(i),
            _ => i += scan.char_len(sql, i),
        }
    }
    None
}

/// The closing quote of an `xq` segment from `i`: `''` is inside.
#[inline]
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
#[inline]
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
#[inline]
pub(super) fn line_end(sql: &[u8], from: usize) -> usize {
    memchr2(b'\n', b'\r', &sql[from..]).map_or(sql.len(), |n| from + n)
}

/// The end of the (nested) block comment starting at `start` (or of `sql`, unterminated):
/// each `/*` opens a level, each `*/` closes one, and neither shares a byte with the other.
pub(super) fn block_comment_end(sql: &[u8], start: usize) -> usize {
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
#[inline]
pub(super) fn operator_end(sql: &[u8], start: usize) -> usize {
    if !sql.get(start + 1).is_some_and(|&b| op_byte(b)) {
        // One byte, the usual operator: nothing to cut.
        return start + 1;
    }
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
#[inline]
pub(super) fn number_end(sql: &[u8], start: usize) -> usize {
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
#[inline]
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
#[inline]
pub(super) fn digits_end(sql: &[u8], from: usize, underscores: bool) -> usize {
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
