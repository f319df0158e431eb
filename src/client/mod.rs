//! One task per client connection: the login (`crate::login`), then the session that relays
//! between the client and the server it holds, or the admin console's session
//! (`crate::admin::console`).

mod checkout;
mod error;
mod finish;
mod flush;
mod idle_loss;
pub mod park;
mod session;
mod timer;
mod wait;

pub use error::{ClientError, Loss};

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::net::TcpStream;
use tracing::field;

use crate::admin::console;
use crate::login::{self, Outcome};
use crate::logs::Escaped;
use crate::net::admission::Pending;
use crate::net::ClientStream;
use crate::protocol::backend;
use crate::shared::Shared;

/// Serves one accepted connection to its end. Never panics the process: every error is
/// answered (if the client can still hear it) and the connection closed.
///
/// An idle client costs its task, so the task's future is kept small: the login runs boxed
/// with the stream and the admission slot it owns (both given back, the slot freed, when it
/// ends), and the task holds only that box and `shared` until then.
pub fn serve(
    stream: TcpStream,
    shared: Arc<Shared>,
    pending: Pending,
    lot: Arc<park::Lot>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    shared.counters.clients_open.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    set_liveness_options(&stream, &shared.config.load().client);
    let login = Box::pin(run_login(
        ClientStream::Plain(stream),
        shared.clone(),
        pending,
    ));
    async move {
        let (stream, id, res) = login.await;
        match res {
            // Boxed: a session can leave its task (`park`) and come back in another.
            Ok(Outcome::Session(login)) => {
                live(Box::new(session::Session::new(stream, shared, login)), lot).await
            }
            res => Box::pin(rare(stream, shared, id, res)).await,
        }
    }
}

/// The console's session, and the logins that ended without a session.
async fn rare(
    mut stream: ClientStream,
    shared: Arc<Shared>,
    id: Option<u64>,
    res: Result<Outcome, ClientError>,
) {
    let res = match res {
        Ok(Outcome::Session(_)) => unreachable!("sessions are served by `live`"),
        Ok(Outcome::Console(who, buf, out)) => console::serve(&mut stream, &shared, who, buf, out)
            .await
            .map_err(ClientError::from),
        Ok(Outcome::Done) => Ok(()),
        Err(e) => Err(e),
    };
    ended(&mut stream, &shared, id, res).await;
}

/// The lot where idle clients wait without a task; those that come back run as `tracker`'s
/// tasks.
pub fn lot(shared: Arc<Shared>, tracker: tokio_util::task::TaskTracker) -> Arc<park::Lot> {
    park::Lot::start(shared, tracker, resume)
}

/// A parked session back as a task.
fn resume(
    session: Box<session::Session>,
    lot: Arc<park::Lot>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(live(session, lot))
}

/// A session's task, from its login or from the lot: runs the session until it ends (then
/// tells the client why), or until it is parked and the task ends without it.
async fn live(mut session: Box<session::Session>, lot: Arc<park::Lot>) {
    loop {
        match session.run().await {
            session::Ran::Parked => match lot.park(session) {
                Ok(()) => return,
                Err(back) => session = back,
            },
            session::Ran::Ended(res) => {
                let shared = session.shared.clone();
                shared.cancels.unregister(session.key);
                let id = session.relay.id();
                let mut stream = std::mem::replace(&mut session.client, ClientStream::Gone);
                drop(session);
                return Box::pin(ended(&mut stream, &shared, Some(id), res)).await;
            }
        }
    }
}

/// Counts how the connection ended and tells the client why, if it can still hear it.
async fn ended(
    stream: &mut ClientStream,
    shared: &Shared,
    id: Option<u64>,
    res: Result<(), ClientError>,
) {
    let l = &shared.lifecycle;
    let outcome = match &res {
        Err(ClientError::Shutdown { forced: true }) => &l.aborted,
        Err(e) if e.is_refusal() => &l.refused,
        _ => &l.completed,
    };
    outcome.fetch_add(1, Ordering::Relaxed);
    if l.is_draining() && id.is_some() {
        let how = match &res {
            Err(ClientError::Shutdown { forced: true }) => "aborted",
            Err(ClientError::Shutdown { forced: false }) => "closed_at_boundary",
            _ => "completed",
        };
        shared
            .metrics
            .lifecycle
            .drain_clients
            .with_label_values(&[how])
            .inc();
    }
    if let Err(e) = res {
        Box::pin(report(stream, &e)).await;
        tracing::debug!(client = ?id, error = %Escaped::new(&e), "client session ended with an error");
    }
    if let Some(id) = id {
        shared.events.client_disconnected(id);
    }
    shared.counters.clients_open.fetch_sub(1, Ordering::Relaxed);
}

