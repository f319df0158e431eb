//! A raw protocol client for tests that drive the pooler message by message.

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::backend;
use droid_pool::protocol::frame::{self, begin, finish, Frame};
use droid_pool::protocol::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const RECV_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    /// The BackendKeyData of the login (process id, secret), once logged in.
    pub key: Option<(i32, i32)>,
}

fn cstr(b: &mut BytesMut, s: &[u8]) {
    b.put_slice(s);
    b.put_u8(0);
}

/// Parse(name, sql) with no declared parameter types.
pub fn parse(name: &str, sql: &str) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::PARSE_TAG);
    cstr(&mut b, name.as_bytes());
    cstr(&mut b, sql.as_bytes());
    b.put_i16(0);
    finish(&mut b, at);
    b
}

/// Bind(portal, statement) with text parameters and text results.
pub fn bind(portal: &str, stmt: &str, params: &[Option<&str>]) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::BIND_TAG);
    cstr(&mut b, portal.as_bytes());
    cstr(&mut b, stmt.as_bytes());
    b.put_i16(0);
    b.put_i16(params.len() as i16);
    for p in params {
        match p {
            Some(v) => {
                b.put_i32(v.len() as i32);
                b.put_slice(v.as_bytes());
            }
            None => b.put_i32(-1),
        }
    }
    b.put_i16(0);
    finish(&mut b, at);
    b
}

pub fn describe(kind: u8, name: &str) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::DESCRIBE_TAG);
    b.put_u8(kind);
    cstr(&mut b, name.as_bytes());
    finish(&mut b, at);
    b
}

pub fn execute(portal: &str) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::EXECUTE_TAG);
    cstr(&mut b, portal.as_bytes());
    b.put_i32(0);
    finish(&mut b, at);
    b
}

pub fn close(kind: u8, name: &str) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::CLOSE_TAG);
    b.put_u8(kind);
    cstr(&mut b, name.as_bytes());
    finish(&mut b, at);
    b
}

pub fn sync() -> BytesMut {
    let mut b = BytesMut::new();
    frontend::sync(&mut b);
    b
}

pub fn flush() -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::FLUSH_TAG);
    finish(&mut b, at);
    b
}

pub fn query(sql: &str) -> BytesMut {
    let mut b = BytesMut::new();
    frontend::query(&mut b, sql);
    b
}

/// Concatenates messages into one write (a pipeline).
pub fn batch(msgs: &[BytesMut]) -> Vec<u8> {
    msgs.iter().flat_map(|m| m.iter().copied()).collect()
}

/// The tags of frames, as a string ("12DCZ").
pub fn tags(frames: &[Frame]) -> String {
    frames.iter().map(|f| f.tag as char).collect()
}

/// SQLSTATE of an ErrorResponse frame.
pub fn sqlstate(f: &Frame) -> String {
    backend::parse_error(f.body()).expect("error fields").code
}

/// First column of a DataRow, as text.
pub fn first_col(f: &Frame) -> Option<String> {
    let body = f.body();
    let n = i32::from_be_bytes([body[2], body[3], body[4], body[5]]);
    if n < 0 {
        return None;
    }
    Some(String::from_utf8_lossy(&body[6..6 + n as usize]).into_owned())
}

