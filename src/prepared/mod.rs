//! Prepared-statement tracking as pure data: the statements each client has made with a named
//! Parse (kept so they can be replayed), and which of them each server connection holds.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

/// A client's statement as the pooler keeps it.
#[derive(Debug)]
pub struct Kept {
    /// Unique per client for its lifetime: tells a re-made statement from the one it replaced.
    pub id: u64,
    /// `p<c>_<name>`: the name on every server connection.
    pub server_name: Bytes,
    /// The client's Parse, already renamed, ready to send (or replay) as is.
    pub parse: Bytes,
}

/// The named statements of one client.
#[derive(Debug, Default)]
pub struct ClientStatements {
    map: HashMap<Bytes, Arc<Kept>>,
    next_id: u64,
}

impl ClientStatements {
    pub fn get(&self, name: &[u8]) -> Option<&Arc<Kept>> {
        self.map.get(name)
    }

    /// Keeps a statement made from `parse` (renamed already); returns it.
    pub fn insert(&mut self, name: Bytes, server_name: Bytes, parse: Bytes) -> Arc<Kept> {
        self.next_id += 1;
        let kept = Arc::new(Kept {
            id: self.next_id,
            server_name,
            parse,
        });
        self.map.insert(name, kept.clone());
        kept
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<Arc<Kept>> {
        self.map.remove(name)
    }

    /// Forgets `name` only if it is still the statement with this id.
    pub fn remove_if(&mut self, name: &[u8], id: u64) {
        if self.map.get(name).is_some_and(|k| k.id == id) {
            self.map.remove(name);
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The server name of client `client`'s statement `name`.
pub fn server_name(client: u64, name: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(name.len() + 24);
    v.push(b'p');
    v.extend_from_slice(client.to_string().as_bytes());
    v.push(b'_');
    v.extend_from_slice(name);
    Bytes::from(v)
}

/// What one server connection holds: server name → (statement id, last use), for LRU bounds.
#[derive(Debug, Default)]
pub struct ServerStatements {
    map: HashMap<Bytes, (u64, u64)>,
    tick: u64,
}

/// Whether a server connection holds a client's statement.
#[derive(Debug, PartialEq, Eq)]
pub enum Presence {
    /// This very statement: use it.
    Present,
    /// Nothing by that name: send the Parse.
    Missing,
    /// An older statement under the same name: close it, then send the Parse.
    Stale,
}

impl ServerStatements {
    /// Looks a statement up and, if present, marks it most recently used.
    pub fn presence(&mut self, server_name: &[u8], id: u64) -> Presence {
        self.tick += 1;
        match self.map.get_mut(server_name) {
            Some((have, used)) if *have == id => {
                *used = self.tick;
                Presence::Present
            }
            Some(_) => Presence::Stale,
            None => Presence::Missing,
        }
    }

    pub fn add(&mut self, server_name: Bytes, id: u64) {
        self.tick += 1;
        self.map.insert(server_name, (id, self.tick));
    }

    pub fn remove(&mut self, server_name: &[u8]) {
        self.map.remove(server_name);
    }

    /// Forgets a copy only if it is still the statement with this id.
    pub fn remove_if(&mut self, server_name: &[u8], id: u64) {
        if self
            .map
            .get(server_name)
            .is_some_and(|(have, _)| *have == id)
        {
            self.map.remove(server_name);
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The least recently used statement, to close before adding one beyond the bound;
    /// `keep` (the statement about to be used) is never chosen.
    pub fn lru_victim(&self, keep: &[u8]) -> Option<Bytes> {
        self.map
            .iter()
            .filter(|(k, _)| k.as_ref() != keep)
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| k.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_and_lru() {
        let mut s = ServerStatements::default();
        s.add(Bytes::from_static(b"p1_a"), 1);
        s.add(Bytes::from_static(b"p1_b"), 2);
        assert_eq!(s.presence(b"p1_a", 1), Presence::Present);
        assert_eq!(s.presence(b"p1_a", 3), Presence::Stale);
        assert_eq!(s.presence(b"p1_c", 3), Presence::Missing);
        // a was used after b, so b is the least recently used.
        assert_eq!(s.lru_victim(b"p1_x").as_deref(), Some(&b"p1_b"[..]));
        assert_eq!(s.lru_victim(b"p1_b").as_deref(), Some(&b"p1_a"[..]));
        s.remove_if(b"p1_a", 9);
        assert_eq!(s.len(), 2);
        s.remove_if(b"p1_a", 1);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn client_statements_replace_and_forget() {
        let mut c = ClientStatements::default();
        let a = c.insert(Bytes::from_static(b"p"), server_name(2, b"p"), Bytes::new());
        assert_eq!(&a.server_name[..], b"p2_p");
        let b = c.insert(
            Bytes::from_static(b"p"),
            a.server_name.clone(),
            Bytes::new(),
        );
        assert_ne!(a.id, b.id);
        c.remove_if(b"p", a.id);
        assert!(c.get(b"p").is_some());
        c.remove_if(b"p", b.id);
        assert!(c.is_empty());
    }
}

/// Whether SQL text drops every prepared statement of the session (`DEALLOCATE [PREPARE] ALL`
/// or `DISCARD ALL`), in any of its `;`-separated statements.
pub fn drops_all_statements(sql: &[u8]) -> bool {
    sql.split(|&b| b == b';').any(|stmt| {
        let words: Vec<&[u8]> = stmt
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty())
            .collect();
        let is = |w: &[u8], s: &str| w.eq_ignore_ascii_case(s.as_bytes());
        match words.as_slice() {
            [a, b] => (is(a, "deallocate") || is(a, "discard")) && is(b, "all"),
            [a, p, b] => is(a, "deallocate") && is(p, "prepare") && is(b, "all"),
            _ => false,
        }
    })
}

#[cfg(test)]
mod sql_tests {
    use super::drops_all_statements;

    #[test]
    fn recognises_deallocate_and_discard_all() {
        assert!(drops_all_statements(b"DEALLOCATE ALL"));
        assert!(drops_all_statements(b"  deallocate prepare all ;"));
        assert!(drops_all_statements(b"select 1; DISCARD ALL"));
        assert!(!drops_all_statements(b"DEALLOCATE p"));
        assert!(!drops_all_statements(b"select 'discard all'x"));
        assert!(!drops_all_statements(b"DISCARD PLANS"));
    }
}
