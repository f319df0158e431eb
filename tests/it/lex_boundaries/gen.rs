//! The generator of the texts `lex_boundaries` runs: valid SQL only, whatever the seed.

use super::Case;

/// xorshift64*: the same texts from the same seed, without a dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// Blanks between tokens: never empty, every `--` comment ended.
const SEPS: &[&str] = &[
    " ",
    "\n",
    "\r",
    "\r\n",
    "\t",
    " -- c;'\"$$/*\n",
    "--x\r",
    "-- ;\r\n",
    "/* a; /* b; */ 'c */",
    "/*/ ; */",
    "/**/",
    "/* ** */ ",
    "\n-- $a$\r\n",
];
/// Where a literal continues: white space with a newline, `--` comments allowed.
const CONTINUATIONS: &[&str] = &[
    "\n",
    " \n  ",
    "\r",
    "\r\n",
    " -- c;'\n",
    "\t--x\r\n  ",
    "\n-- y\n",
];
const NUMBERS: &[&str] = &["1.5e+3", ".5", "1.", "2e-1", "007", "1.5E3"];
const OPERATED: &[&str] = &[
    "1 +-- c\n2",
    "1+--c\r2",
    "(1 +/* ; */ 2)",
    "2 */*c*/ 3",
    "1 -/**/-1",
    "4 /*;*/ / 2",
    "1 +-- ;\r\n-2",
    "1 !=--c\n2",
    "3>=--x\r2",
    "'1'::int",
    "1::text",
    "'a;'::text",
];
const ALIASES: &[&str] = &[
    "a",
    "\"a;b\"",
    "\"x\"\"y\"",
    "U&\"d\\0061t;a\"",
    "a$$b",
    "x$",
    "_1$2",
    "\"--\"",
    "\"/*\"",
    "\"'\"",
    "A$a$",
];
/// Pieces of literals' insides, by the kind of literal (backslash rules differ).
const ANY: &[&str] = &[
    ";", "''", "--", "/*", "*/", "$$", "$a$", "\"", "a", " ", "\n", "\r", "E",
];
const STANDARD_ONLY: &[&str] = &["\\", "\\\\", "\\;"];
const ESCAPES: &[&str] = &["\\\\", "\\n", "\\x41", "\\101", "\\;", "\\\""];
const UNICODE: &[&str] = &[
    "\\0041",
    "\\+000042",
    "\\\\",
    ";",
    "''",
    "--",
    "$$",
    "a",
    "\n",
];
const DOLLAR_BODY: &[&str] = &[
    ";", "'", "\"", "--", "/*", "*/", "$", "$x$", "$a", "\\", "\n", "\r", "a", "$$", "$b$", "E'",
];
const BODY_STATEMENTS: &[&str] = &[
    "SELECT NULL AS case",
    "SELECT 'a;' AS end",
    "SELECT NULL::int AS \"x;\"",
    "",
    "SELECT CASE WHEN true THEN 2 END AS begin",
];
/// SJIS characters whose second byte is ASCII (`ソ`, `表`: a backslash).
const SJIS: &[&[u8]] = &[b"\x83\x5c", b"\x95\x5c", b"\x82\xa0"];

/// The generator of one text.
struct Gen<'r> {
    rng: &'r mut Rng,
    case: Case,
    marker: usize,
}

