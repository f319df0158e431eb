//! The driver's one wait for something other than the relay's traffic (a server from the
//! pool, the end of a PAUSE), during which the client is still read.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::error::ClientError;
use crate::net::read::poll_read_some;
use crate::net::ClientStream;
use crate::relay::Relay;

/// Awaits `work`, reading the client into the relay's buffer meanwhile: a client that leaves
/// is noticed at once (`Gone`), and one that pipelines is read up to `client.buffer_size`,
/// then pushed back through its socket.
/// `work` comes pinned by the caller: an `async fn`'s argument would take its room twice in
/// the session's future.
pub(super) async fn reading_client<F: Future>(
    client: &mut ClientStream,
    relay: &mut Relay,
    mut work: Pin<&mut F>,
) -> Result<F::Output, ClientError> {
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        read_meanwhile(client, relay, cx).map(Err)
    })
    .await
}

/// Reads the client while there is room: ready only with the end of the client (or its
/// socket's error). Out of line: the session's round, which awaits a server inline, stays
/// small enough for its own hot code to be inlined.
#[inline(never)]
fn read_meanwhile(
    client: &mut ClientStream,
    relay: &mut Relay,
    cx: &mut Context<'_>,
) -> Poll<ClientError> {
    while relay.stand(None).room() {
        match ready!(poll_read_some(client, relay.client_in(), cx)) {
            Ok(0) => return Poll::Ready(ClientError::Gone),
            Ok(_) => {}
            Err(e) => return Poll::Ready(ClientError::Io(e)),
        }
    }
    Poll::Pending
}
