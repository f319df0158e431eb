//! What the sessions of one model database share: committed table rows, advisory locks and
//! their queues, LISTEN registrations and the notifications waiting for each session.
//!
//! Sessions do not hold a handle to it: every session call takes `&mut ModelDb`, so the
//! simulation owns the database and its sessions side by side, with no shared ownership or
//! locks. Ordered maps only, so that nothing depends on hash order.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The first OID the model gives a table (PostgreSQL's first user OID, `FirstNormalObjectId`).
const FIRST_OID: u32 = 16384;

/// A table of one nullable `int` column named `n` (the only shape the vocabulary creates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub oid: u32,
    pub rows: Vec<Option<i32>>,
}

/// A notification waiting to be delivered: the sending session's process id, channel and
/// payload (protocol docs, "NotificationResponse").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub pid: i32,
    pub channel: String,
    pub payload: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    pid: i32,
    count: u32,
}

/// One model database: tables, advisory locks, listeners.
#[derive(Debug, Default)]
pub struct ModelDb {
    tables: BTreeMap<String, Table>,
    next_oid: u32,
    locks: BTreeMap<i64, Held>,
    /// Sessions waiting for a lock, first come first served (PostgreSQL's lock queue).
    waiters: BTreeMap<i64, VecDeque<i32>>,
    listeners: BTreeMap<String, BTreeSet<i32>>,
    inboxes: BTreeMap<i32, VecDeque<Notification>>,
}

impl ModelDb {
    pub fn new() -> ModelDb {
        ModelDb {
            next_oid: FIRST_OID,
            ..ModelDb::default()
        }
    }

    /// A database holding these (empty) tables.
    pub fn with_tables<S: Into<String>>(names: impl IntoIterator<Item = S>) -> ModelDb {
        let mut db = ModelDb::new();
        for name in names {
            db.create_table(name);
        }
        db
    }

    /// Creates an empty table (or empties an existing one), as the test setup does outside
    /// any session.
    pub fn create_table(&mut self, name: impl Into<String>) {
        let oid = self.new_oid();
        self.tables.insert(
            name.into(),
            Table {
                oid,
                rows: Vec::new(),
            },
        );
    }

    /// The committed rows of a table.
    pub fn rows(&self, name: &str) -> Option<&[Option<i32>]> {
        self.tables.get(name).map(|t| t.rows.as_slice())
    }

    pub(crate) fn new_oid(&mut self) -> u32 {
        let oid = self.next_oid.max(FIRST_OID);
        self.next_oid = oid + 1;
        oid
    }

    pub(crate) fn table(&self, name: &str) -> Option<&Table> {
        self.tables.get(name)
    }

    /// Appends committed rows.
    pub(crate) fn append(&mut self, name: &str, rows: impl IntoIterator<Item = Option<i32>>) {
        if let Some(t) = self.tables.get_mut(name) {
            t.rows.extend(rows);
        }
    }

    /// Takes the session-level advisory lock `key` for `pid` (re-entrant), or queues `pid`
    /// for it: `false` while another session holds it or waited first.
    pub(crate) fn lock(&mut self, pid: i32, key: i64) -> bool {
        match self.locks.get_mut(&key) {
            Some(h) if h.pid == pid => {
                h.count += 1;
                return true;
            }
            Some(_) => {}
            None => {
                let queue = self.waiters.entry(key).or_default();
                if queue.front().map_or(true, |&first| first == pid) {
                    queue.pop_front();
                    if queue.is_empty() {
                        self.waiters.remove(&key);
                    }
                    self.locks.insert(key, Held { pid, count: 1 });
                    return true;
                }
            }
        }
        let queue = self.waiters.entry(key).or_default();
        if !queue.contains(&pid) {
            queue.push_back(pid);
        }
        false
    }

    /// Takes `key` if it is free and nobody waits for it (`pg_try_advisory_lock`); never
    /// queues.
    pub(crate) fn try_lock(&mut self, pid: i32, key: i64) -> bool {
        let free = match self.locks.get(&key) {
            Some(h) => h.pid == pid,
            None => !self.waiters.contains_key(&key),
        };
        free && self.lock(pid, key)
    }

