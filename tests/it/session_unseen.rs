//! Session state the pooler cannot see never reaches another client, under `pin` and
//! `track`: a role, data and settings made by server-side code (`DO`, `CALL`, functions,
//! `EXPLAIN ANALYZE`, `COPY (query)`, a fastpath FunctionCall, `EXECUTE` of an SQL prepared
//! statement), objects made in `pg_temp` by name, lexer corner cases and long texts. Each
//! case is run directly against PostgreSQL first (client B's answer in a session of its
//! own, with A still connected): through a pool of one server, B (the same user) must get
//! that answer whether A has left or is still connected and idle, or wait and get `57014`
//! where A is pinned. A trigger and a view need `pool.reset_query_always`.

use std::time::Duration;

use tokio::task::block_in_place;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::core::create_db;
use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::raw::Raw;
use crate::support::{self, Pooler};

const USER: &str = "droid";
const DB: &str = "unseen";

/// One of A's steps.
#[derive(Clone, Copy)]
enum Step {
    /// A simple Query.
    Q(&'static str),
    /// `COPY ... TO STDOUT` through the extended protocol.
    CopyOut(&'static str),
    /// A statement through the extended protocol (tokio-postgres prepares it under a name).
    X(&'static str),
    /// A fastpath FunctionCall of `set_config('search_path', <value>, false)`.
    FastpathSetConfig(&'static str),
    /// A Query of a `SELECT` with a literal longer than the pooler reads at once, then
    /// the statement.
    Long(&'static str),
    /// Simple Queries sent in one write, before any answer is read (a raw connection).
    Pipelined(&'static [&'static str]),
}

/// A case: what A runs, what B asks, and whether A is pinned (B then waits for A's server)
/// under `pin` and under `track`. Unless `followed` (a setting `track` follows and takes
/// off itself), B's server is cleaned when A has left: by the pin's reset, or as unseen
/// work's.
struct Case {
    name: &'static str,
    a: &'static [Step],
    probe: &'static str,
    pins: (bool, bool),
    followed: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "SET ROLE in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN EXECUTE 'SET ROLE unseen_secret'; END $$",
        )],
        probe: "SELECT current_user::text",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "SET SESSION AUTHORIZATION in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN EXECUTE 'SET SESSION AUTHORIZATION unseen_login'; END $$",
        )],
        probe: "SELECT session_user::text || '/' || current_user::text",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "a temp table made in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN EXECUTE 'CREATE TEMP TABLE unseen_t AS SELECT 42 AS v'; END $$",
        )],
        probe: "SELECT (to_regclass('pg_temp.unseen_t') IS NOT NULL)::text",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "CREATE TABLE pg_temp.x",
        a: &[Step::Q("CREATE TABLE pg_temp.unseen_x (v int)")],
        probe: "SELECT (to_regclass('pg_temp.unseen_x') IS NOT NULL)::text",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "a pg_temp table shadowing the client's own",
        a: &[
            Step::Q("CREATE TABLE pg_temp.unseen_marker (v text)"),
            Step::Q("INSERT INTO pg_temp.unseen_marker VALUES ('A')"),
        ],
        probe: "SELECT v FROM unseen_marker",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "SELECT ... INTO pg_temp.x",
        a: &[Step::Q("SELECT 1 AS v INTO pg_temp.unseen_si")],
        probe: "SELECT (to_regclass('pg_temp.unseen_si') IS NOT NULL)::text",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "CREATE VIEW pg_temp.x",
        a: &[Step::Q("CREATE VIEW pg_temp.unseen_v AS SELECT 1 AS v")],
        probe: "SELECT (to_regclass('pg_temp.unseen_v') IS NOT NULL)::text",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "CREATE FUNCTION pg_temp.f()",
        a: &[Step::Q(
            "CREATE FUNCTION pg_temp.unseen_f() RETURNS int LANGUAGE sql AS 'SELECT 7'",
        )],
        probe: "SELECT count(*)::text FROM pg_proc \
                WHERE proname = 'unseen_f' AND pronamespace = pg_my_temp_schema()",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "a temp function outlives the DROP of the last temp table",
        a: &[
            Step::Q("CREATE TEMP TABLE unseen_tt (a int)"),
            Step::Q("CREATE FUNCTION pg_temp.unseen_g() RETURNS int LANGUAGE sql AS 'SELECT 1'"),
            Step::Q("DROP TABLE unseen_tt"),
        ],
        probe: "SELECT count(*)::text FROM pg_proc \
                WHERE proname = 'unseen_g' AND pronamespace = pg_my_temp_schema()",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "set_config in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN PERFORM set_config('search_path', 'unseen_a', false); END $$",
        )],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "set_config in an SQL function",
        a: &[Step::Q("SELECT unseen_sql_set()")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "set_config in a plpgsql function, through the extended protocol",
        a: &[Step::X("SELECT unseen_pl_set()")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "a tenant set by a helper function",
        a: &[Step::Q("SELECT unseen_set_tenant('acme')")],
        probe: "SELECT coalesce(current_setting('app.unseen_tenant', true), '')",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "CALL of a procedure",
        a: &[Step::Q("CALL unseen_proc()")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "EXPLAIN ANALYZE of set_config",
        a: &[Step::Q(
            "EXPLAIN ANALYZE SELECT set_config('search_path', 'unseen_d', false)",
        )],
        probe: "SHOW search_path",
        // A setting as the statement writes it: pins under `pin`, followed under `track`.
        pins: (true, false),
        followed: true,
    },
    Case {
        name: "EXPLAIN ANALYZE of a function",
        a: &[Step::Q("EXPLAIN ANALYZE SELECT unseen_pl_set()")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "COPY (query) TO STDOUT of set_config",
        a: &[Step::CopyOut(
            "COPY (SELECT set_config('search_path', 'unseen_e', false)) TO STDOUT",
        )],
        probe: "SHOW search_path",
        // tokio-postgres prepares it under a name, and a setting in a named statement pins
        // without track_prepared.
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "COPY (query) TO STDOUT of a function",
        a: &[Step::CopyOut("COPY (SELECT unseen_pl_set()) TO STDOUT")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "EXECUTE of an SQL prepared statement",
        a: &[
            Step::Q("PREPARE unseen_p AS SELECT set_config('search_path', 'unseen_f', false)"),
            Step::Q("EXECUTE unseen_p"),
        ],
        probe: "SHOW search_path",
        // `pin` pins a client for its SQL PREPARE.
        pins: (true, false),
        followed: false,
    },
    Case {
        name: "a fastpath FunctionCall",
        a: &[Step::FastpathSetConfig("unseen_fp")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "a session advisory lock taken in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN PERFORM pg_advisory_lock(424242); END $$",
        )],
        probe: "SELECT count(*)::text FROM pg_locks \
                WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "a WITH HOLD cursor made in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN EXECUTE 'DECLARE unseen_c CURSOR WITH HOLD FOR SELECT 1'; END $$",
        )],
        probe: "SELECT count(*)::text FROM pg_cursors",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "SQL PREPARE in a DO block",
        a: &[Step::Q(
            "DO $$ BEGIN EXECUTE 'PREPARE unseen_pp AS SELECT 1'; END $$",
        )],
        probe: "SELECT count(*)::text FROM pg_prepared_statements WHERE name = 'unseen_pp'",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "LISTEN in a DO block",
        a: &[Step::Q("DO $$ BEGIN EXECUTE 'LISTEN unseen_ch'; END $$")],
        probe: "SELECT count(*)::text FROM pg_listening_channels()",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "nextval leaves lastval",
        a: &[Step::Q("SELECT nextval('unseen_seq')")],
        probe: "SELECT lastval()::text",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "a SET after a text longer than the pooler reads at once",
        a: &[Step::Long("SET search_path TO unseen_long")],
        probe: "SHOW search_path",
        pins: (false, false),
        followed: false,
    },
    Case {
        name: "a SET ROLE after what reads as two literals with standard_conforming_strings on",
        a: &[
            Step::Q("SET standard_conforming_strings = off"),
            Step::Q("SELECT 'a\\''; SET ROLE unseen_secret; --'"),
        ],
        probe: "SELECT current_user::text",
        pins: (true, true),
        followed: false,
    },
    Case {
        name: "the same, sent before the setting's ParameterStatus came back",
        a: &[Step::Pipelined(&[
            "SET standard_conforming_strings = off",
            "SELECT 'a\\''; SET ROLE unseen_secret; --'",
        ])],
        probe: "SELECT current_user::text",
        // `pin` pins for the SET; under `track` the second text reads otherwise under the
        // setting in flight, so the server is cleaned for the next client.
        pins: (true, false),
        followed: false,
    },
    Case {
        name: "a SET ROLE after a -- comment ended by CR",
        a: &[Step::Q("--x\rSET ROLE unseen_secret")],
        probe: "SELECT current_user::text",
        pins: (true, true),
        followed: false,
    },
];