impl Gen<'_> {
    fn push(&mut self, s: &str) {
        self.case.sql.extend_from_slice(s.as_bytes());
    }

    fn sep(&mut self) {
        let s = self.rng.pick(SEPS);
        self.push(s);
    }

    fn sjis_char(&mut self) {
        let c = SJIS[self.rng.below(SJIS.len())];
        self.case.sql.extend_from_slice(c);
    }

    fn text(mut self) -> Case {
        let n = 1 + self.rng.below(6);
        for i in 0..n {
            if self.rng.below(2) == 0 {
                self.sep();
            }
            match self.rng.below(14) {
                0 => {}
                // Last only: with pg_stat_statements loaded, PostgreSQL reads each statement
                // again when it runs, under the setting of that moment (it then refuses or
                // misreads the statements after the `SET`; 15.18 even crashed).
                1 if i + 1 == n => self.set_mode(),
                2 => self.atomic(),
                _ => self.select(),
            }
            if self.rng.below(2) == 0 {
                self.sep();
            }
            if i + 1 < n || self.rng.below(2) == 0 {
                self.push(";");
            }
        }
        if self.rng.below(8) == 0 {
            self.push("-- the end; SELECT 99");
        }
        self.case
    }

    fn set_mode(&mut self) {
        let form = self.rng.pick(&[
            "SET standard_conforming_strings = ",
            "set standard_conforming_strings to ",
            "SET SESSION standard_conforming_strings=",
        ]);
        let value = self.rng.pick(&["on", "off", "'off'", "true", "false"]);
        self.push(form);
        self.push(value);
    }

    fn atomic(&mut self) {
        self.case.atomic = true;
        self.push("CREATE OR REPLACE FUNCTION pg_temp.lexf() RETURNS int LANGUAGE sql");
        self.sep();
        self.push("BEGIN ATOMIC");
        for _ in 0..self.rng.below(4) {
            self.sep();
            let s = self.rng.pick(BODY_STATEMENTS);
            self.push(s);
            self.push(";");
        }
        self.push(" SELECT CASE WHEN true THEN 2 END; END");
    }

    fn select(&mut self) {
        let verb = self.rng.pick(&["SELECT", "select", "Select"]);
        self.push(verb);
        self.sep();
        let k = self.marker.to_string();
        self.marker += 1;
        self.push(&k);
        for _ in 0..self.rng.below(4) {
            self.push(",");
            self.sep();
            self.expr();
            if self.rng.below(2) == 0 {
                self.sep();
                self.push("AS");
                self.sep();
                self.alias();
            }
        }
    }

    fn alias(&mut self) {
        if self.case.sjis && self.rng.below(3) == 0 {
            self.push("\"");
            self.sjis_char();
            self.push("\"");
            return;
        }
        let a = self.rng.pick(ALIASES);
        self.push(a);
    }

    fn expr(&mut self) {
        match self.rng.below(10) {
            0 => self.literal(""),
            1 => self.literal("N"),
            2 => self.literal("E"),
            3 if self.case.standard => self.literal("U&"),
            4 => {
                let bits = self
                    .rng
                    .pick(&["B'0101'", "X'1f'", "b'1'\n'0'", "x'A' -- c\r'b'"]);
                self.push(bits);
            }
            5 => self.dollar(),
            6 => {
                let prefix = self.rng.pick(&["", "E", "N"]);
                self.literal(prefix);
                let gap = self.rng.pick(CONTINUATIONS);
                self.push(gap);
                // The continuation is read as the literal began.
                self.quoted(prefix);
            }
            7 => {
                let n = self.rng.pick(NUMBERS);
                self.push(n);
            }
            _ => {
                let o = self.rng.pick(OPERATED);
                self.push(o);
            }
        }
    }

    /// A literal with `prefix` (``, `E`, `N`, `U&`).
    fn literal(&mut self, prefix: &str) {
        self.push(prefix);
        self.quoted(prefix);
    }

    /// `'...'` read as a literal with `prefix` reads it under the session's mode.
    fn quoted(&mut self, prefix: &str) {
        let escapes = prefix == "E" || (prefix != "U&" && !self.case.standard);
        self.push("'");
        for _ in 0..self.rng.below(7) {
            match self.rng.below(8) {
                0 if self.case.sjis => self.sjis_char(),
                // `\'` is refused in a client-only encoding (backslash_quote).
                1 if escapes && !self.case.sjis => self.push("\\'"),
                2 if prefix == "U&" => {
                    let p = self.rng.pick(UNICODE);
                    self.push(p);
                }
                3 | 4 if prefix != "U&" => {
                    let p = self.rng.pick(if escapes { ESCAPES } else { STANDARD_ONLY });
                    self.push(p);
                }
                _ => {
                    let p = self.rng.pick(ANY);
                    self.push(p);
                }
            }
        }
        self.push("'");
    }

    /// `$tag$...$tag$`, the body holding other tags and `$`s but not its own closing tag.
    fn dollar(&mut self) {
        let mut tag = b"$".to_vec();
        match self.rng.below(6) {
            0 => {}
            1 if self.case.sjis => tag.extend_from_slice(SJIS[0]),
            1 => tag.extend_from_slice("é".as_bytes()),
            n => tag.extend_from_slice(["a", "_b1", "Tag", "q"][n - 2].as_bytes()),
        }
        tag.push(b'$');
        let mut body = Vec::new();
        for _ in 0..self.rng.below(8) {
            let p = self.rng.pick(DOLLAR_BODY);
            body.extend_from_slice(p.as_bytes());
            let closed = [&body[..], &tag].concat();
            if memchr::memmem::find(&closed, &tag) != Some(body.len()) {
                body.truncate(body.len() - p.len());
            }
        }
        for part in [&tag, &body, &tag] {
            self.case.sql.extend_from_slice(part);
        }
    }
}

/// The text of `seed`, and the session it is written for.
pub(super) fn generate(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let case = Case {
        standard: rng.below(3) != 0,
        sjis: rng.below(4) == 0,
        sql: Vec::new(),
        atomic: false,
    };
    Gen {
        rng: &mut rng,
        case,
        marker: 0,
    }
    .text()
}
