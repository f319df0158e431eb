//! The SQL admin console: `psql -d droidpool` (or `pgbouncer`) as a configured console user.
//! Simple query protocol only; PgBouncer's column names where the concept is the same.

use std::sync::Arc;
use std::time::Duration;

use crate::net::ClientStream;
use bytes::{BufMut, BytesMut};

use super::command::Command;
use super::console_show as show;
use super::error::{error_fields, ClientError};
use super::io::read_some;
use crate::protocol::frame::{self, begin, finish};
use crate::protocol::{backend, frontend, sqlstate};
use crate::shared::Shared;

/// The database names that reach the console.
pub fn is_console_database(db: &str) -> bool {
    db == "droidpool" || db == "pgbouncer"
}

/// Serves a console session after a successful console login.
pub(super) async fn serve(
    stream: &mut ClientStream,
    shared: &Arc<Shared>,
    mut buf: BytesMut,
    mut out: BytesMut,
) -> Result<(), ClientError> {
    backend::auth_ok(&mut out);
    for (k, v) in [
        (
            "server_version",
            concat!("15.0 (droid-pool ", env!("CARGO_PKG_VERSION"), ")"),
        ),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        backend::parameter_status(&mut out, k, v);
    }
    backend::backend_key_data(&mut out, 0, 0);
    backend::ready_for_query(&mut out, backend::TX_IDLE);
    stream.send(&out).await?;
    loop {
        let Some(f) =
            frame::cut(&mut buf, 1 << 20).map_err(|e| ClientError::Protocol(e.to_string()))?
        else {
            if read_some(stream, &mut buf).await? == 0 {
                return Ok(());
            }
            continue;
        };
        let mut out = BytesMut::new();
        match f.tag {
            frontend::TERMINATE_TAG => return Ok(()),
            frontend::QUERY_TAG => {
                let sql = frontend::query_text(&f.bytes).unwrap_or_default();
                run(shared, &String::from_utf8_lossy(sql), &mut out).await;
                backend::ready_for_query(&mut out, backend::TX_IDLE);
            }
            frontend::SYNC_TAG => backend::ready_for_query(&mut out, backend::TX_IDLE),
            _ => {
                let e = error_fields(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "the admin console speaks the simple query protocol only".into(),
                );
                backend::error_response(&mut out, &e);
            }
        }
        stream.send(&out).await?;
    }
}

async fn run(shared: &Arc<Shared>, sql: &str, out: &mut BytesMut) {
    match execute(shared, sql, "console").await {
        Answer::Table(cols, rows) => {
            table(out, cols, &rows);
            complete(out, "SHOW");
        }
        Answer::Done(tag) => complete(out, tag),
        Answer::Error(code, message) => {
            backend::error_response(out, &error_fields(code, message));
        }
    }
}

