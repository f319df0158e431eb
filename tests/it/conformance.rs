//! Session state in transaction pooling, checked against PostgreSQL itself: every scenario
//! runs once directly (the specification) and then through droid-pool in transaction mode
//! with `pool.session_state: pin` and `track`, over a pool of one server and of two, while another client
//! runs short transactions on the same pool the whole time. Each client's answers (rows,
//! command tags, SQLSTATEs) must be exactly the direct ones. With `off` the same table must
//! show a difference (a setting that reaches the next client), so the comparison can fail.
//!
//! A scenario is a list of phases; the clients of a phase run at once, each its statements
//! in order, and the next phase starts once they have all disconnected (what a departed
//! client leaves behind is what the next one would see).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::block_in_place;
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage};

use crate::core::create_db;
use crate::support::{self, Pooler};

const USER: &str = "droid";
const DB: &str = "conformance";

struct Scenario {
    name: &'static str,
    phases: &'static [&'static [&'static [&'static str]]],
    /// Its clients LISTEN: run through `track` only (under `pin` a listener keeps its server,
    /// so a pool of one cannot serve three listeners and a notifier at once).
    listens: bool,
}

/// A step that waits (milliseconds follow), so clients of a phase meet in a known order.
const WAIT: &str = "-- wait ";
/// A step that answers with the notifications the client received since the last such step.
const NOTES: &str = "-- notifications";

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "a SET does not reach the next client",
        phases: &[
            &[&["SET search_path TO conf_a, public", "show search_path"]],
            &[&["show search_path", "select 1", "show search_path"]],
        ],
        listens: false,
    },
    Scenario {
        name: "a SET stays with its client while another runs",
        phases: &[&[
            &[
                "SET work_mem = '3MB'",
                "select 1",
                "show work_mem",
                "begin",
                "show work_mem",
                "commit",
                "show work_mem",
            ],
            &["show work_mem", "select 2", "show work_mem"],
        ]],
        listens: false,
    },
    Scenario {
        name: "a SET in a rolled-back block is undone",
        phases: &[&[&[
            "begin",
            "SET work_mem = '5MB'",
            "show work_mem",
            "rollback",
            "show work_mem",
        ]]],
        listens: false,
    },
    Scenario {
        name: "SET LOCAL ends with its transaction",
        phases: &[
            &[&[
                "begin",
                "SET LOCAL work_mem = '6MB'",
                "show work_mem",
                "commit",
                "show work_mem",
            ]],
            &[&["show work_mem"]],
        ],
        listens: false,
    },
    Scenario {
        name: "a failed SET changes nothing",
        phases: &[&[&[
            "SET no_such_setting = 1",
            "SET work_mem = 'lots'",
            "show work_mem",
        ]]],
        listens: false,
    },
    Scenario {
        name: "look-alikes in literals and comments",
        phases: &[
            &[&[
                "select 'SET work_mem = ''9MB'''",
                "select $$ PREPARE q AS select 1 $$",
                "/* create temp table x (a int); LISTEN ch */ select 1",
                "-- SET work_mem = '9MB'\nselect 2",
                "select \"current_user\" from (select 1 as \"current_user\") as \"SET\"",
            ]],
            &[&["show work_mem"]],
        ],
        listens: false,
    },
    Scenario {
        name: "SQL PREPARE and EXECUTE across transactions, names per client",
        phases: &[&[
            &[
                "PREPARE conf_q AS select 40 + 2",
                "select 1",
                "EXECUTE conf_q",
                "DEALLOCATE conf_q",
                "EXECUTE conf_q",
            ],
            &["PREPARE conf_q AS select 'b'", "select 2", "EXECUTE conf_q"],
        ]],
        listens: false,
    },
    Scenario {
        name: "a temp table across transactions while others run",
        phases: &[&[
            &[
                "create temp table conf_t (a int)",
                "insert into conf_t values (1)",
                "begin",
                "insert into conf_t values (2)",
                "commit",
                "select count(*) from conf_t",
            ],
            &[
                "select count(*) from pg_class where relname = 'conf_t' and relpersistence = 't' \
               and pg_table_is_visible(oid)",
            ],
        ]],
        listens: false,
    },
    Scenario {
        name: "a WITH HOLD cursor across transactions",
        phases: &[&[&[
            "begin",
            "declare conf_c cursor with hold for select g from generate_series(1, 3) g",
            "commit",
            "fetch 1 from conf_c",
            "select 1",
            "fetch 1 from conf_c",
            "close conf_c",
        ]]],
        listens: false,
    },
    Scenario {
        name: "a departed client's lock and temp table are gone",
        phases: &[
            &[&[
                "select pg_advisory_lock(4711)",
                "create temp table conf_gone (a int)",
            ]],
            &[&[
                "select pg_try_advisory_lock(4711)",
                "select pg_advisory_unlock(4711)",
                "select count(*) from pg_class where relname = 'conf_gone'",
            ]],
        ],
        listens: false,
    },
    Scenario {
        name: "a SET in a failed multi-statement query changes nothing",
        phases: &[&[&[
            "SET work_mem = '11MB'; select 1/0",
            "show work_mem",
            "begin; SET work_mem = '12MB'; commit; select 1",
            "show work_mem",
        ]]],
        listens: false,
    },
    Scenario {
        name: "a rollback to a savepoint undoes the SETs after it",
        phases: &[
            &[&[
                "begin",
                "SET work_mem = '13MB'",
                "savepoint s",
                "SET work_mem = '14MB'",
                "SET search_path TO conf_s, public",
                "rollback to savepoint s",
                "commit",
                "select 1",
                "show work_mem",
                "show search_path",
                "RESET work_mem",
                "select 2",
                "show work_mem",
            ]],
            &[&["show work_mem", "show search_path"]],
        ],
        listens: false,
    },
    Scenario {
        name: "DISCARD ALL and RESET ALL",
        phases: &[
            &[&[
                "SET work_mem = '7MB'",
                "RESET ALL",
                "show work_mem",
                "SET work_mem = '8MB'",
                "DISCARD ALL",
                "show work_mem",
            ]],
            &[&["show work_mem"]],
        ],
        listens: false,
    },
    Scenario {
        name: "notifications reach their channel's listeners only, committed, until UNLISTEN",
        phases: &[&[
            &[
                "LISTEN conf_ch",
                "-- wait 800",
                NOTES,
                "-- wait 1200",
                NOTES,
            ],
            &[
                "LISTEN \"conf_ch\"",
                "-- wait 800",
                NOTES,
                "UNLISTEN conf_ch",
                "-- wait 1200",
                NOTES,
            ],
            &[
                "LISTEN conf_other",
                "-- wait 800",
                NOTES,
                "-- wait 1200",
                NOTES,
            ],
            &[
                "-- wait 400",
                "NOTIFY conf_ch, 'one'",
                "begin",
                "NOTIFY conf_ch, 'rolled back'",
                "rollback",
                "select pg_notify('conf_ch', 'two')",
                "-- wait 1000",
                "NOTIFY conf_ch, 'three'",
                "begin; select 1; commit",
                NOTES,
            ],
        ]],
        listens: true,
    },
    Scenario {
        name: "a listener hears itself, and UNLISTEN * ends all",
        phases: &[&[
            &[
                "LISTEN conf_x",
                "LISTEN conf_y",
                "NOTIFY conf_x, 'self'",
                "-- wait 300",
                NOTES,
                "UNLISTEN *",
                "NOTIFY conf_y, 'gone'",
                "-- wait 300",
                NOTES,
            ],
            &["select 1", "-- wait 100", "select 2"],
        ]],
        listens: true,
    },
    Scenario {
        name: "a reported setting the startup sync does not move stays with its client",
        phases: &[
            &[&[
                "SET default_transaction_read_only = on",
                "show transaction_read_only",
            ]],
            &[&[
                "show default_transaction_read_only",
                "show transaction_read_only",
            ]],
        ],
        listens: false,
    },
];

