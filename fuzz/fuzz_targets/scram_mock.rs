//! The mock SCRAM exchange an unknown user gets, on arbitrary names and client messages.
//!
//! Input: byte 0 splits the rest into a user name and a client-first candidate, byte 1 the
//! client-first from a client-final candidate.
//!
//! Checks: nothing panics; the mock verifier of a name is the same salt and iteration count at
//! every attempt (a changing salt gives unknown names away), differs between names and is the
//! salt a plaintext-stored user of that name gets; the exchange never accepts a client-final,
//! whatever it holds.

#![no_main]

use droid_pool::auth::{Exchange, SaltSecret};
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

    let salts = SaltSecret::from_bytes(SECRET);
    let one = salts.mock_verifier(&user, 4096);
    let two = salts.mock_verifier(&user, 4096);
    assert_eq!((&one.salt, one.iterations), (&two.salt, two.iterations));
    assert_eq!(one.salt.len(), 16);
    let other = salts.mock_verifier(&format!("{user}x"), 4096);
    assert_ne!(one.salt, other.salt, "names map to salts one to one");
    let stored = salts.verifier(&user, "pw", 1);
    assert_eq!(stored.salt, one.salt, "a real plaintext user's salt is derived alike");

    if let Ok((ex, server_first)) = Exchange::start(one, first) {
        let salt = server_first.split(',').find_map(|f| f.strip_prefix("s="));
        assert!(salt.is_some(), "server-first names the salt: {server_first}");
        assert!(ex.finish(fin).is_err(), "a mock exchange never passes");
    }
});
