//! The registry of logged-in clients by cancel key: each client's slot (the server it holds
//! now, its pool, whether the console killed it), the key it is issued at login, and the
//! lookups of a CancelRequest, the console's KILL and SHOW CLIENTS, and the drain deadline.

use rand::Rng;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::peers::issue_pid;
use super::send::CancelSender;

/// Draws of a process id no live client has before one in use is accepted (the pair with
/// its random secret is still unique): 16 random bits per peer can run out.
const UNIQUE_PID_TRIES: usize = 64;

/// The server a client holds: its address, cancel key, number and pool generation.
#[derive(Debug, Clone, Copy)]
struct Held {
    addr: SocketAddr,
    key: (i32, i32),
    id: u64,
    generation: u64,
}

/// The server a client holds, the last one it held, and why it keeps it (one lock: every
/// idle client has a slot, which stays in a smaller allocation class with one mutex).
#[derive(Debug, Default)]
struct Servers {
    now: Option<Held>,
    /// The last server's process id and when the client took it: a notification that
    /// server's process sent is this client's (as far as no client took it since).
    last: Option<(i32, Instant)>,
    /// Why the client keeps its server past its transactions (a session-state pin's label).
    pin: Option<&'static str>,
}

/// Where a client's queries run right now, and whether the console has killed it.
#[derive(Debug, Default)]
pub struct CancelSlot {
    held: Mutex<Servers>,
    /// The client's pool, as `database/user` (for the admin console).
    pub pool: Arc<str>,
    /// The client's database, as it named it.
    database: Box<str>,
    /// `KILL` or `KILL_CLIENT`: the session ends with 57P01 when it next looks.
    killed: AtomicBool,
}

impl CancelSlot {
    /// The client took the server at `addr` with cancel key `key` (number `id`, pool
    /// generation `generation`) at `at`.
    pub fn set(&self, addr: SocketAddr, key: (i32, i32), id: u64, generation: u64, at: Instant) {
        let mut s = self.lock();
        s.now = Some(Held {
            addr,
            key,
            id,
            generation,
        });
        s.last = Some((key.0, at));
    }

    pub fn clear(&self) {
        self.lock().now = None;
    }

    /// The client is pinned to its server for `reason`, or (`None`) no longer pinned.
    pub fn set_pin(&self, reason: Option<&'static str>) {
        self.lock().pin = reason;
    }

    pub fn pin(&self) -> Option<&'static str> {
        self.lock().pin
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Servers> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn held(&self) -> Option<Held> {
        self.lock().now
    }

    /// Cancels what the held server runs now (a timeout, a KILL), in the background.
    pub fn cancel_now(&self, sender: CancelSender) {
        if let Some(h) = self.held() {
            tokio::spawn(sender.send(h.addr, h.key));
        }
    }

    /// Whether the console has killed this client.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// This client as a pool waiter: named by the slot's address, stopped by its kill.
    pub fn ticket(&self) -> Ticket<'_> {
        Ticket {
            owner: self as *const CancelSlot as usize,
            stop: &self.killed,
        }
    }
}

/// Who a checkout waits for, so the wait can be ended from outside: `owner` names the waiter
/// (`Pool::drop_waiters_of`), and a set `stop` flag refuses the wait (the pool checks it under
/// its lock, so a stop raised before a drop by name is never missed). A client's ticket is
/// its [`CancelSlot::ticket`]: named by its slot, stopped by the console's KILL.
#[derive(Clone, Copy)]
pub struct Ticket<'a> {
    pub owner: usize,
    pub stop: &'a AtomicBool,
}

/// A client the console killed: its key, and its name as a pool waiter.
#[derive(Debug, Clone, Copy)]
pub struct KilledClient {
    pub key: (i32, i32),
    pub waiter: usize,
}

/// One row of `SHOW CLIENTS`: the client's key, pool, and the server it holds (number and
/// generation).
#[derive(Debug, Clone)]
pub struct ClientRow {
    pub pid: i32,
    pub pool: String,
    pub server: Option<(u64, u64)>,
    /// Why it keeps its server, if it is pinned.
    pub pin: Option<&'static str>,
}

