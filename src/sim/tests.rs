//! The simulation in `cargo test`: a bounded number of seeds per setup (`DROID_SIM_SEEDS`
//! sets how many, `DROID_SIM_BASE` the first, `DROID_SIM_ONLY` a comma-separated list of
//! setups to run), and the replay of one seed (`DROID_SIM_SETUP`, `DROID_SIM_SEED`).

use super::explore::{explore, setup};
use super::harness::SETUPS;

fn seeds() -> u64 {
    std::env::var("DROID_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

#[test]
fn every_setup_agrees_with_the_model() {
    let n = seeds();
    let base: u64 = std::env::var("DROID_SIM_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let only = std::env::var("DROID_SIM_ONLY").ok();
    let chosen = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|n| n == name))
    };
    for s in SETUPS.iter().filter(|s| chosen(s.name)) {
        let started = std::time::Instant::now();
        match explore(s, base..base + n) {
            Ok(stats) => eprintln!(
                "sim {}: {n} programs, {} client sequences, {} steps in {:?}",
                s.name,
                stats.clients,
                stats.steps,
                started.elapsed()
            ),
            Err(found) => panic!("{found}"),
        }
    }
}

/// Replays one seed of one setup, or with `DROID_SIM_PROGRAM` (a printed program) that
/// program alone under the seed's schedule; `DROID_SIM_TRACE` prints the server traffic.
#[test]
fn replay() {
    let (Ok(name), Ok(seed)) = (
        std::env::var("DROID_SIM_SETUP"),
        std::env::var("DROID_SIM_SEED"),
    ) else {
        return;
    };
    let s = setup(&name).expect("a setup of harness::SETUPS");
    let seed: u64 = seed.parse().expect("a number");
    if let Ok(text) = std::env::var("DROID_SIM_PROGRAM") {
        let program: super::program::Program = text.parse().expect("a printed program");
        if let Err(failure) = super::harness::run(s, &program, seed) {
            panic!("setup {}, seed {seed}: {failure}", s.name);
        }
        return;
    }
    if let Err(found) = explore(s, seed..seed + 1) {
        panic!("{found}");
    }
}

/// Seeds of longer explorations that once found a relay bug (or a departure now documented),
/// kept so they stay fixed: each names its setup and what it found.
#[test]
fn found_seeds_stay_fixed() {
    const FOUND: &[(&str, u64, &str)] = &[
        (
            "transaction-tracked",
            11_583,
            "a re-Parse met the server's old copy: 42P05",
        ),
        (
            "transaction-tracked",
            17_403,
            "a Describe after a skipped Close: 26000",
        ),
        (
            "transaction-tracked",
            26_007,
            "a Bind relied on a replay that failed: 26000",
        ),
        (
            "transaction-tracked",
            28_569,
            "a Close replayed into a failed block: 25P02",
        ),
        (
            "transaction-tracked",
            91_537,
            "a Close answered before a FATAL (documented)",
        ),
        (
            "transaction-tracked",
            131_029,
            "the same, the server idle (documented)",
        ),
        (
            "transaction-tracked",
            149_488,
            "a message after a FATAL answered",
        ),
        (
            "transaction-tracked",
            239_001,
            "a skipped Close brought back a copy DEALLOCATE ALL dropped",
        ),
        (
            "transaction-tracked",
            1_000_316,
            "a Parse of a name whose Close a failing batch carried: not 42P05",
        ),
    ];
    for &(name, seed, what) in FOUND {
        let s = setup(name).expect("a setup of harness::SETUPS");
        if let Err(found) = explore(s, seed..seed + 1) {
            panic!("{what}, again:\n{found}");
        }
    }
}

/// With the clean-up disabled (the pool forgets what unseen work left on a server, as
/// before `relay::cleanup`), the simulation finds the leak: another client's `SHOW` answers
/// client 0's setting. Kept seeds, one per setup (27 of the first 500 seeds fail so); with
/// the clean-up, the same seeds pass.
#[test]
fn a_disabled_cleanup_is_found() {
    use super::harness::{run, run_with, Options};
    use super::program::generate;
    let off = Options {
        forget_unseen: true,
        ..Options::default()
    };
    for (name, seed) in [
        ("transaction-unseen-track", 17),
        ("transaction-unseen-pin", 17),
    ] {
        let s = setup(name).expect("a setup of harness::SETUPS");
        let program = generate(seed, &s.rules);
        let leak = run_with(s, &program, seed, &off).expect_err("the leak is found");
        assert!(leak.what.contains("77MB"), "{name}: {}", leak.what);
        if let Err(f) = run(s, &program, seed) {
            panic!("{name}, seed {seed}, with the clean-up: {f}");
        }
    }
}

/// The conversations the pooler holds with a server on a client's behalf, each reverted: the
/// reset of a session-mode client's server skipped, the pin check's answer ignored (the
/// servers say nothing is left), the settings sync skipped (the pool forgets what a server
/// holds); the simulation finds the leak at these seeds, and with the machine as it is the
/// same seeds pass. (The replay's reverts are patches in docs/sim-reverts/.) (Under `pin` in transaction mode, 4,000 seeds
/// skipped a pinned client's reset 984 times and no program's later statement showed it, so
/// the session setup keeps the reset's seed.)
#[test]
fn reverted_conversations_are_found() {
    use super::harness::{run, run_with, Options};
    use super::program::generate;
    let skip_reset = Options {
        skip_leave_reset: true,
        ..Options::default()
    };
    let blind = Options {
        blind_pin_check: true,
        ..Options::default()
    };
    let no_sync = Options {
        forget_settings: true,
        ..Options::default()
    };
    for (name, seed, off) in [
        ("session", 16, &skip_reset),
        ("transaction-pin", 1467, &blind),
        ("transaction-track-reported", 461, &no_sync),
    ] {
        let s = setup(name).expect("a setup of harness::SETUPS");
        let program = generate(seed, &s.rules);
        let leak = run_with(s, &program, seed, off).expect_err("the leak is found");
        assert!(
            leak.what.contains("first difference"),
            "{name}: {}",
            leak.what
        );
        if let Err(f) = run(s, &program, seed) {
            panic!("{name}, seed {seed}, as the machine is: {f}");
        }
    }
}

/// The idle check as a state of the machine: every server taken again is checked first and
/// every third check fails (the server replaced while the client's messages wait). Each
/// setup's programs still agree with the direct run, and checks ran and failed.
#[test]
fn idle_checks_change_nothing_a_client_sees() {
    use super::harness::{run_with, Options};
    use super::program::generate;
    let on = Options {
        check_idle: true,
        ..Options::default()
    };
    let mut checked = 0;
    for s in SETUPS {
        for seed in 0..seeds() / 4 {
            let program = generate(seed, &s.rules);
            match run_with(s, &program, seed, &on) {
                Ok(r) => checked += r.stats.checks,
                Err(f) => panic!("{}, seed {seed}, with idle checks: {f}", s.name),
            }
        }
    }
    eprintln!("idle checks: {checked}");
    assert!(checked > 100, "only {checked} checks ran");
}
