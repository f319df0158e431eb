//! Shared harness for the real-PostgreSQL integration tests.
//!
//! - [`pg`]: throwaway PostgreSQL servers ([`PgServer::shared`] for the one
//!   per-process instance, [`PgServer::start_new`] for a private one).
//! - [`pooler`]: runs the built `droid-pool` binary against such a server.
//!
//! Not every test uses every helper, hence the blanket allows.
#![allow(dead_code, unused_imports)]

pub mod metrics;
pub mod pg;
pub mod pooler;
pub mod raw;
pub mod rss;
pub mod skim;
pub mod tls;
pub mod tools;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::Path;

pub use pg::{bin, shared, shared_pair, Pair, PgServer};
pub use pooler::Pooler;

/// Database created by the harness (owned by role `droid`).
pub const DB: &str = "droid";

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read
/// it, release it). Racy by nature; starters retry on "address in use".
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// tokio-postgres connection string for 127.0.0.1.
pub fn conn_string(port: u16, user: &str, db: &str) -> String {
    format!("host=127.0.0.1 port={port} user={user} dbname={db}")
}

/// Same, with a password.
pub fn conn_string_pw(port: u16, user: &str, password: &str, db: &str) -> String {
    format!("host=127.0.0.1 port={port} user={user} password={password} dbname={db}")
}

/// Connects without TLS and spawns the connection task on the current tokio
/// runtime. Errors of the background connection task are dropped; they show
/// up as errors of the client's calls.
pub async fn try_connect(conn: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// [`try_connect`], panicking with the connection string on failure.
pub async fn connect(conn: &str) -> tokio_postgres::Client {
    match try_connect(conn).await {
        Ok(client) => client,
        Err(e) => panic!("connect `{conn}`: {e}"),
    }
}

/// The last `max_lines` lines of a (text) file, or a note that it can't be read.
pub fn tail_file(path: &Path, max_lines: usize) -> String {
    const MAX_BYTES: u64 = 64 * 1024;
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("<cannot open {}: {e}>", path.display()),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_BYTES {
        let _ = file.seek(SeekFrom::Start(len - MAX_BYTES));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        return format!("<cannot read {}: {e}>", path.display());
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(max_lines);
    lines[start..].join("\n")
}
