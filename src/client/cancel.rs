//! Cancel keys: the pooler's own BackendKeyData per client, and forwarding a CancelRequest to
//! the server that client holds at that moment, on a new connection with that server's key.

use rand::Rng;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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
            tokio::spawn(send_cancel(addr, pid, secret));
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

/// Pid → (secret, slot) of every logged-in client.
#[derive(Debug, Default)]
pub struct Cancels {
    map: Mutex<HashMap<i32, (i32, Arc<CancelSlot>)>>,
}

impl Cancels {
    /// Registers a logged-in client under a fresh random key: a process id no live client has
    /// and a random secret, so a key can be neither guessed from the client's number nor
    /// reused. Returns the key and the client's slot.
    pub fn register(&self, pool: Arc<str>) -> ((i32, i32), Arc<CancelSlot>) {
        let slot = Arc::new(CancelSlot {
            held: Mutex::new(None),
            pool,
        });
        let mut rng = rand::thread_rng();
        let secret: i32 = rng.gen();
        let mut map = self.lock();
        let pid = loop {
            // Positive, as PostgreSQL's process ids are.
            let pid = rng.gen_range(1..=i32::MAX);
            if !map.contains_key(&pid) {
                break pid;
            }
        };
        map.insert(pid, (secret, slot.clone()));
        ((pid, secret), slot)
    }

    pub fn unregister(&self, pid: i32) {
        self.lock().remove(&pid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, (i32, Arc<CancelSlot>)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every logged-in client, for the admin console.
    pub fn clients(&self) -> Vec<ClientRow> {
        let mut rows: Vec<ClientRow> = self
            .lock()
            .iter()
            .map(|(pid, (_, slot))| ClientRow {
                pid: *pid,
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
            .filter(|(_, (_, slot))| slot.get().is_some())
            .map(|(pid, (secret, _))| (*pid, *secret))
            .collect();
        for (pid, secret) in &keys {
            self.forward(*pid, *secret).await;
        }
        keys.len()
    }

    /// Forwards a cancel if the key matches a client that holds a server; otherwise drops it,
    /// as PostgreSQL does (a cancel never gets an answer).
    pub async fn forward(&self, pid: i32, secret: i32) {
        let target = {
            let map = self.lock();
            match map.get(&pid) {
                Some((s, slot)) if *s == secret => slot.get(),
                _ => None,
            }
        };
        let Some((addr, spid, ssecret)) = target else {
            tracing::debug!("cancel request for an unknown or idle client dropped");
            return;
        };
        send_cancel(addr, spid, ssecret).await;
    }
}

/// Sends a CancelRequest for server process `spid` to `addr`, on a connection of its own.
async fn send_cancel(addr: SocketAddr, spid: i32, ssecret: i32) {
    let mut buf = BytesMut::new();
    frontend::cancel_request(&mut buf, spid, ssecret);
    let send = async {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(&buf).await?;
        s.shutdown().await
    };
    if let Err(e) = tokio::time::timeout(Duration::from_secs(5), send)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    {
        tracing::warn!(error = %e, "forwarding a cancel request failed");
    }
}
