//! The admin console's command parser on arbitrary text.
//!
//! Checks: no panic; a command that parses prints back (its tag, and for SHOW its subject) to
//! text that parses to the same command, whatever case or spacing the input had.

#![no_main]

use droid_pool::client::command::Command;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(cmd) = Command::parse(text) else {
        return;
    };
    let printed = match &cmd {
        Command::Show(what) => {
            assert!(!what.is_empty() && !what.contains(char::is_whitespace));
            format!("show {}", what.to_lowercase())
        }
        other => other.tag().to_lowercase(),
    };
    // Lower-casing may change a non-ASCII subject; only ASCII ones must come back equal.
    if printed.is_ascii() {
        assert_eq!(Command::parse(&printed), Some(cmd));
    }
});
