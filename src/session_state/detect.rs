//! What a statement does to session state, read from its tokens: settings (`SET`, `RESET`,
//! `set_config(.., .., false)`), SQL prepared statements, the state the pooler cannot move
//! between servers (temp tables, `WITH HOLD` cursors, session advisory locks, `LOAD`), what
//! ends or may end that state (`DISCARD`, `CLOSE`, `pg_advisory_unlock[_all]()`, `DROP`),
//! `LISTEN`/`UNLISTEN`, and the transaction boundaries that decide whether a `SET` sticks.
//!
//! The hot path is a plain query: [`effects`] looks at the first word of each statement and
//! reads further only for the few that can matter, and a `SELECT` is scanned for the three
//! function names that can change a session only when its text holds one of them.

use super::calls;
pub use super::effect::{Discard, Effect, PinReason, Unseen};
use super::lex::{statements, statements_with, Scan, Token, Tokens};

/// The effects of every statement of `sql`, in order, each with the number of its
/// statement (from 0): a multi-statement Query's effects stick only as far as its
/// statements succeed.
pub fn effects(sql: &[u8], scan: Scan, out: &mut Vec<(usize, Effect)>) {
    if plainly_nothing(sql) {
        return;
    }
    if let Some(stmt) = single(sql) {
        // One statement (the usual case): no need to lex it for its boundaries.
        statement_effects(stmt, scan, &mut |e| out.push((0, e)));
        return;
    }
    for (i, stmt) in statements_with(sql, scan).enumerate() {
        statement_effects(stmt, scan, &mut |e| out.push((i, e)));
    }
}

/// The usual query, settled in one pass over its text, 16 bytes at a time: a `SELECT` with
/// no `;` but a last one (one statement, whatever its quotes hold), no `(` (no function call)
/// and no `INTO` makes no session state. Anything else is read in full.
pub fn plainly_nothing(sql: &[u8]) -> bool {
    // `select` and a blank, without case, from one load.
    let Some(head) = sql.get(..7) else {
        return false;
    };
    let word = u64::from_le_bytes([head[0], head[1], head[2], head[3], head[4], head[5], 0, 0]);
    if word | 0x2020_2020_2020 != u64::from_le_bytes(*b"select\0\0")
        || !head[6].is_ascii_whitespace()
    {
        return false;
    }
    // A last `;` (the usual end) is not scanned for; a `;` the scan meets is judged by what
    // follows it in the whole `text`.
    let text = &sql[7..];
    let rest = match text {
        [rest @ .., b';'] => rest,
        rest => rest,
    };
    let mut at = 0;
    // Two words a round: four (the loop's own work shared by more bytes) cost more where the
    // last bytes are read again as a block of that size.
    while let Some(c) = rest[at..].first_chunk::<16>() {
        if let Some(verdict) = settle_words(text, at, block_flags::<2>(c)) {
            return verdict;
        }
        at += 16;
    }
    let left = rest.len() - at;
    if left == 0 {
        return true;
    }
    // The last bytes, read as the block that ends the text, the flags of the bytes read
    // above masked off (reading one twice would be harmless, only slower).
    if let Some(c) = rest.last_chunk::<16>() {
        let mut flags = block_flags::<2>(c);
        mask_seen(&mut flags, 16 - left);
        return settle_words(text, rest.len() - 16, flags).unwrap_or(true);
    }
    if let (Some(first), Some(last)) = (rest.first_chunk::<8>(), rest.last_chunk::<8>()) {
        // 8 to 15 bytes: two words, overlapping.
        if let Some(verdict) = settle_words(text, 0, block_flags::<1>(first)) {
            return verdict;
        }
        let mut flags = block_flags::<1>(last);
        mask_seen(&mut flags, 16 - rest.len());
        return settle_words(text, rest.len() - 8, flags).unwrap_or(true);
    }
    // A short text: byte by byte.
    for i in 0..rest.len() {
        match settles(text, i) {
            Some(true) => return true,
            Some(false) => {}
            None => return false,
        }
    }
    true
}