/// The objects the cases use, made once by the superuser.
const SETUP: &str = "
    DROP ROLE IF EXISTS unseen_secret; CREATE ROLE unseen_secret NOLOGIN;
    DROP ROLE IF EXISTS unseen_login; CREATE ROLE unseen_login LOGIN;
    CREATE TABLE unseen_marker (v text); INSERT INTO unseen_marker VALUES ('public');
    CREATE SEQUENCE unseen_seq;
    CREATE FUNCTION unseen_sql_set() RETURNS text LANGUAGE sql
        AS $$ SELECT set_config('search_path', 'unseen_b', false) $$;
    CREATE FUNCTION unseen_pl_set() RETURNS int LANGUAGE plpgsql
        AS $$ BEGIN PERFORM set_config('search_path', 'unseen_pl', false); RETURN 1; END $$;
    CREATE FUNCTION unseen_set_tenant(t text) RETURNS void LANGUAGE plpgsql
        AS $$ BEGIN PERFORM set_config('app.unseen_tenant', t, false); END $$;
    CREATE PROCEDURE unseen_proc() LANGUAGE plpgsql
        AS $$ BEGIN PERFORM set_config('search_path', 'unseen_c', false); END $$;
    CREATE FUNCTION unseen_trg() RETURNS trigger LANGUAGE plpgsql
        AS $$ BEGIN PERFORM set_config('search_path', 'unseen_trg', false); RETURN NEW; END $$;
    CREATE TABLE unseen_trg_t (a int);
    CREATE TRIGGER unseen_trg BEFORE INSERT ON unseen_trg_t
        FOR EACH ROW EXECUTE FUNCTION unseen_trg();
    CREATE VIEW unseen_view AS SELECT unseen_pl_set() AS v;
