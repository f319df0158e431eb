//! The relay under traffic nobody tested: errors in odd places of a pipeline, COPY in every
//! mode, messages larger than any buffer, and clients that send without reading. Each test
//! runs the same client against the pooler (and, where it says so, directly against
//! PostgreSQL, whose answer is the specification).

mod copy;
mod desync;
mod fairness;
mod memory;