/// The flags of a block's `N` words: the high bit of each byte that may be a `;`, a `(` or
/// an `i` in either case (the lowest flag of a word is exact, those above it are checked
/// like it).
#[inline(always)]
fn block_flags<const N: usize>(c: &[u8]) -> [u64; N] {
    std::array::from_fn(|k| {
        let w = c.get(8 * k..8 * k + 8).unwrap_or_default();
        word_flags(u64::from_le_bytes(w.try_into().unwrap_or_default()))
    })
}

/// Clears the flags of a block's first `seen` bytes.
#[inline(always)]
fn mask_seen<const N: usize>(flags: &mut [u64; N], seen: usize) {
    for (k, f) in flags.iter_mut().enumerate() {
        let from = 8 * k;
        if seen >= from + 8 {
            *f = 0;
        } else if seen > from {
            *f &= u64::MAX << (8 * (seen - from));
        }
    }
}

/// The flagged bytes of the block at `base` of `text`, in order: `Some` verdict as soon as
/// one settles the text, `None` to read on.
#[inline(always)]
fn settle_words<const N: usize>(text: &[u8], base: usize, flags: [u64; N]) -> Option<bool> {
    if flags.iter().fold(0, |a, f| a | f) == 0 {
        return None;
    }
    for (k, &f) in flags.iter().enumerate() {
        if f != 0 {
            if let Some(verdict) = settle(text, base + 8 * k, f) {
                return Some(verdict);
            }
        }
    }
    None
}

#[inline(always)]
fn word_flags(w: u64) -> u64 {
    // Folded once: `;` and `(` keep their bit 5 set, so only they (and two control bytes,
    // told apart by `settles`) fold onto themselves, as `I` folds onto `i`. The classic
    // zero-byte test of each, merged; the targets are ASCII, so a byte's high bit is the
    // same in each XOR as in the text.
    let v = w | splat(0x20);
    let ones = splat(0x01);
    ((v ^ splat(b';')).wrapping_sub(ones)
        | (v ^ splat(b'(')).wrapping_sub(ones)
        | (v ^ splat(b'i')).wrapping_sub(ones))
        & !v
        & splat(0x80)
}

/// The flagged bytes of the word at `base` of `text`, in order: `Some` verdict as soon as one
/// settles the text, `None` to read on.
#[inline(always)]
fn settle(text: &[u8], base: usize, mut flags: u64) -> Option<bool> {
    while flags != 0 {
        let i = base + (flags.trailing_zeros() / 8) as usize;
        flags &= flags - 1;
        match settles(text, i) {
            Some(true) => return Some(true),
            Some(false) => {}
            None => return Some(false),
        }
    }
    None
}

/// A byte repeated eight times.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// What the byte at `i` of `text` means for the quick path: `None` for a `(`, an `INTO` or a
/// `;` with more after it; `Some(true)` for a last `;` (the text is done); `Some(false)` for
/// anything else.
#[inline(always)]
fn settles(text: &[u8], i: usize) -> Option<bool> {
    match text[i] {
        b'(' => None,
        b';' => text[i + 1..]
            .iter()
            .all(u8::is_ascii_whitespace)
            .then_some(true),
        // Folded, only `into` in any case matches (each letter's other case differs in bit
        // 5 alone).
        b'i' | b'I'
            if text[i..].first_chunk::<4>().is_some_and(|w| {
                u32::from_le_bytes(*w) | 0x2020_2020 == u32::from_le_bytes(*b"into")
            }) =>
        {
            None
        }
        _ => Some(false),
    }
}

