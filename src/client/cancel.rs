//! Cancel keys: the pooler's own BackendKeyData per client, forwarding a CancelRequest to the
//! server that client holds at that moment (on a new connection with that server's key,
//! bounded by `pool.cancel_wait_timeout`), and the console's KILL of a client.

use rand::Rng;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use prometheus::IntCounterVec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::protocol::frontend;
use crate::shared::Shared;

/// The server a client holds: its address, cancel key, number and pool generation.
#[derive(Debug, Clone, Copy)]
struct Held {
    addr: SocketAddr,
    key: (i32, i32),
    id: u64,
    generation: u64,
}

/// Where a client's queries run right now, and whether the console has killed it.
#[derive(Debug, Default)]
pub struct CancelSlot {
    held: Mutex<Option<Held>>,
    /// The client's pool, as `database/user` (for the admin console).
    pub pool: Arc<str>,
    /// The client's database, as it named it.
    database: Box<str>,
    /// `KILL` or `KILL_CLIENT`: the session ends with 57P01 when it next looks.
    killed: AtomicBool,
}

impl CancelSlot {
    pub fn set(&self, addr: SocketAddr, key: (i32, i32), id: u64, generation: u64) {
        *self.lock() = Some(Held {
            addr,
            key,
            id,
            generation,
        });
    }

    pub fn clear(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn held(&self) -> Option<Held> {
        *self.lock()
    }

    /// Cancels what the held server runs now (a timeout, a KILL), in the background.
    pub fn cancel_now(&self, shared: &Shared) {
        if let Some(h) = self.held() {
            tokio::spawn(CancelSender::new(shared).send(h.addr, h.key));
        }
    }

    /// Whether the console has killed this client.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }
}

/// One row of `SHOW CLIENTS`: the client's key, pool, and the server it holds (number and
/// generation).
#[derive(Debug, Clone)]
pub struct ClientRow {
    pub pid: i32,
    pub pool: String,
    pub server: Option<(u64, u64)>,
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
    pub fn register(&self, pool: Arc<str>, database: &str) -> ((i32, i32), Arc<CancelSlot>) {
        let slot = Arc::new(CancelSlot {
            pool,
            database: database.into(),
            ..CancelSlot::default()
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
                server: slot.held().map(|h| (h.id, h.generation)),
            })
            .collect();
        rows.sort_by_key(|r| r.pid);
        rows
    }

    /// Marks clients killed: the one with process id `pid`, or every client of database
    /// `db` (of every database when both are `None`). Returns the process ids marked; the
    /// caller wakes the sessions (`Lifecycle::kick`).
    pub fn kill(&self, pid: Option<i32>, db: Option<&str>) -> Vec<i32> {
        let map = self.lock();
        let mut marked = Vec::new();
        for (p, (_, slot)) in map.iter() {
            let hit = match (pid, db) {
                (Some(want), _) => *p == want,
                (None, Some(d)) => &*slot.database == d,
                (None, None) => true,
            };
            if hit {
                slot.killed.store(true, Ordering::Release);
                marked.push(*p);
            }
        }
        marked
    }

    /// How many of `pids` are still logged in.
    pub fn still_registered(&self, pids: &[i32]) -> usize {
        let map = self.lock();
        pids.iter().filter(|p| map.contains_key(p)).count()
    }

    /// Cancels whatever every client is running now (the drain deadline), in the background;
    /// returns how many.
    pub fn cancel_all(&self, shared: &Shared) -> usize {
        let targets: Vec<Held> = self
            .lock()
            .values()
            .filter_map(|(_, slot)| slot.held())
            .collect();
        let sender = CancelSender::new(shared);
        for h in &targets {
            tokio::spawn(sender.clone().send(h.addr, h.key));
        }
        targets.len()
    }

    /// Forwards a cancel if the key matches a client that holds a server; otherwise drops it,
    /// as PostgreSQL does (a cancel never gets an answer). Returns once the server has closed
    /// the cancel connection, or `pool.cancel_wait_timeout` has passed.
    pub async fn forward(&self, pid: i32, secret: i32, shared: &Shared) {
        let target = {
            let map = self.lock();
            match map.get(&pid) {
                Some((s, slot)) if *s == secret => slot.held(),
                _ => None,
            }
        };
        let sender = CancelSender::new(shared);
        let Some(h) = target else {
            tracing::debug!("cancel request for an unknown or idle client dropped");
            sender.counts.with_label_values(&["unknown"]).inc();
            return;
        };
        sender.send(h.addr, h.key).await;
    }
}

/// Sends CancelRequests, bounded by `pool.cancel_wait_timeout` and counted by result.
#[derive(Clone)]
struct CancelSender {
    /// Zero: no limit.
    wait: Duration,
    counts: IntCounterVec,
}

impl CancelSender {
    fn new(shared: &Shared) -> Self {
        CancelSender {
            wait: shared.config.load().pool.cancel_wait_timeout,
            counts: shared.metrics.clients.cancels.clone(),
        }
    }

    /// Sends a CancelRequest for the server process `key` to `addr`, on a connection of its
    /// own, and waits for the server to close it: PostgreSQL closes it once it has acted on
    /// the request (libpq's cancel waits for the same), so the client's cancel connection
    /// is not closed before that either.
    async fn send(self, addr: SocketAddr, key: (i32, i32)) {
        let mut buf = BytesMut::new();
        frontend::cancel_request(&mut buf, key.0, key.1);
        let send = async {
            let mut s = TcpStream::connect(addr).await?;
            s.write_all(&buf).await?;
            let mut sink = [0u8; 64];
            while s.read(&mut sink).await? > 0 {}
            Ok::<(), std::io::Error>(())
        };
        let res = if self.wait.is_zero() {
            Some(send.await)
        } else {
            tokio::time::timeout(self.wait, send).await.ok()
        };
        let result = match res {
            Some(Ok(())) => "forwarded",
            Some(Err(e)) => {
                tracing::warn!(error = %e, "forwarding a cancel request failed");
                "failed"
            }
            None => {
                tracing::warn!(
                    wait = ?self.wait,
                    "a forwarded cancel request was not confirmed in time (pool.cancel_wait_timeout); given up"
                );
                "timeout"
            }
        };
        self.counts.with_label_values(&[result]).inc();
    }
}
