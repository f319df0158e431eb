//! A `LISTEN`/`UNLISTEN` the pool's listening connection serves (`track`), as a simple Query
//! or as an extended-protocol batch that does nothing else: read from the client's bytes
//! before any server is taken.

use std::ops::Range;

use bytes::{Buf, BufMut, BytesMut};

use super::pin::Pin;
use super::{KeptTexts, Relay, Subscribe};
use crate::listen::MAX_CHANNELS;
use crate::protocol::backend::{self as b, ErrorFields};
use crate::protocol::frame;
use crate::protocol::frontend as f;
use crate::protocol::sqlstate;
use crate::session_state::detect::{subscription, Effect};
use crate::session_state::lex::statements;

/// The `LISTEN`/`UNLISTEN` a statement text is, if it is that alone.
pub(super) fn of_text(sql: &[u8]) -> Option<Subscribe> {
    match subscription(sql)? {
        Effect::Listen { channel } => Some(Subscribe::Listen(channel)),
        Effect::Unlisten { channel } => Some(Subscribe::Unlisten(channel)),
        _ => None,
    }
}

/// Whether statement text `sql` may be a `LISTEN` or `UNLISTEN` (or begins with a blank),
/// from its first two bytes: every other text (an `UPDATE`, a `LOCK`) is not read further.
/// One that begins with a comment is not taken for a lone statement
/// (`detect::subscription`).
#[inline(always)]
pub(super) fn may_subscribe(sql: &[u8]) -> bool {
    match sql {
        [b'l' | b'L', b'i' | b'I', ..] | [b'u' | b'U', b'n' | b'N', ..] => true,
        [b, ..] => b.is_ascii_whitespace(),
        [] => false,
    }
}

impl Relay {
    /// Whether the whole Parse `msg`, whose effects are `found`, makes a named statement
    /// that is a lone `LISTEN`/`UNLISTEN` (`track` with `track_prepared`): run without a
    /// server where its batch does nothing else, and pinning where a server runs it.
    pub(super) fn made_lone_subscription(&self, msg: &[u8], found: &[(usize, Effect)]) -> bool {
        self.policy.tracking
            && self.policy.track_settings
            && self.policy.session_state == super::StateRule::Pin
            && !msg.get(frame::HEADER_LEN).is_some_and(|&b| b == 0)
            && matches!(
                found,
                [(_, Effect::Listen { .. } | Effect::Unlisten { .. })]
            )
            && is_lone(msg)
    }
}

/// Whether the whole Parse `msg` is of a lone `LISTEN`/`UNLISTEN`.
pub(super) fn is_lone(msg: &[u8]) -> bool {
    f::parse_parts(msg).is_ok_and(|(_, sql, _)| may_subscribe(sql) && of_text(sql).is_some())
}

/// The most statements of one Query served as `LISTEN`s/`UNLISTEN`s; a longer one is left
/// to a server (and pins).
const MAX_STATEMENTS: usize = 64;

/// The `LISTEN`s/`UNLISTEN`s a whole Query message is, in order, if it is nothing else: one
/// statement, or several (Graphile Worker listens with `LISTEN "jobs:insert"; LISTEN
/// "worker:migrate";`). A Query that begins otherwise is not read past its first statement.
pub(super) fn of_query(msg: &[u8]) -> Option<Vec<Subscribe>> {
    if !may_subscribe(msg.get(frame::HEADER_LEN..)?) {
        return None;
    }
    let sql = f::query_text(msg).ok()?;
    if let Some(one) = of_text(sql) {
        return Some(vec![one]);
    }
    // Several statements, the first of them a `LISTEN`/`UNLISTEN` (a Query that begins with
    // blanks and then another word is not lexed).
    if !matches!(
        sql.trim_ascii_start().first(),
        Some(b'l' | b'L' | b'u' | b'U')
    ) {
        return None;
    }
    memchr::memchr(b';', sql)?;
    let mut subs = Vec::new();
    for stmt in statements(sql) {
        if subs.len() == MAX_STATEMENTS {
            return None;
        }
        subs.push(of_text(stmt)?);
    }
    (subs.len() > 1).then_some(subs)
}

