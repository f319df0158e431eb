//! Counted slots for server connections: a pool's size, its reserve, and the limits pools
//! share (`pool.max_db_connections`, `pool.max_user_connections`). Each is a semaphore whose
//! permits a connection holds for its life, resized in place by a reload: growing adds
//! permits at once; shrinking forgets free permits now and the rest as connections give them
//! back (the debt), so a lower limit closes nothing that is in use.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::PoolInner;

/// What "no limit" is: more permits than connections can ever exist.
const UNLIMITED: usize = Semaphore::MAX_PERMITS;

/// A resizable number of slots.
pub(crate) struct Capacity {
    sem: Arc<Semaphore>,
    /// The size in force (`UNLIMITED` for none).
    size: AtomicUsize,
    /// Permits still to forget as they come back, after a shrink.
    debt: AtomicUsize,
}

impl Capacity {
    pub(crate) fn new(size: usize) -> Capacity {
        Capacity {
            sem: Arc::new(Semaphore::new(size)),
            size: AtomicUsize::new(size),
            debt: AtomicUsize::new(0),
        }
    }

    /// A limit: `0` means none.
    pub(crate) fn limit(max: usize) -> Capacity {
        Capacity::new(if max == 0 { UNLIMITED } else { max })
    }

    pub(crate) fn size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// Resizes: grows at once, shrinks as slots come free.
    pub(crate) fn resize(&self, new: usize) {
        let old = self.size.swap(new, Ordering::Relaxed);
        if new > old {
            let grow = new - old;
            let cancelled = grow.min(self.debt.load(Ordering::Relaxed));
            self.debt.fetch_sub(cancelled, Ordering::Relaxed);
            self.sem.add_permits(grow - cancelled);
        } else if new < old {
            let shrink = old - new;
            let got = self.sem.forget_permits(shrink);
            self.debt.fetch_add(shrink - got, Ordering::Relaxed);
        }
    }

    /// As [`Capacity::resize`] for a limit (`0`: none).
    pub(crate) fn resize_limit(&self, max: usize) {
        self.resize(if max == 0 { UNLIMITED } else { max });
    }

    /// Forgets permits owed after a shrink, as far as they are free.
    pub(crate) fn settle(&self) {
        let d = self.debt.load(Ordering::Relaxed);
        if d > 0 {
            let got = self.sem.forget_permits(d);
            self.debt.fetch_sub(got, Ordering::Relaxed);
        }
    }

    /// More slots are taken than the size allows (it shrank): a slot given back goes.
    #[inline]
    pub(crate) fn is_over(&self) -> bool {
        self.debt.load(Ordering::Relaxed) > 0
    }

    /// Slots taken.
    pub(crate) fn taken(&self) -> usize {
        (self.size() + self.debt.load(Ordering::Relaxed))
            .saturating_sub(self.sem.available_permits())
    }

    #[inline]
    pub(crate) fn available(&self) -> usize {
        self.sem.available_permits()
    }

    pub(crate) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.sem.clone().try_acquire_owned().ok()
    }

    /// Waits for a slot, first come first served.
    pub(crate) async fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.sem.clone().acquire_owned().await.ok()
    }
}

/// What a shared limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Database,
    User,
}

impl LimitKind {
    pub fn setting(self) -> &'static str {
        match self {
            LimitKind::Database => "pool.max_db_connections",
            LimitKind::User => "pool.max_user_connections",
        }
    }
}

/// Server connections of every pool of one database, or of one user.
pub struct Limit {
    pub(crate) kind: LimitKind,
    pub(crate) cap: Capacity,
    /// Pools waiting for a slot (at most one login each): a server released with nobody of
    /// its own pool waiting is closed to make room for them.
    waiting: AtomicUsize,
    /// The pools counted, to find an idle server to close when one waits.
    members: Mutex<Vec<Weak<PoolInner>>>,
    /// Client sessions of the user (a user's limit only: `client.max_user_connections`).
    clients: AtomicUsize,
}

impl Limit {
    pub(crate) fn new(kind: LimitKind, max: usize) -> Limit {
        Limit {
            kind,
            cap: Capacity::limit(max),
            waiting: AtomicUsize::new(0),
            members: Mutex::new(Vec::new()),
            clients: AtomicUsize::new(0),
        }
    }

    /// The limit in force; `0`: none.
    pub fn max(&self) -> usize {
        match self.cap.size() {
            UNLIMITED => 0,
            n => n,
        }
    }

    /// Server connections counted now.
    pub fn open(&self) -> usize {
        self.cap.taken()
    }

    /// Another pool needs a slot, or the limit was lowered: a released server should go.
    #[inline]
    pub(crate) fn wants_room(&self) -> bool {
        self.cap.is_over() || self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Client sessions counted now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Counts one more client session unless `max` are there already (`0`: no limit).
    pub(crate) fn add_client(&self, max: usize) -> bool {
        self.clients
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (max == 0 || n < max).then_some(n + 1)
            })
            .is_ok()
    }

    pub(crate) fn remove_client(&self) {
        self.clients.fetch_sub(1, Ordering::Relaxed);
    }

    pub(super) fn join(&self, pool: &Arc<PoolInner>) {
        let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|w| w.strong_count() > 0);
        m.push(Arc::downgrade(pool));
    }

    pub(super) fn members(&self) -> Vec<Arc<PoolInner>> {
        let m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        m.iter().filter_map(Weak::upgrade).collect()
    }

    /// Waits for a slot, counted as waiting meanwhile.
    pub(crate) async fn wait(&self) -> Option<OwnedSemaphorePermit> {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let _counted = Waiting(&self.waiting);
        self.cap.take().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shrinking takes free slots at once and the rest as they come back; growing cancels
    /// what is still owed first.
    #[test]
    fn resize_in_place() {
        let c = Capacity::new(3);
        let held: Vec<_> = (0..3).map(|_| c.try_take().unwrap()).collect();
        c.resize(1);
        assert!(c.is_over());
        assert_eq!(c.taken(), 3);
        let mut held = held.into_iter();
        drop(held.next());
        c.settle();
        assert_eq!((c.taken(), c.available()), (2, 0));
        c.resize(2);
        assert!(!c.is_over(), "growing cancels the debt first");
        assert!(c.try_take().is_none());
        drop(held.next());
        assert_eq!(c.taken(), 1);
        assert!(c.try_take().is_some());
        let l = Limit::new(LimitKind::Database, 0);
        assert_eq!(l.max(), 0);
        l.cap.resize_limit(5);
        assert_eq!((l.max(), l.open()), (5, 0));
    }
}