/// `sql` as its only statement when it holds no `;` but a last one followed by nothing but
/// white space: then there is one statement whatever its quotes hold, found without a lexer.
fn single(sql: &[u8]) -> Option<&[u8]> {
    let stmt = match memchr::memchr(b';', sql) {
        None => sql.trim_ascii(),
        Some(i) if sql[i + 1..].iter().all(u8::is_ascii_whitespace) => sql[..i].trim_ascii(),
        Some(_) => return None,
    };
    // A comment first: the lexer skips it, as it does between statements.
    (!matches!(stmt.first(), Some(b'-' | b'/'))).then_some(stmt)
}

/// A Query that is one `LISTEN` or `UNLISTEN` and nothing else (the pool's listening
/// connection serves it): the statement's effect, its channel as PostgreSQL names it
/// (folded, and cut to the 63 bytes of an identifier).
pub fn subscription(sql: &[u8]) -> Option<Effect> {
    let stmt = single(sql)?;
    // Cheap first: most Queries begin with neither word.
    if !matches!(stmt.first(), Some(b'l' | b'L' | b'u' | b'U')) {
        return None;
    }
    let mut t = Tokens::new(stmt);
    let verb = t.next()?;
    let e = if verb.is("listen") {
        Effect::Listen {
            channel: identifier(name_of(&t.next()?)?),
        }
    } else if verb.is("unlisten") {
        match t.next()? {
            Token::Other(b"*") => Effect::Unlisten { channel: None },
            n => Effect::Unlisten {
                channel: Some(identifier(name_of(&n)?)),
            },
        }
    } else {
        return None;
    };
    t.next().is_none().then_some(e)
}

/// The database a Query or Parse text that is one `DROP DATABASE`, `ALTER DATABASE ...
/// RENAME` or `CREATE DATABASE ... TEMPLATE` needs free of other sessions (PostgreSQL
/// refuses it while any is connected there): its name as PostgreSQL folds it.
pub fn database_needed_free(sql: &[u8]) -> Option<String> {
    let stmt = single(sql)?;
    // Cheap first: most texts begin with none of the three verbs.
    if !matches!(stmt.first(), Some(b'd' | b'D' | b'a' | b'A' | b'c' | b'C')) {
        return None;
    }
    let mut t = Tokens::new(stmt);
    let verb = t.next()?;
    if !t.next()?.is("database") {
        return None;
    }
    let name = if verb.is("drop") {
        let mut n = t.next()?;
        if n.is("if") {
            if !t.next()?.is("exists") {
                return None;
            }
            n = t.next()?;
        }
        name_of(&n)?
    } else if verb.is("alter") {
        let n = name_of(&t.next()?)?;
        if !t.next()?.is("rename") {
            return None;
        }
        n
    } else if verb.is("create") {
        let mut t = t.skip_while(|tok| !tok.is("template"));
        t.next()?;
        let mut n = t.next()?;
        if n == Token::Punct(b'=') {
            n = t.next()?;
        }
        if n.is("default") {
            return None;
        }
        name_of(&n)?
    } else {
        return None;
    };
    Some(identifier(name))
}

/// A name cut as PostgreSQL cuts an identifier: to at most 63 bytes, whole characters.
fn identifier(mut name: String) -> String {
    const MAX: usize = 63;
    if name.len() > MAX {
        let mut end = MAX;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

/// The most that the unseen work of `sql` (a Query's or Parse's text) may have left on its
/// server, if it does any.
pub fn unseen(sql: &[u8], scan: Scan) -> Option<Unseen> {
    let mut out = Vec::new();
    effects(sql, scan, &mut out);
    unseen_in(&out)
}

/// The most that the unseen work among `found` may have left, if any.
pub fn unseen_in(found: &[(usize, Effect)]) -> Option<Unseen> {
    found
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::Unseen(u) => Some(*u),
            _ => None,
        })
        .max()
}