/// Clients gone whose last server is remembered: a notification their last transaction sent
/// can reach a listener after they left (a client that notifies and quits at once).
const DEPARTED: usize = 256;

/// A departed client's last server: its process id, the client's, and when it was taken.
#[derive(Debug, Clone, Copy)]
struct Departed {
    server_pid: i32,
    client_pid: i32,
    at: Instant,
}

/// Key (pid, secret) → slot of every logged-in client.
#[derive(Debug, Default)]
pub struct Cancels {
    map: Mutex<HashMap<(i32, i32), Arc<CancelSlot>>>,
    /// The last [`DEPARTED`] clients gone that had taken a server, oldest first.
    departed: Mutex<VecDeque<Departed>>,
}

impl Cancels {
    /// Registers a logged-in client under a fresh random key: a process id carrying this
    /// pooler's peer number (`peer`, 0 for none) and random bits, no live client's as far as
    /// the bits allow, and a random secret, so a key can be neither guessed from the client's
    /// number nor reused. Returns the key and the client's slot.
    pub fn register(
        &self,
        pool: Arc<str>,
        database: &str,
        peer: u16,
    ) -> ((i32, i32), Arc<CancelSlot>) {
        let slot = Arc::new(CancelSlot {
            pool,
            database: database.into(),
            ..CancelSlot::default()
        });
        let mut rng = rand::thread_rng();
        let mut map = self.lock();
        let mut tries = 0;
        let key = loop {
            let key = (issue_pid(peer, &mut rng), rng.gen());
            tries += 1;
            let pid_taken = tries <= UNIQUE_PID_TRIES && map.keys().any(|k| k.0 == key.0);
            if !pid_taken && !map.contains_key(&key) {
                break key;
            }
        };
        map.insert(key, slot.clone());
        (key, slot)
    }

