//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) over stored verifiers: parsing
//! PostgreSQL's verifier format, deriving one from a plaintext password, and checking a
//! client's proof. Message syntax lives in `protocol::scram`; this is the cryptography.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rand::Rng;
use sha2::{Digest, Sha256};

use crate::protocol::scram::{self as msg, ChannelBinding};
use crate::server::scram::{hmac, ScramKeys};

/// Why a SCRAM exchange failed. Messages never carry key material.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("password authentication failed")]
    WrongProof,
}

/// A SCRAM-SHA-256 verifier as PostgreSQL stores it:
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(<redacted>)")
    }
}

fn key32(b64: &str) -> Option<[u8; 32]> {
    B64.decode(b64).ok()?.try_into().ok()
}

/// Equality in time independent of where the inputs differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    super::constant_time_eq(a, b)
}

impl Verifier {
    /// Parses PostgreSQL's verifier text; `None` if it is not one.
    pub fn parse(s: &str) -> Option<Verifier> {
        let rest = s.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iter, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iter.parse().ok().filter(|&i| i > 0)?;
        Some(Verifier {
            iterations,
            salt: B64.decode(salt).ok().filter(|s| !s.is_empty())?,
            stored_key: key32(stored)?,
            server_key: key32(server)?,
        })
    }

    /// Derives a verifier from a plaintext password with a fresh salt (PostgreSQL's default
    /// 4096 iterations; SASLprep as PostgreSQL applies it).
    pub fn from_password(password: &str) -> Verifier {
        let text = postgres_protocol::password::scram_sha_256(password.as_bytes());
        Verifier::parse(&text).expect("postgres-protocol produces PostgreSQL's verifier format")
    }

    /// A verifier nobody can pass, for an unknown user: the exchange runs to its end so a
    /// client cannot tell unknown users from wrong passwords. As PostgreSQL's mock
    /// authentication, the salt comes from the name and a per-process `secret`, so repeated
    /// attempts see the same salt (a random one each time would give unknown names away), and
    /// the iteration count is PostgreSQL's default.
    pub fn mock_for(user: &str, secret: &[u8; 32]) -> Verifier {
        let salt = hmac(secret, &[b"mock salt\0", user.as_bytes()]);
        let mut rng = rand::thread_rng();
        Verifier {
            iterations: 4096,
            salt: salt[..16].to_vec(),
            stored_key: rng.gen(),
            server_key: rng.gen(),
        }
    }
}

/// A server-side exchange between server-first and client-final.
pub struct Exchange {
    verifier: Verifier,
    gs2_header: String,
    nonce: String,
    /// client-first-message-bare "," server-first-message: the start of the AuthMessage.
    auth_prefix: String,
}

impl Exchange {
    /// Handles client-first: returns the exchange and the server-first message to send.
    pub fn start(
        verifier: Verifier,
        client_first: &[u8],
    ) -> Result<(Exchange, String), ScramError> {
        let first = msg::parse_client_first(client_first).map_err(|_| malformed("client-first"))?;
        if let ChannelBinding::Required(_) = first.binding {
            return Err(ScramError::ChannelBinding);
        }
        let server_nonce: [u8; 18] = rand::thread_rng().gen();
        let nonce = format!("{}{}", first.nonce, B64.encode(server_nonce));
        let server_first =
            msg::server_first(&nonce, &B64.encode(&verifier.salt), verifier.iterations);
        let auth_prefix = format!("{},{server_first}", first.bare);
        let ex = Exchange {
            verifier,
            gs2_header: first.gs2_header.to_owned(),
            nonce,
            auth_prefix,
        };
        Ok((ex, server_first))
    }

    /// Handles client-final: checks binding, nonce and proof; returns server-final and what
    /// the proof gave away, the user's ClientKey (with this verifier's ServerKey, salt and
    /// iteration count): enough to log in to a PostgreSQL that holds the same verifier.
    pub fn finish(self, client_final: &[u8]) -> Result<(String, ScramKeys), ScramError> {
        let fin = msg::parse_client_final(client_final).map_err(|_| malformed("client-final"))?;
        if fin.binding != B64.encode(self.gs2_header.as_bytes()) {
            return Err(malformed("channel binding data"));
        }
        if fin.nonce != self.nonce {
            return Err(malformed("nonce"));
        }
        let proof = B64.decode(fin.proof).map_err(|_| malformed("proof"))?;
        if proof.len() != 32 {
            return Err(malformed("proof length"));
        }
        let auth = format!("{},{}", self.auth_prefix, fin.without_proof);
        let signature = hmac(&self.verifier.stored_key, &[auth.as_bytes()]);
        let mut client_key = [0u8; 32];
        for (k, (p, s)) in client_key.iter_mut().zip(proof.iter().zip(signature)) {
            *k = p ^ s;
        }
        let stored: [u8; 32] = Sha256::digest(client_key).into();
        if !same(&stored, &self.verifier.stored_key) {
            return Err(ScramError::WrongProof);
        }
        let server_sig = hmac(&self.verifier.server_key, &[auth.as_bytes()]);
        let keys = ScramKeys {
            client_key,
            server_key: self.verifier.server_key,
            salt: self.verifier.salt,
            iterations: self.verifier.iterations,
        };
        Ok((msg::server_final(&B64.encode(server_sig)), keys))
    }
}

