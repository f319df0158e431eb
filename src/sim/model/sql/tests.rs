//! The recogniser against the generator's vocabulary and its near misses.

use super::*;

fn one(sql: &str) -> Stmt {
    let mut v = parse(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(v.len(), 1, "{sql}");
    v.remove(0)
}

#[test]
fn selects() {
    assert_eq!(
        one("select 1"),
        Stmt::Select(Select::Exprs(vec![Expr::Int(1)]))
    );
    assert_eq!(
        one("select $1::text"),
        Stmt::Select(Select::Exprs(vec![Expr::Param(1, Some(Ty::Text))]))
    );
    assert_eq!(
        one("select 1/0"),
        Stmt::Select(Select::Exprs(vec![Expr::Div(1, 0)]))
    );
    assert_eq!(
        one("select repeat('x', 3000000)"),
        Stmt::Select(Select::Exprs(vec![Expr::Repeat("x".into(), 3_000_000)]))
    );
    assert_eq!(
        one("select n from diff_t0 order by n"),
        Stmt::Select(Select::Column {
            table: "diff_t0".into(),
            sorted: true
        })
    );
    assert_eq!(
        one("select count(*), coalesce(sum(n), 0) from diff_t1"),
        Stmt::Select(Select::Count {
            table: "diff_t1".into(),
            sum: true
        })
    );
    assert_eq!(
        one("select pg_terminate_backend(pg_backend_pid())"),
        Stmt::Select(Select::Exprs(vec![Expr::TerminateSelf]))
    );
}

#[test]
fn utility_statements() {
    assert_eq!(
        one("insert into diff_t0 values ($1::int)"),
        Stmt::Insert {
            table: "diff_t0".into(),
            value: Expr::Param(1, Some(Ty::Int4))
        }
    );
    assert_eq!(
        one("copy (select n from t order by n) to stdout"),
        Stmt::CopyTo {
            table: "t".into(),
            sorted: true
        }
    );
    assert_eq!(
        one("copy t from stdin"),
        Stmt::CopyFrom { table: "t".into() }
    );
    assert_eq!(
        one("set local application_name = 'x'"),
        Stmt::Set {
            local: true,
            name: "application_name".into(),
            value: Some("x".into())
        }
    );
    assert_eq!(one("reset all"), Stmt::Reset { name: None });
    assert_eq!(one("deallocate all"), Stmt::Deallocate { name: None });
    assert_eq!(
        one("prepare a as select $1::text").param_types(),
        Vec::<Option<Ty>>::new(),
        "PREPARE itself takes no parameters"
    );
    assert_eq!(
        one("execute b('nope')"),
        Stmt::Execute {
            name: "b".into(),
            args: vec![Expr::Text("nope".into())]
        }
    );
    assert_eq!(
        one("do $$ begin raise notice 'n'; end $$"),
        Stmt::Raise {
            level: Level::Notice,
            message: "n".into()
        }
    );
    assert_eq!(
        one("notify ch0, 'x'"),
        Stmt::Notify {
            channel: "ch0".into(),
            payload: "x".into()
        }
    );
    assert_eq!(
        one("create temp table tt (n int)"),
        Stmt::CreateTemp { table: "tt".into() }
    );
}

#[test]
fn a_bad_statement_fails_the_whole_string() {
    let e = parse("select 1; selec 2; select 3").unwrap_err();
    assert_eq!(e.code, crate::sim::model::error::SYNTAX_ERROR);
    assert_eq!(parse("select 2; select 'two'").map(|v| v.len()), Ok(2));
    assert_eq!(parse("").map(|v| v.len()), Ok(0));
    assert_eq!(parse(" ; ").map(|v| v.len()), Ok(0));
    for bad in [
        "selec 1",
        "select",
        "reset",
        "select 1 2",
        "insert into t values ('x')",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn parameter_types_come_from_casts_and_columns() {
    assert_eq!(one("select $1::text").param_types(), vec![Some(Ty::Text)]);
    assert_eq!(
        one("insert into t values ($1)").param_types(),
        vec![Some(Ty::Int4)]
    );
    assert_eq!(
        one("select $2::int").param_types(),
        vec![None, Some(Ty::Int4)]
    );
}

#[test]
fn the_poolers_own_statements() {
    let sync = parse(
        "RESET application_name;SELECT pg_catalog.set_config(E'application_name', E'a''b\\\\', \
         false), pg_catalog.set_config(E'TimeZone', E'Asia/Tokyo', false)",
    )
    .expect("settings sync");
    assert_eq!(
        sync,
        vec![
            Stmt::Reset {
                name: Some("application_name".into())
            },
            Stmt::Select(Select::Exprs(vec![
                Expr::SetConfig("application_name".into(), "a'b\\".into(), false),
                Expr::SetConfig("TimeZone".into(), "Asia/Tokyo".into(), false),
            ])),
        ]
    );
    let role = "SELECT pg_catalog.pg_is_in_recovery(), (SELECT reset_val FROM \
                pg_catalog.pg_settings WHERE name = 'default_transaction_read_only')";
    assert_eq!(
        one(role),
        Stmt::Select(Select::Exprs(vec![
            Expr::InRecovery,
            Expr::ResetVal("default_transaction_read_only".into())
        ]))
    );
    assert_eq!(one("DISCARD ALL"), Stmt::DiscardAll);
    assert_eq!(one("ROLLBACK"), Stmt::Rollback);
}
