//! auth_query: a user missing from the files is looked up on the server, on a connection of
//! the lookup pool (logged in as the configured auth user to the auth database). The user name
//! travels only as a bound parameter of an extended-protocol query (Parse with `$1`, Bind),
//! never spliced into SQL text: the failure behind CVE-2025-12819. The lookup's `search_path`
//! is pinned to `pg_catalog`, so the database's owner cannot shadow what the query names.
//! Answers are cached in two bounded LRU maps: users found, and names that were not.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use postgres_protocol::message::frontend as fe;
use postgres_protocol::IsNull;

use super::Credential;
use crate::protocol::{backend, Cursor, ParseError};
use crate::server::{self, ServerConn, ServerError};

/// The longest role or database name PostgreSQL keeps (NAMEDATALEN - 1): a longer one names
/// no role, so it is never looked up nor kept.
pub const MAX_NAME: usize = 63;
/// PostgreSQL's `text` type, so `$1` is never inferred as something else.
const TEXT_OID: u32 = 25;
/// Sent before each lookup: nothing the database's owner put on its `search_path` can stand in
/// for what the query names.
const PIN_SEARCH_PATH: &str = "SET search_path = pg_catalog, pg_temp";

/// One bounded map, least recently used out first.
#[derive(Debug, Default)]
struct Lru {
    /// "database\0user" → when looked up, what was found, its place in `order`.
    map: HashMap<String, (Instant, Option<Credential>, u64)>,
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl Lru {
    fn get(&mut self, key: &str, ttl: Duration) -> Option<Option<Credential>> {
        self.tick += 1;
        let tick = self.tick;
        let (at, cred, place) = self.map.get_mut(key)?;
        if at.elapsed() >= ttl {
            return None;
        }
        let old = std::mem::replace(place, tick);
        let cred = cred.clone();
        if let Some(k) = self.order.remove(&old) {
            self.order.insert(tick, k);
        }
        Some(cred)
    }

    fn put(&mut self, key: String, cred: Option<Credential>, cap: usize) {
        self.tick += 1;
        if let Some((_, _, place)) = self.map.remove(&key) {
            self.order.remove(&place);
        }
        while self.map.len() >= cap.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
        self.order.insert(self.tick, key.clone());
        self.map.insert(key, (Instant::now(), cred, self.tick));
    }

    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

/// Looked-up answers: users found and names not found, kept apart so made-up names (which
/// anyone can send) cannot push real users out, and for different times.
#[derive(Debug, Default)]
pub struct AuthQueryCache {
    found: Mutex<Lru>,
    missing: Mutex<Lru>,
}

fn lock(m: &Mutex<Lru>) -> MutexGuard<'_, Lru> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(database: &str, user: &str) -> String {
    format!("{database}\0{user}")
}

impl AuthQueryCache {
    /// A cached answer for (database, user): a credential younger than `found_ttl`, or
    /// `Some(None)`, a miss younger than `missing_ttl`.
    pub fn get(
        &self,
        database: &str,
        user: &str,
        found_ttl: Duration,
        missing_ttl: Duration,
    ) -> Option<Option<Credential>> {
        let k = key(database, user);
        if let Some(hit) = lock(&self.found).get(&k, found_ttl) {
            return Some(hit);
        }
        lock(&self.missing).get(&k, missing_ttl)
    }

    /// Keeps an answer; each map holds at most `cap` entries. Names too long to be a role's
    /// are not kept.
    pub fn put(&self, database: &str, user: &str, cred: Option<Credential>, cap: usize) {
        if user.len() > MAX_NAME || database.len() > MAX_NAME {
            return;
        }
        let k = key(database, user);
        match cred {
            Some(c) => {
                lock(&self.missing).map.remove(&k);
                lock(&self.found).put(k, Some(c), cap);
            }
            None => lock(&self.missing).put(k, None, cap),
        }
    }

    pub fn clear(&self) {
        lock(&self.found).clear();
        lock(&self.missing).clear();
    }

    /// Entries kept (found, missing).
    pub fn len(&self) -> (usize, usize) {
        (lock(&self.found).map.len(), lock(&self.missing).map.len())
    }
}

/// Runs `query` with `$1 = user` on `conn`, a lookup pool's connection, after pinning its
/// `search_path`; returns the second column of the first row (the stored password), `None`
/// when there is no row or it is NULL. On `Ok` the connection is idle again and may go back
/// to its pool; on an error it must be closed.
pub async fn lookup(
    conn: &mut ServerConn,
    query: &str,
    user: &str,
) -> Result<Option<String>, ServerError> {
    let mut out = BytesMut::new();
    let enc = ServerError::Encode;
    fe::query(PIN_SEARCH_PATH, &mut out).map_err(enc)?;
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
    let mut ready = 0;
    while ready < 2 {
        let f = server::read_frame(conn).await?;
        match f.tag {
            backend::DATA_ROW_TAG if ready == 1 && found.is_none() => {
                found = Some(second_column(f.body())?)
            }
            backend::ERROR_RESPONSE_TAG => failed = Some(backend::parse_error(f.body())?),
            backend::PARAMETER_STATUS_TAG => {
                let (k, v) = backend::parse_parameter_status(f.body())?;
                conn.set_param(k, v);
            }
            backend::READY_FOR_QUERY_TAG => {
                ready += 1;
                if f.body() != [backend::TX_IDLE] {
                    return Err(ServerError::Protocol(
                        "auth_query left a transaction open".into(),
                    ));
                }
            }
            _ => {}
        }
    }
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
    fn cache_expires_and_is_bounded_least_recently_used_first() {
        let c = AuthQueryCache::default();
        let ttl = Duration::from_secs(60);
        let cred = || Some(Credential::Md5("md5abc".into()));
        c.put("db", "real", cred(), 3);
        c.put("db", "ghost", None, 3);
        assert!(matches!(c.get("db", "ghost", ttl, ttl), Some(None)));
        assert!(c.get("db", "ghost", ttl, Duration::ZERO).is_none());
        assert!(matches!(c.get("db", "real", ttl, ttl), Some(Some(_))));
        // Made-up names fill only their own map: the real user stays.
        for i in 0..100 {
            c.put("db", &format!("ghost{i}"), None, 3);
        }
        assert_eq!(c.len(), (1, 3));
        assert!(matches!(c.get("db", "real", ttl, ttl), Some(Some(_))));
        // Least recently used out first.
        c.put("db", "a", cred(), 3);
        c.put("db", "b", cred(), 3);
        assert!(c.get("db", "real", ttl, ttl).is_some());
        c.put("db", "c", cred(), 3);
        assert!(
            c.get("db", "a", ttl, ttl).is_none(),
            "a was the least recently used"
        );
        assert!(c.get("db", "real", ttl, ttl).is_some());
        // Names too long to be a role's are not kept.
        c.put("db", &"x".repeat(MAX_NAME + 1), None, 3);
        assert!(c.get("db", &"x".repeat(MAX_NAME + 1), ttl, ttl).is_none());
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
