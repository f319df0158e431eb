//! SCRAM-SHA-256 as a client that holds a user's ClientKey instead of the password (SCRAM
//! passthrough, as PgBouncer does; RFC 5802 section 3). The ClientKey is what the pooler
//! recovered from that user's own proof when it logged in to the pooler; with the verifier's
//! ServerKey it answers PostgreSQL's challenge and checks PostgreSQL's signature. That works
//! only when PostgreSQL holds the same verifier (same salt and iteration count).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use rand::Rng;
use sha2::{Digest, Sha256};

use super::ServerError;
use crate::protocol::scram as msg;

/// Equality of secrets in time independent of where they differ (only their lengths show).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HMAC-SHA-256 over the concatenation of `parts`.
pub(crate) fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// What a user's SCRAM login proved: its ClientKey, with the ServerKey, salt and iteration
/// count of the verifier it was checked against. Only in memory; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramKeys {
    pub client_key: [u8; 32],
    pub server_key: [u8; 32],
    pub salt: Vec<u8>,
    pub iterations: u32,
}

impl std::fmt::Debug for ScramKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScramKeys(<redacted>)")
    }
}

impl ScramKeys {
    /// H(ClientKey): what a verifier stores, so these keys can be matched to one.
    pub fn stored_key(&self) -> [u8; 32] {
        Sha256::digest(self.client_key).into()
    }
}

/// A client-side exchange between client-first and server-final.
pub struct KeyedClient<'a> {
    keys: &'a ScramKeys,
    /// client-first-message-bare, the start of the AuthMessage.
    first_bare: String,
    nonce: String,
    /// The whole AuthMessage, once server-first is in.
    auth: Option<String>,
}

impl<'a> KeyedClient<'a> {
    /// Starts an exchange; returns it and the client-first message to send.
    pub fn start(keys: &'a ScramKeys) -> (KeyedClient<'a>, String) {
        let nonce = B64.encode(rand::thread_rng().gen::<[u8; 18]>());
        // PostgreSQL takes the user from the startup packet and ignores `n=` (as libpq sends).
        let first = msg::client_first("", &nonce);
        let first_bare = first["n,,".len()..].to_owned();
        let client = KeyedClient {
            keys,
            first_bare,
            nonce,
            auth: None,
        };
        (client, first)
    }

    /// Reads server-first; returns client-final with the proof.
    pub fn update(&mut self, server_first: &[u8]) -> Result<String, ServerError> {
        let m = msg::parse_server_first(server_first).map_err(ServerError::ScramMessage)?;
        if !m.nonce.starts_with(&self.nonce) || m.nonce.len() == self.nonce.len() {
            return Err(ServerError::Protocol("SCRAM: server nonce".into()));
        }
        let salt = B64
            .decode(m.salt)
            .map_err(|_| ServerError::Protocol("SCRAM: salt is not base64".into()))?;
        if salt != self.keys.salt || m.iterations != self.keys.iterations {
            return Err(ServerError::StaleVerifier);
        }
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| ServerError::Protocol("SCRAM: server-first is not UTF-8".into()))?;
        let without_proof = format!("c={},r={}", B64.encode(b"n,,"), m.nonce);
        let auth = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = hmac(&self.keys.stored_key(), &[auth.as_bytes()]);
        let proof: Vec<u8> = self
            .keys
            .client_key
            .iter()
            .zip(signature)
            .map(|(k, s)| k ^ s)
            .collect();
        self.auth = Some(auth);
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks server-final: PostgreSQL must prove it holds the same verifier.
    pub fn finish(self, server_final: &[u8]) -> Result<(), ServerError> {
        let auth = self.auth.ok_or_else(|| {
            ServerError::Protocol("SCRAM: server-final before server-first".into())
        })?;
        let sent = msg::parse_server_final(server_final).map_err(ServerError::ScramMessage)?;
        let sent = B64
            .decode(sent)
            .map_err(|_| ServerError::Protocol("SCRAM: signature is not base64".into()))?;
        let expected = hmac(&self.keys.server_key, &[auth.as_bytes()]);
        if !constant_time_eq(&sent, &expected) {
            return Err(ServerError::NoServerSignature);
        }
        Ok(())
    }
}
