//! tests/it/prepared.rs: what the pooler answers itself (26000, 42P05, 53400, CloseComplete,
//! a ReadyForQuery when nothing reached a server), each in its place in the pipeline, and
//! statements a server rejected forgotten.

use super::prepared::{pooler_answers, TRACKED_ALL, TRACKED_TX};
use super::{
    bind, bind_portal, client, close_s, describe_p, describe_s, exec, fence, flush, never_sent,
    one, parse, parsed_once_per_server, program, q, renamed, run, simple, sync, Expect, Scenario,
    BASE,
};
use crate::sim::program::{Msg, Program};

pub const TABLE: &[Scenario] = &[
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
];

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