/// What an `EXECUTE` of SQL prepared statement `prepare` (its `PREPARE name AS ...` text)
/// may leave on its server: the statement runs where the pooler cannot read it, so whatever
/// it would do to the session (a setting, a lock, a call) counts as unseen work.
pub fn unseen_by_execute(prepare: &[u8], scan: Scan) -> Option<Unseen> {
    let mut t = Tokens::with(prepare, 0, scan);
    let mut depth = 0u32;
    let body = loop {
        match t.next()? {
            Token::Punct(b'(') => depth += 1,
            Token::Punct(b')') => depth = depth.saturating_sub(1),
            ref w if depth == 0 && w.is("as") => match t.next() {
                Some(Token::Word(w)) => {
                    break &prepare[w.as_ptr() as usize - prepare.as_ptr() as usize..];
                }
                _ => return Some(Unseen::Any),
            },
            _ => {}
        }
    };
    let mut out = Vec::new();
    statement_effects(body, scan, &mut |e| out.push((0, e)));
    match unseen_in(&out) {
        Some(u) => Some(u),
        None => out
            .iter()
            .any(|(_, e)| !matches!(e, Effect::Local))
            .then_some(Unseen::Any),
    }
}

/// How many statements `sql` holds (each answered with its own CommandComplete).
pub fn count(sql: &[u8]) -> usize {
    statements(sql).count()
}

fn lower(t: &Token<'_>) -> String {
    String::from_utf8_lossy(t.text()).to_ascii_lowercase()
}

/// A name as PostgreSQL folds it: an unquoted word lower-cased, a quoted one as written.
fn name_of(t: &Token<'_>) -> Option<String> {
    match t {
        Token::Word(_) => Some(lower(t)),
        Token::Quoted(q) => Some(String::from_utf8_lossy(q).replace("\"\"", "\"")),
        _ => None,
    }
}

fn text(stmt: &[u8]) -> String {
    String::from_utf8_lossy(stmt).into_owned()
}

