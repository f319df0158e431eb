//! tests/it/core.rs, the protocol through every pool mode: simple and extended queries,
//! pipelines and Flush, queries behind the startup packet, notices, large values.
//! The originals use tokio-postgres where they can; here are the messages it sends, with
//! the model's SQL in place of what the model does not know (generate_series, md5).

use super::{
    bind, bind_large, client, copy_rows, describe_p, describe_s, exec, fence, flush, one, parse,
    program, q, run, simple, sync, Scenario, BASE,
};
use crate::sim::program::{Msg, Program};

/// Every mode, untracked and tracked, for programs without transaction blocks or named
/// statements.
pub(super) const ALL: &[&str] = &[
    "session",
    "transaction",
    "transaction-tracked-pool-1",
    "statement",
    "statement-tracked",
];
/// The modes with transaction blocks.
pub(super) const TX: &[&str] = &[
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
