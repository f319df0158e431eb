//! The admin plane against a hostile neighbour, with real sockets: the control routes trust
//! no address (127.0.0.1 and 127.0.0.6, the address a service mesh forwards every pod's
//! traffic from, are refused without the token, with a wrong one and cross-site, and change
//! nothing); they work with the token; `/status` and `/metrics` name no user without it; a
//! flood of the admin port leaves the pooler's descriptors bounded while clients log in and
//! `/livez` answers.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tokio::task::block_in_place;

use crate::support::metrics::metric_or_zero;
use crate::support::pooler::{http_raw, ADMIN_TOKEN};
use crate::support::{self, Pooler, DB};

fn from(ip: [u8; 4]) -> SocketAddr {
    SocketAddr::from((ip, 0))
}

/// A POST with `headers` (each ending in CRLF) and `body`.
fn post(path: &str, headers: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

/// What a refused control request must not have changed: still ready, not paused, not
/// draining, no reload run, and a client still served.
async fn unchanged(pooler: &Pooler, reloads_before: f64) {
    let (code, _) = block_in_place(|| pooler.admin_get("/readyz"));
    assert_eq!(code, 200, "still ready");
    let status = block_in_place(|| pooler.status());
    assert_eq!(status["paused"], false, "{status}");
    assert_eq!(status["drain"]["state"], "serving", "{status}");
    let metrics = block_in_place(|| pooler.admin_get("/metrics")).1;
    let reloads = metric_or_zero(
        &metrics,
        "droidpool_config_reloads_total",
        &[("result", "applied")],
    );
    assert_eq!(reloads, reloads_before, "no reload ran");
    let c = pooler.connect("droid", DB).await;
    c.simple_query("select 1")
        .await
        .expect("a client is served");
}

/// Control requests from 127.0.0.1 and 127.0.0.6: without a token 401, with a wrong one
/// 403, cross-site or as an HTML form 403/415 even with the token; none changes anything,
/// and a query running meanwhile is not ended by the refused KILL. With the token each
/// works, and the audit line names the peer and the credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_routes_trust_no_address() {
    let pooler =
        block_in_place(|| Pooler::start_with_config(support::shared(), "pool:\n  size: 2\n", &[]));
    let port = pooler.admin_port();
    let running = pooler.connect("droid", DB).await;
    let sleeper = tokio::spawn(async move { running.simple_query("select pg_sleep(1.5)").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reloads = metric_or_zero(
        &block_in_place(|| pooler.admin_get("/metrics")).1,
        "droidpool_config_reloads_total",
        &[("result", "applied")],
    );
    let text = "Content-Type: text/plain\r\n";
    let cases: Vec<(String, u16)> = vec![
        (post("/console", text, &format!("KILL {DB}")), 401),
        (post("/console", text, "PAUSE"), 401),
        (post("/console", text, "SHUTDOWN"), 401),
        (post("/drain", "", ""), 401),
        (post("/reload", "", ""), 401),
        (
            post(
                "/console",
                &(bearer("wrong-token-wrong-token") + text),
                "PAUSE",
            ),
            403,
        ),
        (post("/drain", &bearer("wrong-token-wrong-token"), ""), 403),
        (
            post("/reload", "Authorization: Basic YWRtaW46YWRtaW4=\r\n", ""),
            401,
        ),
        // A page in a browser: an Origin (or fetch metadata) and a form's body type.
        (
            post(
                "/console",
                &(bearer(ADMIN_TOKEN) + "Origin: http://evil.example\r\n" + text),
                "PAUSE",
            ),
            403,
        ),
        (
            post(
                "/drain",
                &(bearer(ADMIN_TOKEN) + "Sec-Fetch-Site: cross-site\r\n"),
                "",
            ),
            403,
        ),
        (
            post(
                "/console",
                &(bearer(ADMIN_TOKEN) + "Content-Type: application/x-www-form-urlencoded\r\n"),
                "PAUSE",
            ),
            415,
        ),
        (post("/drain", &(bearer(ADMIN_TOKEN) + text), "now"), 415),
    ];
    for source in [[127, 0, 0, 1], [127, 0, 0, 6]] {
        for (request, want) in &cases {
            let (code, body) = block_in_place(|| http_raw(from(source), port, request));
            assert_eq!(code, *want, "from {source:?}: {request:?} answered {body}");
        }
        unchanged(&pooler, reloads).await;
    }
    let slept = sleeper.await.expect("task");
    assert!(slept.is_ok(), "the running query was not killed: {slept:?}");

    // With the token, from the mesh's address: PAUSE works (readiness drops), RESUME too.
    let with = |cmd: &str| post("/console", &(bearer(ADMIN_TOKEN) + text), cmd);
    let (code, body) = block_in_place(|| http_raw(from([127, 0, 0, 6]), port, &with("PAUSE")));
    assert_eq!(code, 200, "{body}");
    assert_eq!(block_in_place(|| pooler.admin_get("/readyz")).0, 503);
    let (code, _) = block_in_place(|| http_raw(from([127, 0, 0, 6]), port, &with("RESUME")));
    assert_eq!(code, 200);
    assert_eq!(block_in_place(|| pooler.admin_get("/readyz")).0, 200);
    let (code, _) = block_in_place(|| {
        http_raw(
            from([127, 0, 0, 1]),
            port,
            &post("/reload", &bearer(ADMIN_TOKEN), ""),
        )
    });
    assert_eq!(code, 202);
    let until = Instant::now() + Duration::from_secs(2);
    while !pooler.stderr().contains("admin command") && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let audited = pooler.stderr();
    let line = audited
        .lines()
        .find(|l| l.contains("admin command") && l.contains("PAUSE"))
        .unwrap_or_else(|| panic!("no audit line for PAUSE in:\n{audited}"));
    assert!(line.contains("peer=127.0.0.6:"), "{line}");
    assert!(line.contains("credential=admin.token"), "{line}");
    assert!(
        !line.contains(ADMIN_TOKEN),
        "the token itself never prints: {line}"
    );
    let metrics = block_in_place(|| pooler.admin_get("/metrics")).1;
    for (result, n) in [
        ("unauthenticated", 12.0),
        ("forbidden", 4.0),
        ("cross_site", 4.0),
        ("bad_body", 4.0),
        ("ok", 3.0),
    ] {
        assert_eq!(
            metric_or_zero(
                &metrics,
                "droidpool_admin_control_requests_total",
                &[("result", result)]
            ),
            n,
            "{result}"
        );
    }
}

/// With no token configured the control routes are off for everyone (403), whatever is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_control_is_off() {
    // The word "token" in the config keeps the harness from giving this pooler one.
    let yaml = "admin:\n  show_users: false  # no admin token on purpose\n";
    let pooler = block_in_place(|| Pooler::start_with_config(support::shared(), yaml, &[]));
    for request in [
        post("/drain", "", ""),
        post("/drain", &bearer(ADMIN_TOKEN), ""),
        post("/console", "Content-Type: text/plain\r\n", "SHUTDOWN"),
    ] {
        let (code, body) =
            block_in_place(|| http_raw(from([127, 0, 0, 1]), pooler.admin_port(), &request));
        assert_eq!(code, 403, "{body}");
        assert!(
            body.contains("admin.token"),
            "says how to turn them on: {body}"
        );
    }
    unchanged(&pooler, 0.0).await;
}

/// `/status` and `/metrics` name no user without the token (a stable pseudonym stands in),
/// and do with it or with `admin.show_users`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_name_no_user_without_the_token() {
    let pooler = block_in_place(|| Pooler::start(support::shared(), &[]));
    let c = pooler.connect("droid", DB).await;
    c.simple_query("select 1").await.unwrap();
    let get = |path: &str, auth: &str| {
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n");
        block_in_place(|| http_raw(from([127, 0, 0, 6]), pooler.admin_port(), &req))
    };
    for path in ["/status", "/metrics"] {
        let (code, open) = get(path, "");
        assert_eq!(code, 200);
        assert!(!open.contains("/droid\""), "{path} names the user: {open}");
        assert!(
            !open.contains("user=\"droid\"") && !open.contains("\"user\":\"droid\""),
            "{open}"
        );
        assert!(open.contains("user-"), "a pseudonym stands in: {open}");
        let (_, shown) = get(path, &bearer(ADMIN_TOKEN));
        assert!(
            shown.contains("user=\"droid\"") || shown.contains("\"user\":\"droid\""),
            "{path} with the token: {shown}"
        );
    }
    // The pseudonym is stable from scrape to scrape (series stay continuous).
    let pseudonym = |text: &str| {
        let at = text.find("user-").expect("pseudonym");
        text[at..at + 17].to_owned()
    };
    assert_eq!(
        pseudonym(&get("/metrics", "").1),
        pseudonym(&get("/metrics", "").1)
    );
}

