//! The userlist parser (PgBouncer's `"user" "password"` lines) on arbitrary text.
//!
//! Checks: no panic; what parses, written out again in the canonical form (each field quoted,
//! quotes doubled), parses back to the same entries; a reported syntax error names a line
//! that exists.

#![no_main]

use droid_pool::auth::userlist::parse_userlist;
use libfuzzer_sys::fuzz_target;

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_userlist(text) {
        Ok(entries) => {
            let canonical: String = entries
                .iter()
                .map(|(u, p)| format!("{} {}\n", quote(u), quote(p)))
                .collect();
            let again = parse_userlist(&canonical).expect("the canonical form parses");
            assert_eq!(again, entries);
            assert!(entries.iter().all(|(u, _)| !u.is_empty()));
        }
        Err(line) => assert!(line >= 1 && line <= text.lines().count()),
    }
});
