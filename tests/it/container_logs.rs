//! What `kubectl logs` shows of each binary: with stderr not a terminal (a container's), the
//! default output is plain text, without ANSI colour codes, and logs never mix into stdout.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, Pooler};

const ESC: char = '\u{1b}';

#[test]
fn the_operator_logs_plain_text_to_stderr() {
    // `run` without a reachable cluster logs its error through the subscriber and exits 1.
    let out = Command::new(env!("CARGO_BIN_EXE_droid-pool-operator"))
        .arg("run")
        .env("KUBECONFIG", "/nonexistent/droid-pool-test-kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run droid-pool-operator");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "no cluster, yet it succeeded: {stderr}"
    );
    assert!(stderr.contains("operator stopped"), "{stderr}");
    assert!(!stderr.contains(ESC), "colour codes in {stderr:?}");
    assert!(
        out.stdout.is_empty(),
        "logs on stdout: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_pooler_logs_plain_text_to_stderr() {
    let pooler = Pooler::start(support::shared(), &[]);
    pooler.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pooler.has_exited() {
        assert!(Instant::now() < deadline, "no exit 30 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stderr = pooler.stderr();
    assert!(stderr.contains("accepting clients"), "{stderr}");
    assert!(!stderr.contains(ESC), "colour codes in {stderr:?}");
}
