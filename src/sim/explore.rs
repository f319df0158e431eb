//! Searching for failures: programs generated from consecutive seeds, each run through a
//! setup with the schedule of the same seed; the first failure is shrunk to the smallest
//! program that still fails with that seed, and reported with what replays it.

use std::ops::Range;

use super::harness::{self, Failure, Setup, Stats};
use super::program::{generate, shrink, Program};

/// A failure found, ready to print: the setup, the seed, the shrunk program and why it
/// fails.
#[derive(Debug, Clone)]
pub struct Found {
    pub setup: &'static str,
    pub seed: u64,
    pub program: Program,
    pub failure: Failure,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "setup {}, seed {}: {}",
            self.setup, self.seed, self.failure
        )?;
        write!(
            f,
            "replay: DROID_SIM_SETUP={} DROID_SIM_SEED={} DROID_SIM_PROGRAM='{}' DROID_SIM_TRACE=1 \
             cargo test --lib sim::tests::replay -- --nocapture",
            self.setup,
            self.seed,
            // Quoted for the shell: a ' in the program's SQL closes and reopens the quote.
            self.program.to_string().replace('\'', "'\\''")
        )
    }
}

/// Runs the programs of `seeds` through `setup`; the totals, or the first failure.
pub fn explore(setup: &Setup, seeds: Range<u64>) -> Result<Stats, Box<Found>> {
    let mut total = Stats::default();
    for seed in seeds {
        let program = generate(seed, &setup.rules);
        match harness::run(setup, &program, seed) {
            Ok(s) => {
                total.steps += s.steps;
                total.clients += s.clients;
            }
            Err(failure) => return Err(Box::new(found(setup, seed, &program, failure))),
        }
    }
    Ok(total)
}

/// Shrinks a failing program (same seed, same schedule choices) and describes it.
pub fn found(setup: &Setup, seed: u64, program: &Program, failure: Failure) -> Found {
    let small = shrink(program, &setup.rules, |p| {
        harness::run(setup, p, seed).is_err()
    });
    let failure = harness::run(setup, &small, seed).err().unwrap_or(failure);
    Found {
        setup: setup.name,
        seed,
        program: small,
        failure,
    }
}

/// The setup named `name`, of [`harness::SETUPS`] or the scenarios' own.
pub fn setup(name: &str) -> Option<&'static Setup> {
    super::scenarios::setup(name)
}