/// One statement's answer as the client sees it: rows, command tags, or the SQLSTATE.
pub(crate) async fn answer(c: &Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(msgs) => msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("NULL"))
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                SimpleQueryMessage::CommandComplete(n) => Some(format!("#{n}")),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(";"),
        Err(e) => format!("ERR {}", e.code().map_or("?", |c| c.code())),
    }
}

/// Every client's answers, phase by phase, through `port`.
async fn run(port: u16, s: &Scenario) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for phase in s.phases {
        let tasks: Vec<_> = phase
            .iter()
            .map(|steps| {
                let steps: Vec<&'static str> = steps.to_vec();
                tokio::spawn(async move {
                    let conn = format!(
                        "host=127.0.0.1 port={port} user={USER} dbname={DB} connect_timeout=10"
                    );
                    let (c, connection) = tokio_postgres::connect(&conn, NoTls)
                        .await
                        .unwrap_or_else(|e| panic!("connect to {port}: {e}"));
                    let notes = Arc::new(Mutex::new(Vec::new()));
                    tokio::spawn(deliver(connection, notes.clone()));
                    let mut out = Vec::new();
                    for sql in steps {
                        if let Some(ms) = sql.strip_prefix(WAIT) {
                            let ms: u64 = ms.parse().expect("milliseconds");
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            continue;
                        }
                        if sql == NOTES {
                            let got: Vec<String> = std::mem::take(&mut *notes.lock().unwrap());
                            out.push(format!("notes [{}]", got.join(",")));
                            continue;
                        }
                        out.push(
                            tokio::time::timeout(Duration::from_secs(20), answer(&c, sql))
                                .await
                                .unwrap_or_else(|_| format!("TIMEOUT {sql}")),
                        );
                        tokio::time::sleep(Duration::from_millis(3)).await;
                    }
                    out
                })
            })
            .collect();
        for t in tasks {
            all.push(t.await.expect("client task"));
        }
        // A departed backend's cleanup (temp tables, locks) is done at its exit.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    all
}