/// The effects of one statement.
pub fn statement_effects(stmt: &[u8], scan: Scan, emit: &mut dyn FnMut(Effect)) {
    let (w, mut t) = match plain_first_word(stmt) {
        Some((w, end)) => (w, Tokens::with(stmt, end, scan)),
        None => {
            let mut t = Tokens::with(stmt, 0, scan);
            let Some(Token::Word(w)) = t.next() else {
                return;
            };
            (w, t)
        }
    };
    // Dispatch on the lower-cased first word, kept on the stack: most statements are none
    // of these.
    let mut buf = [0u8; 11];
    let Some(kw) = buf.get_mut(..w.len()).filter(|_| w.len() >= 2) else {
        return;
    };
    kw.copy_from_slice(w);
    kw.make_ascii_lowercase();
    let kw: &[u8] = kw;
    match kw {
        b"select" | b"with" | b"values" => functions(stmt, scan, emit),
        b"do" if unlistens_if_listening(t.clone(), scan) => {
            emit(Effect::Unlisten { channel: None })
        }
        b"do" | b"call" => emit(Effect::Unseen(Unseen::Any)),
        b"explain" => explain(stmt, t, scan, emit),
        b"set" => set(stmt, t, emit),
        b"reset" => match t.next() {
            Some(n) if n.is("all") => emit(Effect::ResetAll),
            Some(n) if n.is("role") => emit(Effect::Reset {
                name: "role".into(),
            }),
            Some(n) if n.is("session") => emit(Effect::Reset {
                name: "session_authorization".into(),
            }),
            Some(n) => {
                if let Some(name) = dotted_name(n, &mut t) {
                    emit(Effect::Reset { name })
                }
            }
            None => {}
        },
        b"prepare" => prepare(stmt, t, emit),
        b"execute" => {
            if let Some(name) = t.next().as_ref().and_then(name_of) {
                emit(Effect::Execute { name });
            }
        }
        b"deallocate" => {
            let mut n = t.next();
            if n.is_some_and(|n| n.is("prepare")) {
                n = t.next();
            }
            match n {
                Some(n) if n.is("all") => emit(Effect::Deallocate { name: None }),
                Some(n) => {
                    if let Some(name) = name_of(&n) {
                        emit(Effect::Deallocate { name: Some(name) })
                    }
                }
                None => {}
            }
        }
        b"create" => {
            create(t.clone(), emit);
            if names_temp_schema(t) {
                emit(Effect::Pin(PinReason::TempTable));
            }
            calls(stmt, scan, emit);
        }
        b"declare" => {
            declare(t, emit);
            calls(stmt, scan, emit);
        }
        b"close" => match t.next() {
            Some(n) if n.is("all") => emit(Effect::Close { name: None }),
            Some(n) => emit(Effect::Close { name: name_of(&n) }),
            None => {}
        },
        b"load" => emit(Effect::Pin(PinReason::Load)),
        b"drop" => emit(Effect::Drop),
        b"discard" => {
            let what = match t.next() {
                Some(n) if n.is("all") => Discard::All,
                Some(n) if n.is("temp") || n.is("temporary") => Discard::Temp,
                Some(n) if n.is("plans") => Discard::Plans,
                Some(n) if n.is("sequences") => Discard::Sequences,
                _ => return,
            };
            emit(Effect::Discard(what));
        }
        b"listen" => {
            if let Some(channel) = t.next().as_ref().and_then(name_of) {
                emit(Effect::Listen { channel });
            }
        }
        b"unlisten" => match t.next() {
            Some(Token::Other(b"*")) => emit(Effect::Unlisten { channel: None }),
            Some(n) => {
                if let Some(channel) = name_of(&n) {
                    emit(Effect::Unlisten {
                        channel: Some(channel),
                    })
                }
            }
            None => {}
        },
        b"begin" | b"start" => emit(Effect::Begin),
        b"commit" | b"end" => emit(Effect::Commit),
        b"abort" => emit(Effect::Rollback),
        b"rollback" => match t.next() {
            Some(n) if n.is("to") => {
                let mut n = t.next();
                if n.is_some_and(|n| n.is("savepoint")) {
                    n = t.next();
                }
                if let Some(name) = n.as_ref().and_then(name_of) {
                    emit(Effect::RollbackTo { name });
                }
            }
            Some(n) if n.is("prepared") => {}
            _ => emit(Effect::Rollback),
        },
        b"savepoint" => {
            if let Some(name) = t.next().as_ref().and_then(name_of) {
                emit(Effect::Savepoint { name });
            }
        }
        b"release" => {
            let mut n = t.next();
            if n.is_some_and(|n| n.is("savepoint")) {
                n = t.next();
            }
            if let Some(name) = n.as_ref().and_then(name_of) {
                emit(Effect::Release { name });
            }
        }
        // INSERT, UPDATE, DELETE, MERGE, COPY, ALTER, ...: what they call.
        _ => calls(stmt, scan, emit),
    }
}

/// Whether a `DO` block (the tokens after `DO`) runs `UNLISTEN *` when
/// `pg_listening_channels()` lists a channel, as asyncpg's reset on a pool's release does:
/// then it is `UNLISTEN *` for a client that listens and nothing for one that does not, so it
/// is taken for `UNLISTEN *` (on a pooled server the function lists nothing, and the client's
/// subscriptions through the pool's listening connection would otherwise outlive the reset).
/// Only a dollar-quoted body is read, as SQL tokens; any other `DO` is left to its server.
fn unlistens_if_listening(mut t: Tokens<'_>, scan: Scan) -> bool {
    let body = loop {
        match t.next() {
            Some(Token::Str(s)) if s.first() == Some(&b'$') => break s,
            Some(n) if n.is("language") => {
                t.next();
            }
            _ => return false,
        }
    };
    // `$tag$ ... $tag$`: the tag's length from its closing `$`.
    let Some(tag) = body[1..].iter().position(|&b| b == b'$') else {
        return false;
    };
    let Some(code) = body.get(tag + 2..body.len().saturating_sub(tag + 2)) else {
        return false;
    };
    if !has_word(code, b"pg_listening_channels", 3) {
        return false;
    }
    // Only the words of such a reset: a block that does anything else is unseen work.
    const WORDS: &[&str] = &[
        "begin",
        "perform",
        "select",
        "from",
        "pg_listening_channels",
        "limit",
        "if",
        "exists",
        "found",
        "then",
        "unlisten",
        "end",
        "not",
    ];
    let only_reset = Tokens::with(code, 0, scan).all(|t| match t {
        Token::Word(_) => WORDS.iter().any(|w| t.is(w)),
        Token::Punct(_) => true,
        Token::Other(o) => o == b"*" || o == b";" || o.iter().all(u8::is_ascii_digit),
        _ => false,
    });
    if !only_reset {
        return false;
    }
    let mut words = Tokens::with(code, 0, scan);
    let mut asks = false;
    while let Some(w) = words.next() {
        if w.is("pg_listening_channels") {
            asks = true;
        } else if asks && w.is("unlisten") {
            return matches!(words.next(), Some(Token::Other(b"*")));
        }
    }
    false
}

