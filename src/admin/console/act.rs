//! The console commands that act on a database's clients and servers, with PgBouncer's
//! semantics: PAUSE's wait for running transactions, KILL, KILL_CLIENT, RECONNECT and
//! WAIT_CLOSE.

use std::time::Duration;

use tokio::time::Instant;

use crate::cancel::KilledClient;
use crate::pool::{CloseReason, Pool};
use crate::shared::Shared;

/// How often a waiting command looks again.
const POLL: Duration = Duration::from_millis(20);
/// Longest wait of PAUSE for running transactions, and of KILL for its sessions to end.
const SETTLE: Duration = Duration::from_secs(30);

/// The client pools of `db` (of every database for `None`).
fn pools_of(shared: &Shared, db: Option<&str>) -> Vec<Pool> {
    let mut pools = shared.pools.all();
    pools.retain(|p| db.map_or(true, |d| p.database() == d));
    pools
}

/// Waits until `done` holds, at most [`SETTLE`].
async fn settle(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + SETTLE;
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
}

fn pause_new_work(shared: &Shared, db: Option<&str>) {
    let l = &shared.lifecycle;
    match db {
        Some(db) => l.pause_db(db),
        None => {
            l.pause();
            shared.metrics.lifecycle.paused.set(1);
        }
    }
}

/// `PAUSE [db]`: new transactions wait; answered once running ones have given their servers
/// back, as PgBouncer does.
pub(super) async fn pause(shared: &Shared, db: Option<&str>) {
    pause_new_work(shared, db);
    let busy = || {
        pools_of(shared, db)
            .iter()
            .map(|p| p.snapshot().servers_active)
            .sum::<i64>()
    };
    settle(|| busy() == 0).await;
}

/// `KILL [db]`: every client of `db` (of every database) is closed with 57P01 and the server
/// it holds closed (a running statement cancelled first); idle servers are closed too. New
/// clients of the database wait until `RESUME`, as after PgBouncer's KILL.
pub(super) async fn kill(shared: &Shared, db: Option<&str>) {
    pause_new_work(shared, db);
    let killed = shared.cancels.kill(None, db);
    // Its clients waiting for a server leave the queues first: a server their killed
    // neighbours close meanwhile must not start a login for them.
    for p in pools_of(shared, db) {
        p.drop_waiters();
    }
    end(shared, &killed).await;
    for p in pools_of(shared, db) {
        p.close_idle_as(CloseReason::Killed);
    }
}

/// `KILL_CLIENT id`: that client is closed with 57P01, and the server it holds; `false` if no
/// client has that id.
pub(super) async fn kill_client(shared: &Shared, id: i32) -> bool {
    let killed = shared.cancels.kill(Some(id), None);
    if killed.is_empty() {
        return false;
    }
    // A client waiting for a server leaves its queue (it sees its kill there).
    let waiters: Vec<usize> = killed.iter().map(|k| k.waiter).collect();
    for p in shared.pools.all() {
        p.drop_waiters_of(&waiters);
    }
    end(shared, &killed).await;
    true
}

/// Wakes the killed sessions wherever they wait and waits for them to end.
async fn end(shared: &Shared, killed: &[KilledClient]) {
    shared.lifecycle.kick();
    settle(|| shared.cancels.still_registered(killed) == 0).await;
}

/// `RECONNECT [db]`: every server of `db` (of every database) is closed when next released
/// instead of reused, idle ones at once; new ones are logged in as clients need them.
pub(super) fn reconnect(shared: &Shared, db: Option<&str>) {
    for p in pools_of(shared, db) {
        p.reconnect();
    }
}

/// `WAIT_CLOSE [db]`: answered once no server of `db` (of any database) is still to be closed
/// after a RECONNECT. No deadline of its own: it waits as long as the console client does (a
/// psql session that disconnects, or an HTTP client that closes its connection, ends it).
pub(super) async fn wait_close(shared: &Shared, db: Option<&str>) {
    while pools_of(shared, db)
        .iter()
        .map(Pool::close_needed)
        .sum::<usize>()
        > 0
    {
        tokio::time::sleep(POLL).await;
    }
}