    /// Takes `pid` out of every lock queue (its wait was cancelled).
    pub(crate) fn cancel_wait(&mut self, pid: i32) {
        for queue in self.waiters.values_mut() {
            queue.retain(|&p| p != pid);
        }
        self.waiters.retain(|_, q| !q.is_empty());
    }

    /// Releases one hold of `key`; `false` if `pid` did not hold it.
    pub(crate) fn unlock(&mut self, pid: i32, key: i64) -> bool {
        match self.locks.get_mut(&key) {
            Some(h) if h.pid == pid => {
                h.count -= 1;
                if h.count == 0 {
                    self.locks.remove(&key);
                }
                true
            }
            _ => false,
        }
    }

    /// Releases every advisory lock `pid` holds (`pg_advisory_unlock_all`).
    pub(crate) fn unlock_all(&mut self, pid: i32) {
        self.locks.retain(|_, h| h.pid != pid);
    }

    /// Whether `pid` holds `key`.
    pub fn holds_lock(&self, pid: i32, key: i64) -> bool {
        self.locks.get(&key).is_some_and(|h| h.pid == pid)
    }

    /// Whether `pid` holds any advisory lock.
    pub fn holds_any_lock(&self, pid: i32) -> bool {
        self.locks.values().any(|h| h.pid == pid)
    }

    pub(crate) fn listen(&mut self, pid: i32, channel: &str) {
        self.listeners
            .entry(channel.to_owned())
            .or_default()
            .insert(pid);
    }

    pub(crate) fn unlisten(&mut self, pid: i32, channel: Option<&str>) {
        for (ch, pids) in &mut self.listeners {
            if channel.map_or(true, |c| c == ch) {
                pids.remove(&pid);
            }
        }
        self.listeners.retain(|_, pids| !pids.is_empty());
    }

    /// Queues a committed notification for every session listening on its channel.
    pub(crate) fn notify(&mut self, n: Notification) {
        let Some(pids) = self.listeners.get(&n.channel) else {
            return;
        };
        for pid in pids {
            self.inboxes.entry(*pid).or_default().push_back(n.clone());
        }
    }

    /// The notifications waiting for `pid`, oldest first.
    pub(crate) fn take_notifications(&mut self, pid: i32) -> VecDeque<Notification> {
        self.inboxes.remove(&pid).unwrap_or_default()
    }

    /// Whether notifications wait for session `pid`.
    pub fn has_notifications(&self, pid: i32) -> bool {
        self.inboxes.get(&pid).is_some_and(|q| !q.is_empty())
    }

    /// Forgets a session that ended: its locks, place in lock queues, registrations and
    /// undelivered notifications.
    pub(crate) fn forget(&mut self, pid: i32) {
        self.unlock_all(pid);
        self.cancel_wait(pid);
        self.unlisten(pid, None);
        self.inboxes.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_locks_queue_first_come_first_served() {
        let mut db = ModelDb::new();
        assert!(db.lock(1, 7));
        assert!(db.lock(1, 7), "re-entrant");
        assert!(!db.lock(2, 7));
        assert!(!db.lock(3, 7));
        assert!(db.unlock(1, 7));
        assert!(!db.lock(3, 7), "still held once");
        assert!(db.unlock(1, 7));
        assert!(!db.lock(3, 7), "2 waited first");
        assert!(db.lock(2, 7));
        db.forget(2);
        assert!(db.lock(3, 7));
        assert!(!db.unlock(2, 7));
    }

    #[test]
    fn notifications_reach_listeners_only() {
        let mut db = ModelDb::new();
        db.listen(1, "c");
        db.listen(2, "d");
        db.notify(Notification {
            pid: 2,
            channel: "c".into(),
            payload: "x".into(),
        });
        assert!(db.has_notifications(1));
        assert!(!db.has_notifications(2));
        assert_eq!(db.take_notifications(1).len(), 1);
        db.unlisten(1, None);
        db.notify(Notification {
            pid: 2,
            channel: "c".into(),
            payload: "y".into(),
        });
        assert!(!db.has_notifications(1));
    }
}
