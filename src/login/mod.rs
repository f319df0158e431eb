//! A client's login: the startup phase up to the greeting (SSL negotiation, cancel requests,
//! protocol version negotiation, authentication), bounded by the client login timeout. It
//! hands the client task a logged-in session, with the pool's cached parameters and a
//! BackendKeyData of the pooler's own already sent, or an admin console session.

mod authenticate;
mod error;
mod startup;

pub use error::LoginError;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;

use crate::admin::console::{self, Caller};
use crate::cancel::CancelSlot;
use crate::config::{AuthMethod, ClientTlsMode, Config};
use crate::net::ClientStream;
use crate::params::ClientParams;
use crate::pool::{Pool, PoolKey};
use crate::protocol::startup::Startup;
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

/// What a login learned before it ended, kept by the caller: the log line of a refused login
/// names the client by it.
#[derive(Default)]
pub struct Attempt {
    /// The client's number, once it has one.
    pub id: Option<u64>,
    /// The startup packet, once read.
    pub startup: Option<Startup>,
}

impl Attempt {
    /// A startup parameter the client sent (`user`, `database`, `application_name`).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.startup.as_ref()?.get(name)
    }
}

/// How a login ended well.
pub enum Outcome {
    Session(Login),
    /// A console user asked for the admin console: who, bytes after the startup packet, and
    /// what the authentication left to send before AuthenticationOk.
    Console(Caller, BytesMut, BytesMut),
    /// A cancel request or a client that left during startup: nothing more to do.
    Done,
}