/// The first word of `stmt` and where it ends, when the statement plainly starts with one
/// (ASCII white space, then letters ending at a byte that cannot continue a word): the usual
/// case, read without the lexer. `None` sends anything else (a comment first, a quoted
/// name, a non-ASCII letter) to the lexer.
fn plain_first_word(stmt: &[u8]) -> Option<(&[u8], usize)> {
    let start = stmt.iter().position(|b| !b.is_ascii_whitespace())?;
    let len = stmt[start..]
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(stmt.len() - start);
    let next = stmt.get(start + len).copied().unwrap_or(b' ');
    let continues = next.is_ascii_digit() || next == b'_' || next == b'$' || next >= 0x80;
    (len > 0 && !continues).then(|| (&stmt[start..start + len], start + len))
}

/// A possibly qualified setting name (`a.b`), lower-cased.
fn dotted_name(first: Token<'_>, t: &mut Tokens<'_>) -> Option<String> {
    let mut name = name_of(&first)?;
    let mut peek = t.clone();
    while peek.next() == Some(Token::Punct(b'.')) {
        let part = peek.next().as_ref().and_then(name_of)?;
        name.push('.');
        name.push_str(&part);
        *t = peek.clone();
    }
    Some(name)
}

/// `SET [SESSION | LOCAL] ...`.
fn set(stmt: &[u8], mut t: Tokens<'_>, emit: &mut dyn FnMut(Effect)) {
    let Some(mut n) = t.next() else {
        return;
    };
    if n.is("local") || n.is("transaction") {
        emit(Effect::Local);
        return;
    }
    if n.is("session") {
        match t.next() {
            Some(m) if m.is("characteristics") => {
                emit(Effect::Set {
                    name: "session characteristics".into(),
                    replay: text(stmt),
                });
                return;
            }
            Some(m) if m.is("authorization") => {
                setting_as_written(stmt, "session_authorization", t, emit);
                return;
            }
            Some(m) => n = m,
            None => return,
        }
    }
    if n.is("role") {
        setting_as_written(stmt, "role", t, emit);
        return;
    }
    if n.is("time") {
        // SET TIME ZONE value
        setting_as_written(stmt, "timezone", t, emit);
        return;
    }
    if n.is("names") {
        setting_as_written(stmt, "client_encoding", t, emit);
        return;
    }
    let Some(name) = dotted_name(n, &mut t) else {
        return;
    };
    match t.next() {
        Some(x) if x.is("to") || x == Token::Punct(b'=') => {}
        // SET name FROM CURRENT: the value is this server's; replayed as written.
        Some(x) if x.is("from") => {}
        _ => return,
    }
    let mut rest = t.clone();
    if rest.next().is_some_and(|v| v.is("default")) && rest.next().is_none() {
        emit(Effect::Reset { name });
        return;
    }
    emit(Effect::Set {
        name,
        replay: text(stmt),
    });
}

