//! Client authentication during startup: trust, md5, or SCRAM-SHA-256 against the credentials
//! from the users file, the passwords directory or auth_query (protocol docs, "Start-up" and
//! "SASL Authentication"). Runs before any pool is touched, so a wrong password opens and uses
//! no server connection. Unknown users go through the same exchange as known ones and fail
//! at the same step with the same error, so names cannot be probed.

use std::sync::Arc;

use bytes::BytesMut;
use rand::Rng;

use super::error::LoginError;
use crate::auth::{self, Credential, Exchange, ScramError, Verifier};
use crate::config::{AuthMethod, Config};
use crate::logs::Escaped;
use crate::net::read::read_chunk;
use crate::net::ClientStream;
use crate::protocol::backend::{self, AuthRequest};
use crate::protocol::{frame, frontend, scram, sqlstate, Frame};
use crate::server::{ScramKeys, ServerSecret};
use crate::shared::Shared;

/// Largest password message accepted (SCRAM messages are about 100 bytes).
const MAX_AUTH_MESSAGE: usize = scram::MAX_MESSAGE + 64;

/// Authenticates `user` as `auth.method` (or the user's entry in `auth.user_methods`) says. `out` holds what must precede the first
/// request (NegotiateProtocolVersion) and, on success, ends with what follows the exchange
/// (SASLFinal): the caller appends AuthenticationOk and sends it. Returns what the login
/// gives server logins as this user (SCRAM passthrough): the stored plaintext password, or the
/// keys a SCRAM proof against a stored verifier gave.
pub(super) async fn authenticate(
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    shared: &Arc<Shared>,
    user: &str,
    out: &mut BytesMut,
) -> Result<Option<ServerSecret>, LoginError> {
    let cfg = shared.config.load();
    let method = cfg.auth_method_for(user);
    if method == AuthMethod::Trust {
        // A plaintext password in the files serves server logins without any proof.
        let users = shared.auth.users();
        return Ok(users.get(user).and_then(|c| c.server_secret(None)));
    }
    let cred = credential(shared, &cfg, user).await?;
    // What this user's server logins learnt from an older credential goes with it.
    shared
        .pools
        .learned()
        .forget_unless(user, |s| cred.as_ref().is_some_and(|c| c.agrees_with(s)));
    let users = shared.auth.users();
    let mock = || users.mock_verifier(user);
    let mut ex = Exchanger { stream, buf, out };
    let md5 = cred.as_ref().and_then(|c| c.md5_hash(user));
    // The method follows the stored credential, never whether the user exists: in md5 mode an
    // unknown name gets md5 or SCRAM in the proportion known users do (fixed per name), so
    // neither the first challenge nor its salt tells it from a real user. `proved`: `None`
    // if the proof failed, else the SCRAM keys it gave, if any.
    let proved = match (method, &cred) {
        (AuthMethod::Md5, Some(Credential::Md5(_) | Credential::Plain { .. })) => {
            ex.md5(md5).await?.then_some(None)
        }
        (AuthMethod::Md5, None) if !users.unknown_gets_scram_in_md5_mode(user) => {
            ex.md5(None).await?;
            None
        }
        (_, Some(Credential::Md5(_))) => {
            tracing::warn!(
                user = %Escaped::name(user),
                "user is stored with an md5 hash, which cannot answer SCRAM; \
                 store a SCRAM verifier or the password, or set auth.method md5"
            );
            ex.scram(mock()).await?;
            None
        }
        (_, c) => match c.as_ref().and_then(Credential::verifier) {
            Some(v) => ex.scram(v.clone()).await?.map(Some),
            None => {
                ex.scram(mock()).await?;
                None
            }
        },
    };
    let result = if proved.is_some() { "ok" } else { "failed" };
    shared
        .metrics
        .clients
        .auth
        .with_label_values(&[method.as_str(), result])
        .inc();
    if let Some(keys) = proved {
        return Ok(cred.and_then(|c| c.server_secret(keys)));
    }
    // Logged with every refused login, at a bounded rate (`crate::client`).
    Err(LoginError::Fatal {
        code: sqlstate::INVALID_PASSWORD,
        message: format!("password authentication failed for user \"{user}\""),
    })
}

