//! The functions a statement calls, and what each may do to its session: a built-in known to
//! leave the session alone does nothing; `set_config`, the advisory locks and the sequence
//! functions do what the pooler can name; any other function (one of the database's own, a
//! procedural language's, a built-in that runs SQL given as text) is work the pooler cannot
//! see into, after which the server is cleaned before another client runs there.
//!
//! A call is a name followed by `(`. PostgreSQL's grammar never reads a reserved or
//! column-name keyword written unquoted as a function's name (`VALUES (`, `EXISTS (`,
//! `varchar(10)`), nor the name after `INTO`, `TABLE`, `REFERENCES`, `ON`, ... as anything but
//! a relation's (`INSERT INTO t (a, b)`); what is not recognised counts as a call, so an
//! unusual shape costs a clean-up, never a leak.

use super::builtins;
use super::effect::{Effect, PinReason, Unseen};
use super::lex::Token;

/// Unreserved keywords that take a parenthesised list without being a function: window and
/// grouping clauses, column lists, utility options.
const LISTS: &[&[u8]] = &[
    b"by",
    b"cluster",
    b"conflict",
    b"copy",
    b"cube",
    b"enum",
    b"explain",
    b"filter",
    b"hash",
    b"include",
    b"inherits",
    b"key",
    b"list",
    b"materialized",
    b"options",
    b"over",
    b"range",
    b"reindex",
    b"reset",
    b"rollup",
    b"set",
    b"sets",
    b"vacuum",
];

/// Words after which a name followed by `(` is a relation's, a type's or a routine's being
/// defined, not a call: `INSERT INTO t (cols)`, `CREATE TABLE t (..)`, `REFERENCES t (c)`,
/// `ON t (c)`, `USING btree (c)`, `WITH t (c) AS`, `DROP FUNCTION f(int)`, `AS o(n)`.
const DEFINES: &[&[u8]] = &[
    b"aggregate",
    b"analyze",
    b"as",
    b"copy",
    b"exists",
    b"function",
    b"index",
    b"into",
    b"on",
    b"only",
    b"procedure",
    b"recursive",
    b"references",
    b"routine",
    b"statistics",
    b"table",
    b"using",
    b"vacuum",
    b"view",
    b"with",
];

/// Built-ins that change the session in a way the pooler cannot follow, or that run SQL
/// given to them as text (what it does is not seen): each counts as unseen work.
const STATEFUL: &[&[u8]] = &[
    b"cursor_to_xml",
    b"cursor_to_xmlschema",
    b"database_to_xml",
    b"database_to_xml_and_xmlschema",
    b"database_to_xmlschema",
    b"pg_backup_start",
    b"pg_backup_stop",
    b"pg_copy_logical_replication_slot",
    b"pg_copy_physical_replication_slot",
    b"pg_create_logical_replication_slot",
    b"pg_create_physical_replication_slot",
    b"pg_replication_origin_session_reset",
    b"pg_replication_origin_session_setup",
    b"pg_replication_origin_xact_reset",
    b"pg_replication_origin_xact_setup",
    b"pg_start_backup",
    b"pg_stop_backup",
    b"plpgsql_call_handler",
    b"plpgsql_inline_handler",
    b"query_to_xml",
    b"query_to_xml_and_xmlschema",
    b"query_to_xmlschema",
    b"schema_to_xml",
    b"schema_to_xml_and_xmlschema",
    b"schema_to_xmlschema",
    b"setseed",
    b"table_to_xml",
    b"table_to_xml_and_xmlschema",
    b"table_to_xmlschema",
    b"ts_rewrite",
    b"ts_stat",
];

/// What calling `name` (folded as PostgreSQL folds it) does, as far as the pooler must know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Callee {
    /// A built-in that leaves the session alone.
    Harmless,
    /// `set_config`: its arguments say what it sets.
    SetConfig,
    /// A session advisory lock (`pg_advisory_lock`, `pg_try_advisory_lock`, shared or not).
    Lock,
    /// `pg_advisory_unlock_all`.
    UnlockAll,
    /// `pg_advisory_unlock`, `pg_advisory_unlock_shared`.
    Unlock,
    /// What the server holds afterwards cannot be seen.
    Unseen(Unseen),
}

/// Whether `name` is a built-in of the list's PostgreSQL major.
pub fn is_builtin(name: &[u8]) -> bool {
    listed(builtins::NAMES, name)
}

fn listed(list: &[&[u8]], word: &[u8]) -> bool {
    list.binary_search(&word).is_ok()
}

