//! Session state under `pool.session_state: track` and `pin`, checked against PostgreSQL
//! with generated programs. Each program is two or three clients' statements interleaved in
//! a fixed order: `SET`, `SET LOCAL`, `RESET`, `RESET ALL`, `set_config`, `SET SESSION
//! CHARACTERISTICS`, `DISCARD ALL`, blocks with savepoints that commit, roll back or fail,
//! failed `SET`s, transaction control inside one Query, SQL `PREPARE`/`EXECUTE`/
//! `DEALLOCATE`, temp tables, `WITH HOLD` cursors and session advisory locks, and probes
//! (`SHOW`, `current_setting`, and casts whose text a setting shapes). A statement goes as a
//! simple Query, through the unnamed statement, as a named statement made in one batch and
//! run in the next, or, for several, as one pipelined batch before one Sync. Each program
//! runs directly (the specification) and through a pooler of each mode, and every message
//! the clients get (rows, command tags, SQLSTATEs, transaction status) must be the same.
//! The pool has a server per client, so no client waits (a pinned client keeps one). Half
//! the programs run one client's block to its end before another client runs: the clients
//! take turns on the one server taken last. In the others blocks overlap, so clients move
//! between servers. The poolers are the same for every program: a server carries what
//! earlier programs' clients left, which a new client must not see.
//!
//! A custom setting (`app.k`) is read as `coalesce(current_setting('app.k', true), '')`:
//! once made on a server it exists there for good (its value reset to empty), and one a
//! client made and reset does not exist on a server it moves to (README, "What still
//! differs"). Its value is compared.

use std::fmt::Write as _;

use tokio::task::block_in_place;

use crate::core::create_db;
use crate::support::raw::{batch, bind, describe, execute, parse, query, sqlstate, sync, Raw};
use crate::support::{self, Pooler};
use droid_pool::protocol::frame::Frame;

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
    /// A simple Query.
    Simple,
    /// Parse, Bind, Execute, Sync of the unnamed statement.
    Unnamed,
    /// A statement made under a name in one batch and run in the next (tokio-postgres's
    /// way).
    Named,
    /// The statements of the text (split at `;`), each parsed, bound and executed, before
    /// one Sync: one implicit transaction, as a driver's pipeline sends it.
    Pipeline,
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
    let k = 1 + rng.below(2);
    let sql = match rng.below(35) {
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
        21..=23 => rng.pick(SHAPED).to_string(),
        // What `track` replays (SQL prepared statements) and what it pins (temp tables,
        // `WITH HOLD` cursors, session advisory locks), and their ends.
        24 => format!("PREPARE q{k} AS SELECT '{k}'::text"),
        25 => format!("EXECUTE q{k}"),
        26 => rng
            .pick(&["DEALLOCATE q1", "DEALLOCATE ALL", "DEALLOCATE PREPARE q2"])
            .to_string(),
        27 => rng
            .pick(&[
                "CREATE TEMP TABLE tt1 (x int)",
                "INSERT INTO tt1 VALUES (1)",
                "SELECT count(*)::text FROM tt1",
                "DROP TABLE tt1",
                "DISCARD TEMP",
            ])
            .to_string(),
        28 => format!(
            "SELECT {}({k})::text",
            rng.pick(&["pg_try_advisory_lock", "pg_advisory_unlock"])
        ),
        29 => rng
            .pick(&[
                "DECLARE cur CURSOR WITH HOLD FOR SELECT g::text FROM generate_series(1, 3) g",
                "FETCH 1 FROM cur",
                "CLOSE cur",
                "CLOSE ALL",
                "SELECT pg_advisory_unlock_all()::text",
            ])
            .to_string(),
        30 => format!("SET {name} = {value}; PREPARE q{k} AS SELECT current_setting('{name}')"),
        // Transaction control inside one Query.
        _ => {
            let (other, v2) = setting(rng);
            rng.pick(&[
                format!("BEGIN; SET {name} = {value}; COMMIT"),
                format!("BEGIN; SET {name} = {value}; ROLLBACK; SHOW {name}"),
                format!("BEGIN; SET {name} = {value}"),
                format!("SET {name} = {value}; COMMIT; SET {other} = {v2}"),
                format!("COMMIT; SET {name} = {value}"),
                format!("SAVEPOINT s; SET {name} = {value}; ROLLBACK TO SAVEPOINT s; SHOW {name}"),
                format!("SET LOCAL {name} = {value}; SHOW {name}"),
                format!("BEGIN; SET {name} = {value}; SELECT 1/0; COMMIT"),
                format!("SET {name} = {value}; BEGIN; SET {other} = {v2}; COMMIT"),
            ])
            .clone()
        }
    };
    // Whether a custom setting exists at all differs (README): its value is compared.
    let sql = sql
        .replace(
            "current_setting('app.k', true)",
            "coalesce(current_setting('app.k', true), '')",
        )
        .replace(
            "SHOW app.k",
            "SELECT coalesce(current_setting('app.k', true), '')",
        );
    let via = match rng.below(8) {
        _ if sql.contains(';') => *rng.pick(&[Via::Simple, Via::Simple, Via::Pipeline]),
        0 => Via::Unnamed,
        1 => Via::Named,
        _ => Via::Simple,
    };
    (sql, via)
}