/// Descriptors the pooler holds (from /proc).
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// 2,000 idle sockets and half-sent requests on the admin port: the pooler's descriptors stay
/// bounded by `admin.max_connections`, a client logs in and `/livez` answers within a second
/// meanwhile; half-sent headers are closed at `admin.header_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_flood_costs_no_login_and_no_probe() {
    let yaml = "admin:\n  header_read_timeout: 2s\n  idle_timeout: 3s\n";
    let pooler = block_in_place(|| Pooler::start_with_config(support::shared(), yaml, &[]));
    let base = fds(pooler.pid());
    let port = pooler.admin_port();
    let held: Vec<TcpStream> = block_in_place(|| {
        (0..2000)
            .map(|i| {
                let mut s =
                    TcpStream::connect(("127.0.0.1", port)).expect("connect to the admin port");
                if i % 2 == 0 {
                    use std::io::Write;
                    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ");
                }
                s
            })
            .collect()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = fds(pooler.pid());
    assert!(
        during <= base + 64 + 16,
        "the pooler holds {during} descriptors with 2,000 admin sockets open (base {base})"
    );
    let t0 = Instant::now();
    let (code, _) = block_in_place(|| pooler.admin_get("/livez"));
    assert_eq!(code, 200);
    let c = pooler.connect("droid", DB).await;
    c.simple_query("select 1").await.expect("a client logs in");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t0.elapsed()
    );
    let metrics = block_in_place(|| pooler.admin_get("/metrics")).1;
    assert!(
        metric_or_zero(
            &metrics,
            "droidpool_admin_connections_closed_total",
            &[("reason", "evicted")]
        ) >= 1900.0,
        "{metrics}"
    );
    // The newest 60-odd sockets were kept; past the timeouts they are closed too.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = fds(pooler.pid());
    assert!(
        after <= base + 4,
        "{after} descriptors after the timeouts (base {base})"
    );
    drop(held);
}

/// A body larger than `admin.max_request_size` is refused (413) without running the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_requests_are_bounded_in_size() {
    let pooler = block_in_place(|| {
        Pooler::start_with_config(support::shared(), "admin:\n  max_request_size: 2048\n", &[])
    });
    let big = "x".repeat(4096);
    let request = post(
        "/console",
        &(bearer(ADMIN_TOKEN) + "Content-Type: text/plain\r\n"),
        &big,
    );
    let (code, _) =
        block_in_place(|| http_raw(from([127, 0, 0, 1]), pooler.admin_port(), &request));
    assert_eq!(code, 413);
    let huge_header = format!(
        "GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "y".repeat(64 * 1024)
    );
    let (code, _) =
        block_in_place(|| http_raw(from([127, 0, 0, 1]), pooler.admin_port(), &huge_header));
    assert!(code == 431 || code == 0 || code == 400, "{code}");
    assert_eq!(block_in_place(|| pooler.admin_get("/livez")).0, 200);
}