    pub fn unregister(&self, key: (i32, i32)) {
        let Some(slot) = self.lock().remove(&key) else {
            return;
        };
        let Some((server_pid, at)) = slot.lock().last else {
            return;
        };
        let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        if departed.len() == DEPARTED {
            departed.pop_front();
        }
        departed.push_back(Departed {
            server_pid,
            client_pid: key.0,
            at,
        });
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
                server: slot.held().map(|h| (h.id, h.generation)),
                pin: slot.pin(),
            })
            .collect();
        rows.sort_by_key(|r| r.pid);
        rows
    }

    /// Marks clients killed: the one with process id `pid`, or every client of database
    /// `db` (of every database when both are `None`). Returns those marked; the caller
    /// stops their waits for a server and wakes the sessions (`Lifecycle::kick`).
    pub fn kill(&self, pid: Option<i32>, db: Option<&str>) -> Vec<KilledClient> {
        let map = self.lock();
        let mut marked = Vec::new();
        for (key, slot) in map.iter() {
            let hit = match (pid, db) {
                (Some(want), _) => key.0 == want,
                (None, Some(d)) => &*slot.database == d,
                (None, None) => true,
            };
            if hit {
                slot.killed.store(true, Ordering::Release);
                marked.push(KilledClient {
                    key: *key,
                    waiter: slot.ticket().owner,
                });
            }
        }
        marked
    }

    /// How many of `killed` are still logged in.
    pub fn still_registered(&self, killed: &[KilledClient]) -> usize {
        let map = self.lock();
        killed.iter().filter(|k| map.contains_key(&k.key)).count()
    }

    /// Cancels whatever every client is running now (the drain deadline), in the background;
    /// returns how many.
    pub fn cancel_all(&self, sender: CancelSender) -> usize {
        let targets: Vec<Held> = self.lock().values().filter_map(|s| s.held()).collect();
        for h in &targets {
            tokio::spawn(sender.clone().send(h.addr, h.key));
        }
        targets.len()
    }

    /// The process id of the client, logged in or lately gone, that last took the server
    /// whose process is `server_pid` before `sent_before` (a notification it sent, received
    /// then, carries that id to its listeners).
    pub fn notifier(&self, server_pid: i32, sent_before: Instant) -> Option<i32> {
        let live = self
            .lock()
            .iter()
            .filter_map(|(key, slot)| match slot.lock().last {
                Some((pid, at)) if pid == server_pid && at <= sent_before => Some((at, key.0)),
                _ => None,
            })
            .max();
        let gone = self
            .departed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|d| d.server_pid == server_pid && d.at <= sent_before)
            .map(|d| (d.at, d.client_pid))
            .max();
        live.max(gone).map(|(_, pid)| pid)
    }

    /// Forwards a cancel to the server of this pooler's client with that key, if it holds one
    /// (one that holds none has nothing to cancel); returns whether the key is one of this
    /// pooler's. Nobody is answered either way, as PostgreSQL answers no cancel; it returns
    /// once the server has closed the cancel connection or `pool.cancel_wait_timeout` passed.
    pub async fn forward(&self, pid: i32, secret: i32, sender: CancelSender) -> bool {
        let target = self.lock().get(&(pid, secret)).map(|slot| slot.held());
        let Some(held) = target else {
            return false;
        };
        match held {
            Some(h) => sender.send(h.addr, h.key).await,
            None => tracing::debug!("cancel request for an idle client dropped"),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn addr() -> SocketAddr {
        "127.0.0.1:5432".parse().unwrap()
    }

    /// Every logged-in client, idle ones too, keeps a slot: `Arc`'s two counts and the slot
    /// fit mimalloc's 160-byte class (192 while the pin had a mutex of its own).
    #[test]
    fn a_slot_stays_small() {
        let size = std::mem::size_of::<CancelSlot>();
        eprintln!("cancel slot: {size} bytes");
        assert!(size + 16 <= 160, "the cancel slot grew to {size} bytes");
    }

    #[test]
    fn a_pin_is_kept_across_servers_and_shown() {
        let cancels = Cancels::default();
        let (_, slot) = cancels.register("db/u".into(), "db", 0);
        assert_eq!(slot.pin(), None);
        slot.set_pin(Some("temp_table"));
        slot.set(addr(), (900, 1), 1, 0, Instant::now());
        slot.clear();
        assert_eq!(
            slot.pin(),
            Some("temp_table"),
            "a server's change leaves the pin"
        );
        slot.set_pin(None);
        assert_eq!(slot.pin(), None);
    }

    #[test]
    fn a_notifier_is_found_after_it_left_and_not_after_the_notification() {
        let cancels = Cancels::default();
        let t0 = Instant::now();
        let (a, slot_a) = cancels.register("db/u".into(), "db", 0);
        slot_a.set(addr(), (900, 1), 1, 0, t0);
        let sent = t0 + Duration::from_millis(5);
        assert_eq!(cancels.notifier(900, sent), Some(a.0));
        // The sender quits before its notification is delivered: still named.
        cancels.unregister(a);
        assert_eq!(cancels.notifier(900, sent), Some(a.0));
        // Another client takes the same server after the notification arrived: not the
        // sender of that one, the sender of later ones.
        let (b, slot_b) = cancels.register("db/u".into(), "db", 0);
        slot_b.set(addr(), (900, 1), 1, 0, t0 + Duration::from_millis(10));
        assert_eq!(cancels.notifier(900, sent), Some(a.0));
        assert_eq!(
            cancels.notifier(900, t0 + Duration::from_millis(20)),
            Some(b.0)
        );
        assert_eq!(cancels.notifier(901, sent), None);
    }

    #[test]
    fn departed_clients_are_remembered_within_a_bound() {
        let cancels = Cancels::default();
        let t0 = Instant::now();
        let (first, slot) = cancels.register("db/u".into(), "db", 0);
        slot.set(addr(), (1, 1), 1, 0, t0);
        cancels.unregister(first);
        for i in 0..DEPARTED as i32 {
            let (k, s) = cancels.register("db/u".into(), "db", 0);
            s.set(addr(), (10 + i, 1), 1, 0, t0);
            cancels.unregister(k);
        }
        assert_eq!(cancels.departed.lock().unwrap().len(), DEPARTED);
        assert_eq!(cancels.notifier(1, t0), None);
        assert!(cancels.notifier(10, t0).is_some());
    }
}