/// What the `LISTEN`s and `UNLISTEN`s of one Query outside a transaction block change: they
/// commit together (an implicit transaction), so only their sum counts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NetChange {
    /// Channels to listen on that the client does not listen on now, in the order named.
    pub listen: Vec<String>,
    /// Channels it listens on now and no longer will.
    pub unlisten: Vec<String>,
    /// It listens on nothing afterwards.
    pub none_left: bool,
}

/// The change `subs`, run in order, make to the channels a client listens on (`current`).
/// Only the channels they name are looked up in `current` (which may be long), and all of
/// it only after an `UNLISTEN *`.
pub fn net_change(current: &[String], subs: &[Subscribe]) -> NetChange {
    // What counts follows the last `UNLISTEN *`.
    let all = subs
        .iter()
        .rposition(|s| matches!(s, Subscribe::Unlisten(None)));
    let mut named: Vec<(&String, bool)> = Vec::new();
    for sub in &subs[all.map_or(0, |i| i + 1)..] {
        let (channel, on) = match sub {
            Subscribe::Listen(c) => (c, true),
            Subscribe::Unlisten(Some(c)) => (c, false),
            Subscribe::Unlisten(None) => continue,
        };
        match named.iter_mut().find(|(c, _)| *c == channel) {
            Some(entry) => entry.1 = on,
            None => named.push((channel, on)),
        }
    }
    let listen: Vec<String> = named
        .iter()
        .filter(|(c, on)| *on && !current.contains(c))
        .map(|(c, _)| (*c).clone())
        .collect();
    let unlisten: Vec<String> = if all.is_some() {
        let kept = |c: &String| named.iter().any(|(n, on)| *on && *n == c);
        current.iter().filter(|c| !kept(c)).cloned().collect()
    } else {
        named
            .iter()
            .filter(|(c, on)| !*on && current.contains(c))
            .map(|(c, _)| (*c).clone())
            .collect()
    };
    let none_left = current.len() + listen.len() == unlisten.len();
    NetChange {
        listen,
        unlisten,
        none_left,
    }
}

/// One statement's answer from the driver: `Ok(new)` (the client did not listen on the
/// channel before) or the error that ends the statements.
pub type Outcome = Result<bool, ErrorFields>;

/// What the statements `subs` of one Query or batch outside a block make of the client's
/// channels `current`: the change to make (its `LISTEN`s first), or, when the client would
/// listen on more than [`MAX_CHANNELS`] afterwards, the answer that refuses them and changes
/// nothing. The bound holds for what the statements leave: the channels they end make
/// room, though they end after their `LISTEN`s are made.
pub fn plan(current: &[String], subs: &[Subscribe]) -> Result<NetChange, Vec<Outcome>> {
    let change = net_change(current, subs);
    let kept = current.len() - change.unlisten.len();
    match change.listen.get(MAX_CHANNELS.saturating_sub(kept)) {
        Some(beyond) => Err(failed_at(subs, beyond, too_many_channels())),
        None => Ok(change),
    }
}

/// The answer to statements `subs` (outside a block) when listening on `channel` failed
/// with `e`, nothing of them counting: the error answers the first statement that listens
/// on that channel, after the CommandCompletes of those before it, as PostgreSQL's error
/// would end an implicit transaction there.
pub fn failed_at(subs: &[Subscribe], channel: &str, e: ErrorFields) -> Vec<Outcome> {
    let at = subs
        .iter()
        .position(|s| matches!(s, Subscribe::Listen(c) if c == channel))
        .unwrap_or(0);
    let mut results: Vec<Outcome> = (0..at).map(|_| Ok(false)).collect();
    results.push(Err(e));
    results
}

