//! Prepared-statement tracking as pure data: the statements each client has made with a named
//! Parse (kept so they can be replayed), and which of them each server connection holds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::session_state::detect::Unseen;
use crate::session_state::signal::Target;

/// A client's statement as the pooler keeps it.
#[derive(Debug)]
pub struct Kept {
    /// Unique per client for its lifetime: tells a re-made statement from the one it replaced.
    pub id: u64,
    /// The name on every server connection: `p<c>_<name>`, or `P<c>_<id>` when that would
    /// exceed PostgreSQL's 63-byte names (a capital P cannot collide with the first form).
    pub server_name: Bytes,
    /// The client's Parse, already renamed, ready to send (or replay) as is.
    pub parse: Bytes,
    /// A server has answered this Parse with ParseComplete.
    pub confirmed: AtomicBool,
    /// The client's name of the statement this one's text runs (`EXECUTE name`): the server
    /// must hold that one too when this one is used.
    pub needs: Option<Bytes>,
    /// Its text is a lone `LISTEN` or `UNLISTEN` (`track`): run without a server where it is
    /// all its batch does, and pins the client where a server runs it.
    pub subscribes: bool,
    /// The backend its text signals by pid (`pg_terminate_backend`), which a Bind of it is
    /// not run on (`session_state::signal`).
    pub signal: Option<Target>,
    /// What its text may leave on a server that the pooler cannot see into: a server a Bind
    /// of it runs on is cleaned before another client runs there.
    pub unseen: Option<Unseen>,
}

impl Kept {
    pub fn is_confirmed(&self) -> bool {
        self.confirmed.load(Ordering::Relaxed)
    }
}

/// The named statements of one client.
#[derive(Debug, Default)]
pub struct ClientStatements {
    next_id: u64,
    /// Made at the client's first statement: a client that never prepares one (and every
    /// idle client's task holds this inline) carries one pointer, not the table's 88 bytes.
    table: Option<Box<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<Bytes, Arc<Kept>>,
    /// Statements replaced by a Parse whose outcome is not known yet: restored if it fails.
    /// `None`: what it replaced turned out never to have been made (its own Parse failed).
    replaced: Vec<(u64, Option<Arc<Kept>>)>,
    /// Statements whose Parse failed after the client had closed them (the Close still owed),
    /// with the statement each had replaced: a skipped Close brings back that one, not them.
    rejected: Vec<(u64, Option<Arc<Kept>>)>,
}

/// At most this many rejected statements are remembered (a batch owes at most about as
/// many replies); the oldest is forgotten first.
const MAX_REJECTED: usize = 1024;

impl ClientStatements {
    pub fn get(&self, name: &[u8]) -> Option<&Arc<Kept>> {
        self.table.as_ref()?.map.get(name)
    }

    fn table(&mut self) -> &mut Table {
        self.table.get_or_insert_with(Default::default)
    }

    /// The id the next statement will get: statements below it were made before now.
    pub fn next_id(&self) -> u64 {
        self.next_id + 1
    }

    /// Whether the client ever prepared a statement (copies of it may be on servers).
    pub fn ever_kept(&self) -> bool {
        self.next_id > 0
    }

    /// Keeps a statement made from a Parse; `rename` gives its server name and renamed Parse
    /// from its id. A statement it replaces is remembered until the Parse is settled.
    pub fn insert(
        &mut self,
        name: Bytes,
        needs: Option<Bytes>,
        subscribes: bool,
        signal: Option<Target>,
        unseen: Option<Unseen>,
        rename: impl FnOnce(u64) -> (Bytes, Bytes),
    ) -> Arc<Kept> {
        self.next_id += 1;
        let id = self.next_id;
        let (server_name, parse) = rename(id);
        let kept = Arc::new(Kept {
            id,
            server_name,
            parse,
            confirmed: AtomicBool::new(false),
            needs,
            subscribes,
            signal,
            unseen,
        });
        let t = self.table();
        if let Some(old) = t.map.insert(name, kept.clone()) {
            t.replaced.push((id, Some(old)));
        }
        kept
    }

    /// The server accepted statement `id`'s Parse.
    pub fn confirm(&mut self, name: &[u8], id: u64) {
        let Some(t) = self.table.as_mut() else {
            return;
        };
        if let Some(k) = t.map.get(name).filter(|k| k.id == id) {
            k.confirmed.store(true, Ordering::Relaxed);
        }
        t.replaced.retain(|(by, _)| *by != id);
    }

