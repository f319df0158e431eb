//! The startup packet: cutting it (bounded by `client.max_startup_packet` and
//! `client.max_startup_params`), SSL negotiation (TLS when a certificate is configured; GSS is
//! answered `N`), cancel requests, protocol version negotiation, and the session settings the
//! client asks for.

use std::sync::Arc;

use bytes::BytesMut;

use super::error::LoginError;
use crate::config::ClientTlsMode;
use crate::logs::Escaped;
use crate::net::read::read_chunk;
use crate::net::ClientStream;
use crate::params::Params;
use crate::protocol::backend;
use crate::protocol::startup::{self, Startup, StartupError, StartupLimits, StartupPacket};
use crate::shared::Shared;

/// Most SSLRequest/GSSENCRequest round trips before the startup packet.
const MAX_NEGOTIATIONS: usize = 2;

/// Reads the startup packet, answering SSL and GSS requests on the way. `None`: the client
/// left, or sent a CancelRequest (its key is put in `cancel`, for the caller to forward).
/// `buf` keeps the bytes that came after the packet.
pub(super) async fn negotiate(
    stream: &mut ClientStream,
    shared: &Shared,
    buf: &mut BytesMut,
    cancel: &mut Option<(i32, i32)>,
) -> Result<Option<Startup>, LoginError> {
    let full = shared.config.load();
    let cfg = &full.client;
    let limits = StartupLimits {
        max_len: cfg.max_startup_packet,
        max_params: cfg.max_startup_params,
    };
    let mut negotiations = 0;
    loop {
        match startup::cut(buf, limits).map_err(|e| startup_error(shared, e))? {
            None => {
                if read_chunk(stream, buf, 1024).await? == 0 {
                    return Ok(None);
                }
            }
            Some(p @ (StartupPacket::SslRequest | StartupPacket::GssEncRequest)) => {
                negotiations += 1;
                // Bytes sent before our answer would skip the handshake (CVE-2021-23214).
                if negotiations > MAX_NEGOTIATIONS || !buf.is_empty() || stream.is_tls() {
                    return Err(LoginError::Protocol(
                        "unexpected data during SSL/GSS negotiation",
                    ));
                }
                let acceptor = shared.tls.acceptor();
                match acceptor.filter(|_| {
                    p == StartupPacket::SslRequest && full.tls.client.mode != ClientTlsMode::Disable
                }) {
                    Some(config) => start_tls(stream, config).await?,
                    None => stream.send(b"N").await?,
                }
            }
            Some(StartupPacket::Cancel { pid, secret }) => {
                *cancel = Some((pid, secret));
                return Ok(None);
            }
            Some(StartupPacket::Startup(s)) => return Ok(Some(s)),
        }
    }
}

/// Answers `S` and runs the TLS handshake; the stream is TLS from here on.
async fn start_tls(
    stream: &mut ClientStream,
    config: Arc<rustls::ServerConfig>,
) -> Result<(), LoginError> {
    stream.send(b"S").await?;
    let tcp = stream
        .take_plain()
        .ok_or(LoginError::Protocol("TLS requested twice"))?;
    let tls = tokio_rustls::TlsAcceptor::from(config)
        .accept(tcp)
        .await
        .map_err(|e| {
            tracing::debug!(error = %Escaped::new(&e), "client TLS handshake failed");
            LoginError::Gone
        })?;
    *stream = crate::net::MaybeTls::Tls(Box::new(tls));
    Ok(())
}

/// We speak 3.0: a newer minor version or `_pq_.` options get NegotiateProtocolVersion, and
/// the client carries on with 3.0 (protocol docs, "Protocol versions").
pub(super) fn negotiate_version(s: &Startup, out: &mut BytesMut) {
    let unknown: Vec<&str> = s
        .params
        .iter()
        .filter(|(k, _)| k.starts_with("_pq_."))
        .map(|(k, _)| k.as_str())
        .collect();
    if s.minor > 0 || !unknown.is_empty() {
        backend::negotiate_protocol_version(out, 0, &unknown);
    }
}

/// Session settings the client asked for: startup parameters that are GUCs, plus
/// `options=-c name=value` / `--name=value`.
pub(super) fn requested_params(s: &Startup) -> Params {
    let mut p = Params::default();
    for (k, v) in &s.params {
        match k.as_str() {
            "user" | "database" | "replication" | "options" => {}
            k if k.starts_with("_pq_.") => {}
            k => p.set(k, v),
        }
    }
    if let Some(opts) = s.get("options") {
        let words = split_options(opts);
        let mut it = words.iter();
        while let Some(w) = it.next() {
            let setting = if w == "-c" {
                it.next().map(String::as_str)
            } else if let Some(rest) = w.strip_prefix("--") {
                Some(rest)
            } else {
                w.strip_prefix("-c")
            };
            if let Some((name, value)) = setting.and_then(|s| s.split_once('=')) {
                p.set(&name.replace('-', "_"), value);
            }
        }
    }
    // Reported back at once: spelled as PostgreSQL would report it (asyncpg sends `utf-8`).
    if let Some(enc) = p
        .get("client_encoding")
        .and_then(crate::params::canonical_encoding)
    {
        p.set("client_encoding", enc);
    }
    p
}

/// Splits `options` on spaces, honouring backslash escapes as PostgreSQL does.
fn split_options(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ' ' | '\t' => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// A first packet whose length cannot be a startup packet's (Terminate before the
/// StartupMessage, an HTTP request, a TLS ClientHello, one over `client.max_startup_packet`)
/// is closed without a reply and counted, as PostgreSQL closes it (ProcessStartupPacket's
/// COMMERROR). A packet of a plausible length that asks for another protocol version gets
/// PostgreSQL's FATAL 0A000, and one that breaks the layout its FATAL 08P01 (both are counted
/// too). [`LoginError::sqlstate`] says which.
fn startup_error(shared: &Shared, e: StartupError) -> LoginError {
    let reason = match e {
        StartupError::BadLength(_) => "bad_length",
        StartupError::UnsupportedVersion { .. } => "unsupported_protocol",
        StartupError::TooManyParams(_) | StartupError::Malformed(_) => "malformed",
    };
    shared
        .metrics
        .clients
        .bad_startup
        .with_label_values(&[reason])
        .inc();
    if let StartupError::BadLength(_) = e {
        tracing::debug!(error = %e, "first packet is not a startup packet; closing");
    }
    LoginError::Startup(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed() {
        let s = Startup {
            minor: 0,
            params: vec![
                ("user".into(), "u".into()),
                ("application_name".into(), "app".into()),
                (
                    "options".into(),
                    "-c TimeZone=Asia/Tokyo --search-path=a\\ b -cDateStyle=ISO".into(),
                ),
            ],
        };
        let p = requested_params(&s);
        assert_eq!(p.get("TimeZone"), Some("Asia/Tokyo"));
        assert_eq!(p.get("search_path"), Some("a b"));
        assert_eq!(p.get("DateStyle"), Some("ISO"));
        assert_eq!(p.get("application_name"), Some("app"));
        assert_eq!(p.get("user"), None);
    }
}
