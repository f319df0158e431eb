//! tests/it/core.rs, the protocol through every pool mode: simple and extended queries,
//! pipelines and Flush, COPY both ways, notices, session state and its reset, many clients
//! over few servers, a client leaving mid-transaction, a server's FATAL, large values.
//! The originals use tokio-postgres where they can; here are the messages it sends, with
//! the model's SQL in place of what the model does not know (generate_series, md5).

use super::{
    bind, bind_large, client, copy_rows, describe_p, describe_s, exec, fence, flush, one, parse,
    program, q, run, simple, sync, Scenario, BASE,
};
use crate::sim::program::{Msg, Program};

/// Every mode, untracked and tracked, for programs without transaction blocks or named
/// statements.
const ALL: &[&str] = &[
    "session",
    "transaction",
    "transaction-tracked-pool-1",
    "statement",
    "statement-tracked",
];
/// The modes with transaction blocks.
const TX: &[&str] = &[
    "session",
    "transaction",
    "transaction-tracked",
    "transaction-pool-1",
];

pub const TABLE: &[Scenario] = &[
    Scenario {
        name: "queries_pipelined_with_startup",
        origin: "core.rs::query_pipelined_with_startup",
        setups: &["transaction", "transaction-pool-1", "session", "statement"],
        program: || {
            let c = || {
                client(vec![
                    fence(vec![
                        q("select 'eager'"),
                        parse("", "select $1::int4"),
                        bind("", &["41"]),
                        exec(),
                        sync(),
                    ]),
                    simple("select 'after'"),
                ])
            };
            program(vec![c(), c()])
        },
        pipelined_startup: true,
        ..BASE
    },
    Scenario {
        name: "simple_and_extended_queries",
        origin: "core.rs::simple_and_extended_queries",
        setups: TX,
        program: simple_and_extended,
        codes: &["22012", "42P01"],
        ..BASE
    },
    Scenario {
        name: "named_statement_at_top_level_in_session_mode",
        origin: "core.rs::extended_queries_in_session_mode",
        setups: &["session", "session-tracked"],
        program: || {
            let mut writes = vec![fence(vec![
                parse("s", "select $1::text, $2::int8"),
                describe_s("s"),
            ])];
            writes.extend((0..20).map(|i| {
                let (v, n) = (format!("v{i}"), i.to_string());
                fence(vec![bind("s", &[&v, &n]), describe_p(""), exec()])
            }));
            one(writes)
        },
        ..BASE
    },
    Scenario {
        name: "fifty_extended_queries_pipelined",
        origin: "core.rs::pipelined_queries",
        setups: ALL,
        program: pipelined,
        codes: &["22012"],
        ..BASE
    },
    Scenario {
        name: "three_batches_one_failing_then_flush",
        origin: "core.rs::raw_pipeline_and_flush",
        setups: &["transaction-pool-1", "transaction", "statement", "session"],
        program: || {
            let batch = |sql: &str| {
                vec![
                    parse("", sql),
                    bind("", &[]),
                    describe_p(""),
                    exec(),
                    sync(),
                ]
            };
            let mut msgs = batch("select 'one'");
            msgs.extend(batch("select 1/0"));
            msgs.extend(batch("select 'three'"));
            one(vec![
                fence(msgs),
                flush(vec![parse("", "select 'flushed'"), bind("", &[]), exec()]),
                fence(vec![]),
            ])
        },
        codes: &["22012"],
        ..BASE
    },
    Scenario {
        name: "copy_in_and_out_in_transactions",
        origin: "core.rs::copy_in_and_out",
        setups: &["transaction", "transaction-tracked", "session"],
        program: copy_in_out,
        codes: &["22P02"],
        ..BASE
    },
    Scenario {
        name: "copy_in_and_out_at_top_level",
        origin: "core.rs::copy_in_and_out_session_mode",
        setups: &["session-pool-1", "session", "transaction"],
        program: || {
            one(vec![
                fence(vec![
                    q("copy diff_t0 from stdin"),
                    copy_rows(0, 1500),
                    copy_rows(1500, 3000),
                    Msg::CopyDone,
                ]),
                simple("copy (select n from diff_t0 order by n) to stdout"),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "notice_and_own_notification_in_session_mode",
        origin: "core.rs::notices_and_notifications",
        setups: &["session", "session-pool-1"],
        program: || {
            one(vec![
                simple("do $$ begin raise notice 'hello 42'; end $$"),
                simple("listen core_chan"),
                simple("notify core_chan, 'payload-1'"),
                simple("notify core_chan, 'payload-2'"),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "notices_in_every_mode",
        origin: "core.rs::notices_and_notifications",
        setups: ALL,
        program: || {
            one(vec![
                simple(
                    "do $$ begin raise warning 'careful'; end $$; \
                     do $$ begin raise notice 'second'; end $$; select 1",
                ),
                fence(vec![
                    parse("", "do $$ begin raise notice 'n'; end $$"),
                    bind("", &[]),
                    exec(),
                ]),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "session_state_kept_then_reset",
        origin: "core.rs::session_mode_keeps_session_state",
        setups: &["session-pool-1", "session"],
        program: session_state,
        codes: &["42P01"],
        ..BASE
    },
    Scenario {
        name: "many_clients_over_few_servers",
        origin: "core.rs::transaction_mode_200_clients_pool_of_5",
        setups: &[
            "transaction",
            "transaction-pool-1",
            "transaction-tracked-pool-1",
            "session-pool-1",
        ],
        program: many_clients,
        check: Some(|s, r| {
            let n = r.servers.len();
            (n <= s.pool_size)
                .then_some(())
                .ok_or_else(|| format!("{n} server connections, pool of {}", s.pool_size))
        }),
        ..BASE
    },
    Scenario {
        name: "client_leaves_mid_transaction",
        origin: "core.rs::client_disconnect_mid_transaction_does_not_leak",
        setups: &["transaction-pool-1", "transaction", "session-pool-1"],
        program: || {
            program(vec![
                client(vec![
                    simple("BEGIN"),
                    simple("insert into diff_t0 values (1)"),
                ]),
                client(vec![
                    simple("select count(*) from diff_t0"),
                    simple("select count(*) from diff_t0"),
                    simple("select count(*) from diff_t0"),
                ]),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "server_fatal_reaches_its_client_only",
        origin: "core.rs::server_dies_under_client",
        setups: &[
            "session",
            "transaction",
            "transaction-tracked-pool-1",
            "statement",
        ],
        program: || {
            program(vec![
                client(vec![
                    simple("select 1"),
                    simple("select pg_terminate_backend(pg_backend_pid())"),
                ]),
                client(vec![
                    simple("select 'other'"),
                    simple("select 'other still works'"),
                    simple("select 'still'"),
                ]),
            ])
        },
        codes: &["57P01"],
        ..BASE
    },
    Scenario {
        name: "copy_in_done_fail_and_out_at_top_level",
        origin: "core.rs::raw_copy_in_transaction_mode",
        setups: &["transaction-pool-1", "transaction", "statement"],
        program: || {
            let copy = || q("copy diff_t0 from stdin");
            one(vec![
                flush(vec![copy()]),
                fence(vec![
                    Msg::CopyData("1\n2\n".into()),
                    Msg::CopyData("3\n".into()),
                    Msg::CopyDone,
                ]),
                flush(vec![copy()]),
                fence(vec![
                    Msg::CopyData("4\n".into()),
                    Msg::CopyFail("changed my mind".into()),
                ]),
                fence(vec![copy(), Msg::CopyData("5\n".into()), Msg::CopyDone]),
                simple("copy (select n from diff_t0 order by n) to stdout"),
            ])
        },
        codes: &["57014"],
        ..BASE
    },
    Scenario {
        name: "large_parameter_and_large_row",
        origin: "core.rs::large_values",
        setups: &["transaction-pool-1", "transaction", "session", "statement"],
        program: || {
            one(vec![
                fence(vec![
                    parse("", "select $1::text"),
                    bind_large("", 'a', 300_000),
                    describe_p(""),
                    exec(),
                ]),
                fence(vec![
                    parse("", "select repeat('z', 1000000)"),
                    bind("", &[]),
                    describe_p(""),
                    exec(),
                ]),
                simple("select 'after'"),
            ])
        },
        ..BASE
    },
    Scenario {
        name: "large_pipeline_both_ways",
        origin: "core.rs::large_pipeline_does_not_deadlock",
        setups: &["transaction-pool-1", "transaction", "session", "statement"],
        program: || {
            let sql = format!("select repeat('x', 4000) -- {}", "p".repeat(2000));
            one(vec![fence((0..300).map(|_| q(&sql)).collect())])
        },
        ..BASE
    },
    Scenario {
        name: "large_result_read_in_pieces",
        origin: "core.rs::large_result_to_a_client_that_reads_late",
        setups: &["transaction", "transaction-pool-1", "session"],
        program: || {
            let rows: Vec<String> = (0..20)
                .map(|i| format!("select repeat('{}', 10000)", (b'A' + i) as char))
                .collect();
            one(vec![
                fence(vec![
                    q("copy diff_t0 from stdin"),
                    copy_rows(1, 2001),
                    Msg::CopyDone,
                ]),
                simple("select n from diff_t0 order by n"),
                simple(&rows.join("; ")),
                simple("select 'after'"),
            ])
        },
        ..BASE
    },
];

fn simple_and_extended() -> Program {
    let mut writes = vec![
        simple("select 1, 'x'; select 'y'; select 5"),
        simple("select n from no_such_table_core"),
        simple("select 'after error'"),
        simple("select repeat('y', 30000)"),
        simple("select 1; select 2; select 1/0"),
        fence(vec![
            parse("", "select 1/0"),
            bind("", &[]),
            describe_p(""),
            exec(),
        ]),
        simple("select 'after rows'"),
        fence(vec![
            parse("", "select $1::int4, $2::text, $3::int8"),
            bind("", &["42", "héllo", "7"]),
            describe_p(""),
            exec(),
        ]),
        simple("begin"),
        fence(vec![parse("s", "select $1::int8"), describe_s("s")]),
    ];
    writes.extend((0..5).map(|i| fence(run("s", &[&i.to_string()]))));
    writes.extend([
        fence(vec![Msg::Close('S', "s".into())]),
        simple("commit"),
        simple("select 'done'"),
    ]);
    one(writes)
}

fn pipelined() -> Program {
    let mut msgs = Vec::new();
    for i in 0..50 {
        let (sql, params) = if i == 25 {
            ("select 1/0", vec![])
        } else {
            ("select $1::int4", vec![i.to_string()])
        };
        let params: Vec<&str> = params.iter().map(String::as_str).collect();
        msgs.extend([
            parse("", sql),
            bind("", &params),
            describe_p(""),
            exec(),
            sync(),
        ]);
    }
    let simple_ones = (0..20).map(|i| q(&format!("select {}", i + 100))).collect();
    one(vec![fence(msgs), fence(simple_ones)])
}

fn copy_in_out() -> Program {
    let copy = || q("copy diff_t0 from stdin");
    one(vec![
        simple("begin"),
        fence(vec![
            copy(),
            copy_rows(0, 100),
            copy_rows(100, 1000),
            Msg::CopyDone,
        ]),
        simple("commit"),
        simple("select count(*) from diff_t0"),
        simple("begin"),
        simple("copy (select n from diff_t0 order by n) to stdout"),
        simple("commit"),
        simple("begin"),
        fence(vec![
            copy(),
            Msg::CopyData("5000\nnot-a-number\n".into()),
            Msg::CopyDone,
        ]),
        simple("rollback"),
        simple("select count(*) from diff_t0"),
        // The extended protocol's COPY, as libpq and tokio-postgres send it.
        fence(vec![
            parse("", "copy diff_t0 from stdin"),
            bind("", &[]),
            exec(),
            sync(),
            copy_rows(7001, 7003),
            Msg::CopyDone,
            sync(),
        ]),
        simple("select count(*) from diff_t0"),
    ])
}

fn session_state() -> Program {
    program(vec![
        client(vec![
            simple("set statement_timeout = '1min'"),
            simple("create temp table tt (n int)"),
            simple("begin; insert into tt values (1); insert into tt values (2); commit"),
            simple("begin"),
            simple("insert into tt values (3)"),
            simple("commit"),
            simple("show statement_timeout"),
            simple("select count(*) from tt"),
        ]),
        client(vec![
            simple("show statement_timeout"),
            simple("select count(*) from tt"),
        ]),
    ])
}

fn many_clients() -> Program {
    let c = |c: usize| {
        let t = format!("diff_t{c}");
        let mut writes = Vec::new();
        for i in 0..3 {
            writes.extend([
                simple("begin"),
                simple(&format!("insert into {t} values ({i})")),
                simple(&format!("select count(*), coalesce(sum(n), 0) from {t}")),
                simple("commit"),
                fence(vec![
                    parse("", "select $1::int4, $2::int4"),
                    bind("", &[&c.to_string(), &i.to_string()]),
                    exec(),
                ]),
            ]);
        }
        client(writes)
    };
    program((0..6).map(c).collect())
}
