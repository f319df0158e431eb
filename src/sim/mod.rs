//! The deterministic simulation's pieces that do not depend on the relay: a model PostgreSQL
//! backend ([`model`]), client programs with their generator and shrinker ([`program`]), and
//! the oracle's expectation, a program run directly against the model ([`direct`]).
//!
//! A simulation step by step: a [`model::ModelDb`] holding [`program::tables`]; one
//! [`model::ModelServer`] per server connection, fed what the pooler writes to it
//! ([`model::ModelServer::feed`], any split) and polled for what it sends unasked
//! ([`model::ModelServer::poll_async`]); faults through `cancel`, `terminate` and
//! `disconnect`. Programs come from [`program::generate`] under the setup's
//! [`program::Rules`]; each client's expectation from [`direct::run_program`];
//! [`direct::first_difference`] says where a client's messages depart from it, and
//! [`program::shrink`] makes a failing program small.
//!
//! Nothing here performs I/O, spawns, sleeps or reads a clock: every result is a function of
//! the bytes fed in and the seed, so a failing seed replays exactly.

pub mod direct;
pub mod explore;
pub mod harness;
pub mod model;
pub mod program;
pub mod scenarios;

#[cfg(test)]
mod tests;
