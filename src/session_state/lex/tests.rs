//! The lexer's rules, one test each, against texts whose reading by PostgreSQL was checked
//! by hand (scan.l); then properties over random texts.

use super::*;

const OFF: Scan = Scan::STANDARD.standard_strings(false);

fn show(t: Token<'_>) -> String {
    match t {
        Token::Word(w) => format!("w:{}", String::from_utf8_lossy(w)),
        Token::Quoted(q) => format!("q:{}", String::from_utf8_lossy(q)),
        Token::Str(s) => format!("s:{}", String::from_utf8_lossy(s)),
        Token::Other(o) => format!("o:{}", String::from_utf8_lossy(o)),
        Token::Punct(p) => format!("p:{}", p as char),
    }
}

fn words(sql: &str) -> Vec<String> {
    Tokens::new(sql.as_bytes()).map(show).collect()
}

fn stmts(sql: &str) -> Vec<String> {
    stmts_with(sql.as_bytes(), Scan::STANDARD)
}

fn stmts_with(sql: &[u8], scan: Scan) -> Vec<String> {
    statements_with(sql, scan)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[test]
fn literals_and_comments_are_whole_tokens() {
    assert_eq!(
        words("SET search_path TO 'a;b' -- set x\n/* SET /* nested */ y */ , \"Q;\"\"x\""),
        [
            "w:SET",
            "w:search_path",
            "w:TO",
            "s:'a;b'",
            "p:,",
            "q:Q;\"\"x"
        ]
    );
    assert_eq!(
        words("select $f$ ; set x $f$, $$a$$, $1"),
        [
            "w:select",
            "s:$f$ ; set x $f$",
            "p:,",
            "s:$$a$$",
            "p:,",
            "o:$1"
        ]
    );
    assert_eq!(
        words(r"E'it\'s; set' U&'d\0061' x'1f' b'01' n'x'"),
        [
            r"s:E'it\'s; set'",
            r"s:U&'d\0061'",
            "s:x'1f'",
            "s:b'01'",
            "s:n'x'"
        ]
    );
}

#[test]
fn statements_split_at_top_level_semicolons_only() {
    assert_eq!(
        stmts("select 1; select ';' ; ;select $$;$$ -- ;\n;/*;*/select \"a;\""),
        ["select 1", "select ';'", "select $$;$$", "select \"a;\""]
    );
    assert_eq!(stmts("  -- only a comment\n ; "), Vec::<String>::new());
    // Unterminated literals and comments end with the text, never panic.
    assert_eq!(stmts("select 'abc"), ["select 'abc"]);
    assert_eq!(stmts("select /* x"), ["select"]);
    assert_eq!(stmts("select $a$ x"), ["select $a$ x"]);
    assert_eq!(stmts("select \"a"), ["select \"a"]);
    assert_eq!(stmts(r"select E'a\"), [r"select E'a\"]);
}

#[test]
fn keywords_in_any_case() {
    let t: Vec<_> = Tokens::new(b"sEt Reset").collect();
    assert!(t[0].is("set") && t[1].is("reset") && !t[0].is("reset"));
}

#[test]
fn a_dash_comment_ends_at_cr_or_lf() {
    // scan.l `newline [\n\r]`.
    assert_eq!(stmts("--x\rSET ROLE r"), ["SET ROLE r"]);
    assert_eq!(
        stmts("select 1 -- a;\r; set role r;-- b\r\nselect 2 --;"),
        ["select 1", "set role r", "select 2"]
    );
    assert_eq!(words("1 --\r2"), ["o:1", "o:2"]);
}

#[test]
fn block_comments_nest_and_star_slash_outside_is_an_operator() {
    assert_eq!(stmts("/* /* ; */ ; */ select 1"), ["select 1"]);
    // `/*/` opens a comment and does not close it; `**/` closes.
    assert_eq!(
        stmts("/*/ ; */select 1; /* **/select 2"),
        ["select 1", "select 2"]
    );
    assert_eq!(stmts("/* a /*/ b */ ; */ select 1"), ["select 1"]);
    assert_eq!(words("1 */ 2"), ["o:1", "o:*/", "o:2"]);
    // An operator stops where a comment starts inside it.
    assert_eq!(
        words("1 +/* c */2 */*c*/3"),
        ["o:1", "o:+", "o:2", "o:*", "o:3"]
    );
    assert_eq!(words("1 @--c\r2"), ["o:1", "o:@", "o:2"]);
}

#[test]
fn e_strings_take_backslash_escapes_in_every_mode() {
    for scan in [Scan::STANDARD, OFF] {
        let s = |sql: &str| stmts_with(sql.as_bytes(), scan);
        assert_eq!(
            s(r"select E'a\\'; select 2"),
            [r"select E'a\\'", "select 2"]
        );
        assert_eq!(
            s(r"select e'\'; select 2; '"),
            [r"select e'\'; select 2; '"]
        );
        assert_eq!(
            s(r"select E'it''s\\\'; x'; select 2"),
            [r"select E'it''s\\\'; x'", "select 2"]
        );
    }
}

#[test]
fn standard_conforming_strings_off_makes_backslash_an_escape() {
    let text = r"select 'a\'; select 2; '";
    assert_eq!(stmts(text), [r"select 'a\'", "select 2", "'"]);
    assert_eq!(stmts_with(text.as_bytes(), OFF), [text]);
    // `N''` is NCHAR and then a plain literal: it follows the mode too.
    let text = r"select n'a\'; select 2; '";
    assert_eq!(stmts(text).len(), 3);
    assert_eq!(stmts_with(text.as_bytes(), OFF), [text]);
    // `''` is a quote in both.
    assert_eq!(stmts_with(b"select 'a''; b'; select 2", OFF).len(), 2);
}

#[test]
fn unicode_literals_and_identifiers_take_no_backslash_escape() {
    for scan in [Scan::STANDARD, OFF] {
        let s = |sql: &str| stmts_with(sql.as_bytes(), scan);
        assert_eq!(s(r"select U&'\'; select 2"), [r"select U&'\'", "select 2"]);
        assert_eq!(
            s(r"select u&'a''\'; select 2"),
            [r"select u&'a''\'", "select 2"]
        );
        assert_eq!(
            s(r#"select 1 as U&"a;""\"; select 2"#),
            [r#"select 1 as U&"a;""\""#, "select 2"]
        );
    }
    // `U&` not before a quote is the word `U` and an operator.
    assert_eq!(words("U&&'x'"), ["w:U", "o:&&", "s:'x'"]);
}

#[test]
fn bit_strings_end_at_their_first_quote() {
    // scan.l `xbinside [^']*`: no `''` inside; the next quote starts a plain literal.
    assert_eq!(words("b'0''1'"), ["s:b'0'", "s:'1'"]);
    let text = r"select x'1f''\'; select 2; '";
    assert_eq!(stmts(text).len(), 3);
    assert_eq!(stmts_with(text.as_bytes(), OFF), [text]);
}

#[test]
fn a_literal_continues_after_white_space_with_a_newline() {
    // scan.l `quotecontinue`: the continuation is read as the literal began (`xe` here).
    let text = "select E'a'\n'\\'; select 2; '";
    assert_eq!(stmts(text), [text]);
    let text = "select E'a' -- c\r  \t-- d\n\n'\\'; select 2; '";
    assert_eq!(stmts(text), [text]);
    assert_eq!(words("'a'\n'b'"), ["s:'a'\n'b'"]);
    // No newline, or a block comment: not continued.
    assert_eq!(stmts("select E'a' '\\'; select 2; '").len(), 3);
    assert_eq!(stmts("select E'a'\n/**/'\\'; select 2; '").len(), 3);
    // Bit strings continue as bit strings.
    assert_eq!(words("b'0'\n'1''2'"), ["s:b'0'\n'1'", "s:'2'"]);
}

#[test]
fn dollar_quotes_follow_the_tag_rules() {
    assert_eq!(
        stmts("select $a$ $b$ ; $b$ $a$; select 2"),
        ["select $a$ $b$ ; $b$ $a$", "select 2"]
    );
    assert_eq!(
        stmts("select $_a1$;$_a1$; select 2"),
        ["select $_a1$;$_a1$", "select 2"]
    );
    assert_eq!(
        stmts("select $é$;$é$; select 2"),
        ["select $é$;$é$", "select 2"]
    );
    // `$` inside a word is part of it: no quote opens.
    assert_eq!(
        stmts("select 1 as a$$b; select 2 as c$$"),
        ["select 1 as a$$b", "select 2 as c$$"]
    );
    assert_eq!(words("a$$b$$"), ["w:a$$b$$"]);
    // A parameter, then a quote; a digit cannot start a tag.
    assert_eq!(words("$1$$;$$"), ["o:$1", "s:$$;$$"]);
    assert_eq!(words("$1a$"), ["o:$1", "w:a$"]);
    // No closing `$`: a lone `$`, then a word.
    assert_eq!(words("$ab c"), ["o:$", "w:ab", "w:c"]);
    // A tag holds no `$`: `$a$b$` opens `$a$`.
    assert_eq!(words("$a$b$ $a$"), ["s:$a$b$ $a$"]);
    // The closing tag may follow other text directly.
    assert_eq!(words("$q$x$q$$q$"), ["s:$q$x$q$", "s:$q$"]);
}

#[test]
fn operators_end_where_scan_l_ends_them() {
    assert_eq!(
        words("a::int<>-1"),
        ["w:a", "o:::", "w:int", "o:<>", "o:-", "o:1"]
    );
    assert_eq!(words("x=-1"), ["w:x", "p:=", "o:-", "o:1"]);
    assert_eq!(words("x ?- y"), ["w:x", "o:?-", "w:y"]);
    assert_eq!(
        words("x <= y => z := w"),
        ["w:x", "o:<=", "w:y", "o:=>", "w:z", "o::=", "w:w"]
    );
    assert_eq!(words("x 1+--c\n2"), ["w:x", "o:1", "o:+", "o:2"]);
    assert_eq!(words("\\ {"), ["o:\\", "o:{"]);
}

#[test]
fn numbers_end_where_scan_l_ends_them() {
    assert_eq!(
        words("1.5e+3 .5 1. 1..2"),
        ["o:1.5e+3", "o:.5", "o:1.", "o:1", "o:..", "o:2"]
    );
    assert_eq!(
        words("0x1F 0o17 0b101 1_000"),
        ["o:0x1F", "o:0o17", "o:0b101", "o:1_000"]
    );
    // What follows a number is a token of its own: `1e'x'` is `1` and `e'x'`.
    assert_eq!(words(r"1e'\''"), ["o:1", r"s:e'\''"]);
    assert_eq!(
        words("1e 0x'1f' 1a$$"),
        ["o:1", "w:e", "o:0", "s:x'1f'", "o:1", "w:a$$"]
    );
    assert_eq!(words("1$$;$$"), ["o:1", "s:$$;$$"]);
    assert_eq!(words("t.5"), ["w:t", "o:.5"]);
}

#[test]
fn no_length_limit() {
    let mut text = "select '".to_string() + &"x".repeat(1 << 20) + "';";
    text.push_str("set role r");
    assert_eq!(stmts(&text).last().map(String::as_str), Some("set role r"));
}

#[test]
fn client_only_encodings_keep_a_character_whole() {
    let sjis = Scan::STANDARD.client_encoding(b"SJIS");
    // `ソ` in SJIS is 0x83 0x5C: its second byte is a backslash.
    let text = b"select E'\x83\x5c'; set role r; -- '";
    assert_eq!(stmts_with(text, sjis).len(), 2);
    assert_eq!(stmts_with(text, Scan::STANDARD).len(), 1);
    // A word and a dollar tag take the character whole.
    let text = b"select $\x83\x5c$;$\x83\x5c$; select 2";
    assert_eq!(stmts_with(text, sjis).len(), 2);
    assert_eq!(Tokens::with(b"a\x83\x5cb", 0, sjis).count(), 1);
    // Half-width katakana is one byte in SJIS.
    assert_eq!(stmts_with(b"select E'\xb1\\'; select 2; '", sjis).len(), 1);
    let gb = Scan::STANDARD.client_encoding(b"gb18030");
    assert_eq!(
        stmts_with(b"select E'\x81\x30\x81\x5c'; select 2", gb).len(),
        2
    );
    // An ASCII-safe encoding reads byte by byte.
    let utf8 = Scan::STANDARD.client_encoding(b"UTF8");
    assert_eq!(utf8, Scan::STANDARD);
}

#[test]
fn scan_follows_parameter_status() {
    let mut scan = Scan::default();
    assert!(scan.is_standard_strings());
    assert!(!scan.observe(b"standard_conforming_strings", b"on"));
    assert!(scan.observe(b"standard_conforming_strings", b"off"));
    assert_eq!(scan, OFF);
    assert!(!scan.observe(b"TimeZone", b"UTC"));
    assert!(scan.observe(b"client_encoding", b"Shift_JIS"));
    assert_eq!(scan, OFF.client_encoding(b"SJIS"));
    assert!(scan.observe(b"client_encoding", b"UTF8"));
    assert!(scan.observe(b"standard_conforming_strings", b"true"));
    assert_eq!(scan, Scan::STANDARD);
    for off in [&b"false"[..], b"f", b"no", b"0", b"OF"] {
        let mut s = Scan::STANDARD;
        assert!(s.observe(b"standard_conforming_strings", off), "{off:?}");
    }
}

#[test]
fn begin_atomic_bodies_are_split_too() {
    // PostgreSQL's grammar keeps these `;`s inside the CREATE FUNCTION; splitting there as
    // well never hides the statement after it.
    let text = "create function f() returns int language sql begin atomic select 1 as case; end; set role r";
    assert_eq!(stmts(text).last().map(String::as_str), Some("set role r"));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Texts made mostly of the bytes that decide where things end.
    fn text() -> impl Strategy<Value = Vec<u8>> {
        let pieces = prop::sample::select(vec![
            &b"'"[..],
            b"\"",
            b"$",
            b"$a$",
            b"$$",
            b";",
            b"--",
            b"/*",
            b"*/",
            b"\\",
            b"\n",
            b"\r",
            b" ",
            b"E'",
            b"U&'",
            b"b'",
            b"x",
            b"1",
            b".",
            b"e",
            b"+",
            b"-",
            b"*",
            b"/",
            b"=",
            b"a",
            b"\x83",
            b"\x5c",
            b"\x81\x30",
            b"(",
            b")",
            b":",
        ]);
        prop::collection::vec(pieces, 0..40).prop_map(|p| p.concat())
    }

    fn scans() -> [Scan; 4] {
        [
            Scan::STANDARD,
            OFF,
            Scan::STANDARD.client_encoding(b"SJIS"),
            OFF.client_encoding(b"GB18030"),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any bytes: no panic, and the tokens read outside the statements are `;` only,
        /// so each statement's tokens read alone are the text's tokens, in order.
        #[test]
        fn statements_partition_the_tokens(
            sql in prop_oneof![text(), prop::collection::vec(any::<u8>(), 0..64)]
        ) {
            for scan in scans() {
                let whole: Vec<_> = Tokens::with(&sql, 0, scan)
                    .filter(|t| *t != Token::Punct(b';'))
                    .collect();
                let mut split = Vec::new();
                let mut last_end = 0;
                for stmt in statements_with(&sql, scan) {
                    let at = stmt.as_ptr() as usize - sql.as_ptr() as usize;
                    prop_assert!(at >= last_end && !stmt.is_empty());
                    last_end = at + stmt.len();
                    split.extend(Tokens::with(stmt, 0, scan));
                }
                prop_assert_eq!(whole, split);
            }
        }

        /// The mode changes only what backslashes do; the encoding only what high bytes do.
        #[test]
        fn settings_matter_only_where_they_should(sql in text()) {
            let all = |scan| stmts_with(&sql, scan);
            if !sql.contains(&b'\\') {
                prop_assert_eq!(all(Scan::STANDARD), all(OFF));
            }
            if sql.is_ascii() {
                prop_assert_eq!(all(Scan::STANDARD), all(Scan::STANDARD.client_encoding(b"SJIS")));
            }
        }

        /// Statements joined again with `;` split into the same statements when each ends
        /// cleanly (nothing left open at its end).
        #[test]
        fn rejoined_statements_split_the_same(sql in text()) {
            let parts: Vec<&[u8]> = statements(&sql).collect();
            let closed = |s: &&[u8]| statements([*s, &b";select 1"[..]].concat().as_slice()).count() == 2;
            if parts.iter().all(closed) {
                let joined = parts.join(&b";"[..]);
                let again: Vec<&[u8]> = statements(&joined).collect();
                prop_assert_eq!(parts, again);
            }
        }
    }
}