/// The answer to a `LISTEN` beyond the channels one client may listen on
/// ([`MAX_CHANNELS`]).
pub fn too_many_channels() -> ErrorFields {
    super::error_fields(
        sqlstate::PROGRAM_LIMIT_EXCEEDED,
        format!("too many channels: a client listens on at most {MAX_CHANNELS} through the pooler"),
    )
}

/// An extended-protocol batch at the front of `buf` that runs `LISTEN`s/`UNLISTEN`s and
/// nothing else.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Batch {
    /// Its statements, in the order executed.
    pub subs: Vec<Subscribe>,
    /// The bytes of `buf` it spans, through its Sync.
    pub len: usize,
    /// Its last Parse (of the unnamed statement), if it has one: the client's unnamed
    /// statement from now on.
    pub parse: Option<Range<usize>>,
    /// Per statement, the tags of what PostgreSQL answers before its CommandComplete, in
    /// order (ParseComplete, ParameterDescription of no parameters, NoData, BindComplete).
    pub replies: Vec<Vec<u8>>,
}

/// Where an extended batch [`of_batch`] reads stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Before a statement: at the start, or after an Execute.
    Between,
    /// After a Parse of the unnamed statement.
    Parsed,
    /// After a Bind of the unnamed portal.
    Bound,
}

/// The batch at the front of `buf`, if every message of it through its Sync is there and it
/// is up to [`MAX_STATEMENTS`] statements, each: an optional Parse of the unnamed statement
/// declaring no parameter types (and a Describe of that statement), one Bind of the unnamed
/// portal with no parameter values (and a Describe of that portal), one Execute of it; then
/// Sync; Flushes anywhere. pgjdbc sends `LISTEN a; LISTEN b` so, one statement after the
/// other. A Bind without a Parse before it in the batch names a statement `kept` gives the
/// text of (`None`: not one the pooler could run without a server). Every statement's text
/// must be a lone `LISTEN`/`UNLISTEN`. Anything else is left to a server.
pub(super) fn of_batch<'a>(
    buf: &'a [u8],
    kept: impl Fn(&[u8]) -> Option<&'a [u8]>,
) -> Option<Batch> {
    let mut at = 0;
    let mut step = Step::Between;
    let mut parse = None;
    // The statement the batch's last Parse made, and the one bound.
    let mut parsed: Option<Subscribe> = None;
    let mut bound: Option<Subscribe> = None;
    let mut subs = Vec::new();
    let mut replies = Vec::new();
    let mut tags = Vec::new();
    loop {
        let (tag, len) = frame::peek_header(&buf[at..])?;
        let total = usize::try_from(len).ok()?.checked_add(1)?;
        let msg = buf.get(at..at.checked_add(total)?)?;
        match (tag, step) {
            (f::PARSE_TAG, Step::Between) => {
                let (name, sql, types) = f::parse_parts(msg).ok()?;
                if !name.is_empty() || types != 0 || !may_subscribe(sql) {
                    return None;
                }
                parsed = Some(of_text(sql)?);
                parse = Some(at..at + total);
                tags.push(b::PARSE_COMPLETE_TAG);
                step = Step::Parsed;
            }
            (f::DESCRIBE_TAG, Step::Parsed | Step::Bound) => {
                let (kind, span) = f::describe_or_close_target(msg).ok()?;
                match (kind, step) {
                    (b'S', Step::Parsed) if span.len == 0 => {
                        tags.extend([b::PARAMETER_DESCRIPTION_TAG, b::NO_DATA_TAG])
                    }
                    (b'P', Step::Bound) if span.len == 0 => tags.push(b::NO_DATA_TAG),
                    _ => return None,
                }
            }
            (f::BIND_TAG, Step::Between | Step::Parsed) => {
                let (portal, stmt, values) = f::bind_parts(msg).ok()?;
                if !portal.is_empty() || values != 0 {
                    return None;
                }
                bound = match (&parsed, stmt.is_empty()) {
                    (Some(p), true) => Some(p.clone()),
                    // A Parse and then a Bind of another statement.
                    _ if step == Step::Parsed => return None,
                    _ => Some(of_text(kept(stmt)?)?),
                };
                tags.push(b::BIND_COMPLETE_TAG);
                step = Step::Bound;
            }
            (f::EXECUTE_TAG, Step::Bound) => {
                if !f::execute_portal(msg).ok()?.is_empty() || subs.len() == MAX_STATEMENTS {
                    return None;
                }
                subs.push(bound.take()?);
                replies.push(std::mem::take(&mut tags));
                step = Step::Between;
            }
            (f::FLUSH_TAG, _) => {}
            (f::SYNC_TAG, Step::Between) if !subs.is_empty() => {
                return Some(Batch {
                    subs,
                    len: at + total,
                    parse,
                    replies,
                });
            }
            _ => return None,
        }
        at += total;
    }
}

