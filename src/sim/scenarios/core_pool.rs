//! tests/it/core.rs: COPY in and out, session state and its reset, many clients over few
//! servers, a client leaving inside a transaction, a server's FATAL.

use super::{
    bind, client, copy_rows, exec, fence, flush, one, parse, program, q, simple, sync, Scenario,
    BASE,
};
use crate::sim::program::{Msg, Program};

pub const TABLE: &[Scenario] = &[
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
];

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
