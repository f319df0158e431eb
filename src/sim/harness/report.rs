//! What a run showed beyond the clients' transcripts: every message each server connection
//! was sent, and the most named statements it held at once, for checks a scenario makes on
//! top of agreement with the direct run (who answered an error, what was renamed or
//! replayed where, how many statements a server kept).

use bytes::BytesMut;

use super::Stats;
use crate::protocol::frame;
use crate::protocol::frontend as f;
use crate::sim::program::Msg;

/// One server connection's log.
#[derive(Debug, Clone, Default)]
pub struct ServerLog {
    bytes: BytesMut,
    /// The most named prepared statements it held after any step.
    pub peak_prepared: usize,
}

impl ServerLog {
    pub(super) fn note(&mut self, bytes: &[u8], prepared: usize) {
        self.bytes.extend_from_slice(bytes);
        self.peak_prepared = self.peak_prepared.max(prepared);
    }

    /// The messages it was sent, in order, as program messages (a Bind without its
    /// parameters); tags a program does not write are left out.
    pub fn messages(&self) -> Vec<Msg> {
        let mut rest = self.bytes.clone();
        let mut out = Vec::new();
        while let Ok(Some(m)) = frame::cut(&mut rest, usize::MAX) {
            out.extend(decode(m.tag, m.body()));
        }
        out
    }
}

/// The C strings at the start of `body`, lossily as text.
fn cstrs(body: &[u8], n: usize) -> Vec<String> {
    body.split(|&b| b == 0)
        .take(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn decode(tag: u8, body: &[u8]) -> Option<Msg> {
    let two = || {
        let mut v = cstrs(body, 2);
        v.resize(2, String::new());
        (v[0].clone(), v[1].clone())
    };
    let kind = || body.first().map_or('?', |&b| b as char);
    let named = || cstrs(body.get(1..).unwrap_or_default(), 1).remove(0);
    Some(match tag {
        f::QUERY_TAG => Msg::Query(two().0),
        f::PARSE_TAG => {
            let (name, sql) = two();
            Msg::Parse(name, sql)
        }
        f::BIND_TAG => {
            let (portal, stmt) = two();
            Msg::Bind(portal, stmt, Vec::new())
        }
        f::DESCRIBE_TAG => Msg::Describe(kind(), named()),
        f::CLOSE_TAG => Msg::Close(kind(), named()),
        f::EXECUTE_TAG => Msg::Execute(two().0, 0),
        f::SYNC_TAG => Msg::Sync,
        f::FLUSH_TAG => Msg::Flush,
        f::COPY_DATA_TAG => Msg::CopyData(String::from_utf8_lossy(body).into_owned()),
        f::COPY_DONE_TAG => Msg::CopyDone,
        f::COPY_FAIL_TAG => Msg::CopyFail(two().0),
        _ => return None,
    })
}

/// A run that agreed with the direct run, and what its servers were sent.
#[derive(Debug, Clone)]
pub struct Report {
    pub stats: Stats,
    /// One log per server connection opened in the run, in the order they were opened (a
    /// connection closed after a FATAL and its replacement are two).
    pub servers: Vec<ServerLog>,
}

impl Report {
    pub(super) fn new(stats: Stats, servers: Vec<ServerLog>) -> Report {
        Report { stats, servers }
    }

    /// Every message a server was sent: (server connection, message).
    pub fn sent(&self) -> Vec<(usize, Msg)> {
        self.servers
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.messages().into_iter().map(move |m| (i, m)))
            .collect()
    }

    /// The Parses servers were sent of statement `name`: (server connection, SQL).
    pub fn parses_of(&self, name: &str) -> Vec<(usize, String)> {
        self.sent()
            .into_iter()
            .filter_map(|(s, m)| match m {
                Msg::Parse(n, sql) if n == name => Some((s, sql)),
                _ => None,
            })
            .collect()
    }
}
