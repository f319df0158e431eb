//! The integration tests' protocol scenarios (tests/it/prepared.rs and core.rs) as tables,
//! run against the model without PostgreSQL: each scenario goes through each of its setups
//! under several seeds (schedules and byte splits vary), every client must receive what it
//! receives directly ([`crate::sim::direct`]), the direct run must show exactly the SQLSTATEs
//! the scenario names (so a statement the model does not know cannot pass as a syntax error),
//! and a scenario's own check sees what the servers were sent ([`Report`]).
//!
//! [`coverage`] maps every test of those two files to its scenarios or to why only a real
//! PostgreSQL can show it.
//!
//! A failure names the scenario, setup and seed, and how to replay it with a trace:
//! `DROID_SIM_SCENARIO=.. DROID_SIM_SETUP=.. DROID_SIM_SEED=.. DROID_SIM_TRACE=1 cargo test
//! --lib sim::scenarios::tests::replay_scenario -- --nocapture`.

mod answers;
mod bounds;
mod build;
mod clearing;
mod core;
mod core_pool;
pub mod coverage;
mod prepared;

use super::direct;
use super::harness::{self, Limits, Options, Report, Setup};
use super::program::{Program, Rules};
use crate::config::{PoolMode, SessionState};
use crate::protocol::{backend, frame};
use bytes::BytesMut;
use direct::DirectRun;

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
    /// Where the pooler answers by design otherwise than PostgreSQL.
    pub expect: Option<Expect>,
    /// Each client's first write comes in one write with its startup packet.
    pub pipelined_startup: bool,
}

/// What the clients must receive where the pooler answers otherwise than PostgreSQL: the
/// direct run of another program, with its errors of one SQLSTATE made the pooler's.
pub struct Expect {
    pub direct: fn() -> Program,
    /// (SQLSTATE in that direct run, the pooler's SQLSTATE, the pooler's message).
    pub errors: &'static [(&'static str, &'static str, &'static str)],
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
    expect: None,
    pipelined_startup: false,
};

/// Setups only scenarios use (not [`harness::SETUPS`], so the generated programs' test is
/// unchanged): other pool sizes, tracking in session mode, low statement bounds.
pub const SETUPS: &[Setup] = &[
    Setup {
        name: "session-tracked",
        mode: PoolMode::Session,
        state: SessionState::Off,
        track: true,
        pool_size: 2,
        rules: Rules::session(3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "session-pool-1",
        mode: PoolMode::Session,
        state: SessionState::Off,
        track: false,
        pool_size: 1,
        rules: Rules::session(3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "transaction-pool-1",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: false,
        pool_size: 1,
        rules: Rules::transaction(false, 3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "tracked-bound-4",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: true,
        pool_size: 2,
        rules: Rules::transaction(true, 3).small(),
        limits: Limits {
            max_prepared: Some(4),
            ..Limits::DEFAULT
        },
    },
    Setup {
        name: "tracked-bound-1",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: true,
        pool_size: 2,
        rules: Rules::transaction(true, 3).small(),
        limits: Limits {
            max_prepared: Some(1),
            ..Limits::DEFAULT
        },
    },
    Setup {
        name: "tracked-client-bound-3",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: true,
        pool_size: 1,
        rules: Rules::transaction(true, 3).small(),
        limits: Limits {
            max_client_prepared: Some(3),
            ..Limits::DEFAULT
        },
    },
];

/// The setup named `name`, of either list.
pub fn setup(name: &str) -> Option<&'static Setup> {
    harness::SETUPS
        .iter()
        .chain(SETUPS)
        .find(|s| s.name == name)
}

/// The tables, by file.
pub const TABLES: &[(&str, &[Scenario])] = &[
    ("prepared", prepared::TABLE),
    ("answers", answers::TABLE),
    ("clearing", clearing::TABLE),
    ("bounds", bounds::TABLE),
    ("core", core::TABLE),
    ("core_pool", core_pool::TABLE),
];

/// Every scenario.
pub fn all() -> impl Iterator<Item = &'static Scenario> {
    TABLES.iter().flat_map(|(_, t)| t.iter())
}

/// How many seeds each scenario runs under per setup (`DROID_SIM_SCENARIO_SEEDS`).
fn seeds() -> u64 {
    std::env::var("DROID_SIM_SCENARIO_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16)
}

/// What the clients of `s` must receive: the direct run of its program, or what its
/// [`Expect`] says.
fn expected(s: &Scenario, program: &Program) -> Vec<DirectRun> {
    let Some(e) = &s.expect else {
        return direct::run_program(program);
    };
    let mut runs = direct::run_program(&(e.direct)());
    for f in runs.iter_mut().flat_map(|r| r.messages.iter_mut()) {
        let code = (f.tag == backend::ERROR_RESPONSE_TAG)
            .then(|| backend::parse_error(f.body()).ok())
            .flatten()
            .map(|e| e.code);
        if let Some(&(_, to, message)) = e
            .errors
            .iter()
            .find(|(from, ..)| Some(*from) == code.as_deref())
        {
            let mut b = BytesMut::new();
            backend::error_response(&mut b, &crate::relay::error_fields(to, message.into()));
            *f = frame::cut(&mut b, usize::MAX)
                .ok()
                .flatten()
                .expect("an ErrorResponse just written");
        }
    }
    runs
}

/// How `s` runs: against what it expects, the first writes behind the startup or not.
pub fn options(s: &Scenario, program: &Program) -> Options {
    Options {
        expected: Some(expected(s, program)),
        pipelined_startup: s.pipelined_startup,
        forget_unseen: false,
        skip_leave_reset: false,
        blind_pin_check: false,
        forget_settings: false,
        check_idle: false,
    }
}

/// The SQLSTATEs of every ErrorResponse in `runs`.
fn codes_of(runs: &[DirectRun]) -> Vec<String> {
    let mut codes: Vec<String> = runs
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
    let options = options(s, &program);
    let got = codes_of(options.expected.as_deref().unwrap_or_default());
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
            let outcome = harness::run_with(setup, &program, seed, &options)
                .map_err(|f| f.to_string())
                .and_then(|r| {
                    shown |= s.some.is_some_and(|(_, holds)| holds(setup, &r));
                    s.check.map_or(Ok(()), |check| check(setup, &r))
                });
            if let Err(why) = outcome {
                failures.push(format!(
                    "scenario {} ({}), setup {name}, seed {seed}: {why}\nreplay: \
                     DROID_SIM_SCENARIO={} DROID_SIM_SETUP={name} DROID_SIM_SEED={seed} \
                     DROID_SIM_TRACE=1 cargo test --lib sim::scenarios::tests::replay_scenario \
                     -- --nocapture\nprogram: {program}",
                    s.name, s.origin, s.name
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
