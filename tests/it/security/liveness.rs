//! A client whose network path dies is noticed while its transaction holds a server: client
//! sockets have keepalive and TCP_USER_TIMEOUT (`client.tcp_*`). The client runs psql in a
//! network namespace of its own, joined to the pooler by a veth pair; taking the link down
//! black-holes it (no FIN, no RST), as a node that vanished does.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, Pooler, DB};

/// Runs `ip ARGS`, panicking with its output on failure.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with one end of a veth pair; the other end stays here. Removed on
/// drop (which removes the pair too).
struct Netns {
    name: String,
    host_ip: String,
    link: String,
}

impl Netns {
    fn new() -> Netns {
        let id = std::process::id() % 200 + 20;
        let name = format!("dp-live-{}", std::process::id());
        let (host, peer) = (format!("dplv{id}a"), format!("dplv{id}b"));
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let _ = Command::new("ip").args(["link", "del", &host]).output();
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &host, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &name]);
        let host_ip = format!("10.213.{id}.1");
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host]);
        ip(&["link", "set", &host, "up"]);
        let peer_ip = format!("10.213.{id}.2/30");
        ip(&[
            "netns", "exec", &name, "ip", "addr", "add", &peer_ip, "dev", &peer,
        ]);
        ip(&["netns", "exec", &name, "ip", "link", "set", &peer, "up"]);
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        Netns {
            name,
            host_ip,
            link: peer,
        }
    }

    /// Black-holes the namespace: its end of the link goes down.
    fn cut(&self) {
        ip(&[
            "netns", "exec", &self.name, "ip", "link", "set", &self.link, "down",
        ]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// psql in the namespace, reading statements from a pipe this test keeps open.
fn psql_in(ns: &Netns, port: u16) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(support::bin("psql"))
        .args(["-X", "-q", "-h", &ns.host_ip, "-p", &port.to_string()])
        .args(["-U", "droid", "-d", DB])
        .env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql in the namespace")
}

#[tokio::test]
async fn a_client_whose_network_died_gives_its_server_back() {
    let ns = Netns::new();
    let yaml = format!(
        "listen:\n  addr: {}\nauth:\n  allow_trust_on_network: true\npool:\n  size: 1\n\
         client:\n  tcp_keepidle: 1s\n  tcp_keepintvl: 1s\n  tcp_keepcnt: 2\n  tcp_user_timeout: 3s\n",
        ns.host_ip
    );
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let mut psql = psql_in(&ns, pooler.port());
    let mut stdin = psql.stdin.take().expect("stdin");
    stdin
        .write_all(b"begin;\nselect 1;\n")
        .expect("write to psql");
    stdin.flush().unwrap();
    // The transaction holds the pool's only server.
    let until = Instant::now() + Duration::from_secs(10);
    while pooler.servers_active() != 1 {
        assert!(
            Instant::now() < until,
            "psql's transaction never took the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ns.cut();
    let t0 = Instant::now();
    while pooler.servers_active() != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the dead client still holds the server after {:?}: {}",
            t0.elapsed(),
            pooler.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The pool of 1 serves the next client.
    let conn = format!(
        "host={} port={} user=droid dbname={DB}",
        ns.host_ip,
        pooler.port()
    );
    let client = support::connect(&conn).await;
    client.query_one("select 1", &[]).await.expect("select 1");
    let _ = psql.kill();
    let _ = psql.wait();
}
