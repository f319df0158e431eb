//! The admin console, shared by the SQL console (`psql -d droidpool`, or `pgbouncer`, as a
//! configured console user: the client login hands the session to [`serve`]) and
//! `POST /console` of the admin server: the command language (`command`), running one
//! (`execute`: what each shows, `show`, or does, `act`), its answer as rows or as text
//! (`answer`), and the SQL console's session over the wire (`session`).

mod act;
mod answer;
pub mod command;
mod execute;
mod session;
mod show;

pub use answer::{escape, Answer};
pub use execute::{execute, Caller};
pub use session::{serve, ConsoleError};

/// The database names that reach the console.
pub fn is_console_database(db: &str) -> bool {
    db == "droidpool" || db == "pgbouncer"
}