    /// The server rejected (or skipped) statement `id`'s Parse: forget it, bringing back the
    /// statement it replaced, which the server still has. Returns that statement.
    pub fn reject(&mut self, name: &[u8], id: u64) -> Option<Arc<Kept>> {
        self.table().reject(name, id)
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<Arc<Kept>> {
        self.table.as_mut()?.map.remove(name)
    }

    /// Forgets that statement `id`'s Parse failed (its Close ran: nothing can bring it back).
    pub fn forget_rejected(&mut self, id: u64) {
        if let Some(t) = self.table.as_mut() {
            t.rejected.retain(|(r, _)| *r != id);
        }
    }

    /// Whether statement `id`'s Parse failed (or was skipped) after the client closed it.
    pub fn is_rejected(&self, id: u64) -> bool {
        self.table
            .as_ref()
            .is_some_and(|t| t.rejected.iter().any(|(r, _)| *r == id))
    }

    /// Puts back a statement whose Close the server skipped, unless the name was reused.
    pub fn restore(&mut self, name: &[u8], kept: Arc<Kept>) {
        self.table().restore(name, kept)
    }

    /// Forgets statements made before `before` (a DEALLOCATE ALL or DISCARD ALL ran).
    pub fn drop_older_than(&mut self, before: u64) {
        if let Some(t) = self.table.as_mut() {
            t.map.retain(|_, k| k.id >= before);
            t.replaced.retain(|(by, _)| *by >= before);
            t.rejected.retain(|(id, _)| *id >= before);
        }
    }

    pub fn len(&self) -> usize {
        self.table.as_ref().map_or(0, |t| t.map.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Table {
    /// See [`ClientStatements::reject`].
    fn reject(&mut self, name: &[u8], id: u64) -> Option<Arc<Kept>> {
        let old = self
            .replaced
            .iter()
            .position(|(by, _)| *by == id)
            .and_then(|i| self.replaced.swap_remove(i).1);
        // Parses that replaced this one (still owed) replaced what it had replaced.
        for (_, o) in self.replaced.iter_mut().chain(self.rejected.iter_mut()) {
            if o.as_ref().is_some_and(|k| k.id == id) {
                *o = old.clone();
            }
        }
        if self.map.get(name).is_some_and(|k| k.id == id) {
            match &old {
                Some(o) => {
                    self.map.insert(Bytes::copy_from_slice(name), o.clone());
                }
                None => {
                    self.map.remove(name);
                }
            }
        } else {
            // Closed (or replaced) before its Parse failed: a Close of it still owed must not
            // bring back a statement the server never made.
            if self.rejected.len() >= MAX_REJECTED {
                self.rejected.remove(0);
            }
            self.rejected.push((id, old.clone()));
        }
        old
    }

    /// See [`ClientStatements::restore`].
    fn restore(&mut self, name: &[u8], kept: Arc<Kept>) {
        let kept = match self.rejected.iter().position(|(id, _)| *id == kept.id) {
            // Its Parse failed: what the name held before it is what the server still has.
            Some(i) => match self.rejected.swap_remove(i).1 {
                Some(old) => old,
                None => return,
            },
            None => kept,
        };
        let Some(mut cur) = self.map.get(name).map(|k| k.id) else {
            self.map.insert(Bytes::copy_from_slice(name), kept);
            return;
        };
        // The name was reused after the Close, by Parses still owed: they are skipped too
        // (entries settle in order), so the first of them, which found the name free, in fact
        // replaced this statement.
        while cur > kept.id {
            match self.replaced.iter_mut().find(|(by, _)| *by == cur) {
                Some((_, Some(prev))) if prev.id > kept.id => cur = prev.id,
                Some((_, prev)) => {
                    if prev.is_none() {
                        *prev = Some(kept);
                    }
                    return;
                }
                None => {
                    self.replaced.push((cur, Some(kept)));
                    return;
                }
            }
        }
    }
}

/// PostgreSQL keeps the first 63 bytes of a name (NAMEDATALEN - 1).
pub const MAX_NAME: usize = 63;

/// The server name of client `client`'s statement `name` (number `id`).
pub fn server_name(client: u64, name: &[u8], id: u64) -> Bytes {
    let mut v = Vec::with_capacity(name.len() + 24);
    v.push(b'p');
    v.extend_from_slice(client.to_string().as_bytes());
    v.push(b'_');
    v.extend_from_slice(name);
    if v.len() > MAX_NAME {
        v.clear();
        v.extend_from_slice(format!("P{client}_{id}").as_bytes());
    }
    Bytes::from(v)
}

/// The client whose statement a server name is (`p<c>_...` or `P<c>_...`, see
/// [`server_name`]).
pub fn owner(server_name: &[u8]) -> Option<u64> {
    let rest = server_name
        .strip_prefix(b"p")
        .or_else(|| server_name.strip_prefix(b"P"))?;
    let digits = rest.iter().position(|&b| b == b'_')?;
    // Read by hand, without a UTF-8 check and a parse: this runs for every copy a server
    // holds whenever clients have left.
    let digits = &rest[..digits];
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let d = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// One server copy: which statement it is, when it was last used and when it was made.
#[derive(Debug, Clone, Copy)]
struct ServerCopy {
    id: u64,
    used: u64,
    added: u64,
}

/// A server's copy of a statement as a Close still owed found it: which statement, and when
/// it was made there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub id: u64,
    added: u64,
}

/// What one server connection holds: server name → copy, for LRU bounds.
#[derive(Debug, Default)]
pub struct ServerStatements {
    map: HashMap<Bytes, ServerCopy>,
    tick: u64,
    /// Replays that failed while a later Parse of the same name was already recorded: that
    /// Parse failing must not bring them back (see [`ServerStatements::replay_failed`]).
    lost: Vec<(Bytes, u64)>,
}

/// At most this many failed replays are remembered; the oldest is forgotten first.
const MAX_LOST: usize = 64;

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
            Some(c) if c.id == id => {
                c.used = self.tick;
                Presence::Present
            }
            Some(_) => Presence::Stale,
            None => Presence::Missing,
        }
    }

    /// The sequence number the next copy will get: copies below it exist before now.
    pub fn next_seq(&self) -> u64 {
        self.tick + 1
    }

    pub fn add(&mut self, server_name: Bytes, id: u64) {
        // Made (again): whatever an earlier failed replay of it said no longer holds.
        if !self.lost.is_empty() {
            self.lost
                .retain(|(n, i)| !(*i == id && n.as_ref() == server_name.as_ref()));
        }
        self.tick += 1;
        let c = ServerCopy {
            id,
            used: self.tick,
            added: self.tick,
        };
        self.map.insert(server_name, c);
    }

    /// The copy under this name, if any, as [`ServerStatements::restore`] takes it back.
    pub fn held(&self, server_name: &[u8]) -> Option<Held> {
        self.map.get(server_name).map(|c| Held {
            id: c.id,
            added: c.added,
        })
    }

    /// Brings back a copy a skipped Close was to remove, as old as it was: a DEALLOCATE ALL
    /// sent after the Close still drops it.
    pub fn restore(&mut self, server_name: Bytes, held: Held) {
        if !self.lost.is_empty() {
            self.lost
                .retain(|(n, i)| !(*i == held.id && n.as_ref() == server_name.as_ref()));
        }
        self.tick += 1;
        let c = ServerCopy {
            id: held.id,
            used: self.tick,
            added: held.added,
        };
        self.map.insert(server_name, c);
    }

    /// The id of the copy under this name, if any.
    pub fn holds(&self, server_name: &[u8]) -> Option<u64> {
        self.map.get(server_name).map(|c| c.id)
    }

    pub fn remove(&mut self, server_name: &[u8]) {
        self.map.remove(server_name);
    }

    /// Forgets a copy only if it is still the statement with this id.
    /// The server refused the replay of copy `id`. If a later Parse or Close of the same
    /// name is recorded already (it is skipped too, and its settlement would bring back this
    /// copy as the one the name held), remember that this copy was never made.
    pub fn replay_failed(&mut self, server_name: &[u8], id: u64) {
        if self.holds(server_name) == Some(id) {
            self.map.remove(server_name);
            return;
        }
        if self.lost.len() >= MAX_LOST {
            self.lost.remove(0);
        }
        self.lost.push((Bytes::copy_from_slice(server_name), id));
    }

    /// Whether copy `id`'s replay failed (see [`ServerStatements::replay_failed`]) and it
    /// was not made since. Every later skipped Parse or Close of the name in that batch asks.
    pub fn was_lost(&self, server_name: &[u8], id: u64) -> bool {
        self.lost
            .iter()
            .any(|(n, i)| *i == id && n.as_ref() == server_name)
    }

    pub fn remove_if(&mut self, server_name: &[u8], id: u64) {
        if self.map.get(server_name).is_some_and(|c| c.id == id) {
            self.map.remove(server_name);
        }
    }

    /// Forgets copies made before `seq` (the server ran DEALLOCATE ALL or DISCARD ALL).
    pub fn drop_older_than(&mut self, seq: u64) {
        self.map.retain(|_, c| c.added >= seq);
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.lost.clear();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The copies made for any of `clients` (their number in the name), to close.
    pub fn of_clients(&self, clients: &[u64]) -> Vec<(Bytes, u64)> {
        let mine = |k: &Bytes| owner(k).is_some_and(|c| clients.contains(&c));
        let copies = self.map.iter().filter(|(k, _)| mine(k));
        copies.map(|(k, c)| (k.clone(), c.id)).collect()
    }

    /// The server names of the copies held (the simulation checks each exists there).
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.map.keys().map(|k| k.as_ref())
    }

    /// The least recently used statement, to close before adding one beyond the bound;
    /// `keep` (the statement about to be used) is never chosen.
    pub fn lru_victim(&self, keep: &[u8]) -> Option<(Bytes, u64)> {
        self.map
            .iter()
            .filter(|(k, _)| k.as_ref() != keep)
            .min_by_key(|(_, c)| c.used)
            .map(|(k, c)| (k.clone(), c.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(s: &mut ClientStatements, name: &str) -> Arc<Kept> {
        s.insert(
            Bytes::copy_from_slice(name.as_bytes()),
            None,
            false,
            None,
            None,
            |id| (format!("p1_{name}_{id}").into(), Bytes::new()),
        )
    }

    #[test]
    fn a_server_name_says_whose_statement_it_is() {
        assert_eq!(owner(&server_name(12, b"q", 3)), Some(12));
        let long = [b'x'; 80];
        assert_eq!(owner(&server_name(7, &long, 9)), Some(7));
        assert_eq!(owner(b"q"), None);
        assert_eq!(owner(b"pq_1"), None);
        assert_eq!(owner(b"p_1"), None);
        assert_eq!(owner(b"p1x_1"), None);
        assert_eq!(owner(b"p18446744073709551615_a"), Some(u64::MAX));
        assert_eq!(owner(b"p18446744073709551616_a"), None, "past u64");
    }

    #[test]
    fn a_failed_replay_under_a_pending_parse_is_remembered() {
        let mut s = ServerStatements::default();
        let name = Bytes::from_static(b"p1_a");
        // Replay of copy 1, then the client's Parse of the same name (copy 2), both recorded.
        s.add(name.clone(), 1);
        s.add(name.clone(), 2);
        s.replay_failed(&name, 1);
        s.remove_if(&name, 2);
        assert!(s.was_lost(&name, 1), "copy 1 was never made");
        assert!(s.was_lost(&name, 1), "asked again in the same batch");
        s.add(name.clone(), 1);
        assert!(!s.was_lost(&name, 1), "made since");
        // A replay that failed with nothing after it is simply gone.
        s.add(name.clone(), 3);
        s.replay_failed(&name, 3);
        assert_eq!(s.holds(&name), None);
        assert!(!s.was_lost(&name, 3));
    }

    #[test]
    fn a_failed_parse_is_not_brought_back_by_its_failed_successor() {
        // Parse b, Parse b again (same batch), both skipped after an earlier error.
        let mut s = ClientStatements::default();
        let first = named(&mut s, "b");
        let second = named(&mut s, "b");
        assert!(s.reject(b"b", first.id).is_none());
        assert!(
            s.reject(b"b", second.id).is_none(),
            "the first was never made"
        );
        assert!(s.get(b"b").is_none());
        // The same when the first replaced a statement the server has: that one stays.
        let made = named(&mut s, "c");
        s.confirm(b"c", made.id);
        let first = named(&mut s, "c");
        let second = named(&mut s, "c");
        assert_eq!(s.reject(b"c", first.id).map(|k| k.id), Some(made.id));
        assert_eq!(s.reject(b"c", second.id).map(|k| k.id), Some(made.id));
        assert_eq!(s.get(b"c").map(|k| k.id), Some(made.id));
    }

    #[test]
    fn a_skipped_close_does_not_bring_back_a_failed_parse() {
        let mut s = ClientStatements::default();
        // Parse a, Close a, both owed; the Parse fails and the Close is skipped.
        let a = named(&mut s, "a");
        let closed = s.remove(b"a").expect("kept");
        assert!(s.reject(b"a", a.id).is_none());
        s.restore(b"a", closed);
        assert!(s.get(b"a").is_none(), "the server never made it");
        // Replacing a statement the server has: the skipped Close leaves the old one.
        let old = named(&mut s, "b");
        s.confirm(b"b", old.id);
        let new = named(&mut s, "b");
        let closed = s.remove(b"b").expect("kept");
        assert_eq!(s.reject(b"b", new.id).map(|k| k.id), Some(old.id));
        s.restore(b"b", closed);
        assert_eq!(s.get(b"b").map(|k| k.id), Some(old.id));
        // A Close of a statement that was made is skipped: it comes back.
        let c = named(&mut s, "c");
        s.confirm(b"c", c.id);
        let closed = s.remove(b"c").expect("kept");
        s.restore(b"c", closed);
        assert_eq!(s.get(b"c").map(|k| k.id), Some(c.id));
    }

    #[test]
    fn presence_and_lru() {
        let mut s = ServerStatements::default();
        s.add(Bytes::from_static(b"p1_a"), 1);
        s.add(Bytes::from_static(b"p1_b"), 2);
        assert_eq!(s.presence(b"p1_a", 1), Presence::Present);
        assert_eq!(s.presence(b"p1_a", 3), Presence::Stale);
        assert_eq!(s.presence(b"p1_c", 3), Presence::Missing);
        // a was used after b, so b is the least recently used.
        assert_eq!(
            s.lru_victim(b"p1_x").map(|v| v.0),
            Some(Bytes::from_static(b"p1_b"))
        );
        assert_eq!(
            s.lru_victim(b"p1_b").map(|v| v.0),
            Some(Bytes::from_static(b"p1_a"))
        );
        s.remove_if(b"p1_a", 9);
        assert_eq!(s.len(), 2);
        s.remove_if(b"p1_a", 1);
        assert_eq!(s.len(), 1);
        let seq = s.next_seq();
        s.add(Bytes::from_static(b"p1_z"), 4);
        s.drop_older_than(seq);
        assert_eq!(s.holds(b"p1_z"), Some(4));
        assert_eq!(s.holds(b"p1_b"), None);
    }

    #[test]
    fn a_skipped_close_comes_back_under_a_skipped_reuse_of_the_name() {
        // Parse a (made), then in one batch: an error, Close a, Parse a, Parse a: all skipped.
        let mut c = ClientStatements::default();
        let rename = |id| (server_name(2, b"a", id), Bytes::new());
        let a = c.insert(Bytes::from_static(b"a"), None, false, None, None, rename);
        c.confirm(b"a", a.id);
        let closed = c.remove(b"a").unwrap();
        let second = c.insert(Bytes::from_static(b"a"), None, false, None, None, rename);
        let third = c.insert(Bytes::from_static(b"a"), None, false, None, None, rename);
        c.restore(b"a", closed);
        c.reject(b"a", second.id);
        c.reject(b"a", third.id);
        assert_eq!(c.get(b"a").map(|k| k.id), Some(a.id));
    }

    #[test]
    fn replaced_statement_comes_back_when_its_successor_fails() {
        let mut c = ClientStatements::default();
        let rename = |id| (server_name(2, b"p", id), Bytes::new());
        let a = c.insert(Bytes::from_static(b"p"), None, false, None, None, rename);
        assert_eq!(&a.server_name[..], b"p2_p");
        c.confirm(b"p", a.id);
        assert!(a.is_confirmed());
        let b = c.insert(Bytes::from_static(b"p"), None, false, None, None, rename);
        assert_ne!(a.id, b.id);
        assert_eq!(c.reject(b"p", b.id).map(|k| k.id), Some(a.id));
        assert_eq!(c.get(b"p").map(|k| k.id), Some(a.id));
        let before = c.next_id();
        let d = c.insert(Bytes::from_static(b"q"), None, false, None, None, rename);
        c.drop_older_than(before);
        assert!(c.get(b"p").is_none());
        assert_eq!(c.get(b"q").map(|k| k.id), Some(d.id));
    }

    #[test]
    fn long_names_get_a_numbered_server_name() {
        let long = vec![b'n'; 70];
        let s = server_name(12, &long, 7);
        assert_eq!(&s[..], b"P12_7");
        assert!(server_name(1, &[b'n'; 60], 1).len() <= MAX_NAME);
    }
}

/// Whether a CommandComplete tag (its body) says every prepared statement of the session is
/// gone: the server ran `DEALLOCATE ALL` or `DISCARD ALL`, however the SQL was written.
pub fn drops_all_statements(command_tag: &[u8]) -> bool {
    let tag = command_tag.strip_suffix(b"\0").unwrap_or(command_tag);
    tag == b"DISCARD ALL" || tag == b"DEALLOCATE ALL"
}

#[cfg(test)]
mod tag_tests {
    use super::drops_all_statements;

    #[test]
    fn recognises_the_command_tags() {
        assert!(drops_all_statements(b"DEALLOCATE ALL\0"));
        assert!(drops_all_statements(b"DISCARD ALL\0"));
        assert!(!drops_all_statements(b"DEALLOCATE\0"));
        assert!(!drops_all_statements(b"DISCARD PLANS\0"));
        assert!(!drops_all_statements(b"SELECT 1\0"));
    }
}