/// A setting replayed by its statement as written (`SET ROLE x`, `SET TIME ZONE x`); `TO
/// DEFAULT`, `NONE` and `LOCAL` (of a time zone) reset it.
fn setting_as_written(stmt: &[u8], name: &str, mut t: Tokens<'_>, emit: &mut dyn FnMut(Effect)) {
    let mut rest = t.clone();
    let value = rest.next();
    let resets = value.is_some_and(|v| v.is("default") || v.is("none"))
        || (name == "timezone" && value.is_some_and(|v| v.is("local")));
    if resets && rest.next().is_none() {
        emit(Effect::Reset { name: name.into() });
        return;
    }
    if t.next().is_none() {
        return;
    }
    emit(Effect::Set {
        name: name.into(),
        replay: text(stmt),
    });
}

/// `PREPARE name [(types)] AS statement`.
fn prepare(stmt: &[u8], mut t: Tokens<'_>, emit: &mut dyn FnMut(Effect)) {
    let Some(name) = t.next().as_ref().and_then(name_of) else {
        return;
    };
    if name == "transaction" {
        // PREPARE TRANSACTION 'id': two-phase commit, not a statement.
        return;
    }
    emit(Effect::Prepare {
        name,
        sql: text(stmt),
    });
}

/// `CREATE [GLOBAL | LOCAL] {TEMP | TEMPORARY} ...` (tables, views, sequences).
fn create(mut t: Tokens<'_>, emit: &mut dyn FnMut(Effect)) {
    let mut n = t.next();
    if n.is_some_and(|n| n.is("global") || n.is("local")) {
        n = t.next();
    }
    if n.is_some_and(|n| n.is("temp") || n.is("temporary")) && !drops_at_commit(t) {
        emit(Effect::Pin(PinReason::TempTable));
    }
}

/// Whether a `CREATE TEMP ...` says `ON COMMIT DROP` (before the `AS` of a `CREATE TABLE
/// AS`, outside parentheses): the table ends with its transaction and is no session state.
fn drops_at_commit(t: Tokens<'_>) -> bool {
    let mut depth = 0u32;
    let mut last = [false; 2]; // the two words before: ON, COMMIT
    for tok in t {
        match tok {
            Token::Punct(b'(') => depth += 1,
            Token::Punct(b')') => depth = depth.saturating_sub(1),
            _ if depth > 0 => {}
            ref w if w.is("as") => return false,
            ref w if last[1] && w.is("drop") => return true,
            ref w => {
                last = [w.is("on"), last[0] && w.is("commit")];
                continue;
            }
        }
        last = [false; 2];
    }
    false
}

/// `DECLARE name [BINARY] [ASENSITIVE | INSENSITIVE] [[NO] SCROLL] CURSOR WITH HOLD ...`.
fn declare(t: Tokens<'_>, emit: &mut dyn FnMut(Effect)) {
    let mut seen_cursor = false;
    let mut previous_with = false;
    for tok in t.take(12) {
        if tok.is("cursor") {
            seen_cursor = true;
        } else if seen_cursor && previous_with && tok.is("hold") {
            emit(Effect::Pin(PinReason::HoldCursor));
            return;
        } else if tok.is("for") && seen_cursor {
            return;
        }
        previous_with = tok.is("with");
    }
}