impl Raw {
    /// Opens a connection and sends nothing yet.
    pub async fn open(port: u16) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to pooler");
        Raw::from_stream(stream)
    }

    /// A raw client over a connection made elsewhere (from another source address, say).
    pub fn from_stream(stream: TcpStream) -> Raw {
        Raw {
            stream,
            buf: BytesMut::new(),
            key: None,
        }
    }

    /// Opens and logs in (trust) with a 3.0 startup as `user` to `db`; returns the login's
    /// messages too, which must start with AuthenticationOk.
    pub async fn logged_in(port: u16, user: &str, db: &str) -> (Raw, Vec<Frame>) {
        let (raw, frames) = Raw::login(port, &[("user", user), ("database", db)]).await;
        assert_eq!(
            tags(&frames[..1]),
            "R",
            "login should start with AuthenticationOk: {}",
            tags(&frames)
        );
        (raw, frames)
    }

    /// Connects and logs in (trust), reading up to the first ReadyForQuery.
    pub async fn connect(port: u16, user: &str, db: &str) -> Raw {
        Raw::connect_with(port, &[("user", user), ("database", db)]).await
    }

    /// As [`Raw::connect`], with the startup packet's parameters given in full.
    pub async fn connect_with(port: u16, params: &[(&str, &str)]) -> Raw {
        let (raw, login) = Raw::login(port, params).await;
        assert_eq!(
            login.first().map(|f| f.tag),
            Some(backend::AUTHENTICATION_TAG)
        );
        raw
    }

    /// As [`Raw::connect`], also returning the cancel key the pooler gave (BackendKeyData):
    /// its process id is the client's `id` in the admin console's `SHOW CLIENTS`.
    pub async fn connect_keyed(port: u16, user: &str, db: &str) -> (Raw, (i32, i32)) {
        let (raw, login) = Raw::login(port, &[("user", user), ("database", db)]).await;
        let key = login
            .iter()
            .find(|f| f.tag == backend::BACKEND_KEY_DATA_TAG)
            .map(|f| {
                let b = f.body();
                let int = |at: usize| i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                (int(0), int(4))
            })
            .expect("BackendKeyData at login");
        (raw, key)
    }

    /// Connects and logs in (trust); returns the login's messages up to ReadyForQuery.
    pub async fn connect_frames(port: u16, user: &str, db: &str) -> Vec<Frame> {
        Raw::login(port, &[("user", user), ("database", db)])
            .await
            .1
    }

    /// The login's frames for a startup packet with `params`, up to ReadyForQuery.
    pub async fn login_frames_with(port: u16, params: &[(&str, &str)]) -> Vec<Frame> {
        Raw::login(port, params).await.1
    }

    /// Connects, sends a startup packet with `params` and reads up to ReadyForQuery.
    async fn login(port: u16, params: &[(&str, &str)]) -> (Raw, Vec<Frame>) {
        let mut raw = Raw::open(port).await;
        let mut b = BytesMut::new();
        frontend::startup_message(&mut b, params);
        raw.send(&b).await;
        let login = raw.until_ready().await;
        raw.key = login
            .iter()
            .find(|f| f.tag == backend::BACKEND_KEY_DATA_TAG)
            .and_then(|f| backend::parse_backend_key(f.body()).ok());
        (raw, login)
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write to pooler");
    }

    /// The stream and whatever was read from it but not handled yet (for a test that reads
    /// and writes the connection from two tasks).
    pub fn into_parts(self) -> (TcpStream, BytesMut) {
        (self.stream, self.buf)
    }

    /// Sends, ignoring errors (the pooler may already have closed).
    pub async fn send_lossy(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// One raw byte (the answer to SSLRequest / GSSENCRequest).
    pub async fn read_byte(&mut self) -> u8 {
        if self.buf.is_empty() {
            let n = tokio::time::timeout(RECV_TIMEOUT, self.stream.read_buf(&mut self.buf))
                .await
                .expect("timed out waiting for a one-byte answer")
                .expect("read");
            assert!(n > 0, "EOF instead of a one-byte answer");
        }
        let b = self.buf[0];
        let _ = self.buf.split_to(1);
        b
    }

    /// Runs a simple query and returns its messages through ReadyForQuery.
    pub async fn query(&mut self, sql: &str) -> Vec<Frame> {
        self.send(&query(sql)).await;
        self.until_ready().await
    }

    /// Every message up to EOF; `None` if the connection is still open after `secs`.
    pub async fn until_eof(&mut self, secs: u64) -> Option<Vec<Frame>> {
        let mut out = Vec::new();
        let read_all = async {
            while let Some(f) = self.try_recv().await {
                out.push(f);
            }
        };
        tokio::time::timeout(Duration::from_secs(secs), read_all)
            .await
            .ok()?;
        Some(out)
    }

    /// The next whole message; panics after [`RECV_TIMEOUT`] or on EOF.
    pub async fn recv(&mut self) -> Frame {
        tokio::time::timeout(RECV_TIMEOUT, self.try_recv())
            .await
            .expect("timed out waiting for a message")
            .expect("connection closed while waiting for a message")
    }

    /// The next whole message, or None at EOF.
    pub async fn try_recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = frame::cut(&mut self.buf, 1 << 30).expect("valid frame") {
                return Some(f);
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Messages up to and including the next ReadyForQuery.
    pub async fn until_ready(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        loop {
            let f = self.recv().await;
            let done = f.tag == backend::READY_FOR_QUERY_TAG;
            out.push(f);
            if done {
                return out;
            }
        }
    }

    /// Whether nothing arrives within `wait` (the connection stays open and silent).
    pub async fn silent_for(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.try_recv()).await.is_err()
    }

    /// Waits for the server side to close (EOF) within the timeout, skipping messages.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, async { while self.try_recv().await.is_some() {} })
            .await
            .is_ok()
    }
}

/// Sends a CancelRequest for `key` to the pooler on `port` on a connection of its own, as
/// libpq does, and waits for the pooler to close that connection; returns how long that took.
pub async fn cancel_and_wait(port: u16, key: (i32, i32)) -> Duration {
    let started = std::time::Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to pooler");
    let mut b = BytesMut::new();
    frontend::cancel_request(&mut b, key.0, key.1);
    s.write_all(&b).await.expect("send the cancel request");
    let mut sink = [0u8; 64];
    tokio::time::timeout(RECV_TIMEOUT, async {
        while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await
    .expect("the pooler closes a cancel connection");
    started.elapsed()
}