/// Drives a client's connection, keeping the notifications it receives (channel:payload).
async fn deliver<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    notes: Arc<Mutex<Vec<String>>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(m)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        if let AsyncMessage::Notification(n) = m {
            let mut notes = notes.lock().unwrap();
            notes.push(format!("{}:{}", n.channel(), n.payload()));
        }
    }
}

/// Another client's short transactions on the pool, until `stop`.
fn noise(port: u16, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let conn = format!("host=127.0.0.1 port={port} user={USER} dbname={DB}");
        let (c, connection) = tokio_postgres::connect(&conn, NoTls).await.expect("noise");
        tokio::spawn(connection);
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let _ = c.simple_query("begin; select 1; commit").await;
            n += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        n
    })
}

fn pooler(size: usize, state: &str) -> Pooler {
    let pg = support::shared();
    let yaml = format!(
        "pool:\n  size: {size}\n  mode: transaction\n  session_state: {state}\n  \
         query_wait_timeout: 30s\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// The scenarios whose answers through `p` differ from the direct ones.
async fn differences(p: &Pooler, direct: &[Vec<Vec<String>>], listens: bool) -> Vec<String> {
    let stop = Arc::new(AtomicBool::new(false));
    let other = noise(p.port(), stop.clone());
    let mut diffs = Vec::new();
    for (s, want) in SCENARIOS.iter().zip(direct) {
        if s.listens && !listens {
            continue;
        }
        let got = run(p.port(), s).await;
        if &got != want {
            diffs.push(format!(
                "{}:\n  direct: {want:?}\n  pooled: {got:?}",
                s.name
            ));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let ran = other.await.expect("noise task");
    assert!(ran > 0, "the other client ran no transaction");
    diffs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_through_the_pooler_matches_postgresql() {
    let pg = support::shared();
    create_db(pg, DB);
    let mut direct = Vec::new();
    for s in SCENARIOS {
        direct.push(run(pg.port, s).await);
    }
    // The direct answers are what the scenarios claim (a typo would make both sides agree on
    // an error): spot checks.
    assert_eq!(direct[0][1][0], "\"$user\", public;#0");
    assert_eq!(direct[6][0][2], "42;#1");
    assert_eq!(direct[6][0][4], "ERR 26000");
    assert_eq!(direct[9][1][0], "t;#1");
    assert_eq!(direct[10][0][0], "ERR 22012");
    assert_eq!(direct[10][0][3], "12MB;#0");
    assert_eq!(direct[11][0][8], "13MB;#0");
    let notes = &direct[13];
    assert_eq!(notes[0][1], "notes [conf_ch:one,conf_ch:two]");
    assert_eq!(notes[0][2], "notes [conf_ch:three]");
    assert_eq!(notes[1][3], "notes []", "none after UNLISTEN");
    assert_eq!(notes[2][1], "notes []", "none for another channel");
    assert_eq!(direct[14][0][3], "notes [conf_x:self]");
    assert_eq!(direct[14][0][6], "notes []");

    for state in ["pin", "track"] {
        for size in [1, 2] {
            let p = pooler(size, state);
            let diffs = differences(&p, &direct, state == "track").await;
            assert!(
                diffs.is_empty(),
                "{state}, pool of {size}: {} scenario(s) differ from PostgreSQL:\n{}",
                diffs.len(),
                diffs.join("\n")
            );
        }
    }
    // The comparison can fail: with `off` a setting reaches the next client.
    let p = pooler(1, "off");
    let diffs = differences(&p, &direct, false).await;
    assert!(
        diffs
            .iter()
            .any(|d| d.starts_with("a SET does not reach the next client")),
        "{diffs:?}"
    );
}
