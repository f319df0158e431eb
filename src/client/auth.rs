//! Client authentication during startup: trust, md5, or SCRAM-SHA-256 against the credentials
//! from the users file, the passwords directory or auth_query (protocol docs, "Start-up" and
//! "SASL Authentication"). Runs before any pool is touched, so a wrong password opens and uses
//! no server connection. Unknown users go through the same exchange as known ones and fail
//! at the same step with the same error, so names cannot be probed.

use std::sync::Arc;

use bytes::BytesMut;
use rand::Rng;

use super::error::ClientError;
use super::io::read_chunk;
use crate::auth::{self, Credential, Exchange, ScramError, Verifier};
use crate::config::{AuthMethod, Config};
use crate::net::ClientStream;
use crate::protocol::backend::{self, AuthRequest};
use crate::protocol::{frame, frontend, scram, sqlstate, Frame};
use crate::server::ServerTarget;
use crate::shared::Shared;

/// Largest password message accepted (SCRAM messages are about 100 bytes).
const MAX_AUTH_MESSAGE: usize = scram::MAX_MESSAGE + 64;

/// Authenticates `user` as `auth.method` (or the user's entry in `auth.user_methods`) says. `out` holds what must precede the first
/// request (NegotiateProtocolVersion) and, on success, ends with what follows the exchange
/// (SASLFinal): the caller appends AuthenticationOk and sends it.
pub(super) async fn authenticate(
    stream: &mut ClientStream,
    buf: &mut BytesMut,
    shared: &Arc<Shared>,
    user: &str,
    database: &str,
    out: &mut BytesMut,
) -> Result<(), ClientError> {
    let cfg = shared.config.load();
    let method = cfg.auth_method_for(user);
    if method == AuthMethod::Trust {
        return Ok(());
    }
    let cred = credential(shared, &cfg, user, database).await?;
    let mut ex = Exchanger { stream, buf, out };
    let md5 = cred.as_ref().and_then(|c| c.md5_hash(user));
    let passed = match (method, &cred) {
        (AuthMethod::Md5, None) | (AuthMethod::Md5, Some(Credential::Md5(_))) => {
            ex.md5(md5).await?
        }
        (AuthMethod::Md5, Some(Credential::Plain { .. })) => ex.md5(md5).await?,
        (_, Some(Credential::Md5(_))) => {
            tracing::warn!(
                user,
                "user is stored with an md5 hash, which cannot answer SCRAM; \
                 store a SCRAM verifier or the password, or set auth.method md5"
            );
            ex.scram(None).await?
        }
        (_, c) => {
            ex.scram(c.as_ref().and_then(Credential::verifier).cloned())
                .await?
        }
    };
    let result = if passed { "ok" } else { "failed" };
    shared
        .metrics
        .clients
        .auth
        .with_label_values(&[method.as_str(), result])
        .inc();
    if passed {
        return Ok(());
    }
    tracing::info!(user, "client authentication failed");
    Err(ClientError::Fatal {
        code: sqlstate::INVALID_PASSWORD,
        message: format!("password authentication failed for user \"{user}\""),
    })
}

/// The user's credential from the files, else (if configured) from auth_query.
async fn credential(
    shared: &Arc<Shared>,
    cfg: &Config,
    user: &str,
    database: &str,
) -> Result<Option<Credential>, ClientError> {
    if let Some(c) = shared.auth.users().get(user) {
        return Ok(Some(c.clone()));
    }
    let a = &cfg.auth;
    let Some(auth_user) = &a.auth_user else {
        return Ok(None);
    };
    let database = a.auth_database.as_deref().unwrap_or(database);
    let lookups = &shared.metrics.clients.auth_lookups;
    if let Some(hit) = shared.auth.cache.get(database, user, a.auth_cache_ttl) {
        lookups.with_label_values(&["cached"]).inc();
        return Ok(hit);
    }
    let target = ServerTarget {
        host: cfg.server.host.clone(),
        port: cfg.server.port,
        user: auth_user.clone(),
        database: database.to_owned(),
        password: a.auth_password.clone(),
        connect_timeout: cfg.server.connect_timeout,
        tls: shared.tls.clone(),
    };
    match auth::query::lookup(&target, &a.auth_query, user).await {
        Ok(stored) => {
            let result = if stored.is_some() { "found" } else { "missing" };
            lookups.with_label_values(&[result]).inc();
            let cred = stored.as_deref().map(Credential::from_stored);
            shared
                .auth
                .cache
                .put(database, user, cred.clone(), a.auth_cache_ttl);
            Ok(cred)
        }
        Err(e) => {
            lookups.with_label_values(&["error"]).inc();
            tracing::warn!(error = %e, "auth_query lookup failed");
            Err(ClientError::Fatal {
                code: sqlstate::CANNOT_CONNECT_NOW,
                message: "droid-pool cannot look up the user right now (auth_query failed)".into(),
            })
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
    async fn request(&mut self, req: AuthRequest<'_>) -> Result<Frame, ClientError> {
        backend::auth_request(self.out, &req);
        self.stream.send(self.out).await?;
        self.out.clear();
        loop {
            let cut = frame::cut(self.buf, MAX_AUTH_MESSAGE)
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            if let Some(f) = cut {
                if f.tag != frontend::PASSWORD_TAG {
                    return Err(ClientError::Protocol(format!(
                        "expected a password response, got message type '{}'",
                        (f.tag as char).escape_default()
                    )));
                }
                return Ok(f);
            }
            if read_chunk(self.stream, self.buf, 1024).await? == 0 {
                return Err(ClientError::Gone);
            }
        }
    }

    /// An md5 challenge; `stored` is `md5...` or `None` for an unknown user.
    async fn md5(&mut self, stored: Option<String>) -> Result<bool, ClientError> {
        let salt: [u8; 4] = rand::thread_rng().gen();
        let f = self.request(AuthRequest::Md5 { salt }).await?;
        let sent = frontend::parse_password(f.body()).map_err(protocol)?;
        Ok(stored.is_some_and(|s| auth::md5_matches(&s, salt, sent)))
    }

    /// A SCRAM-SHA-256 exchange; `None` runs it against a verifier nobody can pass.
    async fn scram(&mut self, verifier: Option<Verifier>) -> Result<bool, ClientError> {
        let known = verifier.is_some();
        let mechanisms = vec![scram::MECHANISM];
        let f = self.request(AuthRequest::Sasl { mechanisms }).await?;
        let (mechanism, data) = frontend::parse_sasl_initial(f.body()).map_err(protocol)?;
        if mechanism != scram::MECHANISM {
            return Err(ClientError::Protocol(
                "client selected an invalid SASL authentication mechanism".into(),
            ));
        }
        let data = data.ok_or_else(|| protocol("SCRAM initial response missing"))?;
        let (ex, server_first) =
            Exchange::start(verifier.unwrap_or_else(Verifier::mock), data).map_err(scram_error)?;
        let data = server_first.as_bytes();
        let f = self.request(AuthRequest::SaslContinue { data }).await?;
        match ex.finish(f.body()) {
            Ok(server_final) if known => {
                let data = server_final.as_bytes();
                backend::auth_request(self.out, &AuthRequest::SaslFinal { data });
                Ok(true)
            }
            Ok(_) | Err(ScramError::WrongProof) => Ok(false),
            Err(e) => Err(scram_error(e)),
        }
    }
}

fn protocol(e: impl std::fmt::Display) -> ClientError {
    ClientError::Protocol(format!("invalid password message: {e}"))
}

fn scram_error(e: ScramError) -> ClientError {
    ClientError::Protocol(e.to_string())
}
