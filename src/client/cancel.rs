//! Cancel keys: the pooler's own BackendKeyData per client, and forwarding a CancelRequest to
//! the server that client holds at that moment, on a new connection with that server's key.
//! A key is the whole (process id, secret) pair: with a peer number in the process id (see
//! `peers`), process ids alone may repeat.

use rand::Rng;
use std::collections::HashMap;
use std::net::SocketAddr;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, ToSocketAddrs};

use crate::protocol::frontend;

/// Where a client's queries run right now: the server's address and key, and its number.
#[derive(Debug, Default)]
pub struct CancelSlot {
    held: Mutex<Option<(SocketAddr, i32, i32, u64)>>,
    /// The client's pool, as `database/user` (for the admin console).
    pub pool: Arc<str>,
}

impl CancelSlot {
    pub fn set(&self, addr: SocketAddr, key: (i32, i32), server: u64) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some((addr, key.0, key.1, server));
    }

    pub fn clear(&self) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Cancels what the held server runs now (the query timeout), in the background.
    pub fn cancel_now(&self) {
        if let Some((addr, pid, secret)) = self.get() {
            tokio::spawn(send_cancel(addr, pid, secret, SERVER_CANCEL_TIMEOUT));
        }
    }

    fn get(&self) -> Option<(SocketAddr, i32, i32)> {
        self.server().map(|(a, p, s, _)| (a, p, s))
    }

    fn server(&self) -> Option<(SocketAddr, i32, i32, u64)> {
        *self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One row of `SHOW CLIENTS`.
#[derive(Debug, Clone)]
pub struct ClientRow {
    pub pid: i32,
    pub pool: String,
    pub server: Option<u64>,
}

/// How long a cancel sent to a server may take to connect and be written.
const SERVER_CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// Key (pid, secret) → slot of every logged-in client.
#[derive(Debug, Default)]
pub struct Cancels {
    map: Mutex<HashMap<(i32, i32), Arc<CancelSlot>>>,
}

impl Cancels {
    /// Registers a logged-in client under a fresh random key no live client has: a process id
    /// carrying this pooler's peer number (`peer`, 0 for none) and random bits, and a random
    /// secret, so a key can be neither guessed from the client's number nor reused. Returns
    /// the key and the client's slot.
    pub fn register(&self, pool: Arc<str>, peer: u16) -> ((i32, i32), Arc<CancelSlot>) {
        let slot = Arc::new(CancelSlot {
            held: Mutex::new(None),
            pool,
        });
        let mut rng = rand::thread_rng();
        let mut map = self.lock();
        let key = loop {
            let key = (super::peers::issue_pid(peer, &mut rng), rng.gen());
            if !map.contains_key(&key) {
                break key;
            }
        };
        map.insert(key, slot.clone());
        (key, slot)
    }

    pub fn unregister(&self, key: (i32, i32)) {
        self.lock().remove(&key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i32, i32), Arc<CancelSlot>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every logged-in client, for the admin console.
    pub fn clients(&self) -> Vec<ClientRow> {
        let mut rows: Vec<ClientRow> = self
            .lock()
            .iter()
            .map(|(&(pid, _), slot)| ClientRow {
                pid,
                pool: slot.pool.to_string(),
                server: slot.server().map(|s| s.3),
            })
            .collect();
        rows.sort_by_key(|r| r.pid);
        rows
    }

    /// Cancels whatever every client is running now (the drain deadline); returns how many.
    pub async fn cancel_all(&self) -> usize {
        let keys: Vec<(i32, i32)> = self
            .lock()
            .iter()
            .filter(|(_, slot)| slot.get().is_some())
            .map(|(key, _)| *key)
            .collect();
        for (pid, secret) in &keys {
            self.forward(*pid, *secret).await;
        }
        keys.len()
    }

    /// Forwards a cancel if the key is a client of this pooler that holds a server (one that
    /// holds none has nothing to cancel); returns whether the key is one of this pooler's.
    /// Nobody is answered either way, as PostgreSQL answers no cancel.
    pub async fn forward(&self, pid: i32, secret: i32) -> bool {
        let target = self.lock().get(&(pid, secret)).map(|slot| slot.get());
        let Some(held) = target else {
            return false;
        };
        match held {
            Some((addr, spid, ssecret)) => {
                send_cancel(addr, spid, ssecret, SERVER_CANCEL_TIMEOUT).await;
            }
            None => tracing::debug!("cancel request for an idle client dropped"),
        }
        true
    }
}

/// Sends a CancelRequest for process `spid` to `addr` (a server, or a peer pooler), on a
/// connection of its own, within `timeout`; whether it was sent.
pub(super) async fn send_cancel(
    addr: impl ToSocketAddrs,
    spid: i32,
    ssecret: i32,
    timeout: Duration,
) -> bool {
    let mut buf = BytesMut::new();
    frontend::cancel_request(&mut buf, spid, ssecret);
    let send = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(&buf).await?;
        s.shutdown().await
    };
    match tokio::time::timeout(timeout, send).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "forwarding a cancel request failed");
            false
        }
        Err(_) => {
            tracing::warn!("forwarding a cancel request timed out");
            false
        }
    }
}
