//! The deterministic simulation's pieces that do not depend on the relay: a model PostgreSQL
//! backend ([`model`]), client programs with their generator and shrinker ([`program`]), and
//! the oracle's expectation, a program run directly against the model ([`direct`]).
//!
//! Nothing here performs I/O, spawns, sleeps or reads a clock: every result is a function of
//! the bytes fed in and the seed, so a failing seed replays exactly.

pub mod direct;
pub mod explore;
pub mod harness;
pub mod model;
pub mod program;

#[cfg(test)]
mod tests;
