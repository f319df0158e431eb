//! Integration tests that use the simulation's pieces (`droid_pool::sim`, feature `sim`): a
//! test binary of their own with `required-features = ["sim"]`, so a plain `cargo test` and
//! the release build compile no simulation code. CI runs them with
//! `cargo test --all-targets --features sim` (scripts/test.sh, step `test`).

mod model_check;
#[path = "../it/support/mod.rs"]
mod support;
