//! Direct runs: what a client sees, and the comparison of transcripts.

use super::*;
use crate::sim::program::{generate, Rules};

/// Prints the program of `DROID_SIM_SEED` (session rules) and what each client receives
/// directly: `cargo test --lib sim::direct::tests::show_seed -- --ignored --nocapture`.
#[test]
#[ignore = "a tool: prints one seed's program and transcripts"]
fn show_seed() {
    let seed = std::env::var("DROID_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let p = generate(seed, &Rules::session(3));
    println!("{p}");
    for (c, run) in run_program(&p).iter().enumerate() {
        println!(
            "client {c}: closed {} stalled {} after flushes {:?}",
            run.closed, run.stalled, run.after_flush
        );
        for (i, w) in p.clients[c].writes.iter().enumerate() {
            println!(
                "  write {i} ({:?}): {:?}",
                w.end,
                w.msgs
                    .iter()
                    .map(|m| format!("{m:?}").chars().take(90).collect::<String>())
                    .collect::<Vec<_>>()
            );
        }
        for (i, m) in run.messages.iter().enumerate() {
            println!("  {i}: {}", describe(m));
        }
    }
}
