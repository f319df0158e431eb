//! The client's startup phase: SSL negotiation (TLS when a certificate is configured; GSS is
//! answered `N`), cancel requests, protocol version negotiation, authentication, and the greeting with the pool's cached
//! parameters and a BackendKeyData of the pooler's own. Bounded by the client login timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;

use crate::config::{AuthMethod, ClientTlsMode};
use crate::net::ClientStream;

use super::error::ClientError;
use super::io::read_chunk;
use crate::cancel::CancelSlot;
use crate::params::{ClientParams, Params};
use crate::pool::{Pool, PoolKey};
use crate::protocol::startup::{self, StartupError, StartupLimits, StartupPacket};
use crate::protocol::{backend, sqlstate};
use crate::shared::Shared;

/// A logged-in client, ready for its session.
pub struct Login {
    pub id: u64,
    /// The client's cancel key (BackendKeyData).
    pub key: (i32, i32),
    pub pool: Pool,
    /// The session's membership of its pool (and its user's client count).
    pub member: crate::pool::PoolClient,
    pub params: ClientParams,
    pub cancel: Arc<CancelSlot>,
    /// Bytes the client sent after its startup packet.
    pub leftover: BytesMut,
}

pub enum Outcome {
    Session(Login),
    /// A console user asked for the admin console: who, bytes after the startup packet, and
    /// what the authentication left to send before AuthenticationOk.
    Console(super::console::Caller, BytesMut, BytesMut),
    /// A cancel request or a client that left during startup: nothing more to do.
    Done,
}

/// Most SSLRequest/GSSENCRequest round trips before the startup packet.
const MAX_NEGOTIATIONS: usize = 2;

/// Bounded as a whole by the login timeout: the TLS handshake and the password exchange
/// included, so a client that stalls anywhere (slowloris) is dropped. A CancelRequest is
/// forwarded after that, bounded by `pool.cancel_wait_timeout` alone; its connection is
/// closed once the server has acted on it.
pub async fn login(
    stream: &mut ClientStream,
    shared: &Arc<Shared>,
    id: &mut Option<u64>,
) -> Result<Outcome, ClientError> {
    let timeout = shared.config.load().client.login_timeout;
    let mut cancel = None;
    let res =
        match tokio::time::timeout(timeout, login_inner(stream, shared, id, &mut cancel)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Fatal {
                code: sqlstate::PROTOCOL_VIOLATION,
                message: "client login timeout".into(),
            }),
        };
    if let Some(key) = cancel {
        forward_cancel(shared, key).await;
    }
    res
}

/// Cancels what this pooler's client with that key runs, or forwards the request to the peer
/// that issued the key, and counts how it went.
async fn forward_cancel(shared: &Shared, key: (i32, i32)) {
    let cfg = shared.config.load();
    let own = crate::cancel::own_peer_id(&cfg, shared.hostname.as_deref());
    let sender = shared.cancel_sender();
    let result = crate::cancel::handle_request(&shared.cancels, sender, &cfg, own, key).await;
    shared
        .metrics
        .clients
        .cancels
        .with_label_values(&[result])
        .inc();
}

