//! The timer behind the relay's deadlines (`pool.query_timeout` and the transaction
//! timeouts): one per session, boxed and only for sessions that have a timeout on, re-armed
//! only when the relay's next deadline moves.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

use crate::relay::Kind;

pub(super) struct Timer {
    sleep: Pin<Box<Sleep>>,
    armed: Option<(Instant, Kind)>,
}

impl Timer {
    /// Keeps a timer in `slot` while `on` (a timeout is configured), none otherwise.
    pub(super) fn configure(slot: &mut Option<Box<Timer>>, on: bool) {
        if !on {
            *slot = None;
        } else if slot.is_none() {
            *slot = Some(Box::new(Timer {
                sleep: Box::pin(tokio::time::sleep(Duration::from_secs(86_400))),
                armed: None,
            }));
        }
    }

    /// Polls the timer for `due` (re-armed if the deadline moved).
    pub(super) fn poll_due(
        &mut self,
        due: Option<(Instant, Kind)>,
        cx: &mut Context<'_>,
    ) -> Poll<Kind> {
        let Some((at, kind)) = due else {
            self.armed = None;
            return Poll::Pending;
        };
        if self.armed != due {
            self.sleep
                .as_mut()
                .reset(tokio::time::Instant::from_std(at));
            self.armed = due;
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.armed = None;
                Poll::Ready(kind)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
