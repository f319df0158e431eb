//! The integration tests' protocol scenarios (tests/it/prepared.rs and core.rs) as tables,
//! run against the model without PostgreSQL: each scenario goes through each of its setups
//! under several seeds (schedules and byte splits vary), every client must receive what it
//! receives directly ([`crate::sim::direct`]), the direct run must show exactly the SQLSTATEs
//! the scenario names (so a statement the model does not know cannot pass as a syntax error),
//! and a scenario's own check sees what the servers were sent ([`Report`]).
//!
//! [`coverage`] maps every test of those two files to its scenarios or to why only a real
//! PostgreSQL can show it.

mod build;
mod core;
pub mod coverage;
mod prepared;
mod prepared_more;

use super::direct;
use super::harness::{self, Report, Setup};
use super::program::{Program, Rules};
use crate::config::PoolMode;
use crate::protocol::backend;

pub use build::*;

/// A check of one run: why it fails, if it does.
pub type Check = fn(&Setup, &Report) -> Result<(), String>;
/// Whether one run shows something.
pub type Shows = fn(&Setup, &Report) -> bool;

/// One scenario of the table.
pub struct Scenario {
    pub name: &'static str,
    /// The test it ports, `"<file>::<fn>"`.
    pub origin: &'static str,
    /// [`Setup::name`]s, of [`harness::SETUPS`] or [`SETUPS`].
    pub setups: &'static [&'static str],
    pub program: fn() -> Program,
    /// The SQLSTATEs the direct run shows (each at least once, no others).
    pub codes: &'static [&'static str],
    /// Checked on every run, beyond agreement with the direct run.
    pub check: Option<Check>,
    /// Something at least one seed of each setup must show (e.g. a replay on a second
    /// server): what, and whether a run shows it.
    pub some: Option<(&'static str, Shows)>,
}

/// Default fields for `..BASE` in the tables.
pub const BASE: Scenario = Scenario {
    name: "",
    origin: "",
    setups: &[],
    program: || Program { clients: vec![] },
    codes: &[],
    check: None,
    some: None,
};

/// Setups only scenarios use (not [`harness::SETUPS`], so the generated programs' test is
/// unchanged): other pool sizes, tracking in session mode, low statement bounds.
pub const SETUPS: &[Setup] = &[
    Setup {
        name: "session-tracked",
        mode: PoolMode::Session,
        track: true,
        pool_size: 2,
        rules: Rules::session(3).small(),
        max_prepared: None,
    },
    Setup {
        name: "session-pool-1",
        mode: PoolMode::Session,
        track: false,
        pool_size: 1,
        rules: Rules::session(3).small(),
        max_prepared: None,
    },
    Setup {
        name: "transaction-pool-1",
        mode: PoolMode::Transaction,
        track: false,
        pool_size: 1,
        rules: Rules::transaction(false, 3).small(),
        max_prepared: None,
    },
    Setup {
        name: "tracked-bound-4",
        mode: PoolMode::Transaction,
        track: true,
        pool_size: 2,
        rules: Rules::transaction(true, 3).small(),
        max_prepared: Some(4),
    },
    Setup {
        name: "tracked-bound-1",
        mode: PoolMode::Transaction,
        track: true,
        pool_size: 2,
        rules: Rules::transaction(true, 3).small(),
        max_prepared: Some(1),
    },
];

/// The setup named `name`, of either list.
pub fn setup(name: &str) -> Option<&'static Setup> {
    harness::SETUPS
        .iter()
        .chain(SETUPS)
        .find(|s| s.name == name)
}

/// Every scenario.
pub fn all() -> impl Iterator<Item = &'static Scenario> {
    prepared::TABLE
        .iter()
        .chain(prepared_more::TABLE)
        .chain(core::TABLE)
}

/// How many seeds each scenario runs under per setup (`DROID_SIM_SCENARIO_SEEDS`).
fn seeds() -> u64 {
    std::env::var("DROID_SIM_SCENARIO_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

/// The SQLSTATEs of every ErrorResponse the clients of `program` receive directly.
fn direct_codes(program: &Program) -> Vec<String> {
    let mut codes: Vec<String> = direct::run_program(program)
        .iter()
        .flat_map(|run| run.messages.iter())
        .filter(|f| f.tag == backend::ERROR_RESPONSE_TAG)
        .filter_map(|f| backend::parse_error(f.body()).ok().map(|e| e.code))
        .collect();
    codes.sort();
    codes.dedup();
    codes
}

/// Runs one scenario through its setups; every failure, described with its replay.
pub fn run_scenario(s: &Scenario) -> Vec<String> {
    let program = (s.program)();
    let mut failures = Vec::new();
    let mut want: Vec<String> = s.codes.iter().map(|c| c.to_string()).collect();
    want.sort();
    let got = direct_codes(&program);
    if got != want {
        failures.push(format!(
            "{}: the direct run shows SQLSTATEs {got:?}, the scenario names {want:?}",
            s.name
        ));
    }
    for name in s.setups {
        let Some(setup) = setup(name) else {
            failures.push(format!("{}: no setup {name}", s.name));
            continue;
        };
        let mut shown = false;
        for seed in 0..seeds() {
            let outcome = harness::run_report(setup, &program, seed)
                .map_err(|f| f.to_string())
                .and_then(|r| {
                    shown |= s.some.is_some_and(|(_, holds)| holds(setup, &r));
                    s.check.map_or(Ok(()), |check| check(setup, &r))
                });
            if let Err(why) = outcome {
                failures.push(format!(
                    "scenario {} ({}), setup {name}, seed {seed}: {why}\nreplay: \
                     DROID_SIM_SETUP={name} DROID_SIM_SEED={seed} DROID_SIM_PROGRAM='{program}' \
                     DROID_SIM_TRACE=1 cargo test --lib sim::tests::replay -- --nocapture",
                    s.name, s.origin
                ));
                break;
            }
        }
        if let (Some((what, _)), false) = (s.some, shown) {
            failures.push(format!(
                "scenario {}, setup {name}: no seed of {} shows {what}",
                s.name,
                seeds()
            ));
        }
    }
    failures
}

/// Runs every scenario of `table`, panicking with all failures.
pub fn run_table(table: &[Scenario]) {
    let failures: Vec<String> = table.iter().flat_map(run_scenario).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[cfg(test)]
mod tests;
