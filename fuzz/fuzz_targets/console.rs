//! The admin console's command parser on arbitrary text.
//!
//! Checks: no panic; a command that parses prints back (its tag, and for SHOW its subject) to
//! text that parses to the same command, whatever case or spacing the input had.

#![no_main]

use droid_pool::admin::console::command::Command;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(cmd) = Command::parse(text) else {
        return;
    };
    if let Command::Show(what) = &cmd {
        assert!(!what.is_empty() && !what.contains(char::is_whitespace));
    }
    // The canonical spelling parses back to the same command, keywords in any case (a
    // database name keeps its case).
    let printed = cmd.to_sql();
    assert_eq!(Command::parse(&printed), Some(cmd.clone()));
    let (keyword, rest) = printed.split_once(' ').unwrap_or((&printed, ""));
    let lowered = format!("{} {rest}", keyword.to_lowercase());
    if matches!(cmd, Command::Show(_)) {
        if printed.is_ascii() {
            assert_eq!(Command::parse(&printed.to_lowercase()), Some(cmd));
        }
    } else {
        assert_eq!(Command::parse(&lowered), Some(cmd));
    }
});
