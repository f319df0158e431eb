//! Statements of clients that left (`--track-prepared`): a server name carries its client's
//! number (`p<c>_...`, `P<c>_...`), so no one can use those copies again. The next client to
//! hold a server closes the ones it still has (CloseComplete swallowed) instead of leaving
//! them to the LRU bound, so a server holds only statements someone may still bind, and
//! `pg_prepared_statements` shows a client what a session of its own would.
//!
//! The departed clients' numbers are a bounded list, numbered as they come; each server
//! remembers how far it has looked, so holding a server costs one atomic load unless a client
//! that prepared statements has left since.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Clients remembered. The statements of older ones stay on the servers that have not looked
/// yet, until the LRU bound (`pool.max_prepared_statements`) evicts them.
const MAX: usize = 4096;

#[derive(Debug, Default)]
pub struct Orphans {
    /// How many clients were ever added (written under the lock, read without it).
    added: AtomicU64,
    clients: Mutex<VecDeque<u64>>,
}

impl Orphans {
    /// Client `client`, which prepared statements, has left.
    pub fn add(&self, client: u64) {
        let mut q = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == MAX {
            q.pop_front();
        }
        q.push_back(client);
        self.added.fetch_add(1, Ordering::Release);
    }
}

impl crate::relay::Departed for Orphans {
    fn mark(&self) -> u64 {
        self.added.load(Ordering::Acquire)
    }

    fn since(&self, seen: u64) -> Option<(Vec<u64>, u64)> {
        if self.added.load(Ordering::Acquire) == seen {
            return None;
        }
        let q = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let added = self.added.load(Ordering::Acquire);
        let new = usize::try_from(added.saturating_sub(seen))
            .unwrap_or(usize::MAX)
            .min(q.len());
        Some((q.iter().skip(q.len() - new).cloned().collect(), added))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::Departed;

    #[test]
    fn each_server_gets_what_came_since_it_looked() {
        let o = Orphans::default();
        assert_eq!(o.since(0), None);
        o.add(1);
        o.add(2);
        let (gone, mark) = o.since(0).expect("two");
        assert_eq!(gone, [1, 2]);
        assert_eq!(o.since(mark), None);
        o.add(3);
        assert_eq!(o.since(mark).expect("one").0, [3]);
        // A server that looked before the oldest remembered gets what is left.
        (10..10 + MAX as u64).for_each(|c| o.add(c));
        let (gone, _) = o.since(0).expect("bounded");
        assert_eq!(gone.len(), MAX);
        assert_eq!(gone[0], 10);
    }
}
