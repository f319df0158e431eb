//! tests/it/prepared.rs, the contract's checklist: a client's named statements renamed
//! `p<c>_<name>` on the servers, replayed where missing and never where present, as clients
//! move between servers.

use super::{
    bind, client, close_s, describe_p, describe_s, exec, fence, flush, never_sent, one, parse,
    parsed_once_per_server, program, q, renamed, run, servers_parsing, simple, sync, Report,
    Scenario, Setup, BASE,
};
use crate::config::PoolMode;
use crate::sim::program::{Msg, Program};

/// Transaction mode with tracking, a pool of two and of one.
pub(super) const TRACKED: &[&str] = &["transaction-tracked", "transaction-tracked-pool-1"];
/// Those and statement mode with tracking (no transaction blocks in the program).
pub(super) const TRACKED_ALL: &[&str] = &[
    "transaction-tracked",
    "transaction-tracked-pool-1",
    "statement-tracked",
];
/// Transaction mode with tracking, and session mode with tracking.
pub(super) const TRACKED_TX: &[&str] = &[
    "transaction-tracked",
    "transaction-tracked-pool-1",
    "session-tracked",
];

/// Whether the pooler tracks statements in `s` (answering for them itself); in session mode
/// it passes them through.
pub(super) fn pooler_answers(s: &Setup) -> bool {
    s.track && s.mode != PoolMode::Session
}

/// Client 0's `p` was parsed on both servers of a pool of two (replayed on the second);
/// trivially true where no replay can happen.
fn replayed_p(s: &Setup, r: &Report) -> bool {
    s.pool_size < 2 || servers_parsing(r, &renamed(0, "p")) == 2
}

/// Client 0's `p` never parsed twice on one server, and the servers never saw its own name.
fn p_once_per_server(_: &Setup, r: &Report) -> Result<(), String> {
    parsed_once_per_server(r, &renamed(0, "p"))?;
    never_sent(r, |m| matches!(m, Msg::Parse(n, _) if n == "p"))
}

