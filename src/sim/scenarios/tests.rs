//! The scenario tables in `cargo test` (`DROID_SIM_SCENARIO_SEEDS` seeds per setup), one test
//! per table so they run side by side.

use super::{answers, bounds, clearing, core, core_pool, prepared, run_table};

#[test]
fn prepared_scenarios_agree_with_the_model() {
    run_table(prepared::TABLE);
}

#[test]
fn answer_scenarios_agree_with_the_model() {
    run_table(answers::TABLE);
}

#[test]
fn clearing_scenarios_agree_with_the_model() {
    run_table(clearing::TABLE);
}

#[test]
fn bound_scenarios_agree_with_the_model() {
    run_table(bounds::TABLE);
}

#[test]
fn core_scenarios_agree_with_the_model() {
    run_table(core::TABLE);
}

#[test]
fn core_pool_scenarios_agree_with_the_model() {
    run_table(core_pool::TABLE);
}

/// Runs one scenario (`DROID_SIM_SCENARIO`, its name) alone, or with `DROID_SIM_SETUP` and
/// `DROID_SIM_SEED` one run of it, whose server traffic `DROID_SIM_TRACE` prints; the
/// program is printed first for `sim::tests::replay`.
#[test]
fn replay_scenario() {
    let Ok(name) = std::env::var("DROID_SIM_SCENARIO") else {
        return;
    };
    let s = super::all()
        .find(|s| s.name == name)
        .expect("a scenario of the tables");
    let program = (s.program)();
    eprintln!("{program}");
    let (Ok(setup), Ok(seed)) = (
        std::env::var("DROID_SIM_SETUP"),
        std::env::var("DROID_SIM_SEED"),
    ) else {
        let failures = super::run_scenario(s);
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
        return;
    };
    let setup = super::setup(&setup).expect("a setup");
    let seed = seed.parse().expect("a number");
    let options = super::options(s, &program);
    let report = crate::sim::harness::run_with(setup, &program, seed, &options)
        .unwrap_or_else(|f| panic!("{f}"));
    if let Some(check) = s.check {
        check(setup, &report).unwrap_or_else(|e| panic!("{e}"));
    }
}
