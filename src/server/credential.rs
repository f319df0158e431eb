//! What a server login proves itself with: a configured password, or (SCRAM passthrough)
//! what the pooler learnt from the user's own login to the pooler, kept per user in memory
//! only and never printed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::scram::ScramKeys;
use crate::config::Secret;

/// A credential PostgreSQL accepts for one user.
#[derive(Clone, PartialEq, Eq)]
pub enum ServerSecret {
    /// The password itself: answers cleartext, md5 and SCRAM.
    Password(Secret),
    /// A ClientKey with its verifier's ServerKey: answers SCRAM-SHA-256 only.
    Scram(Arc<ScramKeys>),
}

impl std::fmt::Debug for ServerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServerSecret::Password(_) => "Password(<redacted>)",
            ServerSecret::Scram(_) => "Scram(<redacted>)",
        })
    }
}

/// A configured password (`server.password`, `auth.auth_password`) that a reload replaces in
/// place: every pool holding the cell uses the new one at its next server login, pools made
/// before the rotation included.
#[derive(Debug, Default)]
pub struct SecretCell(RwLock<Option<Secret>>);

impl SecretCell {
    pub fn new(secret: Option<Secret>) -> Arc<SecretCell> {
        Arc::new(SecretCell(RwLock::new(secret)))
    }

    pub fn get(&self) -> Option<Secret> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, secret: Option<Secret>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = secret;
    }
}

/// Where a pool's logins take their credential from.
#[derive(Debug, Clone)]
pub enum TargetSecret {
    /// As configured now; `None` in the cell: no password.
    Configured(Arc<SecretCell>),
    /// The login user's own, learnt from its clients' logins (passthrough).
    Learned(Arc<LearnedSecrets>),
}

/// Server credentials learnt from client logins, by user name. Bounded by the users that
/// proved a stored credential: made-up names never get here.
#[derive(Default)]
pub struct LearnedSecrets(Mutex<HashMap<String, ServerSecret>>);

impl std::fmt::Debug for LearnedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LearnedSecrets({} users)", self.lock().len())
    }
}

impl LearnedSecrets {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, ServerSecret>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `user`'s server logins use now.
    pub fn get(&self, user: &str) -> Option<ServerSecret> {
        self.lock().get(user).cloned()
    }

    /// Keeps the latest credential `user` proved (a new verifier's replaces the old one's).
    pub fn learn(&self, user: &str, secret: ServerSecret) {
        let mut map = self.lock();
        if map.get(user) != Some(&secret) {
            map.insert(user.to_owned(), secret);
        }
    }

    /// Forgets `user`'s credential unless `keep` says it still agrees with the stored one.
    pub fn forget_unless(&self, user: &str, keep: impl FnOnce(&ServerSecret) -> bool) {
        let mut map = self.lock();
        if map.get(user).is_some_and(|s| !keep(s)) {
            map.remove(user);
        }
    }

    /// Keeps only the credentials `keep` accepts (after the stored credentials changed).
    pub fn retain(&self, mut keep: impl FnMut(&str, &ServerSecret) -> bool) {
        self.lock().retain(|u, s| keep(u, s));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