pub const TABLE: &[Scenario] = &[
    Scenario {
        name: "tracked_statement_replayed_on_another_server",
        origin: "prepared.rs::prepared_statement_tracked",
        setups: TRACKED,
        program: prepared_statement_tracked,
        check: Some(p_once_per_server),
        some: Some(("p replayed on the second server", replayed_p)),
        ..BASE
    },
    Scenario {
        name: "two_clients_same_name",
        origin: "prepared.rs::names_do_not_collide",
        setups: TRACKED_ALL,
        program: names_do_not_collide,
        check: Some(|_, r| {
            for (c, text) in [(0, "select 'one'"), (1, "select 'two'")] {
                let name = renamed(c, "p");
                if let Some((s, sql)) = r.parses_of(&name).into_iter().find(|(_, t)| t != text) {
                    return Err(format!("{name} on server {s} is {sql:?}"));
                }
            }
            never_sent(r, |m| matches!(m, Msg::Parse(n, _) if n == "p"))
        }),
        ..BASE
    },
    Scenario {
        name: "close_answered_by_pooler_then_parse_again",
        origin: "prepared.rs::close_tracked",
        setups: TRACKED_ALL,
        program: close_tracked,
        codes: &["26000"],
        check: Some(|_, r| {
            // The Close S of client 1's statement reaches a server only as the pooler's own,
            // just before the Parse that replaces a stale copy. (Client 2's copies are closed
            // by the next client to hold a server once client 2 has left: `pool::orphans`.)
            for log in &r.servers {
                let m = log.messages();
                for (i, msg) in m.iter().enumerate() {
                    if let Msg::Close('S', n) = msg {
                        let next = m.get(i + 1);
                        let replaced = matches!(next, Some(Msg::Parse(p, _)) if p == n);
                        if n.starts_with("p1_") && !replaced {
                            return Err(format!("Close of {n} forwarded, then {next:?}"));
                        }
                    }
                }
            }
            Ok(())
        }),
        ..BASE
    },
    Scenario {
        name: "sql_prepare_forwarded_unchanged",
        origin: "prepared.rs::sql_prepare_not_tracked",
        setups: &["transaction-tracked-pool-1", "session-tracked"],
        program: || one(vec![simple("PREPARE s AS select 7"), simple("EXECUTE s")]),
        check: Some(|_, r| {
            let sent = r.sent();
            let forwarded = sent.iter().any(|(_, m)| *m == q("PREPARE s AS select 7"));
            if !forwarded {
                return Err("the PREPARE did not reach a server as written".into());
            }
            never_sent(r, |m| matches!(m, Msg::Parse(n, _) if !n.is_empty()))
        }),
        ..BASE
    },
    Scenario {
        name: "replayed_parse_complete_hidden_with_flush_and_pipeline",
        origin: "prepared.rs::replayed_parse_complete_never_reaches_client",
        setups: TRACKED,
        program: replayed_parse_complete,
        check: Some(p_once_per_server),
        some: Some(("p replayed on the second server", replayed_p)),
        ..BASE
    },
    Scenario {
        name: "renamed_messages_of_many_name_lengths",
        origin: "prepared.rs::renamed_messages_get_their_length_rewritten",
        setups: TRACKED,
        program: renamed_lengths,
        codes: &["26000"],
        check: Some(|_, r| {
            LENGTH_NAMES
                .iter()
                .try_for_each(|n| parsed_once_per_server(r, &renamed(0, &long_name(n))))
        }),
        some: Some(("a statement replayed on the second server", |s, r| {
            s.pool_size < 2
                || LENGTH_NAMES
                    .iter()
                    .any(|n| servers_parsing(r, &renamed(0, &long_name(n))) == 2)
        })),
        ..BASE
    },
    Scenario {
        name: "long_names_differing_at_their_end",
        origin: "prepared.rs::long_names_stay_distinct_on_the_server",
        setups: TRACKED_ALL,
        program: long_names,
        check: Some(|_, r| {
            // PostgreSQL keeps 63 bytes of a name: longer ones would collide there.
            let names: Vec<String> = r
                .sent()
                .into_iter()
                .filter_map(|(_, m)| match m {
                    Msg::Parse(n, _) if !n.is_empty() => Some(n),
                    _ => None,
                })
                .collect();
            if let Some(n) = names.iter().find(|n| n.len() > 63) {
                return Err(format!("{n} is longer than PostgreSQL keeps"));
            }
            match names.as_slice() {
                [a, b, ..] if a != b => Ok(()),
                other => Err(format!("the two statements' server names: {other:?}")),
            }
        }),
        ..BASE
    },
    Scenario {
        name: "no_replay_where_present_while_moving",
        origin: "prepared.rs::no_replay_where_the_statement_exists",
        setups: TRACKED,
        program: no_replay_where_present,
        check: Some(p_once_per_server),
        some: Some(("p on both servers", replayed_p)),
        ..BASE
    },
    Scenario {
        name: "no_replay_on_the_same_server",
        origin: "prepared.rs::no_replay_on_the_same_server",
        setups: TRACKED_ALL,
        program: no_replay_same_server,
        check: Some(|_, r| match r.parses_of(&renamed(0, "p")).len() {
            1 => Ok(()),
            n => Err(format!("one client, one server: p parsed {n} times")),
        }),
        ..BASE
    },
    Scenario {
        name: "unnamed_statement_follows_the_client",
        origin: "prepared.rs::unnamed_statement_follows_the_client",
        setups: TRACKED,
        // Writes end with Sync and Flush, not a fence: a fence's empty simple Query would
        // drop the unnamed statement.
        program: || {
            let mut c0 = vec![flush(vec![
                parse("", "select $1::int4"),
                describe_s(""),
                sync(),
            ])];
            for i in 0..4 {
                let mut msgs = if i % 2 == 1 {
                    vec![describe_s("")]
                } else {
                    vec![]
                };
                msgs.extend(run("", &[&i.to_string()]));
                msgs.push(sync());
                c0.push(flush(msgs));
            }
            // A simple Query drops it: 26000, from PostgreSQL directly, from the pooler here.
            c0.push(simple("select 1"));
            c0.push(fence(run("", &["9"])));
            let c1 = (0..4).map(|_| {
                flush(vec![
                    parse("", "select 'c1', $1::text"),
                    describe_s(""),
                    sync(),
                ])
            });
            let mut c1: Vec<_> = c1.collect();
            c1.push(simple("select 'c1 done'"));
            program(vec![client(c0), client(c1)])
        },
        codes: &["26000"],
        some: Some((
            "client 0's unnamed statement parsed again (replayed)",
            |_, r| {
                let mine = r.parses_of("").into_iter();
                mine.filter(|(_, sql)| sql == "select $1::int4").count() > 1
            },
        )),
        ..BASE
    },
    Scenario {
        name: "describe_statement_replays",
        origin: "prepared.rs::describe_statement_replays",
        setups: TRACKED,
        program: || {
            program(vec![
                client(vec![
                    fence(vec![parse("p", "select $1::int4, 'y', $2::int8")]),
                    fence(vec![describe_s("p")]),
                    fence(run("p", &["1", "2"])),
                ]),
                client(vec![simple("begin"), simple("commit")]),
            ])
        },
        check: Some(|_, r| parsed_once_per_server(r, &renamed(0, "p"))),
        some: Some(("p replayed on the second server", |s, r| {
            s.pool_size < 2 || servers_parsing(r, &renamed(0, "p")) == 2
        })),
        ..BASE
    },
    Scenario {
        name: "two_clients_same_name_moving_between_servers",
        origin: "prepared.rs::statements_follow_clients_across_servers",
        setups: &[
            "transaction-tracked",
            "transaction-tracked-pool-1",
            "session-tracked",
        ],
        program: follow_clients,
        check: Some(|_, r| {
            for c in 0..2 {
                let name = renamed(c, "p");
                parsed_once_per_server(r, &name)?;
                let own = format!("select 'client{}', $1::text", c + 1);
                if r.parses_of(&name).iter().any(|(_, sql)| *sql != own) {
                    return Err(format!("{name} parsed with another client's text"));
                }
            }
            Ok(())
        }),
        some: Some(("each client's p on both servers", |s, r| {
            s.pool_size < 2
                || s.mode == PoolMode::Session
                || (0..2).all(|c| servers_parsing(r, &renamed(c, "p")) == 2)
        })),
        ..BASE
    },
];

