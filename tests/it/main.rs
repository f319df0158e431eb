mod admin;
mod architecture;
mod badinput;
mod builtins;
mod codec;
mod conformance;
mod console;
mod container_logs;
mod core;
mod databases;
mod differential;
mod failover;
mod faults;
mod idle_server_fatal;
mod kind_checker;
mod lex_boundaries;
mod lifecycle;
mod limits;
mod operator_budget;
mod park;
mod peers;
mod prepared;
mod relay;
mod security;
mod server_check;
mod session_listen;
mod session_random;
mod session_signal;
mod session_state;
mod session_track;
mod session_unseen;
mod support;
mod timeouts;

/// The harness itself works: a real PostgreSQL starts and answers directly.
#[tokio::test]
async fn harness_smoke() {
    let pg = support::shared();
    let client = pg.connect("droid", support::DB).await;
    let row = client.query_one("select 1", &[]).await.expect("select 1");
    let one: i32 = row.get(0);
    assert_eq!(one, 1);
}
