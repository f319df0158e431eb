//! Admin routes. Probes answer from atomics only; nothing here touches the data plane's
//! locks for longer than a snapshot.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::shared::Shared;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/startupz", get(startupz))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/console", post(console))
        .route("/reload", post(reload))
        .route("/drain", post(drain))
        .with_state(shared)
}

fn probe(ok: bool, what: &'static str) -> Response {
    if ok {
        (StatusCode::OK, format!("{what}: ok\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what}: not yet or no longer\n"),
        )
            .into_response()
    }
}

async fn startupz(State(s): State<Arc<Shared>>) -> Response {
    probe(s.lifecycle.is_started(), "started")
}

async fn livez(State(s): State<Arc<Shared>>) -> Response {
    probe(s.lifecycle.is_live(), "live")
}

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    let mut ready = s.lifecycle.is_ready();
    if ready && s.config.load().admin.readiness_checks_backend {
        ready = s.backend_reachable();
    }
    probe(ready, "ready")
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

async fn status(State(s): State<Arc<Shared>>) -> Response {
    Json(s.status()).into_response()
}

/// Loopback peers, or a configured bearer token, may change the pooler's state.
fn authorized(s: &Shared, peer: SocketAddr, headers: &HeaderMap) -> bool {
    if peer.ip().is_loopback() {
        return true;
    }
    let cfg = s.config.load();
    let Some(token) = &cfg.admin.token else {
        return false;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| {
            crate::auth::constant_time_eq(given.as_bytes(), token.expose().as_bytes())
        })
}

async fn reload(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&s, peer, &headers) {
        return (StatusCode::FORBIDDEN, "forbidden\n").into_response();
    }
    s.reload.notify_one();
    (StatusCode::ACCEPTED, "reload requested\n").into_response()
}

/// `POST /console` with a console command as the body (`PAUSE orders`, `SHOW DATABASES`):
/// the admin console over HTTP, authorised like `/drain`; answered as text.
async fn console(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if !authorized(&s, peer, &headers) {
        return (StatusCode::FORBIDDEN, "forbidden\n").into_response();
    }
    let answer = crate::client::console::execute(&s, &body, "http").await;
    let code = match answer {
        crate::client::console::Answer::Error(..) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    (code, answer.to_text()).into_response()
}

async fn drain(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&s, peer, &headers) {
        return (StatusCode::FORBIDDEN, "forbidden\n").into_response();
    }
    s.lifecycle.begin_drain();
    (StatusCode::ACCEPTED, "drain started\n").into_response()
}