/// `cancel`: set to the key of a CancelRequest, which the caller forwards.
async fn login_inner(
    stream: &mut ClientStream,
    shared: &Arc<Shared>,
    id: &mut Option<u64>,
    cancel: &mut Option<(i32, i32)>,
) -> Result<Outcome, ClientError> {
    let full = shared.config.load();
    let cfg = &full.client;
    let limits = StartupLimits {
        max_len: cfg.max_startup_packet,
        max_params: cfg.max_startup_params,
    };
    let mut buf = BytesMut::new();
    let mut negotiations = 0;
    let startup = loop {
        match startup::cut(&mut buf, limits).map_err(|e| startup_error(shared, e))? {
            None => {
                if read_chunk(stream, &mut buf, 1024).await? == 0 {
                    return Ok(Outcome::Done);
                }
            }
            Some(p @ (StartupPacket::SslRequest | StartupPacket::GssEncRequest)) => {
                negotiations += 1;
                // Bytes sent before our answer would skip the handshake (CVE-2021-23214).
                if negotiations > MAX_NEGOTIATIONS || !buf.is_empty() || stream.is_tls() {
                    return Err(ClientError::Protocol(
                        "unexpected data during SSL/GSS negotiation".into(),
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
                return Ok(Outcome::Done);
            }
            Some(StartupPacket::Startup(s)) => break s,
        }
    };
    if full.tls.client.mode == ClientTlsMode::Require && !stream.is_tls() {
        return Err(ClientError::Fatal {
            code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            message: "droid-pool accepts TLS connections only (tls.client.mode: require); \
                      connect with sslmode=require"
                .into(),
        });
    }
    let mut out = BytesMut::new();
    negotiate_version(&startup, &mut out);
    let Some(user) = startup.get("user").filter(|u| !u.is_empty()) else {
        return Err(ClientError::Fatal {
            code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            message: "no PostgreSQL user name specified in startup packet".into(),
        });
    };
    if startup
        .get("replication")
        .is_some_and(|r| r != "false" && r != "0" && r != "off")
    {
        return Err(ClientError::Fatal {
            code: sqlstate::FEATURE_NOT_SUPPORTED,
            message: "replication connections are not supported by droid-pool".into(),
        });
    }
    let key = PoolKey {
        user: user.to_owned(),
        database: startup
            .get("database")
            .filter(|d| !d.is_empty())
            .unwrap_or(user)
            .to_owned(),
    };
    let learned = super::auth::authenticate(stream, &mut buf, shared, user, &mut out).await?;
    if super::console::is_console_database(&key.database) {
        let allowed = shared
            .config
            .load()
            .admin
            .console_users
            .iter()
            .any(|u| u == user);
        if !allowed {
            return Err(ClientError::Fatal {
                code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                message: format!(
                    "user \"{user}\" may not use the admin console (admin.console_users)"
                ),
            });
        }
        // No trust by address: the console changes what every client gets, so a console
        // user logs in with a password unless trust is configured for that user by name.
        let method = full.auth_method_for(user);
        let named_trust = full.auth.user_methods.get(user) == Some(&AuthMethod::Trust);
        if method == AuthMethod::Trust && !named_trust {
            return Err(ClientError::Fatal {
                code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                message: format!(
                    "the admin console needs password authentication: set \
                     auth.user_methods.{user} to scram-sha-256 (or to trust, to allow it \
                     without a password)"
                ),
            });
        }
        let who = super::console::Caller {
            via: "sql",
            peer: stream.peer_addr().ok(),
            credential: format!("user {user:?} ({})", method.as_str()),
        };
        return Ok(Outcome::Console(who, buf, out));
    }
    if shared.lifecycle.is_disabled(&key.database) {
        // PostgreSQL's own answer for a database that takes no connections.
        return Err(ClientError::Fatal {
            code: sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            message: format!(
                "database \"{}\" is not currently accepting connections (DISABLE in the admin console)",
                key.database
            ),
        });
    }
    let client_id = shared.counters.next_client_id();
    *id = Some(client_id);
    shared.events.client_connected(client_id);
    shared.metrics.clients.connections.inc();
    if shared.counters.clients_open.load(Ordering::Relaxed) > cfg.max_connections {
        shared
            .metrics
            .clients
            .shed
            .with_label_values(&["too_many_clients"])
            .inc();
        return Err(ClientError::Fatal {
            code: sqlstate::TOO_MANY_CONNECTIONS,
            message: "sorry, too many clients already".into(),
        });
    }
    // Trust: the only method until client authentication lands; validated to loopback.
    backend::auth_ok(&mut out);
    if let Some(secret) = learned {
        shared.pools.learn(&full, user, secret);
    }
    let pool = shared.pools.get(&key);
    let Some(member) = pool.try_attach(full.client.max_user_connections) else {
        shared
            .metrics
            .clients
            .shed
            .with_label_values(&["too_many_user_clients"])
            .inc();
        // PostgreSQL's answer when a role's CONNECTION LIMIT is reached.
        return Err(ClientError::Fatal {
            code: sqlstate::TOO_MANY_CONNECTIONS,
            message: format!("too many connections for role \"{user}\""),
        });
    };
    let server_params = pool.startup_params().await?;
    let requested = requested_params(&startup);
    let mut params = ClientParams::new(server_params.clone());
    for (k, v) in requested.iter() {
        params.set(k, v);
    }
    // Tell only what a server would report; the other requested settings are applied by SET.
    for (k, v) in server_params.iter() {
        backend::parameter_status(&mut out, k, requested.get(k).unwrap_or(v));
    }
    let peer = crate::cancel::own_peer_id(&full, shared.hostname.as_deref());
    let (cancel_key, cancel) = shared
        .cancels
        .register(pool.shared_name(), &key.database, peer);
    backend::backend_key_data(&mut out, cancel_key.0, cancel_key.1);
    backend::ready_for_query(&mut out, backend::TX_IDLE);
    if let Err(e) = stream.send(&out).await {
        shared.cancels.unregister(cancel_key);
        return Err(e.into());
    }
    Ok(Outcome::Session(Login {
        id: client_id,
        key: cancel_key,
        pool,
        member,
        params,
        cancel,
        leftover: buf,
    }))
}

/// Answers `S` and runs the TLS handshake; the stream is TLS from here on.
async fn start_tls(
    stream: &mut ClientStream,
    config: Arc<rustls::ServerConfig>,
) -> Result<(), ClientError> {
    stream.send(b"S").await?;
    let tcp = stream
        .take_plain()
        .ok_or_else(|| ClientError::Protocol("TLS requested twice".into()))?;
    let tls = tokio_rustls::TlsAcceptor::from(config)
        .accept(tcp)
        .await
        .map_err(|e| {
            tracing::debug!(error = %e, "client TLS handshake failed");
            ClientError::Gone
        })?;
    *stream = crate::net::MaybeTls::Tls(Box::new(tls));
    Ok(())
}

/// We speak 3.0: a newer minor version or `_pq_.` options get NegotiateProtocolVersion, and
/// the client carries on with 3.0 (protocol docs, "Protocol versions").
fn negotiate_version(s: &startup::Startup, out: &mut BytesMut) {
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
fn requested_params(s: &startup::Startup) -> Params {
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
/// too).
fn startup_error(shared: &Shared, e: StartupError) -> ClientError {
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
        return ClientError::BadStartup(e);
    }
    let code = match e {
        StartupError::UnsupportedVersion { .. } => sqlstate::FEATURE_NOT_SUPPORTED,
        _ => sqlstate::PROTOCOL_VIOLATION,
    };
    ClientError::Fatal {
        code,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed() {
        let s = startup::Startup {
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