fn prepared_statement_tracked() -> Program {
    program(vec![
        client(vec![
            fence(vec![parse("p", "select $1::int4")]),
            fence(run("p", &["21"])),
        ]),
        client(vec![simple("BEGIN"), simple("COMMIT")]),
    ])
}

fn names_do_not_collide() -> Program {
    let c = |text: &str| {
        client(vec![
            fence(vec![parse("p", &format!("select '{text}'"))]),
            fence(run("p", &[])),
            fence(run("p", &[])),
        ])
    };
    program(vec![c("one"), c("two")])
}

fn close_tracked() -> Program {
    program(vec![
        client(vec![
            fence(vec![parse("p", "select 'one'")]),
            fence(vec![close_s("p")]),
            fence(run("p", &[])),
            simple("select 5"),
            fence(vec![parse("p", "select 'three'"), bind("p", &[]), exec()]),
            fence(run("p", &[])),
        ]),
        client(vec![
            fence(vec![parse("p", "select 'two'")]),
            fence(run("p", &[])),
        ]),
    ])
}

fn replayed_parse_complete() -> Program {
    program(vec![
        client(vec![
            fence(vec![parse("p", "select $1::int4")]),
            flush(vec![bind("p", &["1"])]),
            fence(vec![exec()]),
            fence(vec![
                bind("p", &["10"]),
                describe_p(""),
                exec(),
                sync(),
                bind("p", &["20"]),
                exec(),
                sync(),
                q("select 'after'"),
            ]),
        ]),
        client(vec![simple("begin"), simple("commit")]),
    ])
}

/// The lengths of the names `renamed_lengths` uses.
const LENGTH_NAMES: [usize; 5] = [1, 2, 9, 30, 55];

fn long_name(n: &usize) -> String {
    let i = LENGTH_NAMES.iter().position(|m| m == n).unwrap_or(0);
    format!("{}{}", (b'a' + i as u8) as char, "x".repeat(n - 1))
}

fn renamed_lengths() -> Program {
    let names: Vec<String> = LENGTH_NAMES.iter().map(long_name).collect();
    let mut writes: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            fence(vec![
                parse(name, &format!("select $1::int4, {i}")),
                describe_s(name),
                bind(name, &[&i.to_string()]),
                exec(),
                sync(),
                q("select 'tail'"),
            ])
        })
        .collect();
    let mut again = Vec::new();
    for (i, name) in names.iter().enumerate() {
        again.extend([
            describe_s(name),
            bind(name, &[&(i + 1).to_string()]),
            exec(),
        ]);
    }
    writes.push(fence(again));
    writes.push(fence(names.iter().map(|n| close_s(n)).collect()));
    writes.extend(names.iter().map(|n| fence(vec![describe_s(n)])));
    program(vec![
        client(writes),
        client(
            (0..6)
                .flat_map(|_| [simple("begin"), simple("select 1"), simple("commit")])
                .collect(),
        ),
    ])
}

fn long_names() -> Program {
    let a = format!("{}a", "n".repeat(61));
    let b = format!("{}b", "n".repeat(61));
    one(vec![fence(vec![
        parse(&a, "select 'A'"),
        parse(&b, "select 'B'"),
        bind(&a, &[]),
        exec(),
        bind(&b, &[]),
        exec(),
    ])])
}

fn no_replay_where_present() -> Program {
    let mut writes = vec![fence(vec![parse("p", "select $1::int4")])];
    writes.extend((0..10).map(|i| fence(run("p", &[&i.to_string()]))));
    let mut other = Vec::new();
    for _ in 0..4 {
        other.extend([simple("begin"), simple("select 1"), simple("commit")]);
    }
    program(vec![client(writes), client(other)])
}

fn no_replay_same_server() -> Program {
    let mut writes = vec![fence(vec![parse("p", "select $1::int4")])];
    for i in 0..10 {
        let mut msgs = if i % 2 == 1 {
            vec![describe_s("p")]
        } else {
            vec![]
        };
        msgs.extend(run("p", &[&i.to_string()]));
        writes.push(fence(msgs));
    }
    one(writes)
}

fn follow_clients() -> Program {
    let c = |i: usize| {
        let mut writes = vec![fence(vec![parse(
            "p",
            &format!("select 'client{}', $1::text", i + 1),
        )])];
        for round in 0..8 {
            if i == 0 && round % 2 == 1 {
                writes.push(simple("select 1"));
            }
            let v = round.to_string();
            writes.push(if round % 3 == 0 {
                fence(vec![
                    q("begin"),
                    bind("p", &[&v]),
                    exec(),
                    sync(),
                    q("commit"),
                ])
            } else {
                fence(run("p", &[&v]))
            });
        }
        client(writes)
    };
    program(vec![c(0), c(1)])
}