/// Writes the answers `tags` names ([`Batch::replies`]) to `out`.
pub(super) fn answer(out: &mut BytesMut, tags: &[u8]) {
    for &tag in tags {
        if tag == b::PARAMETER_DESCRIPTION_TAG {
            // No parameters.
            out.put_slice(&[tag, 0, 0, 0, 6, 0, 0]);
        } else {
            b::empty(out, tag);
        }
    }
}

/// The `LISTEN`s/`UNLISTEN`s handed to the driver ([`super::Next::Subscribe`]): one, the
/// statements of one Query, or those of one extended batch, in order.
#[derive(Debug, Default)]
pub(super) struct Subscribes {
    pub subs: Vec<Subscribe>,
    /// Of an extended batch: the tags of what is answered before each statement's
    /// CommandComplete after the first (the first's go out when the batch is read).
    pub later_replies: Vec<Vec<u8>>,
}

impl Subscribes {
    pub(super) fn of(subs: Vec<Subscribe>) -> Box<Subscribes> {
        Box::new(Subscribes {
            subs,
            later_replies: Vec::new(),
        })
    }
}

impl Relay {
    /// Whether the message of type `tag` in front (no server held, `track`) may begin a
    /// batch [`of_batch`] takes: an unnamed Parse whose text may be a `LISTEN`, or a Bind
    /// of a client that keeps such a statement. Every other batch costs this look alone.
    #[inline(always)]
    pub(super) fn may_subscribe_extended(&self, tag: u8) -> bool {
        match tag {
            f::PARSE_TAG => {
                let body = self
                    .client
                    .cbuf
                    .get(frame::HEADER_LEN..)
                    .unwrap_or_default();
                matches!(body, [0, text @ ..] if may_subscribe(text))
            }
            f::BIND_TAG => self.kept_texts.has(KeptTexts::SUBSCRIBES),
            _ => false,
        }
    }

    /// An extended-protocol batch in front of the client's buffer that runs
    /// `LISTEN`s/`UNLISTEN`s and nothing else, with no server held (`track`): answered as
    /// PostgreSQL answers it up to the first command's CommandComplete (the rest when the
    /// driver is done, [`Relay::subscribed`]), and handed to the driver as
    /// [`super::Next::Subscribe`], as the simple Query form is. Returns whether it was.
    pub(super) fn extended_subscription(&mut self) -> bool {
        let unnamed = self.unnamed.as_deref().map(|p| &p[..]);
        let statements = &self.statements;
        let kept = |name: &[u8]| {
            let parse = if name.is_empty() {
                unnamed?
            } else {
                let k = statements.get(name).filter(|k| k.subscribes)?;
                &k.parse[..]
            };
            f::parse_parts(parse).ok().map(|(_, sql, _)| sql)
        };
        let Some(batch) = of_batch(&self.client.cbuf, kept) else {
            return false;
        };
        let mut replies = batch.replies.into_iter();
        answer(&mut self.client.cout, &replies.next().unwrap_or_default());
        if let Some(span) = batch.parse.filter(|_| self.policy.tracking) {
            // The client's unnamed statement now, replayed (and pinning) where it is bound
            // on a server.
            let kept = self.unnamed.get_or_insert_with(Box::default);
            kept.clear();
            kept.extend_from_slice(&self.client.cbuf[span]);
            self.batch.unnamed_here = false;
            self.kept_texts.add(KeptTexts::SUBSCRIBES);
        }
        self.client.cbuf.advance(batch.len);
        self.client.subscribe = Some(Box::new(Subscribes {
            subs: batch.subs,
            later_replies: replies.collect(),
        }));
        true
    }