/// What a console command answers, for the console's protocol or the admin HTTP server.
pub enum Answer {
    Table(&'static [&'static str], Vec<Vec<String>>),
    Done(&'static str),
    Error(&'static str, String),
}

impl Answer {
    /// The answer as text: a header and tab-separated rows, the tag, or `ERROR code: ...`.
    pub fn to_text(&self) -> String {
        match self {
            Answer::Table(cols, rows) => {
                let mut out = cols.join("\t") + "\n";
                for r in rows {
                    out.push_str(&r.join("\t"));
                    out.push('\n');
                }
                out
            }
            Answer::Done(tag) => format!("{tag}\n"),
            Answer::Error(code, m) => format!("ERROR {code}: {m}\n"),
        }
    }
}

/// Runs one console command (`via`: where it came from, for the audit line).
pub async fn execute(shared: &Arc<Shared>, sql: &str, via: &str) -> Answer {
    let Some(cmd) = Command::parse(sql) else {
        return Answer::Error(
            sqlstate::SYNTAX_ERROR,
            format!("unknown console command: {sql:?} (SHOW POOLS|STATS|CLIENTS|SERVERS|CONFIG|VERSION|DATABASES|USERS|LISTS|STATE|TOTALS, PAUSE [db], RESUME [db], DISABLE db, ENABLE db, RELOAD, SHUTDOWN)"),
        );
    };
    if !matches!(cmd, Command::Show(_)) {
        // Every command that changes something is audited.
        tracing::info!(command = sql.trim(), via, "admin command");
    }
    let l = &shared.lifecycle;
    match &cmd {
        Command::Show(what) => return show(shared, what),
        Command::Pause(db) => {
            match db {
                Some(db) => l.pause_db(db),
                None => {
                    l.pause();
                    shared.metrics.lifecycle.paused.set(1);
                }
            }
            // Like PgBouncer: answer once running transactions have given their servers back.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while busy_servers(shared, db.as_deref()) > 0 && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Command::Resume(Some(db)) => l.resume_db(db),
        Command::Resume(None) => {
            l.resume();
            shared.metrics.lifecycle.paused.set(0);
        }
        Command::Disable(db) => l.set_disabled(db, true),
        Command::Enable(db) => l.set_disabled(db, false),
        Command::Reload => shared.reload.notify_one(),
        Command::Shutdown => l.begin_drain(),
    }
    Answer::Done(cmd.tag())
}

/// Servers in use (of one database's pools, or all).
fn busy_servers(shared: &Shared, db: Option<&str>) -> i64 {
    shared
        .pools
        .all()
        .iter()
        .filter(|p| db.map_or(true, |d| p.database() == d))
        .map(|p| p.snapshot().servers_active)
        .sum()
}

fn show(shared: &Arc<Shared>, what: &str) -> Answer {
    let (cols, rows): (&'static [&'static str], Vec<Vec<String>>) = match what {
        "POOLS" => (
            &[
                "database",
                "user",
                "cl_active",
                "cl_waiting",
                "sv_active",
                "sv_idle",
                "sv_used",
                "sv_login",
                "maxwait",
                "pool_mode",
                "pool_size",
                "reserve_pool",
                "sv_reserve",
                "max_db_connections",
                "db_connections",
                "max_user_connections",
                "user_connections",
            ],
            shared
                .pools
                .all()
                .iter()
                .map(|p| {
                    let s = p.snapshot();
                    vec![
                        s.database,
                        s.user,
                        s.clients_active.to_string(),
                        s.clients_waiting.to_string(),
                        s.servers_active.to_string(),
                        s.servers_idle.to_string(),
                        s.servers_used.to_string(),
                        s.servers_login.to_string(),
                        format!("{}", s.max_wait_seconds as u64),
                        s.mode.into(),
                        s.pool_size.to_string(),
                        s.reserve_size.to_string(),
                        s.servers_reserve.to_string(),
                        s.limits.max_db_connections.to_string(),
                        s.limits.db_connections.to_string(),
                        s.limits.max_user_connections.to_string(),
                        s.limits.user_connections.to_string(),
                    ]
                })
                .collect(),
        ),
        "STATS" => {
            let m = &shared.metrics.clients;
            (
                &[
                    "database",
                    "total_xact_count",
                    "total_query_count",
                    "total_received",
                    "total_sent",
                ],
                vec![vec![
                    "*".into(),
                    m.transactions.get().to_string(),
                    m.queries.get().to_string(),
                    m.bytes_in.get().to_string(),
                    m.bytes_out.get().to_string(),
                ]],
            )
        }
        "CLIENTS" => (
            &["type", "id", "database", "user", "state", "server"],
            shared
                .cancels
                .clients()
                .into_iter()
                .map(|c| {
                    let (db, user) = c.pool.split_once('/').unwrap_or((&c.pool, ""));
                    vec![
                        "C".into(),
                        c.pid.to_string(),
                        db.to_owned(),
                        user.to_owned(),
                        if c.server.is_some() { "active" } else { "idle" }.into(),
                        c.server.map(|s| s.to_string()).unwrap_or_default(),
                    ]
                })
                .collect(),
        ),
        "SERVERS" => {
            let mut rows = Vec::new();
            for c in shared.cancels.clients() {
                if let Some(s) = c.server {
                    let (db, user) = c.pool.split_once('/').unwrap_or((&c.pool, ""));
                    rows.push(vec![
                        "S".into(),
                        s.to_string(),
                        db.to_owned(),
                        user.to_owned(),
                        "active".into(),
                        c.pid.to_string(),
                    ]);
                }
            }
            for p in shared.pools.all() {
                let s = p.snapshot();
                for id in p.idle_server_ids() {
                    rows.push(vec![
                        "S".into(),
                        id.to_string(),
                        s.database.clone(),
                        s.user.clone(),
                        "idle".into(),
                        String::new(),
                    ]);
                }
            }
            (&["type", "id", "database", "user", "state", "client"], rows)
        }
        "CONFIG" => (&["key", "value"], config_rows(shared)),
        "VERSION" => (
            &["version"],
            vec![vec![format!("droid-pool {}", env!("CARGO_PKG_VERSION"))]],
        ),
        "DATABASES" => (show::DATABASES, show::databases(shared)),
        "USERS" => (show::USERS, show::users(shared)),
        "LISTS" => (show::LISTS, show::lists(shared)),
        "STATE" => (show::STATE, show::state(shared)),
        "TOTALS" => (show::TOTALS, show::totals(shared)),
        _ => {
            return Answer::Error(
                sqlstate::SYNTAX_ERROR,
                format!("unknown SHOW target {what:?}"),
            );
        }
    };
    Answer::Table(cols, rows)
}

/// Every setting as `section.key = value`, secrets redacted.
fn config_rows(shared: &Shared) -> Vec<Vec<String>> {
    let cfg = shared.config.load();
    let value = serde_yaml::to_value(&*cfg).unwrap_or_default();
    let mut rows = Vec::new();
    if let serde_yaml::Value::Mapping(sections) = value {
        for (section, body) in sections {
            let section = section.as_str().unwrap_or("").to_owned();
            if let serde_yaml::Value::Mapping(keys) = body {
                for (k, v) in keys {
                    let key = format!("{section}.{}", k.as_str().unwrap_or(""));
                    let secret = matches!(
                        key.as_str(),
                        "server.password" | "admin.token" | "auth.auth_password"
                    );
                    let text = if secret && !v.is_null() {
                        "<redacted>".to_owned()
                    } else {
                        serde_yaml::to_string(&v)
                            .unwrap_or_default()
                            .trim()
                            .to_owned()
                    };
                    rows.push(vec![key, text]);
                }
            }
        }
    }
    rows
}

fn table(out: &mut BytesMut, cols: &[&str], rows: &[Vec<String>]) {
    let at = begin(out, backend::ROW_DESCRIPTION_TAG);
    out.put_i16(cols.len() as i16);
    for c in cols {
        out.put_slice(c.as_bytes());
        out.put_u8(0);
        out.put_i32(0); // table oid
        out.put_i16(0); // column number
        out.put_i32(25); // text
        out.put_i16(-1);
        out.put_i32(-1);
        out.put_i16(0); // text format
    }
    finish(out, at);
    for row in rows {
        let at = begin(out, backend::DATA_ROW_TAG);
        out.put_i16(row.len() as i16);
        for v in row {
            out.put_i32(v.len() as i32);
            out.put_slice(v.as_bytes());
        }
        finish(out, at);
    }
}

fn complete(out: &mut BytesMut, tag: &str) {
    let at = begin(out, backend::COMMAND_COMPLETE_TAG);
    out.put_slice(tag.as_bytes());
    out.put_u8(0);
    finish(out, at);
}
