//! Client authentication data: the credentials of each user (from the users file, the
//! passwords directory, or auth_query), the SCRAM and md5 server-side checks, and the store
//! that reloads them. Credentials never print: `Debug` is redacted throughout.

pub mod query;
pub mod salts;
pub mod scram;
pub mod userlist;

pub use crate::server::scram::constant_time_eq;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use md5::{Digest, Md5};
use thiserror::Error;

use crate::config::{Config, Secret};
use crate::server::{ScramKeys, ServerSecret};
pub use query::AuthQueryCache;
pub use salts::SaltSecret;
pub use scram::{Exchange, ScramError, Verifier};

#[derive(Debug, Error)]
pub enum AuthError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The line number only: the line holds a password.
    #[error("{path} line {line}: expected \"user\" \"password\"")]
    Syntax { path: PathBuf, line: usize },
}

/// What the pooler knows about one user's password.
#[derive(Clone)]
pub enum Credential {
    /// A SCRAM-SHA-256 verifier: SCRAM only.
    Scram(Verifier),
    /// PostgreSQL's md5 hash, `md5` + hex(md5(password + user)): md5 only.
    Md5(String),
    /// The plaintext password (kept with a verifier derived once at load).
    Plain {
        password: Secret,
        verifier: Verifier,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Scram(_) => "Scram(<redacted>)",
            Credential::Md5(_) => "Md5(<redacted>)",
            Credential::Plain { .. } => "Plain(<redacted>)",
        })
    }
}

impl Credential {
    /// Classifies `user`'s stored password as PostgreSQL and PgBouncer do; a plaintext one
    /// gets a verifier with the salt `salts` gives the name, so every replica challenges it
    /// alike.
    pub fn from_stored(
        user: &str,
        stored: &str,
        salts: &SaltSecret,
        iterations: u32,
    ) -> Credential {
        if let Some(v) = Verifier::parse(stored) {
            return Credential::Scram(v);
        }
        if is_md5_hash(stored) {
            return Credential::Md5(stored.to_owned());
        }
        Credential::Plain {
            verifier: salts.verifier(user, stored, iterations),
            password: Secret::new(stored.to_owned()),
        }
    }

    /// The md5 hash for `user`, if this credential allows md5.
    pub fn md5_hash(&self, user: &str) -> Option<String> {
        match self {
            Credential::Md5(h) => Some(h.clone()),
            Credential::Plain { password, .. } => Some(md5_stored(user, password.expose())),
            Credential::Scram(_) => None,
        }
    }

    /// The SCRAM verifier, if this credential allows SCRAM.
    pub fn verifier(&self) -> Option<&Verifier> {
        match self {
            Credential::Scram(v) | Credential::Plain { verifier: v, .. } => Some(v),
            Credential::Md5(_) => None,
        }
    }
}

impl Credential {
    /// What a server login may use once the user proved this credential: the password of a
    /// plaintext one, else the keys the user's SCRAM proof gave (`keys`), if any.
    pub fn server_secret(&self, keys: Option<ScramKeys>) -> Option<ServerSecret> {
        match (self, keys) {
            (Credential::Plain { password, .. }, _) => {
                Some(ServerSecret::Password(password.clone()))
            }
            (Credential::Scram(_), Some(k)) => Some(ServerSecret::Scram(std::sync::Arc::new(k))),
            _ => None,
        }
    }

    /// Whether a server credential learnt earlier still belongs to this credential: the same
    /// password, or keys that match this verifier (a rotated password or a new salt do not).
    pub fn agrees_with(&self, secret: &ServerSecret) -> bool {
        match (self, secret) {
            (Credential::Plain { password, .. }, ServerSecret::Password(p)) => password == p,
            (Credential::Scram(v), ServerSecret::Scram(k)) => {
                constant_time_eq(&k.stored_key(), &v.stored_key)
                    && constant_time_eq(&k.server_key, &v.server_key)
            }
            _ => false,
        }
    }
}

