//! droid-pool: a PostgreSQL connection pooler built for Kubernetes.
//!
//! Glossary: a *client* is an application connection to the pooler; a *server* is a
//! connection from the pooler to PostgreSQL; a *pool* holds the servers of one
//! (database, user); a *session* is a logged-in client's task, the driver around the *relay*
//! (its protocol state machine); a *drain* is the graceful stop SIGTERM starts.
//!
//! ARCHITECTURE.md, at the repository root, is the map: the layers, the relay and its driver,
//! where each concern lives and how to add one.
//!
//! Layers, lowest first; each imports only layers below it, and no modules import each other:
//! - `protocol` (sans-IO codec), `resilience`, `lifecycle` (latches and the drain's state),
//!   `metrics`, `prepared`, `params`, `counters`: nothing of ours, or `protocol` alone;
//! - `config`; `logs` (escaping what clients chose, rate limits of lines), `events`, `net`
//!   (sockets, TLS, reading a client while it idles);
//! - `cancel` (cancel keys, KILL, forwarding between peers); `server` (one PostgreSQL
//!   connection); `auth` (client credentials);
//! - `relay` (pure) and `pool` side by side; `shared` (the context every task gets);
//! - `admin` (the admin server and the console), `reload`; `login` (startup and
//!   authentication); `client` (one task per client: login, then the session or the console);
//! - `app` (listener, drain and composition root); `main.rs` on top. `operator` takes only
//!   `config` types (and `resilience`'s backoff) from the rest. `sim` (compiled for unit tests
//!   and with feature `sim`, never by a plain or release build) holds the deterministic
//!   simulation: a model PostgreSQL, client programs and the harness that drives relays
//!   against them; nothing else imports it. `session_state` (what a statement does to session
//!   state) sits beside `prepared`.

pub mod admin;
pub mod app;
pub mod auth;
pub mod cancel;
pub mod client;
pub mod config;
pub mod counters;
pub mod events;
pub mod lifecycle;
pub mod listen;
pub mod login;
pub mod logs;
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
pub mod session_state;
pub mod shared;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