/// Logs a client in. Bounded as a whole by the login timeout: the TLS handshake and the
/// password exchange included, so a client that stalls anywhere (slowloris) is dropped. A
/// CancelRequest is forwarded after that, bounded by `pool.cancel_wait_timeout` alone; its
/// connection is closed once the server has acted on it. `attempt` keeps what the login
/// learns (the client's number, its startup packet), also when it fails or is dropped.
pub async fn login(
    stream: &mut ClientStream,
    shared: &Arc<Shared>,
    attempt: &mut Attempt,
) -> Result<Outcome, LoginError> {
    let timeout = shared.config.load().client.login_timeout;
    let mut cancel = None;
    let res = match tokio::time::timeout(timeout, login_inner(stream, shared, attempt, &mut cancel))
        .await
    {
        Ok(r) => r,
        Err(_) => Err(LoginError::Fatal {
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
    attempt: &mut Attempt,
    cancel: &mut Option<(i32, i32)>,
) -> Result<Outcome, LoginError> {
    let full = shared.config.load();
    let mut buf = BytesMut::new();
    let Some(startup) = startup::negotiate(stream, shared, &mut buf, cancel).await? else {
        return Ok(Outcome::Done);
    };
    let startup = &*attempt.startup.insert(startup);
    let user = check_startup(&full, startup, stream.is_tls())?;
    let mut out = BytesMut::new();
    startup::negotiate_version(startup, &mut out);
    let key = PoolKey {
        user: user.to_owned(),
        database: startup
            .get("database")
            .filter(|d| !d.is_empty())
            .unwrap_or(user)
            .to_owned(),
    };
    let learned = authenticate::authenticate(stream, &mut buf, shared, user, &mut out).await?;
    if console::is_console_database(&key.database) {
        let who = console_caller(shared, &full, stream, user)?;
        return Ok(Outcome::Console(who, buf, out));
    }
    if shared.lifecycle.is_disabled(&key.database) {
        // PostgreSQL's own answer for a database that takes no connections.
        return Err(LoginError::Fatal {
            code: sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            message: format!(
                "database \"{}\" is not currently accepting connections (DISABLE in the admin console)",
                key.database
            ),
        });
    }
    let client_id = shared.counters.next_client_id();
    attempt.id = Some(client_id);
    shared.events.client_connected(client_id);
    shared.metrics.clients.connections.inc();
    if shared.counters.clients_open.load(Ordering::Relaxed) > full.client.max_connections {
        shed(shared, "too_many_clients");
        return Err(LoginError::Fatal {
            code: sqlstate::TOO_MANY_CONNECTIONS,
            message: "sorry, too many clients already".into(),
        });
    }
    // Trust: the only method until client authentication lands; validated to loopback.
    backend::auth_ok(&mut out);
    if let Some(secret) = learned {
        shared.pools.learn(&full, user, secret);
    }
    let greeting = Greeting {
        id: client_id,
        key,
        startup,
        out,
    };
    greet(stream, shared, &full, greeting, buf).await
}

/// Counts a client refused for want of room, by `reason`.
fn shed(shared: &Shared, reason: &str) {
    shared
        .metrics
        .clients
        .shed
        .with_label_values(&[reason])
        .inc();
}

/// What the startup packet must say before authentication: TLS if required, a user, and no
/// replication; returns the user.
fn check_startup<'s>(cfg: &Config, startup: &'s Startup, tls: bool) -> Result<&'s str, LoginError> {
    if cfg.tls.client.mode == ClientTlsMode::Require && !tls {
        return Err(LoginError::Fatal {
            code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            message: "droid-pool accepts TLS connections only (tls.client.mode: require); \
                      connect with sslmode=require"
                .into(),
        });
    }
    let Some(user) = startup.get("user").filter(|u| !u.is_empty()) else {
        return Err(LoginError::Fatal {
            code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            message: "no PostgreSQL user name specified in startup packet".into(),
        });
    };
    if startup
        .get("replication")
        .is_some_and(|r| r != "false" && r != "0" && r != "off")
    {
        return Err(LoginError::Fatal {
            code: sqlstate::FEATURE_NOT_SUPPORTED,
            message: "replication connections are not supported by droid-pool".into(),
        });
    }
    Ok(user)
}

/// An authenticated `user` who asked for the admin console: who they are, if they may use it.
fn console_caller(
    shared: &Shared,
    full: &Config,
    stream: &ClientStream,
    user: &str,
) -> Result<Caller, LoginError> {
    let allowed = shared
        .config
        .load()
        .admin
        .console_users
        .iter()
        .any(|u| u == user);
    if !allowed {
        return Err(LoginError::Fatal {
            code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            message: format!("user \"{user}\" may not use the admin console (admin.console_users)"),
        });
    }
    // No trust by address: the console changes what every client gets, so a console
    // user logs in with a password unless trust is configured for that user by name.
    let method = full.auth_method_for(user);
    let named_trust = full.auth.user_methods.get(user) == Some(&AuthMethod::Trust);
    if method == AuthMethod::Trust && !named_trust {
        return Err(LoginError::Fatal {
            code: sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            message: format!(
                "the admin console needs password authentication: set \
                 auth.user_methods.{user} to scram-sha-256 (or to trust, to allow it \
                 without a password)"
            ),
        });
    }
    Ok(Caller {
        via: "sql",
        peer: stream.peer_addr().ok(),
        credential: format!("user {user:?} ({})", method.as_str()),
    })
}

/// An authenticated client about to be greeted: its number, pool, startup packet, and what
/// is queued for it so far (ending with AuthenticationOk).
struct Greeting<'a> {
    id: u64,
    key: PoolKey,
    startup: &'a Startup,
    out: BytesMut,
}

/// Attaches the client to its pool, registers its cancel key and sends the greeting: the
/// server's parameters (as the client asked for them), BackendKeyData and ReadyForQuery.
async fn greet(
    stream: &mut ClientStream,
    shared: &Shared,
    full: &Config,
    g: Greeting<'_>,
    leftover: BytesMut,
) -> Result<Outcome, LoginError> {
    let Greeting {
        id,
        key,
        startup,
        mut out,
    } = g;
    let pool = shared.pools.get(&key);
    let Some(member) = pool.try_attach(full.client.max_user_connections) else {
        shed(shared, "too_many_user_clients");
        // PostgreSQL's answer when a role's CONNECTION LIMIT is reached.
        return Err(LoginError::Fatal {
            code: sqlstate::TOO_MANY_CONNECTIONS,
            message: format!("too many connections for role \"{}\"", key.user),
        });
    };
    let server_params = pool.startup_params().await?;
    let requested = startup::requested_params(startup);
    let mut params = ClientParams::new(server_params.clone());
    for (k, v) in requested.iter() {
        params.set(k, v);
    }
    // Tell only what a server would report; the other requested settings are applied by SET.
    for (k, v) in server_params.iter() {
        backend::parameter_status(&mut out, k, requested.get(k).unwrap_or(v));
    }
    let peer = crate::cancel::own_peer_id(full, shared.hostname.as_deref());
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
        id,
        key: cancel_key,
        pool,
        member,
        params,
        cancel,
        leftover,
    }))
}
