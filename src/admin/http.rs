//! Admin routes. Probes answer from atomics only; nothing here touches the data plane's
//! locks for longer than a snapshot. Reads (probes, `/metrics`, `/status`) are open, with
//! user names only for a reader holding the admin token (or with `admin.show_users`); the
//! control routes need the token (`guard`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::guard::{self, Takes};
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

/// Whether this reader sees user names.
fn shows_users(s: &Shared, headers: &HeaderMap) -> bool {
    s.config.load().admin.show_users || guard::has_token(s, headers)
}

async fn metrics(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let text = if shows_users(&s, &headers) {
        s.metrics.render()
    } else {
        let users = s.auth.users();
        s.metrics.render_redacted(&|u| users.pseudonym(u))
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn status(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let mut status = s.status();
    if !shows_users(&s, &headers) {
        let users = s.auth.users();
        redact_pools(&mut status, &|u| users.pseudonym(u));
    }
    Json(status).into_response()
}

/// Replaces each pool's user (and the user part of its name) with `pseudonym(user)`.
fn redact_pools(status: &mut serde_json::Value, pseudonym: &dyn Fn(&str) -> String) {
    let Some(pools) = status.get_mut("pools").and_then(|p| p.as_array_mut()) else {
        return;
    };
    for pool in pools {
        let Some(user) = pool.get("user").and_then(|u| u.as_str()).map(str::to_owned) else {
            continue;
        };
        let alias = pseudonym(&user);
        if let Some(db) = pool
            .get("database")
            .and_then(|d| d.as_str())
            .map(str::to_owned)
        {
            pool["pool"] = format!("{db}/{alias}").into();
        }
        pool["user"] = alias.into();
    }
}

async fn reload(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match guard::control(&s, peer, &headers, body.len(), Takes::Nothing) {
        Ok(c) => c,
        Err(refused) => return refused.response(),
    };
    tracing::info!(peer = %caller.peer, credential = caller.credential, "admin reload requested");
    s.reload.notify_one();
    (StatusCode::ACCEPTED, "reload requested\n").into_response()
}

/// `POST /console` with a console command as a `text/plain` body (`PAUSE orders`, `SHOW
/// DATABASES`): the admin console over HTTP, answered as text.
async fn console(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match guard::control(&s, peer, &headers, body.len(), Takes::Text) {
        Ok(c) => c,
        Err(refused) => return refused.response(),
    };
    let Ok(sql) = std::str::from_utf8(&body) else {
        return (StatusCode::BAD_REQUEST, "the command must be UTF-8\n").into_response();
    };
    let who = super::console::Caller {
        via: "http",
        peer: Some(caller.peer),
        credential: caller.credential.to_owned(),
    };
    let answer = super::console::execute(&s, sql, &who).await;
    let code = match answer {
        super::console::Answer::Error(..) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    (code, answer.to_text()).into_response()
}

async fn drain(
    State(s): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let caller = match guard::control(&s, peer, &headers, body.len(), Takes::Nothing) {
        Ok(c) => c,
        Err(refused) => return refused.response(),
    };
    tracing::info!(peer = %caller.peer, credential = caller.credential, "admin drain requested");
    s.lifecycle.begin_drain();
    (StatusCode::ACCEPTED, "drain started\n").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_pools_name_no_user() {
        let mut v = serde_json::json!({"pools": [
            {"pool": "app/alice", "database": "app", "user": "alice", "clients_active": 1}
        ]});
        redact_pools(&mut v, &|u| format!("p({})", u.len()));
        assert_eq!(v["pools"][0]["pool"], "app/p(5)");
        assert_eq!(v["pools"][0]["user"], "p(5)");
        assert!(!v.to_string().contains("alice"));
    }
}
