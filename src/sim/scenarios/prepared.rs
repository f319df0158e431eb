//! tests/it/prepared.rs, the contract's checklist and its rules one by one: a client's named
//! statements renamed per client on the servers, replayed where missing, and what the pooler
//! answers itself (26000, 42P05, CloseComplete) in its place in the pipeline.

use super::{
    bind, bind_portal, client, close_s, describe_p, describe_s, exec, fence, flush, never_sent,
    one, parse, parsed_once_per_server, program, q, renamed, run, servers_parsing, simple, sync,
    Report, Scenario, Setup, BASE,
};
use crate::config::PoolMode;
use crate::sim::program::{Msg, Program};

/// Transaction mode with tracking, a pool of two and of one.
pub const TRACKED: &[&str] = &["transaction-tracked", "transaction-tracked-pool-1"];
/// Those and statement mode with tracking (no transaction blocks in the program).
pub const TRACKED_ALL: &[&str] = &[
    "transaction-tracked",
    "transaction-tracked-pool-1",
    "statement-tracked",
];
/// Transaction mode with tracking, and session mode with tracking.
pub const TRACKED_TX: &[&str] = &[
    "transaction-tracked",
    "transaction-tracked-pool-1",
    "session-tracked",
];

/// Whether the pooler tracks statements in `s` (answering for them itself); in session mode
/// it passes them through.
fn pooler_answers(s: &Setup) -> bool {
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
            // A Close S reaches a server only as the pooler's own, just before the Parse that
            // replaces a stale copy.
            for log in &r.servers {
                let m = log.messages();
                for (i, msg) in m.iter().enumerate() {
                    if let Msg::Close('S', n) = msg {
                        let next = m.get(i + 1);
                        if !matches!(next, Some(Msg::Parse(p, _)) if p == n) {
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
        name: "unknown_name_26000_from_the_pooler",
        origin: "prepared.rs::unknown_name_gets_26000_from_the_pooler",
        setups: TRACKED_TX,
        program: unknown_name,
        codes: &["26000"],
        check: Some(|s, r| {
            if !pooler_answers(s) {
                return Ok(());
            }
            never_sent(r, |m| match m {
                Msg::Bind(_, s, _) | Msg::Describe('S', s) => s.ends_with("nope"),
                _ => false,
            })
        }),
        ..BASE
    },
    Scenario {
        name: "pooler_error_fails_the_transaction",
        origin: "prepared.rs::pooler_error_inside_a_transaction_fails_it",
        setups: TRACKED_TX,
        program: || {
            one(vec![
                fence(vec![
                    q("begin"),
                    q("insert into diff_t0 values (1)"),
                    bind("nope", &[]),
                    exec(),
                    sync(),
                    q("commit"),
                ]),
                simple("select count(*) from diff_t0"),
            ])
        },
        codes: &["26000"],
        ..BASE
    },
    Scenario {
        name: "close_statement_not_forwarded_close_portal_is",
        origin: "prepared.rs::close_is_answered_by_the_pooler_and_forwards_nothing",
        setups: TRACKED_TX,
        program: close_not_forwarded,
        codes: &["26000", "34000"],
        check: Some(|s, r| {
            if !pooler_answers(s) {
                return Ok(());
            }
            never_sent(r, |m| matches!(m, Msg::Close('S', _)))?;
            let portal = r
                .sent()
                .iter()
                .any(|(_, m)| *m == Msg::Close('P', "po".into()));
            portal
                .then_some(())
                .ok_or_else(|| "the portal's Close did not reach the server".into())
        }),
        ..BASE
    },
    Scenario {
        name: "duplicate_parse_42p05_from_the_pooler",
        origin: "prepared.rs::duplicate_parse_gets_42p05_from_the_pooler",
        setups: &[
            "transaction-tracked",
            "transaction-tracked-pool-1",
            "statement-tracked",
            "session-tracked",
        ],
        program: duplicate_parse,
        codes: &["42P05"],
        check: Some(|s, r| {
            if !pooler_answers(s) {
                return Ok(());
            }
            never_sent(
                r,
                |m| matches!(m, Msg::Parse(_, sql) if sql.contains("two") || sql.contains("q2")),
            )
        }),
        ..BASE
    },
    Scenario {
        name: "statement_kept_from_its_forwarded_parse",
        origin: "prepared.rs::statement_is_kept_from_its_forwarded_parse",
        setups: TRACKED_ALL,
        program: || {
            one(vec![fence(vec![
                parse("a", "select $1::text"),
                bind("a", &["hi"]),
                describe_p(""),
                exec(),
                parse("b", "select 2"),
                describe_s("b"),
                bind("b", &[]),
                exec(),
            ])])
        },
        ..BASE
    },
    Scenario {
        name: "parse_rejected_by_the_server_is_dropped",
        origin: "prepared.rs::parse_rejected_by_the_server_is_dropped",
        setups: &[
            "transaction-tracked",
            "transaction-tracked-pool-1",
            "statement-tracked",
            "session-tracked",
        ],
        program: parse_rejected,
        codes: &["26000", "42601", "42P01"],
        ..BASE
    },
    Scenario {
        name: "reparse_after_rejected_parse_pipelined",
        origin: "prepared.rs::reparse_after_rejected_parse_in_one_pipeline",
        setups: &[
            "transaction-tracked",
            "transaction-tracked-pool-1",
            "statement-tracked",
            "session-tracked",
        ],
        program: || {
            one(vec![fence(vec![
                parse("r", "selec 1"),
                sync(),
                parse("r", "select 12"),
                bind("r", &[]),
                exec(),
            ])])
        },
        codes: &["42601"],
        ..BASE
    },
    Scenario {
        name: "pooler_answers_in_pipeline_order",
        origin: "prepared.rs::pooler_answers_keep_their_order_in_a_pipeline",
        setups: TRACKED_ALL,
        program: pooler_answer_order,
        codes: &["26000", "42P05"],
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

fn unknown_name() -> Program {
    one(vec![
        fence(run("nope", &[])),
        fence(vec![describe_s("nope")]),
        fence(vec![
            bind("nope", &[]),
            parse("q", "select 'q'"),
            bind("q", &[]),
            exec(),
            sync(),
            q("select 'next'"),
        ]),
        fence(run("q", &[])),
        fence(vec![parse("q", "select 'q'"), bind("q", &[]), exec()]),
        simple("begin"),
        fence(vec![bind("q", &[]), exec(), bind("nope", &[]), exec()]),
        simple("rollback"),
        simple("select 1"),
    ])
}

fn close_not_forwarded() -> Program {
    one(vec![
        fence(vec![parse("p", "select 'p'")]),
        simple("begin"),
        fence(vec![close_s("p")]),
        fence(run("p", &[])),
        simple("rollback"),
        fence(vec![close_s("never")]),
        fence(vec![parse("q", "select 'q'")]),
        simple("begin"),
        fence(vec![
            bind_portal("po", "q", &[]),
            Msg::Close('P', "po".into()),
            Msg::Execute("po".into(), 0),
        ]),
        simple("rollback"),
    ])
}

fn duplicate_parse() -> Program {
    one(vec![
        fence(vec![parse("p", "select 'one'")]),
        fence(vec![parse("p", "select 'two'"), bind("p", &[]), exec()]),
        fence(run("p", &[])),
        fence(vec![
            parse("q", "select 'q1'"),
            parse("q", "select 'q2'"),
            bind("q", &[]),
            exec(),
        ]),
        fence(run("q", &[])),
        simple("select 'usable'"),
    ])
}

fn parse_rejected() -> Program {
    one(vec![
        fence(vec![parse("bad", "selec 1")]),
        fence(run("bad", &[])),
        fence(vec![parse("bad", "select 11"), bind("bad", &[]), exec()]),
        fence(vec![
            parse("bad2", "select n from no_such_table_prep"),
            bind("bad2", &[]),
            exec(),
        ]),
        fence(vec![describe_s("bad2")]),
        fence(vec![parse("bad2", "select 12"), bind("bad2", &[]), exec()]),
        fence(vec![parse("", "selec"), parse("skipped", "select 13")]),
        fence(vec![
            parse("skipped", "select 13"),
            bind("skipped", &[]),
            exec(),
        ]),
    ])
}

fn pooler_answer_order() -> Program {
    one(vec![
        fence(vec![parse("a", "select 'a'"), parse("b", "select 'b'")]),
        fence(vec![
            bind("a", &[]),
            exec(),
            close_s("b"),
            parse("c", "select 'c'"),
            bind("c", &[]),
            exec(),
            parse("a", "select 'dup'"),
            bind("c", &[]),
            exec(),
            sync(),
            describe_s("b"),
            sync(),
            bind("a", &[]),
            exec(),
            close_s("c"),
            sync(),
            q("select 'q'"),
        ]),
        fence(vec![parse("d", "select 'd'")]),
        flush(vec![bind("a", &[]), exec(), close_s("d")]),
        fence(vec![]),
    ])
}
