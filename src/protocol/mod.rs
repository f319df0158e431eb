//! Sans-IO codec for the PostgreSQL frontend/backend protocol 3.0: cutting frames off a byte
//! buffer, parsing only the messages the pooler must see, and encoding the ones it sends.
//! Nothing here performs I/O or knows about pools, sessions or sockets.

pub mod backend;
pub mod cursor;
pub mod frame;
pub mod frontend;
pub mod scram;
pub mod sqlstate;
pub mod startup;

pub use cursor::{Cursor, ParseError};
pub use frame::{Frame, FrameError};