";

/// What a query answered: its first value, or its SQLSTATE.
type Answer = Result<String, String>;

async fn ask(c: &Client, sql: &str) -> Answer {
    match c.simple_query(sql).await {
        Ok(rows) => Ok(rows
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .unwrap_or_default()),
        Err(e) => Err(e
            .code()
            .map_or_else(|| e.to_string(), |c| c.code().to_owned())),
    }
}

/// Runs A's steps on `c` (a connection to `port`, for the raw ones).
async fn run_a(c: &Client, port: u16, steps: &[Step]) {
    for step in steps {
        match *step {
            Step::Q(sql) => {
                c.simple_query(sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Step::X(sql) => {
                c.query(sql, &[])
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Step::CopyOut(sql) => {
                let s = c
                    .copy_out(sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                futures_drain(s).await;
            }
            Step::Long(sql) => {
                let text = format!("SELECT '{}'; {sql}", "x".repeat(40_000));
                c.simple_query(&text).await.expect("the long text");
            }
            Step::FastpathSetConfig(_) | Step::Pipelined(_) => {
                // Run on a raw connection of their own (`a_runs`).
                let _ = port;
            }
        }
    }
}

async fn futures_drain(s: tokio_postgres::CopyOutStream) {
    use futures_util::StreamExt;
    let mut s = std::pin::pin!(s);
    while let Some(chunk) = s.next().await {
        chunk.expect("copy data");
    }
}

/// A FunctionCall message of `set_config('search_path', value, false)` (oid 2078).
fn function_call(value: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&2078u32.to_be_bytes());
    body.extend_from_slice(&1u16.to_be_bytes());
    body.extend_from_slice(&0u16.to_be_bytes()); // text arguments
    body.extend_from_slice(&3u16.to_be_bytes());
    for arg in ["search_path", value, "false"] {
        body.extend_from_slice(&(arg.len() as i32).to_be_bytes());
        body.extend_from_slice(arg.as_bytes());
    }
    body.extend_from_slice(&0u16.to_be_bytes()); // text result
    let mut m = vec![b'F'];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(&body);
    m
}

/// A as a raw connection, for the fastpath case: returns the connection, kept open.
async fn raw_fastpath(port: u16, value: &str) -> Raw {
    let mut r = Raw::connect(port, USER, DB).await;
    r.send(&function_call(value)).await;
    let frames = r.until_ready().await;
    assert!(
        frames.iter().any(|f| f.tag == b'V'),
        "FunctionCallResponse: {:?}",
        frames.iter().map(|f| f.tag as char).collect::<String>()
    );
    r
}

/// What A holds open while B asks: a client, or a raw connection.
struct Holder {
    _client: Option<Client>,
    _raw: Option<Raw>,
}

async fn a_runs(
    port: u16,
    case: &Case,
    connect: impl std::future::Future<Output = Client>,
) -> Holder {
    if let [Step::FastpathSetConfig(v)] = case.a {
        drop(connect);
        return Holder {
            _client: None,
            _raw: Some(raw_fastpath(port, v).await),
        };
    }
    if let [Step::Pipelined(texts)] = case.a {
        drop(connect);
        let mut r = Raw::connect(port, USER, DB).await;
        let mut bytes = Vec::new();
        for t in *texts {
            bytes.extend_from_slice(&crate::support::raw::query(t));
        }
        r.send(&bytes).await;
        for _ in *texts {
            r.until_ready().await;
        }
        return Holder {
            _client: None,
            _raw: Some(r),
        };
    }
    let c = connect.await;
    run_a(&c, port, case.a).await;
    Holder {
        _client: Some(c),
        _raw: None,
    }
}

/// B's answer in a session of its own, with A's session still open (directly).
async fn direct_answer(pg: &support::pg::PgServer, case: &Case) -> Answer {
    let a = a_runs(pg.port, case, pg.connect(USER, DB)).await;
    let b = pg.connect(USER, DB).await;
    let answer = ask(&b, case.probe).await;
    drop(a);
    answer
}

fn start(state: &str, always: bool) -> Pooler {
    let pg = support::shared();
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: 1\n  mode: transaction\n  \
         session_state: {state}\n  reset_query_always: {always}\n  query_wait_timeout: 1500ms\n\
         auth:\n  user_methods:\n    {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

fn resets(p: &Pooler, reason: &str) -> f64 {
    metric_or_zero(
        &scrape(p),
        "droidpool_session_resets_total",
        &[("reason", reason)],
    )
}

/// Makes the database and its objects, once per test run.
fn setup_db() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let pg = support::shared();
        create_db(pg, DB);
        pg.psql_db(DB, SETUP);
    });
}

/// Every case under `state`: B after A left, and B while A is connected and idle.
async fn every_case(state: &str) {
    block_in_place(setup_db);
    let pg = support::shared();
    let p = start(state, false);
    let track = state == "track";
    let mut failures = Vec::new();
    for case in CASES {
        let want = direct_answer(pg, case).await;
        let pins = if track { case.pins.1 } else { case.pins.0 };

        // B after A left.
        let before = resets(&p, "opaque") + resets(&p, "leave");
        let a = a_runs(p.port(), case, p.connect(USER, DB)).await;
        drop(a);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let b = p.connect(USER, DB).await;
        let got = ask(&b, case.probe).await;
        drop(b);
        if got != want {
            failures.push(format!(
                "{} (A left): B got {got:?}, directly {want:?}",
                case.name
            ));
        }
        let after = resets(&p, "opaque") + resets(&p, "leave");
        if after <= before && !(track && case.followed) {
            failures.push(format!("{} (A left): no clean-up counted", case.name));
        }

        // B while A is connected and idle.
        let a = a_runs(p.port(), case, p.connect(USER, DB)).await;
        let b = p.connect(USER, DB).await;
        let got = ask(&b, case.probe).await;
        let expected = if pins {
            Err("57014".to_owned())
        } else {
            want.clone()
        };
        if got != expected {
            failures.push(format!(
                "{} (A idle): B got {got:?}, expected {expected:?}",
                case.name
            ));
        }
        drop(b);
        drop(a);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        failures.is_empty(),
        "under {state}:\n{}",
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unseen_state_never_reaches_another_client_under_track() {
    every_case("track").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unseen_state_never_reaches_another_client_under_pin() {
    every_case("pin").await;
}

/// The same client getting its server back pays nothing: its own setting made in a function
/// is still there, and nothing is cleaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_client_keeps_its_server_as_it_left_it() {
    block_in_place(setup_db);
    let p = start("track", false);
    let a = p.connect(USER, DB).await;
    a.simple_query("SELECT unseen_pl_set()").await.unwrap();
    assert_eq!(ask(&a, "SHOW search_path").await, Ok("unseen_pl".into()));
    assert_eq!(ask(&a, "SHOW search_path").await, Ok("unseen_pl".into()));
    assert_eq!(resets(&p, "opaque"), 0.0);
    // Another client then gets it cleaned, once.
    let b = p.connect(USER, DB).await;
    assert_eq!(
        ask(&b, "SHOW search_path").await,
        Ok("\"$user\", public".into())
    );
    assert_eq!(
        ask(&b, "SHOW search_path").await,
        Ok("\"$user\", public".into())
    );
    assert_eq!(resets(&p, "opaque"), 1.0);
}

/// A trigger and a view run code no statement names: without `reset_query_always` the
/// setting it makes reaches the next client (the README says so); with it, never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_and_views_need_reset_query_always() {
    block_in_place(setup_db);
    let pg = support::shared();
    for (what, sql) in [
        ("a trigger", "INSERT INTO unseen_trg_t VALUES (1)"),
        ("a view", "SELECT * FROM unseen_view"),
    ] {
        let direct = {
            let a = pg.connect(USER, DB).await;
            a.simple_query(sql).await.unwrap();
            let b = pg.connect(USER, DB).await;
            ask(&b, "SHOW search_path").await
        };
        for state in ["pin", "track"] {
            let p = start(state, true);
            let a = p.connect(USER, DB).await;
            a.simple_query(sql).await.unwrap();
            let b = p.connect(USER, DB).await;
            assert_eq!(
                ask(&b, "SHOW search_path").await,
                direct,
                "{what} under {state}"
            );
            assert!(resets(&p, "always") >= 1.0, "{what} under {state}");
            drop((a, b));
            // Without it: not seen.
            let p = start(state, false);
            let a = p.connect(USER, DB).await;
            a.simple_query(sql).await.unwrap();
            let b = p.connect(USER, DB).await;
            assert_ne!(
                ask(&b, "SHOW search_path").await,
                direct,
                "{what} under {state} without reset_query_always (the README's limit)"
            );
        }
    }
}

/// A seeded random sequence does not reach the next client: its `random()` is not the one
/// `setseed` fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_seed_does_not_reach_another_client() {
    block_in_place(setup_db);
    let pg = support::shared();
    let seeded = {
        let c = pg.connect(USER, DB).await;
        c.simple_query("SELECT setseed(0.25)").await.unwrap();
        ask(&c, "SELECT random()::text").await.unwrap()
    };
    for state in ["pin", "track"] {
        let p = start(state, false);
        let a = p.connect(USER, DB).await;
        a.simple_query("DO $$ BEGIN PERFORM setseed(0.25); END $$")
            .await
            .unwrap();
        let b = p.connect(USER, DB).await;
        assert_ne!(
            ask(&b, "SELECT random()::text").await.unwrap(),
            seeded,
            "{state}"
        );
    }
}

/// `pgbench -S` (simple and extended) and TPC-B under `track` make no clean-up at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_workloads_make_no_clean_up() {
    let pg = support::shared();
    let db = "unseen_bench";
    block_in_place(|| create_db(pg, db));
    let p = start("track", false);
    let run = |args: &[&str]| {
        let out = crate::support::tools::run_tool(
            crate::support::tools::pg_tool("pgbench")
                .args(["-h", "127.0.0.1", "-p", &p.port().to_string(), "-U", USER])
                .args(args)
                .arg(db),
            None,
        );
        assert!(
            out.status.success(),
            "pgbench {args:?}: {:?}",
            crate::support::tools::text(&out)
        );
        crate::support::tools::pgbench_processed(&String::from_utf8_lossy(&out.stdout))
    };
    block_in_place(|| {
        let init = crate::support::tools::run_tool(
            crate::support::tools::pg_tool("pgbench")
                .args(["-i", "-s", "1", "-q", "-h", "127.0.0.1", "-p"])
                .arg(pg.port.to_string())
                .args(["-U", USER, db]),
            None,
        );
        assert!(
            init.status.success(),
            "{:?}",
            crate::support::tools::text(&init)
        );
        for args in [
            &["-S", "-c", "4", "-T", "2"][..],
            &["-S", "-M", "extended", "-c", "4", "-T", "2"],
            &["-S", "-M", "prepared", "-c", "4", "-T", "2"],
            &["-c", "4", "-T", "2"],
            &["-M", "extended", "-c", "4", "-T", "2"],
        ] {
            assert!(run(args) > 0, "{args:?}");
        }
    });
    for reason in ["opaque", "always", "leave"] {
        assert_eq!(resets(&p, reason), 0.0, "{reason}");
    }
}

/// After a clean-up the next client's own settings are there: its startup parameters
/// (application_name, a `-c` option) and, under `track`, what it SET in an earlier
/// transaction on another server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_clients_own_settings_follow_a_clean_up() {
    block_in_place(setup_db);
    for state in ["pin", "track"] {
        let p = start(state, false);
        let a = support::connect(&format!(
            "{} application_name=a_app options='-c work_mem=3MB'",
            p.conn_string(USER, DB)
        ))
        .await;
        let b = support::connect(&format!(
            "{} application_name=b_app options='-c work_mem=7MB'",
            p.conn_string(USER, DB)
        ))
        .await;
        if state == "track" {
            b.simple_query("SET statement_timeout = '42s'")
                .await
                .unwrap();
        }
        a.simple_query("SELECT unseen_pl_set()").await.unwrap();
        let cleaned = resets(&p, "opaque");
        let ask_b = |sql: &'static str| {
            let b = &b;
            async move { ask(b, sql).await }
        };
        assert_eq!(
            ask_b("SHOW application_name").await,
            Ok("b_app".into()),
            "{state}"
        );
        assert_eq!(ask_b("SHOW work_mem").await, Ok("7MB".into()), "{state}");
        assert_eq!(
            ask_b("SHOW search_path").await,
            Ok("\"$user\", public".into()),
            "{state}"
        );
        if state == "track" {
            assert_eq!(ask_b("SHOW statement_timeout").await, Ok("42s".into()));
        }
        assert_eq!(resets(&p, "opaque"), cleaned + 1.0, "{state}: one clean-up");
        // And A's, on the same server after B.
        assert_eq!(
            ask(&a, "SHOW application_name").await,
            Ok("a_app".into()),
            "{state}"
        );
        assert_eq!(ask(&a, "SHOW work_mem").await, Ok("3MB".into()), "{state}");
    }
}
