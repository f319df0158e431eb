//! Shrinking a failing program: greedily take away clients, writes and runs of messages
//! (halves first, then smaller chunks, as delta debugging does) while the program stays
//! legal under its rules and still fails, until nothing more can go.

use super::vocab::{self, QUERIES, STATEMENTS};
use super::{ClientProgram, End, Msg, Program, Rules};

/// The smallest program found that still satisfies `still_fails`; `program` itself if nothing
/// can be taken away. `still_fails` only ever sees legal programs.
pub fn shrink(
    program: &Program,
    rules: &Rules,
    mut still_fails: impl FnMut(&Program) -> bool,
) -> Program {
    let mut best = program.clone();
    let mut try_it = |candidate: Program, best: &mut Program| -> bool {
        let ok = candidate != *best && rules.check(&candidate).is_ok() && still_fails(&candidate);
        if ok {
            *best = candidate;
        }
        ok
    };
    loop {
        let mut progress = false;
        for c in (0..best.clients.len()).rev() {
            if best.clients.len() > 1 {
                progress |= try_it(without_client(&best, c), &mut best);
            }
        }
        for c in 0..best.clients.len() {
            progress |= fence_flushes(&mut best, c, &mut try_it);
            progress |= shrink_writes(&mut best, c, &mut try_it);
            progress |= shrink_messages(&mut best, c, &mut try_it);
        }
        if !progress {
            return best;
        }
    }
}

type TryIt<'a> = dyn FnMut(Program, &mut Program) -> bool + 'a;

/// Takes away runs of whole writes (never the last, the cleanup).
fn shrink_writes(best: &mut Program, c: usize, try_it: &mut TryIt) -> bool {
    let mut progress = false;
    let mut chunk = best.clients[c].writes.len().saturating_sub(1).max(1);
    while chunk >= 1 {
        let mut at = 0;
        while at + 1 < best.clients[c].writes.len() {
            let mut cand = best.clone();
            let writes = &mut cand.clients[c].writes;
            let end = (at + chunk).min(writes.len() - 1);
            writes.drain(at..end);
            if try_it(cand, best) {
                progress = true;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    progress
}

/// Turns Flush-ended writes into fenced ones (without their Flush).
fn fence_flushes(best: &mut Program, c: usize, try_it: &mut TryIt) -> bool {
    let mut progress = false;
    for w in 0..best.clients[c].writes.len() {
        if best.clients[c].writes[w].end == End::Flush {
            let mut cand = best.clone();
            let write = &mut cand.clients[c].writes[w];
            write.msgs.pop();
            write.end = End::Fence;
            progress |= try_it(cand, best);
        }
    }
    progress
}

/// Takes away runs of units (a message, or a COPY with its data, or a Bind with its
/// Execute) from each write, then single CopyData messages.
fn shrink_messages(best: &mut Program, c: usize, try_it: &mut TryIt) -> bool {
    let mut progress = false;
    let mut w = 0;
    while w + 1 < best.clients[c].writes.len() {
        let units = units(&best.clients[c].writes[w].msgs);
        let mut chunk = units.len().max(1);
        while chunk >= 1 {
            let mut at = 0;
            loop {
                let units = units_of(best, c, w);
                if at >= units.len() {
                    break;
                }
                let from = units[at].0;
                let to = units[(at + chunk).min(units.len()) - 1].1;
                let mut cand = best.clone();
                cand.clients[c].writes[w].msgs.drain(from..to);
                if try_it(cand, best) {
                    progress = true;
                } else {
                    at += chunk;
                }
            }
            chunk /= 2;
        }
        progress |= drop_copy_data(best, c, w, try_it);
        w += 1;
    }
    progress
}

fn units_of(p: &Program, c: usize, w: usize) -> Vec<(usize, usize)> {
    p.clients[c]
        .writes
        .get(w)
        .map_or_else(Vec::new, |w| units(&w.msgs))
}

fn drop_copy_data(best: &mut Program, c: usize, w: usize, try_it: &mut TryIt) -> bool {
    let mut progress = false;
    let mut i = 0;
    while i < best.clients[c].writes.get(w).map_or(0, |w| w.msgs.len()) {
        if matches!(best.clients[c].writes[w].msgs[i], Msg::CopyData(_)) {
            let mut cand = best.clone();
            cand.clients[c].writes[w].msgs.remove(i);
            if try_it(cand, best) {
                progress = true;
                continue;
            }
        }
        i += 1;
    }
    progress
}

/// The message ranges that go together: a COPY FROM STDIN with its data and end (and, by
/// Parse, its Bind, Execute and Syncs), a Bind with the Execute after it, else one message.
fn units(msgs: &[Msg]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < msgs.len() {
        let len = match &msgs[i] {
            Msg::Query(sql) if sql.starts_with("copy ") && sql.ends_with(" from stdin") => {
                1 + copy_tail(&msgs[i + 1..])
            }
            Msg::Parse(_, sql) if sql.starts_with("copy ") && sql.ends_with(" from stdin") => {
                let tail = copy_tail(msgs.get(i + 4..).unwrap_or_default());
                (4 + tail + 1).min(msgs.len() - i)
            }
            Msg::Bind(..) if matches!(msgs.get(i + 1), Some(Msg::Execute(..))) => 2,
            _ => 1,
        };
        out.push((i, i + len));
        i += len;
    }
    out
}

/// CopyData messages and the CopyDone or CopyFail after them.
fn copy_tail(msgs: &[Msg]) -> usize {
    let data = msgs
        .iter()
        .take_while(|m| matches!(m, Msg::CopyData(_)))
        .count();
    data + usize::from(matches!(
        msgs.get(data),
        Some(Msg::CopyDone | Msg::CopyFail(_))
    ))
}

/// The program without client `c`: the clients after it move down one place and take the
/// tables, channels and lock keys of their new numbers.
fn without_client(p: &Program, c: usize) -> Program {
    let mut clients = p.clients.clone();
    clients.remove(c);
    for (to, client) in clients.iter_mut().enumerate().skip(c) {
        *client = renumbered(client, to + 1, to);
    }
    Program { clients }
}

fn renumbered(client: &ClientProgram, from: usize, to: usize) -> ClientProgram {
    let mut out = client.clone();
    for w in &mut out.writes {
        for m in &mut w.msgs {
            match m {
                Msg::Query(sql) => *sql = vocab::renumber(QUERIES, sql, from, to),
                Msg::Parse(_, sql) => *sql = vocab::renumber(STATEMENTS, sql, from, to),
                _ => {}
            }
        }
    }
    out
}