/// The user's credential from the files, else (if configured) from auth_query, looked up on
/// the lookup pool: its size bounds the server connections lookups open, whatever names and
/// databases clients make up, and its login limits, retry budget and breaker apply.
async fn credential(
    shared: &Arc<Shared>,
    cfg: &Config,
    user: &str,
) -> Result<Option<Credential>, LoginError> {
    if let Some(c) = shared.auth.users().get(user) {
        return Ok(Some(c.clone()));
    }
    let a = &cfg.auth;
    if a.auth_user.is_none() {
        return Ok(None);
    }
    let lookups = &shared.metrics.clients.auth_lookups;
    if user.len() > auth::query::MAX_NAME {
        // No role has a name this long: nothing to look up.
        lookups.with_label_values(&["missing"]).inc();
        return Ok(None);
    }
    let database = &a.auth_database;
    let cache = &shared.auth.cache;
    // One TTL for both answers unless configured otherwise: a shorter one for misses would
    // tell a prober which names exist by which answer is still cached.
    let missing_ttl = a.auth_negative_cache_ttl.unwrap_or(a.auth_cache_ttl);
    if let Some(hit) = cache.get(database, user, a.auth_cache_ttl, missing_ttl) {
        lookups.with_label_values(&["cached"]).inc();
        return Ok(hit);
    }
    let unavailable = || LoginError::Fatal {
        code: sqlstate::CANNOT_CONNECT_NOW,
        message: "droid-pool cannot look up the user right now (auth_query failed)".into(),
    };
    let Some(pool) = shared.pools.lookup_pool(cfg) else {
        return Ok(None);
    };
    let mut conn = match pool.checkout().await {
        Ok(c) => c,
        Err(e) => {
            lookups.with_label_values(&["error"]).inc();
            tracing::warn!(error = %Escaped::new(&e), "auth_query lookup: no lookup connection");
            return Err(unavailable());
        }
    };
    match auth::query::lookup(&mut conn, &a.auth_query, user).await {
        Ok(stored) => {
            pool.checkin(conn);
            let result = if stored.is_some() { "found" } else { "missing" };
            lookups.with_label_values(&[result]).inc();
            let users = shared.auth.users();
            let cred = stored.as_deref().map(|s| users.credential(user, s));
            cache.put(database, user, cred.clone(), a.auth_cache_size);
            Ok(cred)
        }
        Err(e) => {
            pool.discard(conn, crate::pool::CloseReason::Broken);
            lookups.with_label_values(&["error"]).inc();
            tracing::warn!(error = %Escaped::new(&e), "auth_query lookup failed");
            Err(unavailable())
        }
    }
}

/// The message exchange of one authentication.
struct Exchanger<'a> {
    stream: &'a mut ClientStream,
    buf: &'a mut BytesMut,
    out: &'a mut BytesMut,
}

impl Exchanger<'_> {
    async fn request(&mut self, req: AuthRequest<'_>) -> Result<Frame, LoginError> {
        backend::auth_request(self.out, &req);
        self.stream.send(self.out).await?;
        self.out.clear();
        loop {
            let cut = frame::cut(self.buf, MAX_AUTH_MESSAGE)?;
            if let Some(f) = cut {
                if f.tag != frontend::PASSWORD_TAG {
                    return Err(LoginError::NotPassword(f.tag));
                }
                return Ok(f);
            }
            if read_chunk(self.stream, self.buf, 1024).await? == 0 {
                return Err(LoginError::Gone);
            }
        }
    }

    /// An md5 challenge; `stored` is `md5...` or `None` for an unknown user.
    async fn md5(&mut self, stored: Option<String>) -> Result<bool, LoginError> {
        let salt: [u8; 4] = rand::thread_rng().gen();
        let f = self.request(AuthRequest::Md5 { salt }).await?;
        let sent = frontend::parse_password(f.body()).map_err(LoginError::PasswordMessage)?;
        Ok(stored.is_some_and(|s| auth::md5_matches(&s, salt, sent)))
    }

    /// A SCRAM-SHA-256 exchange against `verifier` (for an unknown user, a mock one nobody
    /// can pass); if the client's proof was right, the keys it gave.
    async fn scram(&mut self, verifier: Verifier) -> Result<Option<ScramKeys>, LoginError> {
        let mechanisms = vec![scram::MECHANISM];
        let f = self.request(AuthRequest::Sasl { mechanisms }).await?;
        let (mechanism, data) =
            frontend::parse_sasl_initial(f.body()).map_err(LoginError::PasswordMessage)?;
        if mechanism != scram::MECHANISM {
            return Err(LoginError::Protocol(
                "client selected an invalid SASL authentication mechanism",
            ));
        }
        let data = data.ok_or(LoginError::Protocol(
            "invalid password message: SCRAM initial response missing",
        ))?;
        let (ex, server_first) = Exchange::start(verifier, data)?;
        let data = server_first.as_bytes();
        let f = self.request(AuthRequest::SaslContinue { data }).await?;
        match ex.finish(f.body()) {
            Ok((server_final, keys)) => {
                let data = server_final.as_bytes();
                backend::auth_request(self.out, &AuthRequest::SaslFinal { data });
                Ok(Some(keys))
            }
            Err(ScramError::WrongProof) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
