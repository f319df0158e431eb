//! A `LISTEN`/`UNLISTEN` the pool's listening connection serves (`track`), as a simple Query
//! or as an extended-protocol batch that does nothing else: read from the client's bytes
//! before any server is taken.

use bytes::{Buf, BufMut};

use super::pin::Pin;
use super::{Relay, Subscribe};
use crate::protocol::backend as b;
use crate::protocol::frame;
use crate::protocol::frontend as f;
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

/// An extended-protocol batch at the front of `buf` that runs one `LISTEN`/`UNLISTEN` and
/// nothing else.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Batch {
    pub sub: Subscribe,
    /// The bytes of `buf` it spans, through its Sync.
    pub len: usize,
    /// Its Parse (of the unnamed statement), if it has one: the client's unnamed statement
    /// from now on.
    pub parse: Option<usize>,
    /// The tags of what PostgreSQL answers before the command's CommandComplete, in order
    /// (ParseComplete, ParameterDescription of no parameters, NoData, BindComplete).
    pub replies: Vec<u8>,
}

/// The batch at the front of `buf`, if every message of it through its Sync is there and it
/// is: an optional Parse of the unnamed statement declaring no parameter types (and a
/// Describe of that statement), one Bind of the unnamed portal with no parameter values (and
/// a Describe of that portal), one Execute of it, and Sync, in that order, Flushes anywhere.
/// Without a Parse, `kept` gives the text of the statement the Bind names (`None`: it is not
/// one the pooler could run without a server). The statement's text must be a lone
/// `LISTEN`/`UNLISTEN`. Anything else is left to a server.
pub(super) fn of_batch<'a>(
    buf: &'a [u8],
    kept: impl FnOnce(&[u8]) -> Option<&'a [u8]>,
) -> Option<Batch> {
    let mut at = 0;
    let mut parse = None;
    let mut sub = None;
    let mut bound = false;
    let mut executed = false;
    let mut replies = Vec::new();
    let mut kept = Some(kept);
    loop {
        let (tag, len) = frame::peek_header(&buf[at..])?;
        let total = usize::try_from(len).ok()?.checked_add(1)?;
        let msg = buf.get(at..at.checked_add(total)?)?;
        match tag {
            f::PARSE_TAG if at == 0 => {
                let (name, sql, types) = f::parse_parts(msg).ok()?;
                if !name.is_empty() || types != 0 {
                    return None;
                }
                sub = Some(of_text(sql)?);
                parse = Some(total);
                replies.push(b::PARSE_COMPLETE_TAG);
            }
            f::DESCRIBE_TAG if !executed => {
                let (kind, span) = f::describe_or_close_target(msg).ok()?;
                match kind {
                    b'S' if parse.is_some() && !bound && span.len == 0 => {
                        replies.extend([b::PARAMETER_DESCRIPTION_TAG, b::NO_DATA_TAG])
                    }
                    b'P' if bound && span.len == 0 => replies.push(b::NO_DATA_TAG),
                    _ => return None,
                }
            }
            f::BIND_TAG if !bound => {
                let (portal, stmt, values) = f::bind_parts(msg).ok()?;
                if !portal.is_empty() || values != 0 {
                    return None;
                }
                if parse.is_none() {
                    sub = Some(of_text((kept.take()?)(stmt)?)?);
                } else if !stmt.is_empty() {
                    return None;
                }
                bound = true;
                replies.push(b::BIND_COMPLETE_TAG);
            }
            f::EXECUTE_TAG if bound && !executed => {
                if !f::execute_portal(msg).ok()?.is_empty() {
                    return None;
                }
                executed = true;
            }
            f::FLUSH_TAG => {}
            f::SYNC_TAG if executed => {
                return Some(Batch {
                    sub: sub?,
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
            f::BIND_TAG => self.subscribes,
            _ => false,
        }
    }

    /// An extended-protocol batch in front of the client's buffer that runs a lone
    /// `LISTEN`/`UNLISTEN` and nothing else, with no server held (`track`): answered as
    /// PostgreSQL answers it up to the command's CommandComplete, and handed to the driver
    /// as [`super::Next::Aside`], as the simple Query form is. Returns whether it was.
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
        for &tag in &batch.replies {
            if tag == b::PARAMETER_DESCRIPTION_TAG {
                // No parameters.
                self.client.cout.put_slice(&[tag, 0, 0, 0, 6, 0, 0]);
            } else {
                b::empty(&mut self.client.cout, tag);
            }
        }
        if let Some(len) = batch.parse.filter(|_| self.policy.tracking) {
            // The client's unnamed statement now, replayed (and pinning) where it is bound
            // on a server.
            let kept = self.unnamed.get_or_insert_with(Box::default);
            kept.clear();
            kept.extend_from_slice(&self.client.cbuf[..len]);
            self.batch.unnamed_here = false;
            self.subscribes = true;
        }
        self.client.cbuf.advance(batch.len);
        self.client.subscribe = Some(Box::new(vec![batch.sub]));
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
        assert_eq!(found.sub, Subscribe::Listen("Ch".into()));
        assert_eq!(found.len, b.len());
        assert_eq!(found.parse, Some(parse("", "LISTEN \"Ch\"").len()));
        assert_eq!(found.replies, b"12n");
        // What follows the Sync is not the batch's.
        let more = [&b[..], &sync()].concat();
        assert_eq!(of_batch(&more, none).map(|f| f.len), Some(b.len()));

        // A Bind of a statement the client keeps, with a Describe of the statement first
        // where there is a Parse.
        let b = [bind("", "s1"), execute(""), msg(b'H', b""), sync()].concat();
        let found = of_batch(&b, |n| (n == b"s1").then_some(&b"unlisten *"[..])).unwrap();
        assert_eq!(found.sub, Subscribe::Unlisten(None));
        assert_eq!((found.parse, &found.replies[..]), (None, &b"2"[..]));
        let b = [
            parse("", "listen a"),
            describe(b'S', ""),
            bind("", ""),
            execute(""),
            sync(),
        ]
        .concat();
        assert_eq!(of_batch(&b, none).unwrap().replies, b"1tn2");
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
}
