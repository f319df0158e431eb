//! What the outcome of an owed reply means for the prepared-statement bookkeeping: a Parse
//! confirmed or dropped, a replay or an injected Close that the server skipped.

use crate::prepared::{ClientStatements, ServerStatements};
use crate::server::Owed;

/// Applies what the outcome of one owed reply means for prepared-statement bookkeeping.
/// `failed`: the server answered it with an error, or skipped it after an earlier error.
pub(super) fn settle(
    client: &mut ClientStatements,
    server: &mut ServerStatements,
    o: Owed,
    failed: bool,
) {
    match o {
        Owed::TrackedParse { name, id, .. } if !failed => client.confirm(&name, id),
        Owed::TrackedParse {
            name,
            server_name,
            id,
        } => {
            server.remove_if(&server_name, id);
            // A statement this Parse replaced is still on the server under the same name,
            // unless it was replayed there for this Parse and the replay failed.
            if let Some(old) = client.reject(&name, id) {
                if old.server_name == server_name && !server.was_lost(&server_name, old.id) {
                    server.add(old.server_name.clone(), old.id);
                }
            }
        }
        Owed::Replay { server_name, id } if failed => server.replay_failed(&server_name, id),
        // A Close the server skipped: the copy is still there.
        // Entries settle in order, so a Parse sent after this Close settles after it.
        // Unless its replay in the same batch was skipped: then it never was.
        Owed::InjectedClose { server_name, id } if failed && !server.was_lost(&server_name, id) => {
            server.add(server_name, id)
        }
        // A client's Close the server skipped: the statement and its copy are still there,
        // unless that copy's own Parse or its replay was skipped too (the server never made it).
        Owed::ClientClose { name, kept, had } if failed => {
            let never_made = client.is_rejected(kept.id);
            if let Some(h) = had.filter(|h| !(never_made && h.id == kept.id)) {
                if !server.was_lost(&kept.server_name, h.id) {
                    server.restore(kept.server_name.clone(), h);
                }
            }
            client.restore(&name, kept);
        }
        // A client's Close that ran: whatever the name held before it is gone from the
        // server, also a copy an earlier failed Parse's settlement brought back (copies of
        // later Parses, with higher ids, were made after it and stay).
        Owed::ClientClose { kept, .. } => {
            if server
                .holds(&kept.server_name)
                .is_some_and(|id| id <= kept.id)
            {
                server.remove(&kept.server_name);
            }
            client.forget_rejected(kept.id);
        }
        _ => {}
    }
}
