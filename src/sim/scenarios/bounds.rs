//! tests/it/prepared.rs: eviction under `pool.max_prepared_statements` (a server never holds
//! more), an eviction skipped after an error, and tracking in session and statement mode.

use super::{
    bind, client, close_s, describe_s, exec, fence, one, parse, program, q, run, simple, sync,
    Report, Scenario, Setup, BASE,
};
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
        name: "eviction_keeps_servers_bounded",
        origin: "prepared.rs::eviction_keeps_the_server_bounded",
        setups: &["tracked-bound-4"],
        program: eviction,
        check: Some(bounded),
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
        name: "session_mode_with_tracking",
        origin: "prepared.rs::session_mode_with_tracking_works",
        setups: &["session-tracked"],
        program: session_tracking,
        codes: &["26000", "42P05"],
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
];

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
