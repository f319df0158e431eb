//! The classifier on the statement shapes that matter, and on look-alikes that must not.

use super::*;

fn all(sql: &str) -> Vec<(usize, Effect)> {
    let mut out = Vec::new();
    effects(sql.as_bytes(), Scan::STANDARD, &mut out);
    out
}

fn one(sql: &str) -> Option<Effect> {
    let mut e = all(sql);
    assert!(e.len() <= 1, "{sql}: {e:?}");
    e.pop().map(|(_, e)| e)
}

fn set(name: &str, replay: &str) -> Option<Effect> {
    Some(Effect::Set {
        name: name.into(),
        replay: replay.into(),
    })
}

#[test]
fn settings_and_their_replay() {
    assert_eq!(
        one("SET search_path TO a, \"B\""),
        set("search_path", "SET search_path TO a, \"B\"")
    );
    assert_eq!(
        one("set SESSION work_mem = '8MB'"),
        set("work_mem", "set SESSION work_mem = '8MB'")
    );
    assert_eq!(
        one("SET myapp.user_id = 7"),
        set("myapp.user_id", "SET myapp.user_id = 7")
    );
    assert_eq!(
        one("SET TIME ZONE 'Europe/Rome'"),
        set("timezone", "SET TIME ZONE 'Europe/Rome'")
    );
    assert_eq!(
        one("SET ROLE app_reader"),
        set("role", "SET ROLE app_reader")
    );
    assert_eq!(
        one("SET SESSION AUTHORIZATION app"),
        set("session_authorization", "SET SESSION AUTHORIZATION app")
    );
    assert_eq!(
        one("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"),
        set(
            "session characteristics",
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
        )
    );
    assert_eq!(
        one("SET work_mem TO DEFAULT"),
        Some(Effect::Reset {
            name: "work_mem".into()
        })
    );
    assert_eq!(
        one("SET ROLE NONE"),
        Some(Effect::Reset {
            name: "role".into()
        })
    );
    assert_eq!(
        one("RESET search_path"),
        Some(Effect::Reset {
            name: "search_path".into()
        })
    );
    assert_eq!(
        one("RESET ROLE"),
        Some(Effect::Reset {
            name: "role".into()
        })
    );
    assert_eq!(one("reset all"), Some(Effect::ResetAll));
    assert_eq!(one("SET LOCAL work_mem = '1MB'"), Some(Effect::Local));
    assert_eq!(
        one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        Some(Effect::Local)
    );
    assert_eq!(
        one("select set_config('search_path', 'x, y', false)"),
        set(
            "search_path",
            "SELECT pg_catalog.set_config(E'search_path', E'x, y', false)"
        )
    );
    assert_eq!(
        one("SELECT set_config('a.b', 'v', true)"),
        Some(Effect::Local)
    );
    assert_eq!(
        one("SELECT pg_catalog.\"set_config\"('a.b', 'v', false)"),
        set("a.b", "SELECT pg_catalog.set_config(E'a.b', E'v', false)")
    );
    assert_eq!(
        one("SELECT set_config($1, $2, false)"),
        Some(Effect::Pin(PinReason::DynamicSetting))
    );
}

