//! droid-pool: a PostgreSQL connection pooler built for Kubernetes.
//!
//! Glossary: a *client* is an application connection to the pooler; a *server* is a
//! connection from the pooler to PostgreSQL; a *pool* holds the servers of one
//! (database, user). Layers, lowest first: `protocol` (sans-IO codec), `config`, `params`,
//! `prepared`, `events`; `server` (one PostgreSQL connection); `pool`; `client` (one task per
//! client); `app` (listener and composition root).

pub mod admin;
pub mod app;
pub mod auth;
pub mod cancel;
pub mod client;
pub mod config;
pub mod counters;
pub mod events;
pub mod lifecycle;
pub mod metrics;
pub mod net;
#[cfg(feature = "operator")]
pub mod operator;
pub mod params;
pub mod pool;
pub mod prepared;
pub mod protocol;
pub mod relay;
pub mod reload;
pub mod resilience;
pub mod server;
pub mod shared;