fn is_md5_hash(s: &str) -> bool {
    s.len() == 35 && s.starts_with("md5") && s[3..].bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `md5` + hex(md5(password + user)): how PostgreSQL stores an md5 password.
pub fn md5_stored(user: &str, password: &str) -> String {
    let mut h = Md5::new();
    h.update(password.as_bytes());
    h.update(user.as_bytes());
    format!("md5{}", hex(&h.finalize()))
}

/// Checks an md5 response: `md5` + hex(md5(hex-part-of-stored + salt)).
pub fn md5_matches(stored: &str, salt: [u8; 4], response: &[u8]) -> bool {
    let Some(inner) = stored.strip_prefix("md5") else {
        return false;
    };
    let mut h = Md5::new();
    h.update(inner.as_bytes());
    h.update(salt);
    let expected = format!("md5{}", hex(&h.finalize()));
    expected.len() == response.len()
        && expected
            .bytes()
            .zip(response)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The users known from files, and what challenges derive from them; replaced whole on
/// reload.
pub struct Users {
    map: HashMap<String, Credential>,
    salts: SaltSecret,
    /// The iteration count of the stored SCRAM verifiers (the most common), which mock and
    /// derived verifiers use too.
    iterations: u32,
    /// The share of users stored with a SCRAM verifier only: in md5 mode they are challenged
    /// with SCRAM while the others get md5, and unknown names are split the same way.
    scram_only_share: f64,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Users({} users)", self.map.len())
    }
}

impl Default for Users {
    fn default() -> Self {
        Users::from_entries(&Config::default(), Vec::new())
    }
}

impl Users {
    /// Reads `users_file`, then `passwords_dir` (whose entries win: it is the Secret).
    pub fn load(cfg: &Config) -> Result<Users, AuthError> {
        let mut entries = Vec::new();
        if let Some(path) = &cfg.auth.users_file {
            entries.extend(userlist::read_userlist(path)?);
        }
        if let Some(dir) = &cfg.auth.passwords_dir {
            entries.extend(userlist::read_passwords_dir(dir)?);
        }
        Ok(Users::from_entries(cfg, entries))
    }

    /// The users of `entries` (a later entry of a name wins).
    pub fn from_entries(cfg: &Config, entries: Vec<(String, String)>) -> Users {
        let salts = SaltSecret::derive(cfg, &entries);
        let mut counts: HashMap<u32, usize> = HashMap::new();
        for (_, stored) in &entries {
            if let Some(v) = Verifier::parse(stored) {
                *counts.entry(v.iterations).or_default() += 1;
            }
        }
        let iterations = counts
            .into_iter()
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
            .map_or(salts::DEFAULT_ITERATIONS, |(i, _)| i);
        let mut map = HashMap::new();
        for (user, stored) in entries {
            let cred = Credential::from_stored(&user, &stored, &salts, iterations);
            map.insert(user, cred);
        }
        let scram_only = map
            .values()
            .filter(|c| matches!(c, Credential::Scram(_)))
            .count();
        let scram_only_share = if map.is_empty() {
            // Only auth_query (or nobody): PostgreSQL stores SCRAM verifiers by default.
            if cfg.auth.auth_user.is_some() {
                1.0
            } else {
                0.0
            }
        } else {
            scram_only as f64 / map.len() as f64
        };
        Users {
            map,
            salts,
            iterations,
            scram_only_share,
        }
    }

    pub fn get(&self, user: &str) -> Option<&Credential> {
        self.map.get(user)
    }

    /// A credential looked up elsewhere (auth_query), classified as the files' are.
    pub fn credential(&self, user: &str, stored: &str) -> Credential {
        Credential::from_stored(user, stored, &self.salts, self.iterations)
    }

    /// The verifier an unknown `user` is challenged with: nobody can pass it, and its salt and
    /// iteration count are what a real user's would be, the same at every attempt, on every
    /// replica (PostgreSQL's mock authentication).
    pub fn mock_verifier(&self, user: &str) -> Verifier {
        self.salts.mock_verifier(user, self.iterations)
    }

    /// `user`'s name as readers without the admin token see it.
    pub fn pseudonym(&self, user: &str) -> String {
        self.salts.pseudonym(user)
    }

    /// Whether an unknown `user` is challenged with SCRAM in md5 mode: as the share of known
    /// users that can only answer SCRAM, fixed per name.
    pub fn unknown_gets_scram_in_md5_mode(&self, user: &str) -> bool {
        self.salts.fraction(user) < self.scram_only_share
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The users in force and the auth_query cache, shared by all clients.
#[derive(Debug, Default)]
pub struct AuthStore {
    users: RwLock<Arc<Users>>,
    pub cache: AuthQueryCache,
}

impl AuthStore {
    /// Puts freshly read users in force (and forgets looked-up ones).
    pub fn replace(&self, users: Users) {
        *self.users.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(users);
        self.cache.clear();
    }

    pub fn users(&self) -> Arc<Users> {
        self.users.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_what_libpq_sends() {
        let stored = md5_stored("md5_user", "md5_pass");
        let salt = [1, 2, 3, 4];
        let sent = postgres_protocol::authentication::md5_hash(b"md5_user", b"md5_pass", salt);
        assert!(md5_matches(&stored, salt, sent.as_bytes()));
        let wrong = postgres_protocol::authentication::md5_hash(b"md5_user", b"nope", salt);
        assert!(!md5_matches(&stored, salt, wrong.as_bytes()));
        let salts = SaltSecret::from_bytes([1; 32]);
        assert!(matches!(
            Credential::from_stored("md5_user", &stored, &salts, 4096),
            Credential::Md5(_)
        ));
    }

    #[test]
    fn stored_forms_are_told_apart_and_never_print() {
        let salts = SaltSecret::from_bytes([1; 32]);
        let scram = postgres_protocol::password::scram_sha_256(b"pw");
        assert!(matches!(
            Credential::from_stored("u", &scram, &salts, 4096),
            Credential::Scram(_)
        ));
        let plain = Credential::from_stored("u", "hunter2", &salts, 4096);
        assert!(plain.md5_hash("u").is_some() && plain.verifier().is_some());
        assert!(!format!("{plain:?}").contains("hunter2"));
    }
}
