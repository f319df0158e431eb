//! The hand-over of a server to a client waiting in a pool's queue, through a slot the client
//! keeps across its waits: a busy session allocates nothing per wait (a oneshot channel would
//! be allocated, and freed, for each). Each wait is numbered, so a hand-over meant for a wait
//! the client gave up is refused and the server goes to the next waiter instead; the pool
//! dropping a wait (a KILL, the pool's end) wakes the client with nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::{Pool, PoolError};
use crate::server::Server;

type Outcome = Result<Server, PoolError>;

/// One client's slot (see the module's comment).
#[derive(Default)]
pub struct Handoff {
    /// The wait under way (0: none): read without the lock to tell a live waiter from one
    /// that left; written under it.
    current: AtomicU64,
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    /// The last wait's number.
    last: u64,
    value: Option<Outcome>,
    waker: Option<Waker>,
    /// The pool dropped the wait without an answer.
    dropped: bool,
}

impl Handoff {
    pub fn new() -> Arc<Handoff> {
        Arc::new(Handoff::default())
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a wait: the pool's end of it.
    pub(super) fn begin(self: &Arc<Handoff>) -> Sender {
        let wait = {
            let mut s = self.slot();
            s.last += 1;
            s.value = None;
            s.dropped = false;
            self.current.store(s.last, Ordering::Release);
            s.last
        };
        Sender {
            handoff: Some(self.clone()),
            wait,
        }
    }
}

/// The pool's end of one wait, kept in its queue.
pub(super) struct Sender {
    /// `None` once answered.
    handoff: Option<Arc<Handoff>>,
    wait: u64,
}

impl Sender {
    /// The wait's number, for the client's [`Waiting`].
    pub(super) fn wait(&self) -> u64 {
        self.wait
    }

    /// The client stopped waiting (gave up, timed out or left).
    pub(super) fn is_closed(&self) -> bool {
        self.handoff
            .as_ref()
            .map_or(true, |h| h.current.load(Ordering::Acquire) != self.wait)
    }

    /// Hands `value` over; gives it back if the client stopped waiting.
    pub(super) fn send(mut self, value: Outcome) -> Result<(), Outcome> {
        let Some(h) = self.handoff.take() else {
            return Err(value);
        };
        let mut s = h.slot();
        if h.current.load(Ordering::Relaxed) != self.wait {
            return Err(value);
        }
        s.value = Some(value);
        // The waker stays for the client's next wait (the same task's: no clone then).
        if let Some(w) = &s.waker {
            w.wake_by_ref();
        }
        Ok(())
    }
}

impl Drop for Sender {
    /// Dropped unanswered: the client is woken with nothing.
    fn drop(&mut self) {
        let Some(h) = self.handoff.take() else {
            return;
        };
        let mut s = h.slot();
        if h.current.load(Ordering::Relaxed) != self.wait || s.value.is_some() {
            return;
        }
        s.dropped = true;
        if let Some(w) = &s.waker {
            w.wake_by_ref();
        }
    }
}

/// The client's end of one wait ([`Pool::checkout_or_queue`]): ready with the server handed
/// to it, or with the pool's answer (57014 at the deadline); `None`: the pool dropped the wait
/// (it closed, or a KILL named this waiter). Given up (dropped) before it is ready, a server
/// already handed over goes back to the pool.
pub struct Waiting<'a> {
    handoff: &'a Handoff,
    wait: u64,
    pool: &'a Pool,
    done: bool,
}

impl<'a> Waiting<'a> {
    pub(super) fn new(handoff: &'a Handoff, wait: u64, pool: &'a Pool) -> Waiting<'a> {
        Waiting {
            handoff,
            wait,
            pool,
            done: false,
        }
    }
}

impl Future for Waiting<'_> {
    type Output = Option<Outcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let h = self.handoff;
        let mut s = h.slot();
        if let Some(v) = s.value.take() {
            h.current.store(0, Ordering::Release);
            drop(s);
            self.done = true;
            return Poll::Ready(Some(v));
        }
        if s.dropped || h.current.load(Ordering::Relaxed) != self.wait {
            h.current.store(0, Ordering::Release);
            drop(s);
            self.done = true;
            return Poll::Ready(None);
        }
        match &s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Waiting<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.done {
            self.give_up();
        }
    }
}

impl Waiting<'_> {
    /// The client stopped waiting before an answer came.
    #[cold]
    fn give_up(&mut self) {
        let value = {
            let mut s = self.handoff.slot();
            if self.handoff.current.load(Ordering::Relaxed) == self.wait {
                self.handoff.current.store(0, Ordering::Release);
            }
            s.value.take()
        };
        // Handed over as the client gave up: the next client's, not closed.
        if let Some(Ok(conn)) = value {
            self.pool.checkin(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err() -> Outcome {
        Err(PoolError::Closed("p".into()))
    }

    /// The client's end, polled by hand (no pool needed for answers that carry no server).
    fn poll(h: &Handoff, wait: u64) -> Poll<Option<Outcome>> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut s = h.slot();
        if let Some(v) = s.value.take() {
            h.current.store(0, Ordering::Release);
            return Poll::Ready(Some(v));
        }
        if s.dropped || h.current.load(Ordering::Relaxed) != wait {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        let _ = &mut cx;
        Poll::Pending
    }

    #[test]
    fn an_answer_reaches_the_wait_it_was_meant_for() {
        let h = Handoff::new();
        let tx = h.begin();
        let wait = tx.wait();
        assert!(!tx.is_closed());
        assert!(poll(&h, wait).is_pending());
        assert!(tx.send(err()).is_ok());
        assert!(matches!(poll(&h, wait), Poll::Ready(Some(Err(_)))));
    }

    /// A wait the client gave up (a new one begun since) refuses the answer: the pool gives
    /// the server to the next waiter.
    #[test]
    fn an_abandoned_wait_refuses_its_answer() {
        let h = Handoff::new();
        let old = h.begin();
        let new = h.begin();
        assert!(old.is_closed(), "the old wait counts as left");
        assert!(!new.is_closed());
        assert!(old.send(err()).is_err());
        assert!(
            poll(&h, new.wait()).is_pending(),
            "the new wait got nothing"
        );
    }

    /// The pool dropping a wait (a KILL, its end) answers it with nothing; dropping an
    /// answered or abandoned one does not.
    #[test]
    fn a_dropped_wait_answers_nothing() {
        let h = Handoff::new();
        let tx = h.begin();
        let wait = tx.wait();
        drop(tx);
        assert!(matches!(poll(&h, wait), Poll::Ready(None)));
        let old = h.begin();
        let new = h.begin();
        drop(old);
        assert!(poll(&h, new.wait()).is_pending());
    }
}
