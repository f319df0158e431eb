//! Settings made by SQL under `pool.session_state: track`, checked against PostgreSQL with
//! generated programs. Each program is two or three clients' statements interleaved in a
//! fixed order: `SET`, `SET LOCAL`, `RESET`, `RESET ALL`, `set_config`, `SET SESSION
//! CHARACTERISTICS`, `DISCARD ALL`, blocks with savepoints that commit, roll back or fail,
//! failed `SET`s, multi-statement Queries, the same through the extended protocol, and
//! probes (`SHOW`, `current_setting`, and a cast whose text the setting shapes). It runs
//! directly (the specification) and through one pooler, and every answer must be the same.
//! The pool has a server per client, so no client waits (a client the pooler pins, where it
//! cannot know what a server holds, keeps one). Half the programs run one client's block
//! to its end before another client runs: the clients take turns on the one server taken
//! last. In the others blocks overlap, so clients move between servers. The pooler is the
//! same for every program: a server carries what earlier programs' clients left, which a
//! new client must not see.
//!
//! Every client sets the custom setting `app.k` first: a custom setting, once made on a
//! server, exists there for good (its value reset to empty), which a client that never made
//! it would see (README, "What still differs").

use std::fmt::Write as _;

use tokio::task::block_in_place;
use tokio_postgres::{Client, NoTls};

use crate::core::create_db;
use crate::support::{self, Pooler};

const USER: &str = "droid";
const DB: &str = "settings_random";

/// splitmix64: the same programs from the same seed, without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }
}

/// Settings and the values the programs give them (the last of `work_mem`'s is refused).
const SETTINGS: &[(&str, &[&str])] = &[
    ("work_mem", &["'1MB'", "'2MB'", "'3MB'", "'nope'"]),
    (
        "search_path",
        &["a", "b, public", "public", "\"$user\", public", "DEFAULT"],
    ),
    ("statement_timeout", &["0", "'5s'", "'7s'"]),
    ("DateStyle", &["'ISO, DMY'", "'SQL, MDY'", "German"]),
    (
        "TimeZone",
        &["'UTC'", "'Europe/Paris'", "'America/New_York'"],
    ),
    ("application_name", &["'p'", "'q'", "''"]),
    ("app.k", &["'x'", "'y'", "''"]),
    ("extra_float_digits", &["0", "3", "-2"]),
    ("bytea_output", &["hex", "escape"]),
    ("lock_timeout", &["'1s'", "'2s'"]),
    ("default_transaction_read_only", &["on", "off"]),
];