/// What a call of `name` (unqualified, or `pg_catalog.name`) does.
pub(super) fn callee(name: &[u8]) -> Callee {
    match name {
        b"set_config" => Callee::SetConfig,
        b"pg_advisory_lock"
        | b"pg_advisory_lock_shared"
        | b"pg_try_advisory_lock"
        | b"pg_try_advisory_lock_shared" => Callee::Lock,
        b"pg_advisory_unlock_all" => Callee::UnlockAll,
        b"pg_advisory_unlock" | b"pg_advisory_unlock_shared" => Callee::Unlock,
        // `currval`/`lastval` read what these leave.
        b"nextval" | b"setval" => Callee::Unseen(Unseen::Sequences),
        _ if listed(STATEFUL, name) || !is_builtin(name) => Callee::Unseen(Unseen::Any),
        _ => Callee::Harmless,
    }
}

/// A word as PostgreSQL folds a name: an unquoted one lower-cased (into `buf`), a quoted one
/// as written. `None` for anything else, or a name too long to be one.
fn folded<'b>(t: &'b Token<'_>, buf: &'b mut [u8; 64]) -> Option<&'b [u8]> {
    match *t {
        Token::Word(w) => {
            let out = buf.get_mut(..w.len())?;
            out.copy_from_slice(w);
            out.make_ascii_lowercase();
            Some(out)
        }
        // (A quoted name with `""` inside names no built-in.)
        Token::Quoted(q) => Some(q),
        _ => None,
    }
}

fn is_word_in(t: Option<&Token<'_>>, list: &[&[u8]]) -> bool {
    let mut buf = [0u8; 64];
    matches!(t, Some(t @ Token::Word(_)) if folded(t, &mut buf).is_some_and(|w| listed(list, w)))
}

