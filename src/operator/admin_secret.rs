//! The admin Secret of each PoolConfig (`<name>-admin`): made once with random values, owned
//! by the PoolConfig, never rewritten (deleting it is how the values are rotated: the next
//! reconciliation makes new ones). Its token is read back to ask the poolers for `/status`.
//! Only `create` is needed: the operator never updates or patches a Secret.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::ResourceExt;
use rand::RngCore;

use super::claim::{owned_by, Conflict};
use super::context::{Error, FIELD_MANAGER};
use super::crd::PoolConfig;
use super::render::{self, MOCK_SECRET_KEY, TOKEN_KEY};
use crate::config;

/// Random bytes per value (hex-encoded: 64 characters, no whitespace to trim).
const VALUE_BYTES: usize = 32;
/// The shortest token the pooler takes (`admin.token` must have 16 characters).
const MIN_TOKEN: usize = 16;

/// The admin Secret as found (or made).
#[derive(Debug)]
pub enum AdminSecret {
    /// Usable: its token, for the operator's own `/status` requests.
    Ready { token: config::Secret },
    /// A same-named Secret belongs to something else: nothing is applied.
    Conflict(Conflict),
    /// This PoolConfig's Secret lost a key (someone edited it): say how to fix it.
    Invalid(String),
}

/// Finds the admin Secret of `pc` in `ns`, making it when there is none.
pub async fn ensure(
    client: &kube::Client,
    ns: &str,
    pc: &PoolConfig,
) -> Result<AdminSecret, Error> {
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let name = render::admin_secret_name(pc);
    let found = match api.get_opt(&name).await? {
        Some(s) => s,
        None => {
            let new = render::admin_secret(pc, &random_hex(), &random_hex())
                .ok_or_else(|| Error::Unstored(pc.name_any()))?;
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            match api.create(&params, &new).await {
                Ok(s) => {
                    tracing::info!(secret = %name, namespace = %ns, "admin Secret created");
                    s
                }
                // Made meanwhile by another reconciliation: use that one.
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if !owned_by(&found, pc) {
        return Ok(AdminSecret::Conflict(Conflict {
            kind: "Secret",
            name,
        }));
    }
    Ok(read(&found, ns))
}

/// The token and mock secret of an owned admin Secret.
fn read(s: &Secret, ns: &str) -> AdminSecret {
    let value = |key: &str| {
        let data = s.data.as_ref()?.get(key)?;
        let text = std::str::from_utf8(&data.0).ok()?.trim();
        (!text.is_empty()).then(|| text.to_owned())
    };
    let name = s.name_any();
    match (value(TOKEN_KEY), value(MOCK_SECRET_KEY)) {
        (Some(token), Some(_)) if token.len() >= MIN_TOKEN => AdminSecret::Ready {
            token: config::Secret::new(token),
        },
        _ => AdminSecret::Invalid(format!(
            "Secret {ns}/{name} needs keys {TOKEN_KEY:?} (at least {MIN_TOKEN} characters) and \
             {MOCK_SECRET_KEY:?}: delete it and the operator makes a new one"
        )),
    }
}

/// `VALUE_BYTES` from the operating system's generator, as lowercase hex.
fn random_hex() -> String {
    let mut bytes = [0u8; VALUE_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn values_are_fresh_64_hex_characters() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn an_owned_secret_needs_both_keys_and_a_long_token() {
        let secret = |token: &str, mock: Option<&str>| {
            let mut data = std::collections::BTreeMap::new();
            data.insert(TOKEN_KEY.to_owned(), ByteString(token.into()));
            if let Some(m) = mock {
                data.insert(MOCK_SECRET_KEY.to_owned(), ByteString(m.into()));
            }
            let mut s = Secret {
                data: Some(data),
                ..Secret::default()
            };
            s.metadata.name = Some("w-admin".into());
            s
        };
        match read(&secret(&format!("{}\n", "a".repeat(64)), Some("m")), "ns") {
            AdminSecret::Ready { token } => assert_eq!(token.expose(), "a".repeat(64)),
            other => panic!("{other:?}"),
        }
        for bad in [secret("short", Some("m")), secret(&"a".repeat(64), None)] {
            match read(&bad, "shop") {
                AdminSecret::Invalid(m) => {
                    assert!(m.contains("shop/w-admin") && m.contains("delete it"), "{m}")
                }
                other => panic!("{other:?}"),
            }
        }
        // The token never shows in a Debug print (logs, errors).
        let ready = read(&secret(&"z".repeat(64), Some("m")), "ns");
        assert!(!format!("{ready:?}").contains("zzzz"));
    }
}
