//! The mock SCRAM exchange an unknown user gets, on arbitrary names and client messages.
//!
//! Input: byte 0 splits the rest into a user name and a client-first candidate, byte 1 the
//! client-first from a client-final candidate.
//!
//! Checks: nothing panics; the mock verifier of a name is the same salt and iteration count at
//! every attempt (a changing salt gives unknown names away) and differs between names; the
//! exchange never accepts a client-final, whatever it holds.

#![no_main]

use droid_pool::auth::{Exchange, Verifier};
use libfuzzer_sys::fuzz_target;

const SECRET: [u8; 32] = [42; 32];

fuzz_target!(|data: &[u8]| {
    let [a, b, rest @ ..] = data else {
        return;
    };
    let at = (*a as usize).min(rest.len());
    let (user, rest) = rest.split_at(at);
    let at = (*b as usize).min(rest.len());
    let (first, fin) = rest.split_at(at);
    let user = String::from_utf8_lossy(user);

    let one = Verifier::mock_for(&user, &SECRET);
    let two = Verifier::mock_for(&user, &SECRET);
    assert_eq!((&one.salt, one.iterations), (&two.salt, two.iterations));
    assert_eq!(one.salt.len(), 16);
    let other = Verifier::mock_for(&format!("{user}x"), &SECRET);
    assert_ne!(one.salt, other.salt, "names map to salts one to one");

    if let Ok((ex, server_first)) = Exchange::start(one, first) {
        let salt = server_first.split(',').find_map(|f| f.strip_prefix("s="));
        assert!(salt.is_some(), "server-first names the salt: {server_first}");
        assert!(ex.finish(fin).is_err(), "a mock exchange never passes");
    }
});