/// The effects of the calls among `tokens` (a statement's): each name followed by `(` that
/// the grammar reads as a function call.
pub(super) fn effects_of_calls(tokens: &[Token<'_>], emit: &mut dyn FnMut(Effect)) {
    let mut buf = [0u8; 64];
    for (i, pair) in tokens.windows(2).enumerate() {
        if pair[1] != Token::Punct(b'(') {
            continue;
        }
        let Some(name) = folded(&pair[0], &mut buf) else {
            continue;
        };
        let qualified = i >= 2 && tokens[i - 1] == Token::Punct(b'.');
        // The word before the (possibly qualified) name.
        let before = if qualified {
            i.checked_sub(3).map(|j| &tokens[j])
        } else {
            i.checked_sub(1).map(|j| &tokens[j])
        };
        if is_word_in(before, DEFINES) || before == Some(&Token::Other(b"::")) {
            continue;
        }
        let callee = if qualified {
            let mut sbuf = [0u8; 64];
            match folded(&tokens[i - 2], &mut sbuf) {
                Some(b"pg_catalog") => callee(name),
                _ => Callee::Unseen(Unseen::Any),
            }
        } else {
            if matches!(pair[0], Token::Word(_))
                && (listed(builtins::NOT_CALLED, name) || listed(LISTS, name))
            {
                continue;
            }
            callee(name)
        };
        match callee {
            Callee::Harmless => {}
            Callee::SetConfig => set_config(&tokens[i + 2..], emit),
            Callee::Lock => emit(Effect::Pin(PinReason::AdvisoryLock)),
            Callee::UnlockAll => emit(Effect::UnlockAll),
            Callee::Unlock => emit(Effect::Unlock),
            Callee::Unseen(u) => emit(Effect::Unseen(u)),
        }
    }
}

/// `set_config(name, value, is_local)` from its arguments: literal name and value with a
/// literal `false` are a setting; `true` is transaction-local; anything else (a parameter,
/// an expression) cannot be read, so the client is pinned.
fn set_config(args: &[Token<'_>], emit: &mut dyn FnMut(Effect)) {
    let lit = |t: Option<&Token<'_>>| match t {
        Some(Token::Str(s)) if s.first() == Some(&b'\'') && s.len() >= 2 => {
            Some(String::from_utf8_lossy(&s[1..s.len() - 1]).replace("''", "'"))
        }
        _ => None,
    };
    let (name, comma1, value, comma2, local, close) = (
        lit(args.first()),
        args.get(1),
        lit(args.get(2)),
        args.get(3),
        args.get(4),
        args.get(5),
    );
    let shaped = comma1 == Some(&Token::Punct(b','))
        && comma2 == Some(&Token::Punct(b','))
        && close == Some(&Token::Punct(b')'));
    match (name, value, local) {
        (Some(name), Some(value), Some(l)) if shaped && l.is("false") => {
            let name = name.to_ascii_lowercase();
            let replay = format!(
                "SELECT pg_catalog.set_config({}, {}, false)",
                quote(&name),
                quote(&value)
            );
            emit(Effect::Set { name, replay });
        }
        (_, _, Some(l)) if shaped && l.is("true") => emit(Effect::Local),
        _ => emit(Effect::Pin(PinReason::DynamicSetting)),
    }
}

/// An SQL string literal (`E''`, so backslashes mean the same whatever the settings).
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("E'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_state::detect::{effects, unseen};
    use crate::session_state::lex::Scan;

    /// What drivers, ORMs and benchmarks send every day calls only built-ins (a clean-up
    /// there would cost every handoff).
    #[test]
    fn everyday_statements_are_seen_through() {
        for sql in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
            "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
            "select o.n, p.partstrat, pg_catalog.count(i.inhparent) from pg_catalog.pg_class as c \
             join pg_catalog.pg_namespace as n on (n.oid = c.relnamespace) cross join lateral \
             (select pg_catalog.array_position(pg_catalog.current_schemas(true), n.nspname)) as o(n) \
             left join pg_catalog.pg_partitioned_table as p on (p.partrelid = c.oid) \
             left join pg_catalog.pg_inherits as i on (c.oid = i.inhparent) \
             where c.relname = 'pgbench_accounts' and o.n is not null group by 1, 2 order by 1 asc limit 1",
            "SELECT count(*), coalesce(sum(n), 0), now(), lower(name) FROM t WHERE id IN (1, 2)",
            "SELECT \"app_item\".\"id\" FROM \"app_item\" WHERE \"app_item\".\"id\" = ANY($1) LIMIT 21",
            "INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT (a) DO UPDATE SET b = EXCLUDED.b RETURNING (xmax = 0)",
            "WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT sum(n) FROM r",
            "SELECT row_number() OVER (PARTITION BY a ORDER BY b), array_agg(DISTINCT c) FILTER (WHERE d) FROM t GROUP BY ROLLUP (a, b)",
            "SELECT CAST(x AS varchar(10)), x::numeric(10, 2), extract(epoch FROM ts), date_trunc('day', ts) FROM t",
            "SELECT * FROM a JOIN (SELECT id FROM b) AS s (id) USING (id) WHERE EXISTS (SELECT 1 FROM c)",
            "SELECT to_char(now(), 'YYYY'), jsonb_build_object('a', 1), string_agg(x, ',' ORDER BY y) FROM t",
            "CREATE TABLE IF NOT EXISTS t (id serial PRIMARY KEY, v varchar(20) NOT NULL, CHECK (length(v) > 0))",
            "CREATE INDEX CONCURRENTLY i ON t USING btree (lower(v)) INCLUDE (id)",
            "ALTER TABLE t ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES u (b)",
            "SELECT pg_catalog.set_config('search_path', '', true)",
            "COPY t (a, b) FROM STDIN",
        ] {
            assert_eq!(unseen(sql.as_bytes(), Scan::STANDARD), None, "{sql}");
        }
    }

    /// Calls of functions the pooler cannot see into, and built-ins that change the session
    /// it cannot follow, however they are written.
    #[test]
    fn unseen_calls_in_any_statement() {
        for (sql, want) in [
            ("SELECT my_func()", Unseen::Any),
            ("SELECT public.lower(x) FROM t", Unseen::Any),
            ("SELECT \"Lower\"(x) FROM t", Unseen::Any),
            ("INSERT INTO t VALUES (audit(1))", Unseen::Any),
            ("UPDATE t SET a = f(a)", Unseen::Any),
            ("DELETE FROM t WHERE g(a)", Unseen::Any),
            ("COPY (SELECT f()) TO STDOUT", Unseen::Any),
            ("EXPLAIN SELECT f()", Unseen::Any),
            ("EXPLAIN (ANALYZE, BUFFERS) SELECT f()", Unseen::Any),
            ("DECLARE c CURSOR WITH HOLD FOR SELECT f()", Unseen::Any),
            ("CALL p()", Unseen::Any),
            ("DO $$ BEGIN NULL; END $$", Unseen::Any),
            ("SELECT setseed(0.5)", Unseen::Any),
            (
                "SELECT query_to_xml('select 1', true, true, '')",
                Unseen::Any,
            ),
            ("SELECT nextval('s')", Unseen::Sequences),
            ("SELECT pg_catalog.setval('s', 5)", Unseen::Sequences),
            (
                "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = f(s.v)",
                Unseen::Any,
            ),
        ] {
            assert_eq!(unseen(sql.as_bytes(), Scan::STANDARD), Some(want), "{sql}");
        }
        // Known calls keep their meaning in any statement.
        let mut out = Vec::new();
        effects(
            b"INSERT INTO t VALUES (pg_advisory_lock(1))",
            Scan::STANDARD,
            &mut out,
        );
        assert_eq!(out, vec![(0, Effect::Pin(PinReason::AdvisoryLock))]);
    }

    #[test]
    fn the_lists_are_sorted_for_their_searches() {
        for list in [LISTS, DEFINES, STATEFUL] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
        assert!(builtins::NAMES.windows(2).all(|w| w[0] < w[1]));
        assert!(builtins::NOT_CALLED.windows(2).all(|w| w[0] < w[1]));
        for name in STATEFUL {
            assert_eq!(callee(name), Callee::Unseen(Unseen::Any));
        }
    }
}
