//! Deterministic SCRAM salts, so that nothing in a challenge tells a real user from a made-up
//! name: an unknown user's mock salt and a plaintext-stored user's salt both derive from one
//! secret and the name. The secret is the same for every replica with the same configuration
//! and across restarts (PostgreSQL keeps its mock-salt secret in `pg_control` for the same
//! reason): `auth.mock_secret(_file)` when set, else a hash of the configured credentials.

use sha2::{Digest, Sha256};

use super::scram::Verifier;
use crate::config::Config;
use crate::server::scram::hmac;

/// PostgreSQL's default `scram_iterations`.
pub const DEFAULT_ITERATIONS: u32 = 4096;
const SALT_LEN: usize = 16;

/// The secret salts derive from. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SaltSecret([u8; 32]);

impl std::fmt::Debug for SaltSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SaltSecret(<redacted>)")
    }
}

impl SaltSecret {
    /// The configured `auth.mock_secret`, else a hash of every credential the configuration
    /// holds (`entries`: the users read from files, by name), else of the config file.
    pub fn derive(cfg: &Config, entries: &[(String, String)]) -> SaltSecret {
        let mut h = Sha256::new();
        h.update(b"droid-pool salt secret v1\0");
        if let Some(s) = &cfg.auth.mock_secret {
            h.update(b"configured\0");
            h.update(s.expose().as_bytes());
            return SaltSecret(h.finalize().into());
        }
        let mut sorted: Vec<&(String, String)> = entries.iter().collect();
        sorted.sort();
        for (user, stored) in sorted {
            for part in [user.as_bytes(), b"\0", stored.as_bytes(), b"\0"] {
                h.update(part);
            }
        }
        for secret in [&cfg.auth.auth_password, &cfg.server.password] {
            h.update(b"\x01");
            h.update(secret.as_ref().map_or("", |s| s.expose()).as_bytes());
        }
        h.update(cfg.file_hash.as_deref().unwrap_or("").as_bytes());
        SaltSecret(h.finalize().into())
    }

    /// A given secret (tests and fuzz targets).
    pub fn from_bytes(b: [u8; 32]) -> SaltSecret {
        SaltSecret(b)
    }

    /// The salt of `user`'s verifiers that the pooler makes itself.
    pub fn salt(&self, user: &str) -> Vec<u8> {
        hmac(&self.0, &[b"salt\0", user.as_bytes()])[..SALT_LEN].to_vec()
    }

    /// What `/status` and `/metrics` call `user` for a reader without the admin token: the
    /// same on every replica and scrape (series stay continuous), and no name in it.
    pub fn pseudonym(&self, user: &str) -> String {
        let h = hmac(&self.0, &[b"pseudonym\0", user.as_bytes()]);
        let mut out = String::from("user-");
        for b in &h[..6] {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// A number in [0, 1) fixed for `user`: picks an unknown user's challenge where known
    /// users' differ by how they are stored.
    pub fn fraction(&self, user: &str) -> f64 {
        let h = hmac(&self.0, &[b"method\0", user.as_bytes()]);
        f64::from(u32::from_be_bytes([h[0], h[1], h[2], h[3]])) / (f64::from(u32::MAX) + 1.0)
    }

    /// A verifier nobody can pass, for an unknown user: the exchange runs to its end so a
    /// client cannot tell unknown users from wrong passwords; its salt is the one this user
    /// would have if stored as plaintext, and the iteration count the real users' one.
    pub fn mock_verifier(&self, user: &str, iterations: u32) -> Verifier {
        let keys = hmac(&self.0, &[b"mock keys\0", user.as_bytes()]);
        Verifier {
            iterations,
            salt: self.salt(user),
            // Keys that match no password anyone knows (derived from the secret, and a proof
            // is checked against StoredKey, whose preimage nobody has).
            stored_key: hmac(&keys, &[b"stored"]),
            server_key: hmac(&keys, &[b"server"]),
        }
    }

    /// `user`'s verifier for a plaintext password, with this secret's salt for the name.
    pub fn verifier(&self, user: &str, password: &str, iterations: u32) -> Verifier {
        verifier_with_salt(password, self.salt(user), iterations)
    }
}

/// PostgreSQL's verifier of `password` (SASLprep applied where it applies, as libpq and the
/// server do) with the given salt and iteration count.
pub fn verifier_with_salt(password: &str, salt: Vec<u8>, iterations: u32) -> Verifier {
    let prepared = stringprep::saslprep(password)
        .map(|p| p.into_owned())
        .unwrap_or_else(|_| password.to_owned());
    let salted = hi(prepared.as_bytes(), &salt, iterations.max(1));
    let client_key = hmac(&salted, &[b"Client Key"]);
    Verifier {
        iterations,
        salt,
        stored_key: Sha256::digest(client_key).into(),
        server_key: hmac(&salted, &[b"Server Key"]),
    }
}

/// RFC 5802's Hi(): PBKDF2 with HMAC-SHA-256, one block.
fn hi(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut u = hmac(password, &[salt, &1u32.to_be_bytes()]);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac(password, &[&u]);
        for (o, b) in out.iter_mut().zip(u) {
            *o ^= b;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived verifier is PostgreSQL's: postgres-protocol's client proves the password
    /// against it, and a wrong one fails.
    #[test]
    fn derived_verifier_answers_a_real_client() {
        use crate::auth::{Exchange, ScramError};
        use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
        let secret = SaltSecret::from_bytes([7; 32]);
        for pw in ["s3cret", "pässwörd\u{00A0}x"] {
            let v = secret.verifier("app", pw, 4096);
            let mut client = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
            let (ex, first) = Exchange::start(v.clone(), client.message()).unwrap();
            client.update(first.as_bytes()).unwrap();
            let (fin, _) = ex.finish(client.message()).unwrap();
            client.finish(fin.as_bytes()).unwrap();
            let mut wrong = ScramSha256::new(b"nope", ChannelBinding::unsupported());
            let (ex, first) = Exchange::start(v, wrong.message()).unwrap();
            wrong.update(first.as_bytes()).unwrap();
            assert_eq!(
                ex.finish(wrong.message()).err(),
                Some(ScramError::WrongProof)
            );
        }
    }

    /// Same configuration, same salts (another replica, a restart); another secret, others.
    #[test]
    fn salts_follow_the_configuration_only() {
        let mut cfg = Config::default();
        let entries = vec![("app".to_owned(), "pw".to_owned())];
        let a = SaltSecret::derive(&cfg, &entries);
        let b = SaltSecret::derive(&cfg.clone(), &entries);
        assert_eq!(a.salt("ghost"), b.salt("ghost"));
        assert_eq!(
            a.mock_verifier("ghost", 4096),
            b.mock_verifier("ghost", 4096)
        );
        assert_ne!(a.salt("ghost"), a.salt("ghost2"));
        cfg.auth.mock_secret = Some(crate::config::Secret::new("k".repeat(32)));
        let c = SaltSecret::derive(&cfg, &entries);
        assert_ne!(a.salt("ghost"), c.salt("ghost"));
        let other = vec![("app".to_owned(), "pw2".to_owned())];
        assert_eq!(
            c,
            SaltSecret::derive(&cfg, &other),
            "a configured secret wins"
        );
        assert!(!format!("{c:?}").contains('k'));
    }
}
