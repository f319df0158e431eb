//! tests/it/prepared.rs, continued: statements across servers and clients, DEALLOCATE ALL and
//! DISCARD ALL, Close skipped after an error, eviction under a bound, and tracking in session
//! and statement mode.

use super::prepared::{TRACKED, TRACKED_ALL, TRACKED_TX};
use super::{
    bind, client, close_s, describe_s, exec, fence, flush, never_sent, one, parse,
    parsed_once_per_server, program, q, renamed, run, servers_parsing, simple, sync, Expect,
    Report, Scenario, Setup, BASE,
};
use crate::config::PoolMode;
use crate::sim::program::{Msg, Program};

/// No server held more named statements than the setup's bound.
fn bounded(s: &Setup, r: &Report) -> Result<(), String> {
    let max = s.limits.max_prepared.unwrap_or(usize::MAX);
    match r.servers.iter().position(|l| l.peak_prepared > max) {
        Some(i) => Err(format!(
            "server connection {i} held {} statements, bound {max}",
            r.servers[i].peak_prepared
        )),
        None => Ok(()),
    }
}

pub const TABLE: &[Scenario] = &[
    Scenario {
        name: "client_bound_53400_from_the_pooler",
        origin: "prepared.rs::client_statements_are_bounded",
        setups: &["tracked-client-bound-3"],
        program: || client_bound("select 4"),
        // Directly the fourth Parse succeeds; expected is a direct run where it fails (bad
        // SQL), with the pooler's 53400 in place of that syntax error.
        expect: Some(Expect {
            direct: || client_bound("selec 4"),
            errors: &[(
                "42601",
                "53400",
                "too many prepared statements: the pooler keeps at most 3 per client \
                 (pool.max_client_prepared_statements); close some before preparing \"s4\"",
            )],
        }),
        codes: &["42P05", "53400"],
        check: Some(|_, r| parsed_once_per_server(r, &renamed(0, "s4"))),
        ..BASE
    },
    Scenario {
        name: "pool_answers_sync_without_a_server",
        origin: "prepared.rs::pool_answers_sync_when_nothing_reached_a_server",
        setups: TRACKED_ALL,
        program: || {
            one(vec![
                fence(vec![parse("p", "select 1")]),
                fence(vec![close_s("p")]),
                fence(run("nope", &[])),
                fence(vec![describe_s("nope")]),
                fence(vec![parse("q", "select 2")]),
                fence(vec![parse("q", "select 3")]),
                fence(vec![
                    close_s("q"),
                    sync(),
                    bind("q", &[]),
                    exec(),
                    sync(),
                    close_s("zz"),
                    sync(),
                ]),
                flush(vec![close_s("zz")]),
                fence(vec![]),
            ])
        },
        codes: &["26000", "42P05"],
        check: Some(|_, r| {
            never_sent(r, |m| match m {
                Msg::Close('S', _) | Msg::Describe('S', _) => true,
                Msg::Bind(_, s, _) => !s.is_empty(),
                Msg::Parse(_, sql) => sql == "select 3",
                _ => false,
            })
        }),
        ..BASE
    },
    Scenario {
        name: "other_client_unknown_name_then_its_own",
        origin: "prepared.rs::statements_forgotten_when_the_client_leaves",
        setups: TRACKED_ALL,
        program: || {
            program(vec![
                client(vec![fence(vec![parse("p", "select 'old'")])]),
                client(vec![
                    fence(run("p", &[])),
                    fence(vec![parse("p", "select 'new'"), bind("p", &[]), exec()]),
                ]),
                client(vec![fence(vec![describe_s("p")])]),
            ])
        },
        codes: &["26000"],
        ..BASE
    },
    Scenario {
        name: "deallocate_all_in_pipeline_order",
        origin: "prepared.rs::deallocate_all_clears_in_pipeline_order",
        // A pool of one, as in the original: a Bind pipelined behind DEALLOCATE ALL is judged
        // as before it (README, "Prepared statements"), so on a server without the statement
        // it would be replayed where PostgreSQL answers 26000.
        setups: &["transaction-tracked-pool-1"],
        program: deallocate_all_pipelined,
        codes: &["26000"],
        some: Some((
            "client 1's x prepared again after the DEALLOCATE",
            |_, r| r.parses_of(&renamed(1, "x")).len() >= 2,
        )),
        ..BASE
    },
    Scenario {
        name: "discard_and_deallocate_all_in_both_protocols",
        origin: "prepared.rs::discard_all_clears_in_both_protocols",
        setups: TRACKED_ALL,
        program: discard_both_protocols,
        codes: &["26000"],
        ..BASE
    },
    Scenario {
        name: "refused_discard_all_keeps_statements",
        origin: "prepared.rs::refused_discard_all_keeps_statements",
        setups: TRACKED_TX,
        program: || {
            one(vec![fence(vec![
                parse("p", "select 'p'"),
                sync(),
                q("begin"),
                q("discard all"),
                q("rollback"),
                bind("p", &[]),
                exec(),
                sync(),
                parse("q", "select 'q'"),
                sync(),
                q("begin"),
                q("select 1/0"),
                q("deallocate all"),
                q("rollback"),
                bind("q", &[]),
                exec(),
            ])])
        },
        codes: &["22012", "25001", "25P02"],
        ..BASE
    },
    Scenario {
        name: "close_skipped_after_an_error",
        origin: "prepared.rs::close_skipped_after_an_error_keeps_the_statement",
        setups: &[
            "transaction-tracked",
            "transaction-tracked-pool-1",
            "statement-tracked",
            "session-tracked",
        ],
        program: || {
            one(vec![
                fence(vec![parse("p", "select 'p'")]),
                fence(vec![bind("p", &["1"]), close_s("p")]),
                fence(run("p", &[])),
            ])
        },
        codes: &["08P01"],
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
    Scenario {
        name: "eviction_keeps_servers_bounded",
        origin: "prepared.rs::eviction_keeps_the_server_bounded",
        setups: &["tracked-bound-4"],
        program: eviction,
        check: Some(bounded),
        ..BASE
    },
    Scenario {
        name: "session_mode_with_tracking",
        origin: "prepared.rs::session_mode_with_tracking_works",
        setups: &["session-tracked"],
        program: session_tracking,
        codes: &["26000", "42P05"],
        ..BASE
    },
    Scenario {
        name: "deallocate_all_with_comments",
        origin: "prepared.rs::deallocate_all_with_comments_clears_too",
        setups: TRACKED_ALL,
        program: || {
            let each = |sql: &str| {
                fence(vec![
                    parse("k", "select 'k'"),
                    sync(),
                    q(sql),
                    parse("k", "select 'k2'"),
                    bind("k", &[]),
                    exec(),
                    close_s("k"),
                ])
            };
            one(vec![
                each("/* reset */ DEALLOCATE ALL"),
                each("DEALLOCATE ALL -- reset"),
                each("/* app=web */ DISCARD ALL"),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "discard_all_through_a_named_statement",
        origin: "prepared.rs::discard_all_through_a_named_statement_clears_the_server_record",
        setups: TRACKED,
        program: || {
            let named = |i: usize, sql: &str| {
                let name = format!("d{i}");
                fence(vec![parse(&name, sql), bind(&name, &[]), exec()])
            };
            program(vec![
                client(vec![named(0, "DISCARD ALL"), named(1, "DEALLOCATE ALL")]),
                client(vec![
                    fence(vec![parse("x", "select 'x'")]),
                    fence(run("x", &[])),
                    fence(run("x", &[])),
                    fence(run("x", &[])),
                ]),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "statement_mode_with_tracking",
        origin: "prepared.rs::statement_mode_with_tracking_works",
        setups: &["statement-tracked", "transaction-tracked"],
        program: statement_tracking,
        codes: &["26000"],
        ..BASE
    },
    Scenario {
        name: "injected_close_of_stale_copy_skipped",
        origin: "prepared.rs::injected_close_of_a_stale_copy_skipped_after_an_error",
        setups: TRACKED_ALL,
        program: || {
            one(vec![
                fence(vec![parse("p", "select 'one'"), parse("q", "select 1")]),
                fence(vec![close_s("p")]),
                fence(vec![bind("q", &["1"]), parse("p", "select 'two'")]),
                fence(vec![parse("p", "select 'three'"), bind("p", &[]), exec()]),
            ])
        },
        codes: &["08P01"],
        ..BASE
    },
    Scenario {
        name: "injected_eviction_close_skipped",
        origin: "prepared.rs::injected_eviction_close_skipped_after_an_error",
        setups: &["tracked-bound-1"],
        program: || {
            one(vec![
                fence(vec![parse("a", "select 'a'")]),
                fence(vec![bind("a", &["1"]), parse("b", "select 'b'")]),
                fence(run("a", &[])),
            ])
        },
        codes: &["08P01"],
        ..BASE
    },
    Scenario {
        name: "eviction_with_a_bound_of_one",
        origin: "prepared.rs::eviction_with_a_bound_of_one",
        setups: &["tracked-bound-1"],
        program: || {
            one(vec![
                fence(vec![
                    parse("a", "select 'a'"),
                    parse("b", "select 'b'"),
                    bind("a", &[]),
                    exec(),
                    bind("b", &[]),
                    exec(),
                    describe_s("a"),
                    bind("a", &[]),
                    exec(),
                ]),
                simple("begin"),
                fence(run("b", &[])),
                simple("commit"),
            ])
        },
        check: Some(bounded),
        ..BASE
    },
];

fn deallocate_all_pipelined() -> Program {
    program(vec![
        client(vec![
            fence(vec![parse("a", "select 'a'")]),
            fence(vec![
                q("DEALLOCATE ALL"),
                parse("b", "select 'b'"),
                bind("b", &[]),
                exec(),
                sync(),
                bind("a", &[]),
                exec(),
            ]),
            fence(vec![
                parse("a", "select 'a2'"),
                bind("a", &[]),
                exec(),
                bind("b", &[]),
                exec(),
            ]),
            fence(vec![
                parse("d", "select 'd'"),
                sync(),
                q("deallocate prepare all"),
                bind("d", &[]),
                exec(),
            ]),
        ]),
        client(vec![
            fence(vec![parse("x", "select 'x'")]),
            fence(run("x", &[])),
            fence(run("x", &[])),
        ]),
    ])
}

fn discard_both_protocols() -> Program {
    let mut writes = Vec::new();
    for (i, sql) in ["DISCARD ALL", "DEALLOCATE ALL", "discard all"]
        .iter()
        .enumerate()
    {
        writes.push(fence(vec![parse("k", "select 'k'")]));
        writes.push(if i == 0 {
            simple(sql)
        } else {
            fence(vec![parse("", sql), bind("", &[]), exec()])
        });
        writes.push(fence(run("k", &[])));
        writes.push(fence(vec![
            parse("k", "select 'k2'"),
            bind("k", &[]),
            exec(),
            close_s("k"),
        ]));
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

fn eviction() -> Program {
    let mut writes = Vec::new();
    for i in 0..12 {
        let name = format!("s{i}");
        let sql = format!("select {i}, $1::int4");
        writes.push(fence(vec![parse(&name, &sql), bind(&name, &["1"]), exec()]));
    }
    for k in 0..12 {
        let name = format!("s{}", (k * 5) % 12);
        writes.push(fence(run(&name, &["2"])));
    }
    let mut msgs: Vec<Msg> = (0..8)
        .map(|j| parse(&format!("t{j}"), &format!("select {j}")))
        .collect();
    for j in 0..8 {
        msgs.extend(run(&format!("t{j}"), &[]));
    }
    writes.push(fence(msgs));
    one(writes)
}

fn session_tracking() -> Program {
    let mut c0 = vec![fence(vec![parse("p", "select 'one'")])];
    for _ in 0..3 {
        c0.push(fence(vec![
            q("begin"),
            bind("p", &[]),
            exec(),
            sync(),
            q("commit"),
        ]));
    }
    c0.extend([
        fence(vec![parse("p", "select 'dup'")]),
        fence(vec![
            close_s("p"),
            parse("p", "select 'again'"),
            bind("p", &[]),
            exec(),
        ]),
        fence(vec![q("deallocate all"), bind("p", &[]), exec()]),
    ]);
    let mut c1 = vec![fence(vec![parse("p", "select 'two'")])];
    c1.extend((0..4).map(|_| fence(run("p", &[]))));
    let c2 = vec![fence(vec![
        parse("p", "select 'three'"),
        bind("p", &[]),
        exec(),
    ])];
    program(vec![client(c0), client(c1), client(c2)])
}

fn statement_tracking() -> Program {
    let c = |i: usize| {
        let mut writes = vec![fence(vec![parse("p", &format!("select 'c{i}', $1::int4"))])];
        writes.extend((0..6).map(|r| fence(run("p", &[&r.to_string()]))));
        if i == 0 {
            writes.push(fence(vec![close_s("p")]));
            writes.push(fence(run("p", &["1"])));
        }
        client(writes)
    };
    program(vec![c(0), c(1)])
}

/// `client_statements_are_bounded`: the fourth name of a client bounded to three.
fn client_bound(s4: &'static str) -> Program {
    one(vec![
        fence(vec![parse("s1", "select 1")]),
        fence(vec![parse("s2", "select 1")]),
        fence(vec![parse("s3", "select 1")]),
        fence(vec![parse("s4", s4), bind("s4", &[]), exec()]),
        fence(vec![parse("s1", "select 1")]),
        simple("begin"),
        fence(vec![parse("s4", s4)]),
        simple("rollback"),
        fence(run("s2", &[])),
        fence(vec![close_s("s3"), parse("s4", "select 4")]),
    ])
}
