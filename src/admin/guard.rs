//! Who may use the control routes (`POST /console`, `/reload`, `/drain`): whoever presents
//! `admin.token` as a bearer token, from any address. No address is trusted: a service mesh
//! forwards every pod's traffic from 127.0.0.6, and any container of the pod (or an SSRF in
//! the application) is on loopback too. With no token configured the routes are off. A
//! browser's request (one that carries `Origin` or a cross-site `Sec-Fetch-Site`) and a body
//! of another type than the route takes are refused, so a page cannot drive them either.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::shared::Shared;

/// What body a control route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Takes {
    /// A console command as `text/plain` (or with no Content-Type).
    Text,
    /// No body at all.
    Nothing,
}

/// Who a control request came from, for the audit line.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller {
    pub peer: SocketAddr,
    /// The credential it presented (never its value).
    pub credential: &'static str,
}

/// Why a control request was refused: its metric label, status and answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    Off,
    Unauthenticated,
    Forbidden,
    CrossSite,
    BadBody,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Off => "off",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::Forbidden => "forbidden",
            Refusal::CrossSite => "cross_site",
            Refusal::BadBody => "bad_body",
        }
    }

    pub fn response(self) -> Response {
        let (code, text) = match self {
            Refusal::Off => (
                StatusCode::FORBIDDEN,
                "control routes are off: set admin.token or admin.token_file\n",
            ),
            Refusal::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                "send Authorization: Bearer <admin.token>\n",
            ),
            Refusal::Forbidden => (StatusCode::FORBIDDEN, "forbidden\n"),
            Refusal::CrossSite => (StatusCode::FORBIDDEN, "cross-site requests are refused\n"),
            Refusal::BadBody => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "this route takes a text/plain body (POST /console) or none\n",
            ),
        };
        let mut r = (code, text).into_response();
        if self == Refusal::Unauthenticated {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"droid-pool admin\""),
            );
        }
        r
    }
}

/// Whether the request carries the configured admin token.
pub(super) fn has_token(s: &Shared, headers: &HeaderMap) -> bool {
    let cfg = s.config.load();
    let Some(token) = &cfg.admin.token else {
        return false;
    };
    bearer(headers).is_some_and(|given| {
        crate::auth::constant_time_eq(given.as_bytes(), token.expose().as_bytes())
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// A browser's request: fetch metadata or an Origin say so (curl, kubectl and Prometheus
/// send neither).
fn cross_site(headers: &HeaderMap) -> bool {
    if headers.contains_key(header::ORIGIN) {
        return true;
    }
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !v.eq_ignore_ascii_case("none"))
}

fn body_fits(headers: &HeaderMap, body_len: usize, takes: Takes) -> bool {
    match takes {
        Takes::Nothing => body_len == 0,
        Takes::Text => match headers.get(header::CONTENT_TYPE) {
            None => true,
            Some(v) => v.to_str().ok().is_some_and(|v| {
                let essence = v.split(';').next().unwrap_or("").trim();
                essence.eq_ignore_ascii_case("text/plain")
            }),
        },
    }
}

/// Authorises a control request, or answers its refusal (counted, and logged at a bounded
/// rate with the peer's address).
pub(super) fn control(
    s: &Shared,
    peer: SocketAddr,
    headers: &HeaderMap,
    body_len: usize,
    takes: Takes,
) -> Result<Caller, Refusal> {
    let verdict = if cross_site(headers) {
        Err(Refusal::CrossSite)
    } else if s.config.load().admin.token.is_none() {
        Err(Refusal::Off)
    } else if bearer(headers).is_none() {
        Err(Refusal::Unauthenticated)
    } else if !has_token(s, headers) {
        Err(Refusal::Forbidden)
    } else if !body_fits(headers, body_len, takes) {
        Err(Refusal::BadBody)
    } else {
        Ok(())
    };
    let control = &s.metrics.admin.control;
    match verdict {
        Ok(()) => {
            control.with_label_values(&["ok"]).inc();
            Ok(Caller {
                peer,
                credential: "admin.token",
            })
        }
        Err(refusal) => {
            control.with_label_values(&[refusal.label()]).inc();
            if let Some(suppressed) = s.refused_admin.admit() {
                tracing::info!(
                    %peer,
                    reason = refusal.label(),
                    earlier_not_logged = suppressed,
                    "admin control request refused"
                );
            }
            Err(refusal)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, header::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn browsers_and_other_bodies_are_told_apart() {
        assert!(cross_site(&headers(&[("origin", "https://evil.example")])));
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!cross_site(&headers(&[("sec-fetch-site", "none")])));
        assert!(!cross_site(&headers(&[("authorization", "Bearer x")])));
        let form = headers(&[("content-type", "application/x-www-form-urlencoded")]);
        assert!(!body_fits(&form, 10, Takes::Text));
        let text = headers(&[("content-type", "text/plain; charset=utf-8")]);
        assert!(body_fits(&text, 10, Takes::Text));
        assert!(body_fits(&HeaderMap::new(), 10, Takes::Text));
        assert!(!body_fits(&text, 1, Takes::Nothing));
        assert!(body_fits(&text, 0, Takes::Nothing));
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer abc ")])),
            Some("abc")
        );
        assert_eq!(bearer(&headers(&[("authorization", "Basic abc")])), None);
    }
}