/// Keepalive and TCP_USER_TIMEOUT as `client.tcp_*` say: a client whose network path died
/// (a node gone, a black-holed route) is noticed while its transaction holds a server.
fn set_liveness_options(stream: &TcpStream, c: &crate::config::ClientConfig) {
    if !c.tcp_keepalive {
        return;
    }
    let sock = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(c.tcp_keepidle)
        .with_interval(c.tcp_keepintvl)
        .with_retries(c.tcp_keepcnt);
    let user_timeout = (!c.tcp_user_timeout.is_zero()).then_some(c.tcp_user_timeout);
    if let Err(e) = sock
        .set_tcp_keepalive(&keepalive)
        .and_then(|_| sock.set_tcp_user_timeout(user_timeout))
    {
        tracing::debug!(error = %e, "cannot set keepalive options on a client socket");
    }
}

/// Tells the client why its connection ends, if it can still hear it.
async fn report(stream: &mut ClientStream, e: &ClientError) {
    if let Some(fields) = e.to_fields() {
        let mut out = BytesMut::new();
        backend::error_response(&mut out, &fields);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stream.send(&out)).await;
    }
}

/// Startup and authentication, ended early (53300) if a newer connection needs the pending
/// login's slot. Returns the stream and the client's number (once it has one) either way.
async fn run_login(
    mut stream: ClientStream,
    shared: Arc<Shared>,
    pending: Pending,
) -> (ClientStream, Option<u64>, Result<Outcome, ClientError>) {
    let mut attempt = login::Attempt::default();
    let res = tokio::select! {
        r = login::login(&mut stream, &shared, &mut attempt) => r.map_err(ClientError::from),
        _ = pending.evicted() => Err(ClientError::Fatal {
            code: crate::protocol::sqlstate::TOO_MANY_CONNECTIONS,
            message: "too many connections are still logging in \
                      (client.max_pending_logins, client.max_pending_logins_per_ip)"
                .into(),
        }),
    };
    if let Err(e) = &res {
        log_refused(&shared, &stream, &attempt, e);
    }
    (stream, attempt.id, res)
}

/// A refused login, as often as `shared.refused_logins` lets (the rest are counted): the
/// peer, the names the client chose (escaped: they cannot forge a line), the SQLSTATE it is
/// told (`none`: closed without a reply) and why. A client that left was not refused.
fn log_refused(shared: &Shared, stream: &ClientStream, who: &login::Attempt, e: &ClientError) {
    if e.is_gone() {
        return;
    }
    let Some(earlier_not_logged) = shared.refused_logins.admit() else {
        return;
    };
    let name = |k| who.param(k).map(|v| field::display(Escaped::name(v)));
    let code = e.to_fields().map(|f| f.code);
    tracing::info!(
        peer = stream.peer_addr().ok().map(field::display),
        user = name("user"),
        database = name("database"),
        application_name = name("application_name"),
        code = %code.as_deref().unwrap_or("none"),
        reason = %Escaped::new(e),
        earlier_not_logged,
        "client login refused"
    );
}

#[cfg(test)]
mod size_tests {
    /// An idle client costs its task's future: keep the future small (the benchmark's
    /// memory-per-idle-client target depends on it). Sizes, not timings: deterministic.
    #[test]
    fn idle_client_future_stays_small() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let c = tokio::net::TcpStream::connect(l.local_addr().expect("addr"))
                .await
                .expect("connect");
            let shared = crate::shared::Shared::new(Default::default());
            let (pending, _) = shared.pending_logins.admit([127, 0, 0, 1].into(), 1, 1);
            let lot = std::sync::Arc::new(super::park::Lot::closed(
                shared.clone(),
                tokio_util::task::TaskTracker::new(),
                super::resume,
            ));
            let f = super::serve(c, shared, pending, lot);
            let size = std::mem::size_of_val(&f);
            eprintln!("client task future: {size} bytes");
            // A parked client is its boxed session (and its cancel slot): mimalloc's
            // 512-byte class.
            let parked = std::mem::size_of::<super::session::Session>();
            eprintln!("parked session: {parked} bytes");
            assert!(parked <= 512, "a parked session grew to {parked} bytes");
            // 616 bytes now, the session boxed (it leaves the task when parked); 792 while it
            // was inline (release: 784, its task cell 896 bytes: 96 of tokio's own around
            // the future, rounded to 128). 896 while the prepared-statement table was inline,
            // 1,024 while the login's outcome stayed in the future; 1,152
            // before that put every idle task in a larger allocation class: tokio aligns task
            // cells to 128 bytes, and the allocator's classes are a quarter of a power of two
            // apart).
            assert!(size <= 640, "client task future grew to {size} bytes");
        });
    }
}
