//! The admin server's accept loop, bounded so that a flood of the admin port costs neither a
//! client login nor a probe answer: at most `admin.max_connections` connections (over it, the
//! oldest one not running a request is closed for the newcomer, so a probe always gets in),
//! request headers within `admin.header_read_timeout`, a body within the same time and
//! `admin.max_request_size`, and connections idle for `admin.idle_timeout` closed.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::config::AdminConfig;
use crate::metrics::AdminMetrics;

/// What one connection is doing, read by the loop that may evict it.
#[derive(Debug)]
struct Activity {
    /// Requests being answered (past their body).
    running: AtomicUsize,
    /// When the last request ended, or the connection opened.
    last: Mutex<Instant>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            running: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        }
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire) > 0
    }

    fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
}

/// The open admin connections, oldest first.
#[derive(Debug, Default)]
struct Connections {
    next: u64,
    open: BTreeMap<u64, (Arc<Activity>, CancellationToken)>,
}

/// The verdict on a new connection.
#[derive(Debug)]
enum Admission {
    /// Its slot; `evicted`: an older idle connection was closed to make room.
    Admitted {
        id: u64,
        activity: Arc<Activity>,
        close: CancellationToken,
        evicted: bool,
    },
    /// At the cap with every connection running a request.
    Refused,
}

impl Connections {
    fn admit(&mut self, max: usize) -> Admission {
        let mut evicted = false;
        if self.open.len() >= max {
            let oldest_idle = self
                .open
                .iter()
                .find(|(_, (a, _))| !a.is_running())
                .map(|(&id, _)| id);
            let Some(id) = oldest_idle else {
                return Admission::Refused;
            };
            if let Some((_, close)) = self.open.remove(&id) {
                close.cancel();
            }
            evicted = true;
        }
        self.next += 1;
        let activity = Arc::new(Activity::new());
        let close = CancellationToken::new();
        self.open
            .insert(self.next, (activity.clone(), close.clone()));
        Admission::Admitted {
            id: self.next,
            activity,
            close,
            evicted,
        }
    }
}

/// The accept loop's shared parts.
struct Server {
    router: Router,
    connections: Mutex<Connections>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The admin settings in force (read at each accept: a reload changes the bounds).
    config: Arc<crate::config::ConfigCell>,
}

impl Server {
    fn connections(&self) -> MutexGuard<'_, Connections> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn metrics(&self) -> &AdminMetrics {
        &self.metrics.admin
    }
}

/// Serves `router` on `listener` until the process exits.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    config: Arc<crate::config::ConfigCell>,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let server = Arc::new(Server {
        router,
        connections: Mutex::default(),
        metrics,
        config,
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors (EMFILE) or a connection reset before accept: keep
                // serving; the caps free descriptors as connections close.
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let limits = server.config.load().admin.clone();
        let admission = server.connections().admit(limits.max_connections);
        let Admission::Admitted {
            id,
            activity,
            close,
            evicted,
        } = admission
        else {
            server
                .metrics()
                .closed
                .with_label_values(&["refused"])
                .inc();
            drop(stream);
            continue;
        };
        if evicted {
            server
                .metrics()
                .closed
                .with_label_values(&["evicted"])
                .inc();
        }
        server.metrics().connections.inc();
        let server = server.clone();
        tokio::spawn(async move {
            connection(&server, stream, peer, &limits, &activity, &close).await;
            server.connections().open.remove(&id);
            server.metrics().connections.dec();
        });
    }
}

/// Serves one connection until it ends, is evicted, or stays idle too long.
async fn connection(
    server: &Arc<Server>,
    stream: TcpStream,
    peer: SocketAddr,
    limits: &AdminConfig,
    activity: &Arc<Activity>,
    close: &CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = {
        let (server, activity) = (server.clone(), activity.clone());
        let limits = limits.clone();
        hyper::service::service_fn(move |req| {
            let (server, activity, limits) = (server.clone(), activity.clone(), limits.clone());
            async move { Ok::<_, Infallible>(answer(&server, req, peer, &limits, &activity).await) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_request_size.max(8192))
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    loop {
        let idle_at = activity.last() + limits.idle_timeout;
        tokio::select! {
            _ = &mut conn => return,
            () = close.cancelled() => return,
            () = tokio::time::sleep_until(idle_at) => {
                if !activity.is_running() && activity.last() + limits.idle_timeout <= Instant::now() {
                    server.metrics().closed.with_label_values(&["idle"]).inc();
                    return;
                }
            }
        }
    }
}

/// Reads the body (bounded in size and time), then runs the router; only the router's part
/// counts as running, so a slow body keeps no slot from eviction.
async fn answer(
    server: &Server,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
    limits: &AdminConfig,
    activity: &Activity,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let limited = http_body_util::Limited::new(body, limits.max_request_size);
    let bytes = match tokio::time::timeout(limits.header_read_timeout, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(_)) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "request too large\n"),
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "request body too slow\n"),
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(ConnectInfo(peer));
    activity.running.fetch_add(1, Ordering::AcqRel);
    let response = match server.router.clone().oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    activity.touch();
    activity.running.fetch_sub(1, Ordering::AcqRel);
    response
}

fn plain(code: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = code;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> (u64, Arc<Activity>, CancellationToken, bool) {
        match a {
            Admission::Admitted {
                id,
                activity,
                close,
                evicted,
            } => (id, activity, close, evicted),
            Admission::Refused => panic!("refused"),
        }
    }

    /// Over the cap the oldest connection not running a request makes room; with every one
    /// running, the newcomer is refused.
    #[test]
    fn the_oldest_idle_connection_makes_room() {
        let mut c = Connections::default();
        let (_, first, first_close, _) = admitted(c.admit(2));
        let (_, _, second_close, _) = admitted(c.admit(2));
        first.running.fetch_add(1, Ordering::AcqRel);
        let (_, third, _, evicted) = admitted(c.admit(2));
        assert!(evicted);
        assert!(second_close.is_cancelled(), "the oldest idle one goes");
        assert!(!first_close.is_cancelled(), "a running one stays");
        third.running.fetch_add(1, Ordering::AcqRel);
        assert!(matches!(c.admit(2), Admission::Refused));
        assert_eq!(c.open.len(), 2);
    }
}
