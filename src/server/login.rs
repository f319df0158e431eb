//! Server login: TCP connect, TLS as `tls.server.sslmode` says, StartupMessage, authentication (trust, cleartext, md5,
//! SCRAM-SHA-256), then ParameterStatus and BackendKeyData up to the first ReadyForQuery.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use postgres_protocol::authentication::{md5_hash, sasl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::SslMode;
use crate::net::{MaybeTls, ServerStream, TlsCell};

use super::credential::{ServerSecret, TargetSecret};
use super::scram::KeyedClient;
use super::{ServerConn, ServerError, ServerState};

use crate::protocol::backend::{self, AuthRequest};
use crate::protocol::{frame, frontend, Frame};

/// Largest message accepted from a server during login.
const LOGIN_MAX_MESSAGE: usize = 1 << 20;

/// Where and as whom to log in.
#[derive(Debug, Clone)]
pub struct ServerTarget {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub database: String,
    /// What the login proves itself with when the server asks for a password.
    pub secret: TargetSecret,
    pub connect_timeout: Duration,
    /// TLS settings in force (read at each login, so rotated files apply to new logins).
    pub tls: std::sync::Arc<TlsCell>,
    /// Send the password in cleartext when the server asks, even without TLS
    /// (`server.allow_cleartext_password`).
    pub allow_cleartext: bool,
}

/// Connects and logs in; the whole exchange is bounded by `connect_timeout`.
pub async fn login(target: &ServerTarget) -> Result<ServerConn, ServerError> {
    tokio::time::timeout(target.connect_timeout, login_inner(target))
        .await
        .map_err(|_| ServerError::Timeout)?
}

async fn login_inner(t: &ServerTarget) -> Result<ServerConn, ServerError> {
    let addr_text = format!("{}:{}", t.host, t.port);
    let stream = TcpStream::connect(&addr_text)
        .await
        .map_err(|source| ServerError::Connect {
            addr: addr_text.clone(),
            source,
        })?;
    stream.set_nodelay(true)?;
    set_liveness_options(&stream);
    let addr = stream.peer_addr()?;
    let stream = negotiate_tls(stream, t).await?;
    let mut conn = ServerConn {
        stream,
        state: ServerState::new(),
        key: (0, 0),
        addr,
        created: Instant::now(),
        last_used: Instant::now(),
        expires: None,
        slots: Default::default(),
        generation: Default::default(),
        check_due: false,
        fit_epoch: 0,
    };
    let mut out = BytesMut::new();
    frontend::startup_message(&mut out, &[("user", &t.user), ("database", &t.database)]);
    conn.stream.send(&out).await?;
    authenticate(&mut conn, t).await?;
    loop {
        let f = read_frame(&mut conn).await?;
        match f.tag {
            backend::PARAMETER_STATUS_TAG => {
                let (k, v) = backend::parse_parameter_status(f.body())?;
                conn.set_param(k, v);
            }
            backend::BACKEND_KEY_DATA_TAG => {
                conn.key = backend::parse_backend_key(f.body())?;
                conn.state.pid = conn.key.0;
            }
            backend::READY_FOR_QUERY_TAG => {
                conn.state.note_login();
                return Ok(conn);
            }
            backend::ERROR_RESPONSE_TAG => {
                return Err(ServerError::Rejected(backend::parse_error(f.body())?))
            }
            backend::NOTICE_RESPONSE_TAG | backend::NEGOTIATE_PROTOCOL_VERSION_TAG => {}
            t => {
                return Err(ServerError::Protocol(format!(
                    "unexpected message '{}' at login",
                    t as char
                )))
            }
        }
    }
}

/// A SCRAM exchange in progress: with the password, or with a learnt ClientKey.
enum Sasl<'a> {
    Password(Box<sasl::ScramSha256>),
    Keys(KeyedClient<'a>),
}

async fn authenticate(conn: &mut ServerConn, t: &ServerTarget) -> Result<(), ServerError> {
    let secret = secret(t);
    let mut scram: Option<Sasl<'_>> = None;
    // A SCRAM exchange, once started, must end with the server's signature checked: a server
    // that answers AuthenticationOk without proving it knows the password is not trusted.
    let mut sasl_started = false;
    let mut sasl_verified = false;
    loop {
        let f = read_frame(conn).await?;
        match f.tag {
            backend::AUTHENTICATION_TAG => {}
            backend::ERROR_RESPONSE_TAG => {
                return Err(ServerError::Rejected(backend::parse_error(f.body())?))
            }
            backend::NEGOTIATE_PROTOCOL_VERSION_TAG | backend::NOTICE_RESPONSE_TAG => continue,
            t => {
                return Err(ServerError::Protocol(format!(
                    "unexpected message '{}' in authentication",
                    t as char
                )))
            }
        }
        let mut out = BytesMut::new();
        match backend::parse_auth(f.body())? {
            AuthRequest::Ok if sasl_started && !sasl_verified => {
                return Err(ServerError::NoServerSignature)
            }
            AuthRequest::Ok => return Ok(()),
            AuthRequest::Cleartext if !conn.stream.is_tls() && !t.allow_cleartext => {
                return Err(ServerError::CleartextRefused)
            }
            AuthRequest::Cleartext => frontend::password(&mut out, password(t, &secret)?),
            AuthRequest::Md5 { salt } => {
                let hash = md5_hash(t.user.as_bytes(), password(t, &secret)?, salt);
                frontend::password(&mut out, hash.as_bytes());
            }
            AuthRequest::Sasl { mechanisms } => {
                if !mechanisms.contains(&sasl::SCRAM_SHA_256) {
                    return Err(ServerError::UnsupportedAuth(mechanisms.join(",")));
                }
                let (s, first) = match &secret {
                    Some(ServerSecret::Scram(keys)) => {
                        let (c, first) = KeyedClient::start(keys);
                        (Sasl::Keys(c), first.into_bytes())
                    }
                    _ => {
                        let s = sasl::ScramSha256::new(
                            password(t, &secret)?,
                            sasl::ChannelBinding::unsupported(),
                        );
                        let first = s.message().to_vec();
                        (Sasl::Password(Box::new(s)), first)
                    }
                };
                frontend::sasl_initial_response(&mut out, sasl::SCRAM_SHA_256, &first);
                scram = Some(s);
                sasl_started = true;
            }
            AuthRequest::SaslContinue { data } => {
                match scram
                    .as_mut()
                    .ok_or_else(|| protocol("SASLContinue before SASL"))?
                {
                    Sasl::Password(s) => {
                        s.update(data).map_err(ServerError::Scram)?;
                        frontend::sasl_response(&mut out, s.message());
                    }
                    Sasl::Keys(c) => frontend::sasl_response(&mut out, c.update(data)?.as_bytes()),
                }
            }
            AuthRequest::SaslFinal { data } => {
                match scram
                    .take()
                    .ok_or_else(|| protocol("SASLFinal before SASL"))?
                {
                    Sasl::Password(mut s) => s.finish(data).map_err(ServerError::Scram)?,
                    Sasl::Keys(c) => c.finish(data)?,
                }
                sasl_verified = true;
                continue;
            }
            AuthRequest::Other(n) => {
                return Err(ServerError::UnsupportedAuth(format!("method {n}")))
            }
        }
        conn.stream.send(&out).await?;
    }
}