#[test]
fn state_that_pins_and_what_ends_it() {
    let pin = |r| Some(Effect::Pin(r));
    assert_eq!(
        one("CREATE TEMP TABLE t (n int)"),
        pin(PinReason::TempTable)
    );
    assert_eq!(
        one("create local temporary table t as select 1"),
        pin(PinReason::TempTable)
    );
    assert_eq!(one("SELECT 1 AS n INTO TEMP t"), pin(PinReason::TempTable));
    // ON COMMIT DROP: gone with its transaction.
    assert_eq!(one("create temp table t (a int) on commit drop"), None);
    assert_eq!(one("CREATE TEMP TABLE t ON COMMIT DROP AS SELECT 1"), None);
    assert_eq!(
        one("create temp table t (a int default 1) on commit delete rows"),
        pin(PinReason::TempTable)
    );
    assert_eq!(
        one("create temp table t as select 1 as on_, 'on commit drop'"),
        pin(PinReason::TempTable)
    );
    assert_eq!(
        one("SELECT 1 INTO TEMPORARY TABLE t"),
        pin(PinReason::TempTable)
    );
    assert_eq!(
        one("DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
        pin(PinReason::HoldCursor)
    );
    assert_eq!(
        one("declare c no scroll cursor with hold for select 1"),
        pin(PinReason::HoldCursor)
    );
    assert_eq!(one("DECLARE c CURSOR FOR SELECT 1"), None);
    assert_eq!(one("DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1"), None);
    assert_eq!(
        one("SELECT pg_advisory_lock(1)"),
        pin(PinReason::AdvisoryLock)
    );
    assert_eq!(
        one("select pg_try_advisory_lock_shared(1, 2)"),
        pin(PinReason::AdvisoryLock)
    );
    assert_eq!(one("SELECT pg_advisory_xact_lock(1)"), None);
    assert_eq!(
        one("SELECT pg_advisory_unlock_all()"),
        Some(Effect::UnlockAll)
    );
    assert_eq!(one("LOAD 'auto_explain'"), pin(PinReason::Load));
    assert_eq!(one("DISCARD ALL"), Some(Effect::Discard(Discard::All)));
    assert_eq!(
        one("discard temporary"),
        Some(Effect::Discard(Discard::Temp))
    );
    assert_eq!(
        one("CLOSE c"),
        Some(Effect::Close {
            name: Some("c".into())
        })
    );
    assert_eq!(one("CLOSE ALL"), Some(Effect::Close { name: None }));
    assert_eq!(one("select pg_advisory_unlock(1)"), Some(Effect::Unlock));
    assert_eq!(
        one("SELECT PG_ADVISORY_UNLOCK_SHARED(1, 2)"),
        Some(Effect::Unlock)
    );
    assert_eq!(one("select 'pg_advisory_unlock(1)'"), None);
    assert_eq!(one("DROP TABLE t"), Some(Effect::Drop));
    assert_eq!(one("/* drop */ select 1"), None);
}

#[test]
fn prepared_statements_listen_and_transactions() {
    assert_eq!(
        one("PREPARE q (int) AS SELECT $1"),
        Some(Effect::Prepare {
            name: "q".into(),
            sql: "PREPARE q (int) AS SELECT $1".into()
        })
    );
    assert_eq!(one("PREPARE TRANSACTION 'x'"), None);
    assert_eq!(
        one("EXECUTE Q(1)"),
        Some(Effect::Execute { name: "q".into() })
    );
    assert_eq!(
        one("DEALLOCATE PREPARE q"),
        Some(Effect::Deallocate {
            name: Some("q".into())
        })
    );
    assert_eq!(
        one("deallocate all"),
        Some(Effect::Deallocate { name: None })
    );
    assert_eq!(
        one("LISTEN \"Ch\""),
        Some(Effect::Listen {
            channel: "Ch".into()
        })
    );
    assert_eq!(one("UNLISTEN *"), Some(Effect::Unlisten { channel: None }));
    assert_eq!(
        one("unlisten ch"),
        Some(Effect::Unlisten {
            channel: Some("ch".into())
        })
    );
    assert_eq!(one("BEGIN"), Some(Effect::Begin));
    assert_eq!(one("start transaction read only"), Some(Effect::Begin));
    assert_eq!(one("END"), Some(Effect::Commit));
    assert_eq!(
        one("ROLLBACK TO SAVEPOINT s"),
        Some(Effect::RollbackTo { name: "s".into() })
    );
    assert_eq!(
        one("rollback to s"),
        Some(Effect::RollbackTo { name: "s".into() })
    );
    assert_eq!(one("ROLLBACK PREPARED 'x'"), None);
    assert_eq!(one("ABORT"), Some(Effect::Rollback));
    assert_eq!(one("release s"), Some(Effect::Release { name: "s".into() }));
}

/// Nothing in a literal, a comment, an identifier or a column value is read as state.
#[test]
fn look_alikes_are_not_state() {
    for sql in [
        "SELECT 'SET search_path TO a'",
        "select $$; create temp table t()$$",
        "-- SET x = 1\nSELECT 1",
        "/* LISTEN x; */ SELECT 1",
        "SELECT * FROM pg_advisory_locks",
        "SELECT into_total FROM t",
        "UPDATE t SET search_path = 'x'",
        "INSERT INTO temp VALUES (1)",
        "SELECT 'pg_advisory_lock(1)'",
        "SELECT E'it\\'s; DISCARD ALL'",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 7",
    ] {
        assert_eq!(all(sql), vec![], "{sql}");
    }
    // A quoted name is the built-in only as written in lower case: this one is a function
    // of the database's own.
    assert_eq!(
        one("SELECT \"SET_CONFIG\"('a', 'b', false) FROM t"),
        Some(Effect::Unseen(Unseen::Any))
    );
}

#[test]
fn multi_statement_queries_number_their_effects() {
    assert_eq!(
        all("SELECT 1; SET a.b = 1; select 'x;'; RESET ALL"),
        vec![
            (
                1,
                Effect::Set {
                    name: "a.b".into(),
                    replay: "SET a.b = 1".into()
                }
            ),
            (3, Effect::ResetAll)
        ]
    );
    assert_eq!(count(b"select 1; select ';' ;"), 2);
}

#[test]
fn the_quick_paths_agree_with_the_lexer() {
    // One statement with a trailing `;` (no lexer for boundaries), a first word read
    // without the lexer, function names and INTO in any case.
    assert_eq!(
        one("  SET search_path TO a;  \n"),
        set("search_path", "SET search_path TO a")
    );
    assert_eq!(
        one("SELECT pg_catalog.SET_CONFIG('a.b', 'v', false)"),
        set("a.b", "SELECT pg_catalog.set_config(E'a.b', E'v', false)")
    );
    assert_eq!(
        one("select 1 InTo TEMP t"),
        Some(Effect::Pin(PinReason::TempTable))
    );
    assert_eq!(
        one("select PG_ADVISORY_LOCK(1)"),
        Some(Effect::Pin(PinReason::AdvisoryLock))
    );
    // The one-pass path: a last `;`, and what sends a SELECT on to the full reading.
    assert!(plainly_nothing(b"SELECT abalance FROM a WHERE aid = 7;  "));
    assert!(plainly_nothing(b"select 1"));
    // Whatever falls in the last, padded, bytes counts as in the full ones.
    for n in 0..20 {
        let pad = "x".repeat(n);
        assert!(!plainly_nothing(format!("select {pad}(").as_bytes()), "{n}");
        assert!(
            !plainly_nothing(format!("select {pad};x").as_bytes()),
            "{n}"
        );
        assert!(
            !plainly_nothing(format!("select {pad} INTO temp t").as_bytes()),
            "{n}"
        );
        assert!(plainly_nothing(format!("select {pad};").as_bytes()), "{n}");
        assert!(plainly_nothing(format!("select {pad} a").as_bytes()), "{n}");
    }
    assert!(plainly_nothing(
        b"Select\ta FROM b WHERE c = 'it''s' -- no\n"
    ));
    assert!(!plainly_nothing(b"select\n1 InTo TEMP t"));
    assert!(!plainly_nothing(b"selectx 1"));
    // Every position of each byte that matters, across the eight-byte steps and the tail:
    // the text after `select {pad}`, and whether it is plainly nothing.
    let cases = [
        ("(1)", false),
        ("; select 2", false),
        (" into t", false),
        (";  ", true),
        (" INTO t;", false),
        (" iNTo t", false),
        (" In It;", true),
        (" in it", true),
    ];
    for at in 0..70 {
        let pad = "x".repeat(at);
        for (tail, plain) in cases {
            let sql = format!("select {pad}{tail}");
            assert_eq!(plainly_nothing(sql.as_bytes()), plain, "{sql:?}");
        }
    }
    // Against the byte-by-byte reading, on texts made of the bytes that matter (and the two
    // control bytes that fold onto `;` and `(`), every length across the blocks and the tail.
    let alphabet = b"; (iInNtToOx\n\x1b\x08";
    let reference = |rest: &[u8]| {
        for i in 0..rest.len() {
            match rest[i] {
                b'(' => return false,
                b';' => return rest[i + 1..].iter().all(u8::is_ascii_whitespace),
                _ if rest[i..].len() >= 4 && rest[i..i + 4].eq_ignore_ascii_case(b"into") => {
                    return false
                }
                _ => {}
            }
        }
        true
    };
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..30_000 {
        let len = round % 101;
        let mut sql = b"select ".to_vec();
        for _ in 0..len {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            sql.push(alphabet[(seed >> 33) as usize % alphabet.len()]);
        }
        assert_eq!(
            plainly_nothing(&sql),
            reference(&sql[7..]),
            "{:?}",
            String::from_utf8_lossy(&sql)
        );
    }
    for sql in [
        "select 1 into temp t;",
        "select 1; set a.b = 1",
        "select set_config('a.b', 'c', false)",
        "/* c */ select 1",
        "select 'x;' ",
        "update t set a = 1",
    ] {
        assert!(!plainly_nothing(sql.as_bytes()), "{sql}");
    }
    assert_eq!(
        one("SELECT 1 INTO TEMP t;"),
        Some(Effect::Pin(PinReason::TempTable))
    );
    // A `;` in a literal: the lexer splits, and the second statement counts.
    assert_eq!(
        all("SELECT ';'; SET a.b = 1"),
        vec![(
            1,
            Effect::Set {
                name: "a.b".into(),
                replay: "SET a.b = 1".into()
            }
        )]
    );
    // Words that only start like a keyword, and a comment first.
    assert_eq!(one("set_x"), None);
    assert_eq!(one("sets"), None);
    assert_eq!(
        one("/* c */ SET work_mem = 1"),
        set("work_mem", "SET work_mem = 1")
    );
    assert_eq!(one("select 1 from pgbench_accounts where aid = 1"), None);
}

#[test]
fn a_lone_listen_or_unlisten_is_a_subscription() {
    let listen = |c: &str| Some(Effect::Listen { channel: c.into() });
    assert_eq!(subscription(b"LISTEN Foo"), listen("foo"));
    assert_eq!(subscription(b"  listen \"Foo\" ;  "), listen("Foo"));
    assert_eq!(
        subscription(b"UNLISTEN *"),
        Some(Effect::Unlisten { channel: None })
    );
    assert_eq!(
        subscription(b"unlisten x"),
        Some(Effect::Unlisten {
            channel: Some("x".into())
        })
    );
    let long = format!("listen {}", "é".repeat(40));
    let Some(Effect::Listen { channel }) = subscription(long.as_bytes()) else {
        panic!("a long name is still a channel");
    };
    assert_eq!(channel.len(), 62);
    for sql in [
        "listen a; select 1",
        "select 1",
        "listen a b",
        "-- listen a\nselect 1",
        "listen",
        "unlisten 'x'",
        "LISTENER a",
    ] {
        assert_eq!(subscription(sql.as_bytes()), None, "{sql}");
    }
}

#[test]
fn a_database_needed_free_is_named() {
    let cases: &[(&str, Option<&str>)] = &[
        ("DROP DATABASE testdb", Some("testdb")),
        ("drop database if exists \"Test DB\";", Some("Test DB")),
        ("DROP DATABASE x WITH (FORCE)", Some("x")),
        ("  drop database Mixed  ", Some("mixed")),
        ("ALTER DATABASE old RENAME TO new", Some("old")),
        ("alter database old set work_mem = '1MB'", None),
        ("CREATE DATABASE copy TEMPLATE src", Some("src")),
        (
            "create database copy with owner me template = \"Src\"",
            Some("Src"),
        ),
        ("CREATE DATABASE plain", None),
        ("CREATE DATABASE d TEMPLATE DEFAULT", None),
        ("CREATE TABLE database (x int)", None),
        ("DROP TABLE testdb", None),
        ("drop database a; select 1", None),
        ("-- drop database a", None),
        ("select 'drop database a'", None),
        ("DROP DATABASE", None),
    ];
    for (sql, want) in cases {
        assert_eq!(
            database_needed_free(sql.as_bytes()).as_deref(),
            *want,
            "{sql}"
        );
    }
}

/// asyncpg's reset (a pool's release) ends the session's subscriptions with a `DO` block
/// that runs `UNLISTEN *` when `pg_listening_channels()` lists one: taken for `UNLISTEN *`.
/// Other `DO` blocks, and look-alikes, are not.
#[test]
fn a_do_block_that_unlistens_when_listening_is_unlisten_all() {
    let asyncpg = "SELECT pg_advisory_unlock_all();\nCLOSE ALL;\n
                DO $$
                BEGIN
                    PERFORM * FROM pg_listening_channels() LIMIT 1;
                    IF FOUND THEN
                        UNLISTEN *;
                    END IF;
                END;
                $$;
            \nRESET ALL;";
    let found: Vec<Effect> = all(asyncpg).into_iter().map(|(_, e)| e).collect();
    assert_eq!(
        found,
        [
            Effect::UnlockAll,
            Effect::Close { name: None },
            Effect::Unlisten { channel: None },
            Effect::ResetAll
        ]
    );
    let unlisten_all = Some(Effect::Unlisten { channel: None });
    for yes in [
        "do language plpgsql $body$ begin perform pg_listening_channels(); unlisten *; end $body$",
        "DO $x$BEGIN IF EXISTS (SELECT FROM PG_LISTENING_CHANNELS()) THEN UNLISTEN * ; END IF; END$x$ LANGUAGE plpgsql",
    ] {
        assert_eq!(one(yes), unlisten_all, "{yes}");
    }
    // Any other block is work the pooler cannot see into, one that also unlistens too.
    for other in [
        "DO $$ BEGIN UNLISTEN *; END $$",
        "DO $$ BEGIN PERFORM pg_listening_channels(); UNLISTEN ch; END $$",
        "DO $$ BEGIN UNLISTEN *; PERFORM pg_listening_channels(); END $$",
        "DO $$ BEGIN PERFORM pg_listening_channels(); RAISE NOTICE 'unlisten *'; END $$",
        "DO $$ BEGIN PERFORM pg_listening_channels(); -- unlisten *\nEND $$",
        "DO 'BEGIN PERFORM pg_listening_channels(); UNLISTEN *; END'",
        "DO $$ BEGIN PERFORM pg_listening_channels(); EXECUTE 'SET ROLE r'; UNLISTEN *; END $$",
        "DO $$ BEGIN PERFORM pg_listening_channels(), set_config('a.b', 'c', false); UNLISTEN *; END $$",
        "DO",
    ] {
        assert_eq!(one(other), Some(Effect::Unseen(Unseen::Any)), "{other}");
    }
    assert_eq!(
        one("select 'DO $$ pg_listening_channels() unlisten * $$'"),
        None
    );
    // asyncpg's own, as its `Connection.reset()` sends it.
    assert_eq!(
        one("DO $$\nBEGIN\n    PERFORM * FROM pg_listening_channels() LIMIT 1;\n    IF FOUND THEN\n        UNLISTEN *;\n    END IF;\nEND;\n$$"),
        unlisten_all
    );
}
