//! tests/it/prepared.rs: DEALLOCATE ALL and DISCARD ALL (in a Query, through the extended
//! protocol, with comments, refused by the server) clearing the client's statements in
//! pipeline order and the server's record, and Closes skipped after an error.

use super::prepared::{TRACKED, TRACKED_ALL, TRACKED_TX};
use super::{
    bind, client, close_s, exec, fence, one, parse, program, q, renamed, run, simple, sync,
    Scenario, BASE,
};
use crate::sim::program::Program;

pub const TABLE: &[Scenario] = &[
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