/// SSLRequest and the TLS handshake, as libpq's sslmode says (protocol docs, "SSL Session
/// Encryption"). The server answers with one byte; anything it sent after that byte before the
/// handshake would be unauthenticated, so it is refused (CVE-2021-23222).
async fn negotiate_tls(mut tcp: TcpStream, t: &ServerTarget) -> Result<ServerStream, ServerError> {
    let tls = t.tls.current();
    let Some(config) = tls.connector.filter(|_| tls.sslmode != SslMode::Disable) else {
        return Ok(MaybeTls::Plain(tcp));
    };
    let mut req = BytesMut::new();
    frontend::ssl_request(&mut req);
    tcp.write_all(&req).await?;
    let mut answer = [0u8; 1];
    if tcp.read(&mut answer).await? == 0 {
        return Err(ServerError::Closed);
    }
    match answer[0] {
        b'S' => {}
        b'N' if tls.sslmode == SslMode::Prefer => return Ok(MaybeTls::Plain(tcp)),
        b'N' => {
            return Err(ServerError::Tls(format!(
                "the server does not accept TLS (tls.server.sslmode {})",
                tls.sslmode.as_str()
            )))
        }
        _ => return Err(protocol("unexpected answer to SSLRequest")),
    }
    let mut probe = [0u8; 1];
    if !matches!(tcp.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
        return Err(protocol("data after the SSLRequest answer"));
    }
    let name = rustls::pki_types::ServerName::try_from(t.host.clone())
        .map_err(|_| ServerError::Tls(format!("{:?} is not a valid TLS server name", t.host)))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| {
            // A TLS-level refusal (certificate, protocol) will not go away by retrying; a
            // connection reset mid-handshake might.
            if e.get_ref().is_some_and(|i| i.is::<rustls::Error>()) {
                ServerError::TlsHandshake(e)
            } else {
                ServerError::Io(e)
            }
        })?;
    Ok(MaybeTls::Tls(Box::new(stream)))
}

/// Keepalives and TCP_USER_TIMEOUT, so a black-holed network is noticed in seconds rather
/// than on TCP's retransmission timers (minutes).
fn set_liveness_options(stream: &TcpStream) {
    let sock = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    if let Err(e) = sock
        .set_tcp_keepalive(&keepalive)
        .and_then(|_| sock.set_tcp_user_timeout(Some(Duration::from_secs(15))))
    {
        tracing::debug!(error = %e, "cannot set keepalive options on a server socket");
    }
}

/// The credential this login uses: the configured one, or the user's learnt one.
fn secret(t: &ServerTarget) -> Option<ServerSecret> {
    match &t.secret {
        TargetSecret::Configured(p) => p.get().map(ServerSecret::Password),
        TargetSecret::Learned(learned) => learned.get(&t.user),
    }
}

/// The password, for a server that asks for it (or an md5 hash of it).
fn password<'s>(
    t: &ServerTarget,
    secret: &'s Option<ServerSecret>,
) -> Result<&'s [u8], ServerError> {
    match (secret, &t.secret) {
        (Some(ServerSecret::Password(p)), _) => Ok(p.expose().as_bytes()),
        (Some(ServerSecret::Scram(_)), _) => Err(ServerError::PassthroughNeedsScram {
            user: t.user.clone(),
        }),
        (None, TargetSecret::Learned(_)) => Err(ServerError::NoPassthrough {
            user: t.user.clone(),
        }),
        (None, TargetSecret::Configured(_)) => Err(ServerError::NoPassword),
    }
}

fn protocol(msg: &str) -> ServerError {
    ServerError::Protocol(msg.to_owned())
}

/// Reads one whole message from the server into its buffer.
pub(crate) async fn read_frame(conn: &mut ServerConn) -> Result<Frame, ServerError> {
    loop {
        if let Some(f) = frame::cut(&mut conn.rbuf, LOGIN_MAX_MESSAGE)? {
            return Ok(f);
        }
        if conn.stream.read_buf(&mut conn.state.rbuf).await? == 0 {
            return Err(ServerError::Closed);
        }
    }
}
