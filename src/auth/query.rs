//! auth_query: a user missing from the files is looked up on the server, logged in as the
//! configured auth user. The user name travels only as a bound parameter of an extended-
//! protocol query (Parse with `$1`, Bind), never spliced into SQL text: the failure behind
//! CVE-2025-12819. Answers, including "no such user", are cached for `auth_cache_ttl`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use postgres_protocol::message::frontend as fe;
use postgres_protocol::IsNull;

use super::Credential;
use crate::protocol::{backend, Cursor, ParseError};
use crate::server::{self, ServerError, ServerTarget};

/// Entries kept before expired ones are swept (made-up user names must not grow memory).
const MAX_ENTRIES: usize = 10_000;
/// PostgreSQL's `text` type, so `$1` is never inferred as something else.
const TEXT_OID: u32 = 25;

/// (database, user) → when looked up, and what was found.
type Entries = HashMap<(String, String), (Instant, Option<Credential>)>;

#[derive(Debug, Default)]
pub struct AuthQueryCache {
    entries: Mutex<Entries>,
}

impl AuthQueryCache {
    /// A cached answer for (database, user) younger than `ttl`: `Some(None)` is a cached miss.
    pub fn get(&self, database: &str, user: &str, ttl: Duration) -> Option<Option<Credential>> {
        let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (at, cred) = map.get(&(database.to_owned(), user.to_owned()))?;
        (at.elapsed() < ttl).then(|| cred.clone())
    }

    pub fn put(&self, database: &str, user: &str, cred: Option<Credential>, ttl: Duration) {
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, (at, _)| at.elapsed() < ttl);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(
            (database.to_owned(), user.to_owned()),
            (Instant::now(), cred),
        );
    }

    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Runs `query` with `$1 = user` on a fresh connection as the auth user; returns the second
/// column of the first row (the stored password), `None` when there is no row or it is NULL.
pub async fn lookup(
    target: &ServerTarget,
    query: &str,
    user: &str,
) -> Result<Option<String>, ServerError> {
    let mut conn = server::login(target).await?;
    let mut out = BytesMut::new();
    let enc = |e: std::io::Error| ServerError::Protocol(e.to_string());
    fe::parse("", query, [TEXT_OID], &mut out).map_err(enc)?;
    fe::bind(
        "",
        "",
        [0],
        [user],
        |v, buf| {
            buf.extend_from_slice(v.as_bytes());
            Ok(IsNull::No)
        },
        [0],
        &mut out,
    )
    .map_err(|_| ServerError::Protocol("cannot encode the auth_query parameter".into()))?;
    fe::execute("", 1, &mut out).map_err(enc)?;
    fe::sync(&mut out);
    conn.stream.send(&out).await?;
    let mut found = None;
    let mut failed = None;
    loop {
        let f = server::read_frame(&mut conn).await?;
        match f.tag {
            backend::DATA_ROW_TAG if found.is_none() => found = Some(second_column(f.body())?),
            backend::ERROR_RESPONSE_TAG => failed = Some(backend::parse_error(f.body())?),
            backend::READY_FOR_QUERY_TAG => break,
            _ => {}
        }
    }
    let mut bye = BytesMut::new();
    fe::terminate(&mut bye);
    let _ = conn.stream.send(&bye).await;
    match failed {
        Some(e) => Err(ServerError::Rejected(e)),
        None => Ok(found.flatten()),
    }
}

/// The second column of a DataRow as text, `None` for NULL.
fn second_column(body: &[u8]) -> Result<Option<String>, ParseError> {
    let mut c = Cursor::new(body);
    if c.i16()? < 2 {
        return Err(ParseError::Invalid(
            "auth_query must return (name, password)",
        ));
    }
    let first = c.i32()?;
    if first > 0 {
        c.take(first as usize)?;
    }
    match c.i32()? {
        -1 => Ok(None),
        n => {
            let v = c.take(usize::try_from(n).map_err(|_| ParseError::Invalid("length"))?)?;
            String::from_utf8(v.to_vec())
                .map(Some)
                .map_err(|_| ParseError::Utf8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_expires_and_stays_bounded() {
        let c = AuthQueryCache::default();
        let ttl = Duration::from_secs(60);
        c.put("db", "u", None, ttl);
        assert!(matches!(c.get("db", "u", ttl), Some(None)));
        assert!(c.get("db", "u", Duration::ZERO).is_none());
        for i in 0..MAX_ENTRIES + 5 {
            c.put("db", &i.to_string(), None, Duration::ZERO);
        }
        assert!(c.entries.lock().unwrap().len() <= MAX_ENTRIES);
    }

    #[test]
    fn data_row_second_column() {
        let mut b = Vec::new();
        b.extend_from_slice(&2i16.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.push(b'u');
        b.extend_from_slice(&3i32.to_be_bytes());
        b.extend_from_slice(b"md5");
        assert_eq!(second_column(&b).unwrap().as_deref(), Some("md5"));
        b.truncate(7);
        b.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(second_column(&b).unwrap(), None);
        assert!(second_column(&b[..5]).is_err());
    }
}