    /// A statement whose text is a lone `LISTEN` (`parse`, a whole Parse) runs on server
    /// `srv`: the client is pinned there, as for any `LISTEN` a server runs.
    pub(super) fn pin_if_listens(&mut self, srv: u64, parse: &[u8]) {
        let text = f::parse_parts(parse)
            .map(|(_, sql, _)| sql)
            .unwrap_or_default();
        if may_subscribe(text) && matches!(of_text(text), Some(Subscribe::Listen(_))) {
            self.pin_to(srv, Pin::Listen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn parse(name: &str, sql: &str) -> Vec<u8> {
        msg(b'P', format!("{name}\0{sql}\0\0\0").as_bytes())
    }

    fn bind(portal: &str, stmt: &str) -> Vec<u8> {
        msg(b'B', format!("{portal}\0{stmt}\0\0\0\0\0\0\0").as_bytes())
    }

    fn describe(kind: u8, name: &str) -> Vec<u8> {
        msg(b'D', &[&[kind], name.as_bytes(), &[0]].concat())
    }

    fn execute(portal: &str) -> Vec<u8> {
        msg(b'E', &[portal.as_bytes(), &[0, 0, 0, 0, 0]].concat())
    }

    fn sync() -> Vec<u8> {
        msg(b'S', b"")
    }

    fn none<'a>(_: &[u8]) -> Option<&'a [u8]> {
        None
    }

    #[test]
    fn a_batch_that_only_listens_is_found() {
        let b = [
            parse("", "LISTEN \"Ch\""),
            bind("", ""),
            describe(b'P', ""),
            execute(""),
            sync(),
        ]
        .concat();
        let found = of_batch(&b, none).expect("a lone LISTEN batch");
        assert_eq!(found.subs, [Subscribe::Listen("Ch".into())]);
        assert_eq!(found.len, b.len());
        assert_eq!(found.parse, Some(0..parse("", "LISTEN \"Ch\"").len()));
        assert_eq!(found.replies, [b"12n"]);
        // What follows the Sync is not the batch's.
        let more = [&b[..], &sync()].concat();
        assert_eq!(of_batch(&more, none).map(|f| f.len), Some(b.len()));

        // A Bind of a statement the client keeps, with a Describe of the statement first
        // where there is a Parse.
        let b = [bind("", "s1"), execute(""), msg(b'H', b""), sync()].concat();
        let found = of_batch(&b, |n| (n == b"s1").then_some(&b"unlisten *"[..])).unwrap();
        assert_eq!(found.subs, [Subscribe::Unlisten(None)]);
        assert_eq!(
            (found.parse, &found.replies[..]),
            (None, &[b"2".to_vec()][..])
        );
        let b = [
            parse("", "listen a"),
            describe(b'S', ""),
            bind("", ""),
            execute(""),
            sync(),
        ]
        .concat();
        assert_eq!(of_batch(&b, none).unwrap().replies, [b"1tn2"]);
    }

    /// pgjdbc sends `LISTEN a; UNLISTEN b` as one batch of two statements; each is
    /// answered as PostgreSQL answers it, and the unnamed statement is the last one parsed.
    #[test]
    fn a_batch_of_several_listens_is_found() {
        let first = parse("", "LISTEN a");
        let b = [
            first.clone(),
            bind("", ""),
            describe(b'P', ""),
            execute(""),
            parse("", "UNLISTEN b"),
            describe(b'S', ""),
            bind("", ""),
            execute(""),
            // The batch's unnamed statement again.
            bind("", ""),
            msg(b'H', b""),
            execute(""),
            // A statement the client keeps.
            bind("", "s1"),
            execute(""),
            sync(),
        ]
        .concat();
        let found = of_batch(&b, |n| (n == b"s1").then_some(&b"listen c"[..])).unwrap();
        let (l, u) = (
            |c: &str| Subscribe::Listen(c.into()),
            |c: &str| Subscribe::Unlisten(Some(c.into())),
        );
        assert_eq!(found.subs, [l("a"), u("b"), u("b"), l("c")]);
        assert_eq!(found.len, b.len());
        let second = first.len()
            + [bind("", ""), describe(b'P', ""), execute("")]
                .concat()
                .len();
        assert_eq!(
            found.parse,
            Some(second..second + parse("", "UNLISTEN b").len())
        );
        assert_eq!(found.replies, [&b"12n"[..], b"1tn2", b"2", b"2"]);
        // Without a Parse in the batch, a Bind of the unnamed statement is of the client's.
        let b = [bind("", ""), execute(""), bind("", ""), execute(""), sync()].concat();
        let found = of_batch(&b, |n| n.is_empty().then_some(&b"listen k"[..])).unwrap();
        assert_eq!(found.subs, [l("k"), l("k")]);

        let listen = || [parse("", "LISTEN a"), bind("", ""), execute("")].concat();
        let many = listen().repeat(MAX_STATEMENTS);
        assert_eq!(
            of_batch(&[&many[..], &sync()].concat(), none).map(|f| f.subs.len()),
            Some(MAX_STATEMENTS)
        );
        let cases: Vec<Vec<Vec<u8>>> = vec![
            // One statement too many.
            vec![many.clone(), listen(), sync()],
            // A statement other than LISTEN/UNLISTEN among them.
            vec![
                listen(),
                parse("", "SELECT 1"),
                bind("", ""),
                execute(""),
                sync(),
            ],
            vec![
                listen(),
                parse("", "BEGIN"),
                bind("", ""),
                execute(""),
                sync(),
            ],
            // Two Parses, or a Parse and then a Bind of another statement.
            vec![
                listen(),
                parse("", "LISTEN b"),
                parse("", "LISTEN c"),
                sync(),
            ],
            vec![
                listen(),
                parse("", "LISTEN b"),
                bind("", "s1"),
                execute(""),
                sync(),
            ],
            // A Describe of a statement after its Bind, or a Parse not executed.
            vec![
                listen(),
                parse("", "LISTEN b"),
                bind("", ""),
                describe(b'S', ""),
                sync(),
            ],
            vec![listen(), parse("", "LISTEN b"), sync()],
            // Flush instead of Sync: not the batch's end.
            vec![listen(), listen(), msg(b'H', b"")],
            // A Bind of a statement the pooler does not know as one.
            vec![listen(), bind("", "s1"), execute(""), sync()],
        ];
        for (i, c) in cases.iter().enumerate() {
            let b = c.concat();
            assert_eq!(of_batch(&b, none), None, "case {i}");
        }
    }

    #[test]
    fn anything_more_is_left_to_a_server() {
        let listen = parse("", "LISTEN a");
        let cases: Vec<Vec<Vec<u8>>> = vec![
            // Not all there yet, or no Sync.
            vec![listen.clone(), bind("", ""), execute("")],
            vec![
                listen.clone(),
                bind("", ""),
                execute(""),
                sync()[..3].to_vec(),
            ],
            // A named statement, a named portal, parameter types or values.
            vec![parse("s", "LISTEN a"), bind("", "s"), execute(""), sync()],
            vec![listen.clone(), bind("p", ""), execute("p"), sync()],
            vec![
                msg(b'P', b"\0LISTEN a\0\0\x01\0\0\0\x19"),
                bind("", ""),
                execute(""),
                sync(),
            ],
            vec![
                listen.clone(),
                msg(b'B', b"\0\0\0\0\0\x01\0\0\0\x011\0\0"),
                execute(""),
                sync(),
            ],
            // Not executed, executed twice, or something else in the batch.
            vec![listen.clone(), describe(b'S', ""), sync()],
            vec![
                listen.clone(),
                bind("", ""),
                execute(""),
                execute(""),
                sync(),
            ],
            vec![
                listen.clone(),
                bind("", ""),
                execute(""),
                parse("", "select 1"),
                sync(),
            ],
            vec![
                listen.clone(),
                bind("", ""),
                execute(""),
                msg(b'Q', b"select 1\0"),
            ],
            // Another text, or more than the one statement.
            vec![parse("", "select 1"), bind("", ""), execute(""), sync()],
            vec![
                parse("", "LISTEN a; select 1"),
                bind("", ""),
                execute(""),
                sync(),
            ],
            // A Bind of a statement the pooler does not know as one.
            vec![bind("", "s1"), execute(""), sync()],
        ];
        for (i, c) in cases.iter().enumerate() {
            let b = c.concat();
            assert_eq!(of_batch(&b, none), None, "case {i}");
        }
        for (text, may) in [
            (&b"LISTEN a"[..], true),
            (b"unlisten *", true),
            (b" \n listen a", true),
            (b"UPDATE t SET a = 1", false),
            (b"lock t", false),
            (b"l", false),
            (b"", false),
        ] {
            assert_eq!(
                may_subscribe(text),
                may,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        let mut q = BytesMut::new();
        f::query(&mut q, "  listen x");
        assert_eq!(of_query(&q), Some(vec![Subscribe::Listen("x".into())]));
        q.clear();
        f::query(&mut q, "select 1");
        assert_eq!(of_query(&q), None);
    }

    /// Several `LISTEN`s/`UNLISTEN`s in one Query are served too; one other statement, or
    /// too many, leaves the Query to a server.
    #[test]
    fn a_query_of_listens_only_is_served() {
        let q = |sql: &str| {
            let mut m = BytesMut::new();
            f::query(&mut m, sql);
            of_query(&m)
        };
        let l = |c: &str| Subscribe::Listen(c.into());
        assert_eq!(
            q(r#"LISTEN "jobs:insert"; LISTEN "worker:migrate";"#),
            Some(vec![l("jobs:insert"), l("worker:migrate")])
        );
        assert_eq!(
            q("listen a;; -- and\n UNLISTEN * ; /* b */ unlisten B"),
            Some(vec![
                l("a"),
                Subscribe::Unlisten(None),
                Subscribe::Unlisten(Some("b".into()))
            ])
        );
        for no in [
            "LISTEN a; SELECT 1",
            "LISTEN a; NOTIFY a",
            "SELECT 1; LISTEN a",
            "LISTEN a; LISTEN",
            "LISTEN a; 'LISTEN b'",
        ] {
            assert_eq!(q(no), None, "{no}");
        }
        let many = "LISTEN a;".repeat(MAX_STATEMENTS);
        assert_eq!(q(&many).map(|v| v.len()), Some(MAX_STATEMENTS));
        assert_eq!(q(&format!("{many} LISTEN b")), None);
    }

    /// The statements of one Query outside a block count by their sum.
    #[test]
    fn a_querys_listens_count_by_their_sum() {
        let l = |c: &str| Subscribe::Listen(c.into());
        let u = |c: &str| Subscribe::Unlisten(Some(c.into()));
        let s = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        let cases: Vec<(Vec<String>, Vec<Subscribe>, NetChange)> = vec![
            (
                s(&[]),
                vec![l("a"), l("b"), l("a")],
                NetChange {
                    listen: s(&["a", "b"]),
                    unlisten: s(&[]),
                    none_left: false,
                },
            ),
            (
                s(&["a", "b"]),
                vec![Subscribe::Unlisten(None), l("c")],
                NetChange {
                    listen: s(&["c"]),
                    unlisten: s(&["a", "b"]),
                    none_left: false,
                },
            ),
            (
                s(&[]),
                vec![l("a"), u("a")],
                NetChange {
                    listen: s(&[]),
                    unlisten: s(&[]),
                    none_left: true,
                },
            ),
            (
                s(&["a"]),
                vec![u("a"), l("a")],
                NetChange {
                    listen: s(&[]),
                    unlisten: s(&[]),
                    none_left: false,
                },
            ),
            (
                s(&["a", "b"]),
                vec![u("b"), u("x")],
                NetChange {
                    listen: s(&[]),
                    unlisten: s(&["b"]),
                    none_left: false,
                },
            ),
            (
                s(&["a"]),
                vec![l("b"), Subscribe::Unlisten(None)],
                NetChange {
                    listen: s(&[]),
                    unlisten: s(&["a"]),
                    none_left: true,
                },
            ),
        ];
        for (current, subs, want) in cases {
            assert_eq!(net_change(&current, &subs), want, "{current:?} {subs:?}");
        }
    }

    /// The bound on a client's channels holds for what a Query leaves, and its error, like
    /// one from the listening connection, answers the first statement that listens on the
    /// channel that failed, after the CommandCompletes of those before it.
    #[test]
    fn a_plan_refuses_beyond_the_bound_at_the_statement_that_listens_there() {
        let l = |c: &str| Subscribe::Listen(c.into());
        let u = |c: &str| Subscribe::Unlisten(Some(c.into()));
        let full: Vec<String> = (0..MAX_CHANNELS).map(|i| format!("c{i}")).collect();
        let code = |r: &[Outcome]| {
            r.iter()
                .map(|o| match o {
                    Ok(_) => "ok".to_string(),
                    Err(e) => e.code.to_string(),
                })
                .collect::<Vec<_>>()
        };
        // One more channel: refused at the statement naming it, nothing made.
        let subs = [l("c0"), u("x"), l("more"), l("other")];
        let refused = plan(&full, &subs).expect_err("beyond the bound");
        assert_eq!(code(&refused), ["ok", "ok", "54000"]);
        // An UNLISTEN of the same statements makes room, wherever it stands.
        let subs = [l("more"), u("c5")];
        let change = plan(&full, &subs).expect("room made");
        assert_eq!(
            (change.listen, change.unlisten),
            (vec!["more".to_string()], vec!["c5".to_string()])
        );
        let change = plan(&full, &[l("a"), l("b"), Subscribe::Unlisten(None), l("c")]).unwrap();
        assert_eq!(
            (change.listen.len(), change.unlisten.len()),
            (1, MAX_CHANNELS)
        );
        // Below the bound nothing is refused.
        assert!(plan(&full[1..], &[l("more")]).is_ok());
        assert!(plan(&full[2..], &[l("x"), l("y"), l("x")]).is_ok());
        assert!(plan(&full[2..], &[l("x"), l("y"), l("z")]).is_err());

        // A channel the listening connection could not make: the error at the first
        // statement listening there, whichever statement made it first in the sum.
        let e = super::super::error_fields("53300", "full".into());
        let subs = [u("a"), l("b"), l("a"), l("b")];
        assert_eq!(
            code(&failed_at(&subs, "a", e.clone())),
            ["ok", "ok", "53300"]
        );
        assert_eq!(code(&failed_at(&subs, "b", e)), ["ok", "53300"]);
    }
}
