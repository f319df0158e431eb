//! Session state a client creates on a server in transaction pooling: what SQL creates it
//! (a purpose lexer and a classifier of the few statement shapes that matter), and what a
//! client holds (settings to replay, SQL prepared statements, pins, channels listened to).

pub mod builtins;
pub mod calls;
pub mod detect;
pub mod effect;
pub mod lex;
pub mod settings;
pub mod signal;