fn malformed(what: &'static str) -> ScramError {
    ScramError::Malformed(what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding as Cb, ScramSha256};

    /// A full exchange against postgres-protocol's client: right and wrong password.
    fn run(stored_password: &str, client_password: &str) -> Result<(), ScramError> {
        let v = Verifier::from_password(stored_password);
        let mut client = ScramSha256::new(client_password.as_bytes(), Cb::unsupported());
        let (ex, server_first) = Exchange::start(v, client.message())?;
        client
            .update(server_first.as_bytes())
            .expect("client accepts server-first");
        let (server_final, _) = ex.finish(client.message())?;
        client
            .finish(server_final.as_bytes())
            .expect("client verifies the server's signature");
        Ok(())
    }

    #[test]
    fn exchange_with_a_real_client() {
        run("s3cret", "s3cret").unwrap();
        assert_eq!(run("s3cret", "wrong"), Err(ScramError::WrongProof));
    }

    /// The keys a client's proof gives log in, as that client, to a server holding the same
    /// verifier (its salt and iterations), and only to one: another verifier of the same
    /// password (another salt) is told apart before any proof is sent.
    #[test]
    fn recovered_keys_log_in_to_a_server_with_the_same_verifier() {
        use crate::server::scram::KeyedClient;
        let v = Verifier::from_password("s3cret");
        let mut client = ScramSha256::new(b"s3cret", Cb::unsupported());
        let (ex, sf) = Exchange::start(v.clone(), client.message()).unwrap();
        client.update(sf.as_bytes()).unwrap();
        let (_, keys) = ex.finish(client.message()).unwrap();
        assert!(!format!("{keys:?}").contains(&format!("{:?}", keys.client_key)));
        // The pooler, as a client of a server that holds `v`.
        let (mut pooler, first) = KeyedClient::start(&keys);
        let (server, sf) = Exchange::start(v.clone(), first.as_bytes()).unwrap();
        let fin = pooler.update(sf.as_bytes()).unwrap();
        let (server_final, again) = server.finish(fin.as_bytes()).unwrap();
        assert_eq!(again, keys, "the server recovers the same ClientKey");
        pooler.finish(server_final.as_bytes()).unwrap();
        // A server with another verifier of the same password: refused before the proof.
        let other = Verifier::from_password("s3cret");
        let (mut pooler, first) = KeyedClient::start(&keys);
        let (_, sf) = Exchange::start(other, first.as_bytes()).unwrap();
        assert!(matches!(
            pooler.update(sf.as_bytes()),
            Err(crate::server::ServerError::StaleVerifier)
        ));
        // A server that cannot sign with the verifier's ServerKey is not trusted.
        let (mut pooler, first) = KeyedClient::start(&keys);
        let (server, sf) = Exchange::start(v.clone(), first.as_bytes()).unwrap();
        pooler.update(sf.as_bytes()).unwrap();
        drop(server);
        assert!(pooler
            .finish(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
            .is_err());
    }

    #[test]
    fn verifier_text_parses_and_redacts() {
        let text = postgres_protocol::password::scram_sha_256(b"pw");
        let v = Verifier::parse(&text).unwrap();
        assert_eq!(v.iterations, 4096);
        assert!(!format!("{v:?}").contains(&text[20..]));
        for bad in [
            "",
            "md5abc",
            "SCRAM-SHA-256$0:AAAA$a:b",
            "SCRAM-SHA-256$4096:$a:b",
        ] {
            assert!(Verifier::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn tampered_messages_are_refused() {
        let v = Verifier::from_password("pw");
        let mut client = ScramSha256::new(b"pw", Cb::unsupported());
        let (ex, sf) = Exchange::start(v.clone(), client.message()).unwrap();
        client.update(sf.as_bytes()).unwrap();
        let good = String::from_utf8(client.message().to_vec()).unwrap();
        let other_nonce = good.replacen("r=", "r=x", 1);
        assert!(matches!(
            ex.finish(other_nonce.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
        assert_eq!(
            Exchange::start(v, b"p=tls-server-end-point,,n=,r=abc").err(),
            Some(ScramError::ChannelBinding)
        );
    }
}
