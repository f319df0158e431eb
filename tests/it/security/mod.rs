//! Client authentication, TLS on both sides and hardening, through the real binary against
//! the harness PostgreSQL (roles and passwords: see `support::pg`).

mod admin_plane;
mod admission;
mod auth;
mod auth_query;
mod badinput;
mod hygiene;
mod leaks;
mod liveness;
mod logs;
mod passthrough;
mod probing;
mod reload;
mod server_login;
mod server_tls;
mod tls;

use std::path::Path;

use crate::support::Pooler;

/// Starts a pooler that must refuse to start (exiting non-zero); returns its stderr.
pub fn refused_at_startup(yaml: &str, args: &[&str]) -> String {
    let pooler = Pooler::spawn_with_config(crate::support::shared(), yaml, args);
    let status = pooler
        .wait_exit(std::time::Duration::from_secs(10))
        .expect("the pooler must refuse to start");
    assert!(!status.success(), "exit {status}");
    pooler.stderr()
}

/// A userlist.txt line for `user`.
pub fn userlist_line(user: &str, stored: &str) -> String {
    format!("\"{user}\" \"{stored}\"\n")
}

/// Writes `text` to `dir/name` and returns the path as a string for YAML.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p.display().to_string()
}

/// The pools `/status` reports, with their server counts.
pub fn status(pooler: &Pooler) -> serde_json::Value {
    let (code, body) = pooler.admin_get("/status");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("status is JSON")
}

/// Connects with `conn`, which must fail; returns the error.
pub async fn refused(conn: &str, why: &str) -> tokio_postgres::Error {
    match crate::support::try_connect(conn).await {
        Ok(_) => panic!("{why}: `{conn}` was accepted"),
        Err(e) => e,
    }
}
