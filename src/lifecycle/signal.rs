//! A one-way signal that every session watches while it works: reading it is an atomic load,
//! and a watcher registers its waker once per watch instead of on every poll (a
//! `CancellationToken` takes a mutex for both). A signal can also be kicked without firing:
//! every watcher wakes once to look at something of its own (the console killed a client).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct Signal {
    fired: AtomicBool,
    kicks: AtomicU64,
    notify: Notify,
}

impl Signal {
    /// Fires the signal for good and wakes every watcher.
    pub fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Wakes every watcher once without firing: each watch completes, its owner sees the
    /// signal not fired, looks at its own state and [`Watch::rearm`]s.
    pub fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// A future that completes once the signal has fired (or was kicked since the watch was
    /// made or rearmed). Pin it once (`std::pin::pin!`) and poll it by `Pin<&mut Watch>` for
    /// as long as the work lasts: the registration is kept, and nothing is allocated.
    pub fn watch(&self) -> Watch<'_> {
        Watch {
            signal: self,
            notified: self.notify.notified(),
            seen: self.kicks.load(Ordering::Acquire),
            waker: None,
        }
    }
}

pin_project_lite::pin_project! {
    /// See [`Signal::watch`].
    pub struct Watch<'a> {
        signal: &'a Signal,
        #[pin]
        notified: Notified<'a>,
        // The kicks counted when the watch was made or rearmed.
        seen: u64,
        // The waker registered with `notified`; polls with the same waker skip the
        // registration.
        waker: Option<Waker>,
    }
}

impl<'a> Watch<'a> {
    /// After a kick: waits for the next fire or kick. The new registration is made before the
    /// count is read, so a kick in between wakes it rather than being lost.
    pub fn rearm(self: Pin<&mut Self>) {
        let mut this = self.project();
        let signal: &'a Signal = this.signal;
        this.notified.set(signal.notify.notified());
        *this.seen = this.signal.kicks.load(Ordering::Acquire);
        *this.waker = None;
    }
}

impl Future for Watch<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.signal.is_fired() || this.signal.kicks.load(Ordering::Acquire) != *this.seen {
            return Poll::Ready(());
        }
        if !this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            // `notified` was made before this poll, so a fire since then completes it.
            if this.notified.poll(cx).is_ready() {
                return Poll::Ready(());
            }
            *this.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn watchers_wake_when_fired_and_late_watchers_see_it() {
        let signal = Arc::new(Signal::default());
        let mut watchers = Vec::new();
        for _ in 0..3 {
            let s = signal.clone();
            watchers.push(tokio::spawn(async move { s.watch().await }));
        }
        // Each watcher is polled (and registered) before the fire.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(watchers.iter().all(|w| !w.is_finished()));
        signal.fire();
        for w in watchers {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("a watcher was not woken")
                .unwrap();
        }
        assert!(signal.is_fired());
        tokio::time::timeout(Duration::from_secs(1), signal.watch())
            .await
            .expect("a watch made after the fire completes at once");
    }

    #[tokio::test]
    async fn a_watch_polled_by_another_task_registers_again() {
        let signal = Arc::new(Signal::default());
        let s = signal.clone();
        // First polled by this task, then moved to another one: the new waker must register.
        let mut watch = Box::pin(async move { s.watch().await });
        assert!(futures_poll_once(watch.as_mut()).await.is_pending());
        let task = tokio::spawn(watch);
        tokio::time::sleep(Duration::from_millis(10)).await;
        signal.fire();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the moved watch was not woken")
            .unwrap();
    }

    async fn futures_poll_once<F: Future + Unpin>(mut f: F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx))).await
    }
}