/// The calls of a `SELECT` (or `WITH`, `VALUES`) and its `INTO TEMP` (or `INTO
/// pg_temp.name`). A text with no `(` and no `into` is not lexed.
fn functions(stmt: &[u8], scan: Scan, emit: &mut dyn FnMut(Effect)) {
    let called = memchr::memchr(b'(', stmt).is_some();
    if !called && !has_word(stmt, b"into", 3) {
        return;
    }
    let tokens: Vec<Token<'_>> = Tokens::with(stmt, 0, scan).collect();
    if called {
        calls::effects_of_calls(&tokens, emit);
    }
    for (i, tok) in tokens.iter().enumerate() {
        if !tok.is("into") {
            continue;
        }
        let (next, next2) = (tokens.get(i + 1), tokens.get(i + 2));
        let temp = |t: Option<&Token<'_>>| t.is_some_and(|t| t.is("temp") || t.is("temporary"));
        let scope = |t: Option<&Token<'_>>| t.is_some_and(|t| t.is("global") || t.is("local"));
        if temp(next)
            || (scope(next) && temp(next2))
            || names_temp_schema(tokens[i + 1..].iter().copied())
        {
            emit(Effect::Pin(PinReason::TempTable));
        }
    }
}

/// The effects of what statement `stmt` calls, where it holds a `(`.
fn calls(stmt: &[u8], scan: Scan, emit: &mut dyn FnMut(Effect)) {
    if memchr::memchr(b'(', stmt).is_none() {
        return;
    }
    let tokens: Vec<Token<'_>> = Tokens::with(stmt, 0, scan).collect();
    calls::effects_of_calls(&tokens, emit);
}

/// Whether the tokens begin with, or (for a `CREATE`) hold, a name in the session's
/// temporary schema (`pg_temp.x`, `pg_temp_3.x`): an object made there is the session's,
/// as one made with `TEMP` is.
fn names_temp_schema<'a>(t: impl Iterator<Item = Token<'a>>) -> bool {
    let mut last_temp = false;
    // (`INTO` passes its tokens on from the name; `CREATE` from the word after it.)
    for tok in t {
        if last_temp && tok == Token::Punct(b'.') {
            return true;
        }
        last_temp = match tok {
            Token::Word(w) => is_temp_schema(&w.to_ascii_lowercase()),
            Token::Quoted(q) => is_temp_schema(q),
            _ => false,
        };
    }
    false
}

/// `pg_temp`, or a backend's own `pg_temp_N`.
fn is_temp_schema(name: &[u8]) -> bool {
    name == b"pg_temp"
        || name
            .strip_prefix(b"pg_temp_")
            .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
}

/// `EXPLAIN [ANALYZE] [VERBOSE] [(options)] statement`: what it calls may run while it is
/// planned (a function folded as immutable), and with `ANALYZE` the statement runs.
fn explain(stmt: &[u8], t: Tokens<'_>, scan: Scan, emit: &mut dyn FnMut(Effect)) {
    let mut analyze = false;
    let mut depth = 0u32;
    let mut inner = None;
    for tok in t {
        match tok {
            Token::Punct(b'(') => depth += 1,
            Token::Punct(b')') => depth = depth.saturating_sub(1),
            ref w if w.is("analyze") || w.is("analyse") => analyze = true,
            ref w if depth == 0 && w.is("verbose") => {}
            Token::Word(w) if depth == 0 => {
                inner = Some(w.as_ptr() as usize - stmt.as_ptr() as usize);
                break;
            }
            _ => {}
        }
    }
    let Some(at) = inner else {
        return;
    };
    if analyze {
        statement_effects(&stmt[at..], scan, emit);
    } else {
        calls(&stmt[at..], scan, &mut |e| {
            if matches!(e, Effect::Unseen(_)) {
                emit(e)
            }
        });
    }
}

/// Whether `hay` holds `needle` (lower-case) in any case, found through the byte at
/// `anchor` of it.
pub(super) fn has_word(hay: &[u8], needle: &[u8], anchor: usize) -> bool {
    let a = needle[anchor];
    let mut from = anchor;
    while let Some(i) = hay
        .get(from..)
        .and_then(|rest| memchr::memchr2(a, a.to_ascii_uppercase(), rest))
    {
        let at = from + i - anchor;
        if hay
            .get(at..at + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
        {
            return true;
        }
        from += i + 1;
    }
    false
}

#[cfg(test)]
mod tests;