/// Whether a client is in a block after `sql` (near enough: an error before a `BEGIN` in the
/// same Query leaves none open, which only changes the order the clients take turns in).
fn ends_in_block(sql: &str, mut open: bool) -> bool {
    for part in sql.split(';').map(|p| p.trim().to_ascii_uppercase()) {
        if part.starts_with("BEGIN") || part.starts_with("START") {
            open = true;
        } else if part.starts_with("COMMIT")
            || part.starts_with("END")
            || (part.starts_with("ROLLBACK") && !part.starts_with("ROLLBACK TO"))
        {
            open = false;
        }
    }
    open
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
            _ => {
                let (sql, via) = statement(&mut rng, in_block[client]);
                in_block[client] = ends_in_block(&sql, in_block[client]);
                (sql, via)
            }
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

/// The messages of `step` for the extended protocol: statement `name`'s Parse (in a batch
/// of its own for [`Via::Named`]), Bind, Execute and Sync.
fn extended(step: &Step, name: &str) -> Vec<Vec<u8>> {
    let run = |stmt: &str| vec![bind("", stmt, &[]), execute("")];
    match step.via {
        Via::Simple => vec![query(&step.sql).to_vec()],
        Via::Unnamed => {
            let mut m = vec![parse("", &step.sql)];
            m.extend(run(""));
            m.push(sync());
            vec![batch(&m)]
        }
        Via::Named => {
            let made = batch(&[parse(name, &step.sql), describe(b'S', name), sync()]);
            let mut m = run(name);
            m.push(sync());
            vec![made, batch(&m)]
        }
        Via::Pipeline => {
            let mut m = Vec::new();
            for stmt in step.sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                m.push(parse("", stmt));
                m.extend(run(""));
            }
            m.push(sync());
            vec![batch(&m)]
        }
    }
}

/// The columns of a DataRow, as text.
fn columns(f: &Frame) -> String {
    let cols = droid_pool::protocol::backend::parse_data_row(f.body()).expect("a DataRow");
    cols.iter()
        .map(|c| c.map_or_else(|| "NULL".into(), String::from_utf8_lossy))
        .collect::<Vec<_>>()
        .join("|")
}

/// The answer as the client sees it: each message, with rows' values, command tags,
/// SQLSTATEs and the transaction status (ParameterStatus and notices left out).
fn answer(frames: &[Frame]) -> String {
    frames
        .iter()
        .filter_map(|f| match f.tag {
            b'D' => Some(columns(f)),
            b'C' => Some(format!(
                "#{}",
                String::from_utf8_lossy(f.body()).trim_end_matches('\0')
            )),
            b'E' => Some(format!("ERR {}", sqlstate(f))),
            b'Z' => Some(format!("Z{}", f.body()[0] as char)),
            b'S' | b'N' | b'T' | b't' | b'n' | b'1' | b'2' | b'3' => None,
            t => Some((t as char).to_string()),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every step's answer through `port`, each client on a connection of its own.
async fn run(port: u16, steps: &[Step], clients: usize) -> Vec<String> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(Raw::connect(port, USER, DB).await);
    }
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let c = &mut conns[step.client];
        let mut got = Vec::new();
        for msgs in extended(step, &format!("s{i}")) {
            c.send(&msgs).await;
            got.push(answer(&c.until_ready().await));
        }
        out.push(got.join(" / "));
    }
    out
}

/// Waits until the advisory locks of the clients that just left are released (a backend
/// releases them as it exits, a moment after its client left; the pooler's reset, as
/// quickly), so the next run starts from none.
async fn locks_released(watch: &tokio_postgres::Client) {
    let sql = "select count(*) from pg_locks where locktype = 'advisory'";
    for _ in 0..500 {
        let held: i64 = watch.query_one(sql, &[]).await.expect(sql).get(0);
        if held == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("advisory locks still held 5 s after their clients left");
}

fn pooler(size: usize, state: &str) -> Pooler {
    let pg = support::shared();
    let yaml = format!(
        "pool:\n  size: {size}\n  mode: transaction\n  session_state: {state}\n  \
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

/// Generated programs agree with PostgreSQL, through `track` and through `pin`.
/// `DROID_SETTINGS_SEED` runs one seed's program (as a failure names it),
/// `DROID_SETTINGS_SEEDS` the first that many (60 by default).
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
        Err(_) => match std::env::var("DROID_SETTINGS_SEEDS") {
            Ok(n) => (1..=n.parse().expect("a number")).collect(),
            Err(_) => (1..=60).collect(),
        },
    };
    let mut failures = Vec::new();
    let mut statements = 0;
    let poolers = [("track", pooler(3, "track")), ("pin", pooler(3, "pin"))];
    let watch = pg.connect(USER, DB).await;
    for &seed in &seeds {
        let clients = 2 + (seed % 2) as usize;
        let turns = seed % 4 < 2;
        let steps = program(seed, clients, 40, turns);
        statements += steps.len();
        let direct = run(pg.port, &steps, clients).await;
        locks_released(&watch).await;
        for (state, p) in &poolers {
            let pooled = run(p.port(), &steps, clients).await;
            locks_released(&watch).await;
            if let Some(d) = difference(&steps, &direct, &pooled) {
                failures.push(format!(
                    "{state}, seed {seed} ({clients} clients, turns: {turns}):\n{d}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs differ from PostgreSQL:\n{}",
        failures.len(),
        seeds.len() * poolers.len(),
        failures.join("\n")
    );
    assert!(statements > 1_000, "{statements} statements run");
}
