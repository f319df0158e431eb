//! The SQL programs are made of: simple-query strings and extended-protocol statements, each
//! with what it needs of a pooling setup to mean the same through the pooler as directly.
//!
//! Templates name the client's own objects, so clients never touch each other's: `{t}` its
//! table, `{k}` its number (advisory lock key, LISTEN channel). `{x}` and `{y}` are value sizes,
//! large (as the differential test uses them) or small (a fast simulation).

use super::Rules;

/// Needs: named prepared statements survive between transactions (session mode, or tracking).
pub const NAMED: u8 = 1;
/// Needs: explicit transaction blocks (not statement mode).
pub const TX: u8 = 2;
/// Needs: SQL-level session state a transaction pooler does not carry from server to server
/// (SET, PREPARE, LISTEN, temp tables, advisory locks, DISCARD ALL): session mode only.
pub const SESSION: u8 = 4;
/// Needs: changes of a reported setting (ParameterStatus) carried to the client's next server.
pub const REPORTED: u8 = 8;
/// Needs: the server may end the session with FATAL.
pub const FATAL: u8 = 16;
/// Needs: work the pooler cannot see into that changes a setting (client 0 only).
pub const UNSEEN_WRITE: u8 = 32;
/// Needs: a read of the setting unseen work changes (any client but 0, which wrote it).
pub const UNSEEN_READ: u8 = 64;

/// Client 0's unseen work, and the other clients' read of what it sets.
const UNSEEN_DO: &str = "do $$ begin perform set_config('work_mem', '77MB', false); end $$";
const UNSEEN_SHOW: &str = "show work_mem";

/// One piece of vocabulary.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub sql: &'static str,
    pub needs: u8,
    /// How often the generator picks it, relative to the others of its list.
    pub weight: u32,
    /// The write ends after it: DEALLOCATE's and DISCARD's effect on a pooler's statement
    /// bookkeeping comes with their answer, so what a client pipelines after them is judged as
    /// before them (README, "Prepared statements").
    pub ends_write: bool,
}

const fn e(sql: &'static str, needs: u8, weight: u32) -> Entry {
    Entry {
        sql,
        needs,
        weight,
        ends_write: false,
    }
}

const fn last(sql: &'static str, needs: u8, weight: u32) -> Entry {
    Entry {
        sql,
        needs,
        weight,
        ends_write: true,
    }
}

/// Simple-query strings. Weight 0: written by pieces of their own, never picked at random.
pub const QUERIES: &[Entry] = &[
    e("select 1", 0, 4),
    e("select 1/0", 0, 4),
    e("selec 1", 0, 4),
    e("insert into {t} values (7)", 0, 4),
    e("select count(*), coalesce(sum(n), 0) from {t}", 0, 4),
    e("select 1; selec 2; select 3", 0, 4),
    e("select 2; select 'two'", 0, 4),
    e("select repeat('x', {x})", 0, 4),
    last("deallocate all", NAMED, 4),
    e("insert into {t} values (7); select 1/0", 0, 2),
    e("copy (select n from {t} order by n) to stdout", 0, 2),
    e("do $$ begin raise notice 'n'; end $$", 0, 3),
    e("do $$ begin raise warning 'w'; end $$", 0, 2),
    e("do $$ begin raise exception 'e'; end $$", 0, 2),
    e(
        "select 1; do $$ begin raise notice 'n'; end $$; select 2",
        0,
        2,
    ),
    e("notify ch{k}, 'x'", 0, 1),
    e("select pg_terminate_backend(pg_backend_pid())", FATAL, 1),
    e("set application_name = 'a'", REPORTED, 2),
    e("set application_name = 'b'", REPORTED, 2),
    e("reset application_name", REPORTED, 1),
    e("show application_name", REPORTED, 2),
    e("set local application_name = 'l'", REPORTED, 2),
    e("set statement_timeout = '1min'", SESSION, 1),
    e("show statement_timeout", SESSION, 1),
    e("reset all", SESSION | REPORTED, 1),
    e("prepare a as select $1::text", SESSION | NAMED, 2),
    e(
        "prepare b as insert into {t} values ($1::int)",
        SESSION | NAMED,
        2,
    ),
    e("execute a('v')", SESSION | NAMED, 2),
    e("execute b(5)", SESSION | NAMED, 2),
    e("execute b('nope')", SESSION | NAMED, 1),
    last("deallocate a", SESSION | NAMED, 1),
    last("discard all", SESSION | NAMED | REPORTED, 1),
    e("listen ch{k}", SESSION, 1),
    e("listen ch{k}; notify ch{k}, 'y'", SESSION, 2),
    e("unlisten *", SESSION, 1),
    e("create temp table tt (n int)", SESSION, 1),
    e("insert into tt values (1)", SESSION, 1),
    e("select count(*) from tt", SESSION, 1),
    e("select pg_advisory_lock({k})", SESSION, 1),
    e("select pg_advisory_unlock({k})", SESSION, 1),
    e("select pg_advisory_unlock_all()", SESSION, 1),
    e("begin", TX, 0),
    e("commit", TX, 0),
    e("rollback", TX, 0),
    e("copy {t} from stdin", 0, 0),
    e(UNSEEN_DO, UNSEEN_WRITE, 30),
    e(UNSEEN_SHOW, UNSEEN_READ, 30),
];