/// Probes whose answer a setting shapes, beside `SHOW` and `current_setting`.
const SHAPED: &[&str] = &[
    "SELECT 0.1::float8, '\\x41'::bytea",
    "SELECT '2020-01-02 03:04:05+00'::timestamptz",
    "SHOW transaction_isolation",
    "SHOW default_transaction_isolation",
    "SHOW transaction_read_only",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Via {
    Simple,
    Extended,
}

#[derive(Debug)]
struct Step {
    client: usize,
    sql: String,
    via: Via,
}

/// A setting and one of its values, with `SET`'s spelling of it.
fn setting(rng: &mut Rng) -> (&'static str, &'static str) {
    let &(name, values) = rng.pick(SETTINGS);
    (name, *rng.pick(values))
}

/// `set_config`'s spelling of a value: a text literal.
fn as_text(value: &str) -> String {
    match value {
        "DEFAULT" => "''".into(),
        v if v.starts_with('\'') => v.into(),
        v => format!("'{}'", v.replace('\'', "''")),
    }
}

/// One client's next statement, given whether it is in a block.
fn statement(rng: &mut Rng, in_block: bool) -> (String, Via) {
    let (name, value) = setting(rng);
    let sql = match rng.below(24) {
        0..=3 => format!("SET {name} = {value}"),
        4 => format!("SET SESSION {name} TO {value}"),
        5 | 6 => format!("SET LOCAL {name} = {value}"),
        7 => format!("RESET {name}"),
        8 => "RESET ALL".into(),
        9 => format!(
            "SELECT set_config('{name}', {}, {})",
            as_text(value),
            rng.pick(&["false", "true"])
        ),
        10 => format!(
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL {}",
            rng.pick(&["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"])
        ),
        11 => "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ".into(),
        12 if !in_block => "DISCARD ALL".into(),
        12 => "SELECT 1/0".into(),
        13 => format!("SET {name} = {value}; SHOW {name}"),
        14 => format!("SET {name} = {value}; SELECT 1/0"),
        15 => format!("SHOW {name}; RESET {name}; SHOW {name}"),
        16 if in_block => rng
            .pick(&[
                "SAVEPOINT s",
                "ROLLBACK TO SAVEPOINT s",
                "RELEASE SAVEPOINT s",
            ])
            .to_string(),
        16 => "SELECT 1".into(),
        17..=19 => format!("SHOW {name}"),
        20 => format!("SELECT current_setting('{name}', true)"),
        _ => rng.pick(SHAPED).to_string(),
    };
    // Single statements only through the extended protocol (as a driver prepares them).
    let via = if !sql.contains(';') && rng.below(4) == 0 {
        Via::Extended
    } else {
        Via::Simple
    };
    (sql, via)
}

/// A program of `clients` clients and `steps` steps. `exclusive`: a client in a block runs
/// until the block ends (a pool of one server serves one block at a time).
fn program(seed: u64, clients: usize, steps: usize, exclusive: bool) -> Vec<Step> {
    let mut rng = Rng(seed);
    let mut in_block = vec![false; clients];
    let mut out: Vec<Step> = (0..clients)
        .map(|client| Step {
            client,
            sql: format!("SET app.k = 'c{client}'"),
            via: Via::Simple,
        })
        .collect();
    for _ in 0..steps {
        let open = in_block.iter().position(|b| *b);
        let client = match open {
            Some(c) if exclusive => c,
            _ => rng.below(clients),
        };
        let (sql, via) = match rng.below(8) {
            0 if !in_block[client] => {
                in_block[client] = true;
                (
                    rng.pick(&[
                        "BEGIN",
                        "START TRANSACTION",
                        "BEGIN ISOLATION LEVEL SERIALIZABLE",
                    ])
                    .to_string(),
                    Via::Simple,
                )
            }
            1 | 2 if in_block[client] => {
                in_block[client] = false;
                (
                    rng.pick(&["COMMIT", "ROLLBACK", "END"]).to_string(),
                    Via::Simple,
                )
            }
            _ => statement(&mut rng, in_block[client]),
        };
        out.push(Step { client, sql, via });
    }
    // Every block ends, so the next program's clients find free servers.
    for (client, open) in in_block.iter().enumerate() {
        if *open {
            out.push(Step {
                client,
                sql: "ROLLBACK".into(),
                via: Via::Simple,
            });
        }
    }
    out
}

/// One statement's answer as the client sees it: rows, command tags, or the SQLSTATE.
async fn answer(c: &Client, step: &Step) -> String {
    let code = |e: tokio_postgres::Error| format!("ERR {}", e.code().map_or("?", |c| c.code()));
    match step.via {
        Via::Simple => crate::conformance::answer(c, &step.sql).await,
        Via::Extended if step.sql.starts_with("SHOW") || step.sql.starts_with("SELECT") => {
            // Text columns only: SHOW, current_setting and set_config answer text; the
            // shaped probes are simple-protocol only (their types differ).
            match c.query(&step.sql, &[]).await {
                Ok(rows) => rows
                    .iter()
                    .map(|r| {
                        r.try_get::<_, Option<String>>(0)
                            .map(|v| v.unwrap_or_else(|| "NULL".into()))
                            .unwrap_or_else(|e| format!("TYPE {e}"))
                    })
                    .collect::<Vec<_>>()
                    .join(";"),
                Err(e) => code(e),
            }
        }
        Via::Extended => match c.execute(&step.sql, &[]).await {
            Ok(n) => format!("#{n}"),
            Err(e) => code(e),
        },
    }
}

/// Every step's answer through `port`, each client on a connection of its own.
async fn run(port: u16, steps: &[Step], clients: usize) -> Vec<String> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        let url = format!("host=127.0.0.1 port={port} user={USER} dbname={DB} connect_timeout=10");
        let (c, connection) = tokio_postgres::connect(&url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to {port}: {e}"));
        tokio::spawn(connection);
        conns.push(c);
    }
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            answer(&conns[step.client], step),
        )
        .await
        .unwrap_or_else(|_| "TIMEOUT".into());
        out.push(got);
    }
    out
}

fn pooler(size: usize) -> Pooler {
    let pg = support::shared();
    let yaml = format!(
        "pool:\n  size: {size}\n  mode: transaction\n  session_state: track\n  \
         track_prepared: true\n  query_wait_timeout: 10s\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// The first step whose answer through the pooler differs, described with the program.
fn difference(steps: &[Step], direct: &[String], pooled: &[String]) -> Option<String> {
    let at = direct.iter().zip(pooled).position(|(d, p)| d != p)?;
    let mut s = String::new();
    for (i, step) in steps.iter().enumerate().take(at + 1) {
        let _ = writeln!(
            s,
            "  {i:3} c{} {:?} {}\n        direct: {}\n        pooled: {}",
            step.client, step.via, step.sql, direct[i], pooled[i]
        );
    }
    Some(s)
}

/// Generated programs agree with PostgreSQL. `DROID_SETTINGS_SEED` runs one seed's program
/// (as a failure names it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_settings_programs_match_postgresql() {
    let pg = support::shared();
    create_db(pg, DB);
    block_in_place(|| {
        pg.psql_db(
            DB,
            "create schema if not exists a; create schema if not exists b",
        );
    });
    let seeds: Vec<u64> = match std::env::var("DROID_SETTINGS_SEED") {
        Ok(s) => vec![s.parse().expect("a number")],
        Err(_) => (1..=60).collect(),
    };
    let mut failures = Vec::new();
    let mut statements = 0;
    let p = pooler(3);
    for &seed in &seeds {
        let clients = 2 + (seed % 2) as usize;
        let turns = seed % 4 < 2;
        let steps = program(seed, clients, 40, turns);
        statements += steps.len();
        let direct = run(pg.port, &steps, clients).await;
        let pooled = run(p.port(), &steps, clients).await;
        if let Some(d) = difference(&steps, &direct, &pooled) {
            failures.push(format!(
                "seed {seed} ({clients} clients, turns: {turns}):\n{d}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} programs differ from PostgreSQL:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
    assert!(statements > 1_000, "{statements} statements run");
}
