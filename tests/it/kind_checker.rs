//! `tests/kind/prepared_checks.py`, the wire-protocol checker that `tests/kind/e2e.sh` runs
//! against poolers in a kind cluster, run here against a local pooler: it must pass with
//! prepared-statement tracking and fail without it, so that a green kind run means something.

use std::process::Command;

use crate::support::{self, Pooler, DB};

const USER: &str = "droid";

/// Runs the checker against `pooler`; returns its success and its output.
fn run_checks(pooler: &Pooler) -> (bool, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kind/prepared_checks.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--port", &pooler.port().to_string()])
        .args(["--user", USER, "--database", DB])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs tests/kind/prepared_checks.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn kind_checker_passes_with_tracking() {
    let pooler = Pooler::start(
        support::shared(),
        &[
            "--pool-size",
            "2",
            "--mode",
            "transaction",
            "--track-prepared",
        ],
    );
    let (ok, out) = run_checks(&pooler);
    assert!(ok, "{out}");
    assert!(out.contains("4 passed, 0 failed"), "{out}");
}

/// The negative control: without tracking, the three checks that need it fail, and SQL
/// PREPARE (never tracked) behaves the same.
#[test]
fn kind_checker_fails_without_tracking() {
    let pooler = Pooler::start(
        support::shared(),
        &["--pool-size", "2", "--mode", "transaction"],
    );
    let (ok, out) = run_checks(&pooler);
    assert!(!ok, "{out}");
    for check in [
        "prepared-statement-tracked",
        "names-do-not-collide",
        "close-tracked",
    ] {
        assert!(out.contains(&format!("FAIL {check}")), "{out}");
    }
    assert!(out.contains("PASS sql-prepare-not-tracked"), "{out}");
}