/// Statements for Parse. Weight 0: only as part of a piece of its own.
pub const STATEMENTS: &[Entry] = &[
    e("select $1::text", 0, 4),
    e("select 1/0", 0, 4),
    e("selec 1", 0, 4),
    e("select n from {t} order by n", 0, 4),
    e("insert into {t} values ($1::int)", 0, 4),
    e("select repeat('y', {y})", 0, 4),
    e("copy (select n from {t} order by n) to stdout", 0, 4),
    e("select 1", 0, 2),
    e("do $$ begin raise notice 'n'; end $$", 0, 2),
    e("select pg_terminate_backend(pg_backend_pid())", FATAL, 1),
    e("show application_name", REPORTED, 1),
    e("copy {t} from stdin", 0, 0),
    e(UNSEEN_DO, UNSEEN_WRITE, 15),
    e(UNSEEN_SHOW, UNSEEN_READ, 15),
];

/// The COPY FROM STDIN template (a piece of its own, with its data).
pub const COPY_IN: &str = "copy {t} from stdin";

/// Whether the rules allow what `needs` asks for.
pub fn allowed(rules: &Rules, needs: u8) -> bool {
    let has = [
        (NAMED, rules.named_statements),
        (TX, rules.transactions),
        (SESSION, rules.session_state),
        (REPORTED, rules.reported_settings),
        (FATAL, rules.fatal),
        (UNSEEN_WRITE | UNSEEN_READ, rules.unseen),
    ];
    has.iter().all(|&(bit, ok)| needs & bit == 0 || ok)
}

/// Whether the rules allow what `needs` asks for of client `c`: unseen work is client 0's,
/// the reads of what it sets the others'.
pub fn allowed_for(rules: &Rules, needs: u8, c: usize) -> bool {
    allowed(rules, needs)
        && !(needs & UNSEEN_WRITE != 0 && c != 0)
        && !(needs & UNSEEN_READ != 0 && c == 0)
}

/// A template filled in for client `c`.
pub fn fill(sql: &str, c: usize, large: bool) -> String {
    if !sql.contains('{') {
        return sql.to_owned();
    }
    let (x, y) = if large {
        (3_000_000, 70_000)
    } else {
        (30_000, 9_000)
    };
    sql.replace("{t}", &super::table(c))
        .replace("{k}", &c.to_string())
        .replace("{x}", &x.to_string())
        .replace("{y}", &y.to_string())
}

/// The entry of `list` that `sql` is, filled in for client `c` (values of either size).
pub fn classify(list: &'static [Entry], sql: &str, c: usize) -> Option<&'static Entry> {
    list.iter()
        .find(|e| fill(e.sql, c, true) == sql || fill(e.sql, c, false) == sql)
}

/// Whether `sql` (of client `c`) is a large-value variant.
pub fn is_large(list: &'static [Entry], sql: &str, c: usize) -> bool {
    classify(list, sql, c)
        .is_some_and(|e| fill(e.sql, c, true) == sql && fill(e.sql, c, false) != sql)
}

/// `sql` of client `from` rewritten for client `to` (for the shrinker, which renumbers
/// clients); unchanged if it is not vocabulary.
pub fn renumber(list: &'static [Entry], sql: &str, from: usize, to: usize) -> String {
    match classify(list, sql, from) {
        Some(e) => fill(e.sql, to, is_large(list, sql, from)),
        None => sql.to_owned(),
    }
}
