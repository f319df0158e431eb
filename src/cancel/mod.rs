//! Cancel keys: the pooler's own BackendKeyData per client, forwarding a CancelRequest to the
//! server that client holds at that moment (on a new connection with that server's key,
//! bounded by `pool.cancel_wait_timeout`), and the console's KILL of a client. A key is the
//! whole (process id, secret) pair; with a peer number in the process id (see `peers`), the
//! process id is kept unique among live clients as far as its random bits allow.
//!
//! Below the pool and the client tasks: what it needs of the rest of the pooler (the
//! configured wait, the metrics, this host's peer number) is handed in by the caller.

pub mod peers;
mod registry;
mod send;

pub use peers::own_peer_id;
pub use registry::{CancelSlot, Cancels, ClientRow, KilledClient, Ticket};
pub use send::CancelSender;

use crate::config::Config;
use peers::{route, Route, FORWARDED, FORWARD_TIMEOUT};
use send::send_cancel;

/// Handles a CancelRequest for key (`pid`, `secret`): cancels what this pooler's client with
/// that key runs (through `sender`), or forwards the request to the peer that issued the key,
/// by `cfg`'s peers and this pooler's number `own`; anything else is dropped (nobody is
/// answered). Returns how it was handled, the `result` label of
/// `droidpool_client_cancels_total`: `local`, `unknown`, `forwarded` or `forward_failed`.
pub async fn handle_request(
    cancels: &Cancels,
    sender: CancelSender,
    cfg: &Config,
    own: u16,
    (pid, secret): (i32, i32),
) -> &'static str {
    if cancels.forward(pid & !FORWARDED, secret, sender).await {
        return "local";
    }
    match route(cfg, own, pid) {
        Route::Here => "unknown",
        Route::Peer(address) => {
            let sent = send_cancel(address, pid | FORWARDED, secret, FORWARD_TIMEOUT).await;
            if sent {
                "forwarded"
            } else {
                "forward_failed"
            }
        }
    }
}
