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

/// Counts, over many seeds, the messages clients receive by tag and error code: what the
/// generator reaches. `cargo test --lib sim::direct::tests::coverage -- --ignored --nocapture`.
#[test]
#[ignore = "a tool: prints what generated programs reach"]
fn coverage() {
    use std::collections::BTreeMap;
    let mut tags: BTreeMap<String, usize> = BTreeMap::new();
    for seed in 0..2000 {
        let p = generate(seed, &Rules::session(3));
        for run in run_program(&p) {
            for m in &run.messages {
                let key = match m.tag {
                    b::ERROR_RESPONSE_TAG | b::NOTICE_RESPONSE_TAG => {
                        let e = b::parse_error(m.body()).expect("model errors parse");
                        format!("{} {} {}", m.tag as char, e.severity, e.code)
                    }
                    b::PARAMETER_STATUS_TAG | b::COMMAND_COMPLETE_TAG => describe(m),
                    _ => (m.tag as char).to_string(),
                };
                *tags.entry(key).or_default() += 1;
            }
            *tags.entry(format!("closed {}", run.closed)).or_default() += 1;
            *tags.entry(format!("stalled {}", run.stalled)).or_default() += 1;
        }
    }
    for (k, n) in tags {
        println!("{n:8} {k}");
    }
}

/// The first seeds whose transcripts hold a message `DROID_SIM_FIND` describes (a
/// substring of [`describe`]'s line): `cargo test --lib sim::direct::tests::find -- --ignored
/// --nocapture`.
#[test]
#[ignore = "a tool: finds seeds by what their clients receive"]
fn find() {
    let want = std::env::var("DROID_SIM_FIND").unwrap_or_else(|_| "FATAL".into());
    let mut found = 0;
    for seed in 0..5000 {
        let p = generate(seed, &Rules::session(3));
        let runs = run_program(&p);
        let hit = runs.iter().enumerate().find_map(|(c, r)| {
            r.messages
                .iter()
                .find(|m| describe(m).contains(&want))
                .map(|m| (c, m))
        });
        if let Some((c, m)) = hit {
            println!("seed {seed} client {c}: {}", describe(m));
            found += 1;
            if found == 5 {
                break;
            }
        }
    }
}

/// Client programs run directly per second on this core (small values, session rules: the
/// simulation's setting): `cargo test --release --lib sim::direct::tests::speed -- --ignored
/// --nocapture`.
#[test]
#[ignore = "a measurement: run in release mode"]
fn speed() {
    for rules in [Rules::session(3).small(), Rules::session(3)] {
        let programs: Vec<_> = (0..2000).map(|s| generate(s, &rules)).collect();
        let started = std::time::Instant::now();
        let mut clients = 0;
        for _ in 0..5 {
            for p in &programs {
                clients += run_program(p).len();
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let gen_started = std::time::Instant::now();
        for s in 0..10_000 {
            std::hint::black_box(generate(s, &rules));
        }
        let gen_secs = gen_started.elapsed().as_secs_f64();
        println!(
            "large values {}: {:.0} programs/s, {:.0} client programs/s run directly; \
             {:.0} programs/s generated",
            rules.large_values,
            10_000.0 / secs,
            clients as f64 / secs,
            10_000.0 / gen_secs
        );
    }
}
