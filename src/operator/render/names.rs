//! The names a spec gives of other objects (Secrets, the sidecar's ConfigMap, a
//! ServiceAccount, a CloudNativePG Cluster) and the Secret keys it names. Each is checked
//! before it is used: kube-rs puts a name into the request path as it is, so a name such as
//! `../../other/secrets/x` must never reach the API, and the operator must only ever look in
//! the PoolConfig's own namespace. The CRD's patterns say the same; this holds for objects
//! stored under an older CRD too.

use super::RenderError;
use crate::operator::crd::{PoolConfigSpec, Target};

pub use crate::operator::crd::{DNS_SUBDOMAIN, SECRET_KEY};

/// Whether `s` is an RFC 1123 subdomain of at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    s.len() <= 253 && s.split('.').all(label)
}

/// Whether `s` can be a Secret key and a file name in the mounted directory.
pub fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
}

/// Every name and key the spec gives, checked.
pub fn check_names(spec: &PoolConfigSpec) -> Result<(), RenderError> {
    let mut names: Vec<(&'static str, &str)> = Vec::new();
    let mut keys: Vec<(&'static str, &str)> = Vec::new();
    if let Some(r) = &spec.server.password_secret {
        names.push(("spec.server.passwordSecret.name", &r.name));
        keys.push(("spec.server.passwordSecret.key", &r.key));
    }
    if let Some(c) = &spec.server.cloud_native_pg {
        names.push(("spec.server.cloudNativePG.cluster", &c.cluster));
    }
    if let Some(a) = &spec.client_auth {
        if let Some(n) = &a.passwords_secret {
            names.push(("spec.clientAuth.passwordsSecret", n));
        }
        if let Some(u) = &a.users_secret {
            names.push(("spec.clientAuth.usersSecret.name", &u.name));
            keys.push(("spec.clientAuth.usersSecret.key", &u.key));
        }
    }
    match &spec.target {
        Target::Sidecar(t) => names.push(("spec.target.sidecar.configMapName", &t.config_map_name)),
        Target::Deployment(t) => {
            let tmpl = t.pod_template.as_deref();
            let field = "spec.target.deployment.podTemplate";
            if let Some(sa) = tmpl.and_then(|p| p.service_account_name.as_deref()) {
                names.push(("spec.target.deployment.podTemplate.serviceAccountName", sa));
            }
            if let Some(pc) = tmpl.and_then(|p| p.priority_class_name.as_deref()) {
                names.push(("spec.target.deployment.podTemplate.priorityClassName", pc));
            }
            for s in tmpl.and_then(|p| p.image_pull_secrets.as_ref()).into_iter() {
                for r in s {
                    names.push((field, &r.name));
                }
            }
        }
    }
    if let Some((field, value)) = names.into_iter().find(|(_, n)| !is_dns_subdomain(n)) {
        return Err(RenderError::Name {
            field,
            value: value.to_owned(),
        });
    }
    if let Some((field, value)) = keys.into_iter().find(|(_, k)| !is_secret_key(k)) {
        return Err(RenderError::Key {
            field,
            value: value.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PoolConfigSpec {
        let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn names_are_dns_subdomains_and_keys_plain_file_names() {
        for ok in ["db", "db-cred", "a.b-c.d", "0", &"a".repeat(253)] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "../other/secrets/x",
            "a/b",
            "-a",
            "a-",
            "A",
            "a..b",
            ".a",
            "a_b",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        for ok in ["password", "userlist.txt", "a_B-1", ".hidden"] {
            assert!(is_secret_key(ok), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "a b"] {
            assert!(!is_secret_key(bad), "{bad}");
        }
    }

    /// A spec that names an object in another namespace (a path in the name) is refused
    /// before anything is looked up, each field by its own name.
    #[test]
    fn a_name_that_leaves_the_namespace_is_refused() {
        let base = "poolSize: 1\nserver: {host: db, passwordSecret: {name: NAME, key: KEY}}\n\
                    target: {sidecar: {configMapName: CM}}\n";
        let s = |name: &str, key: &str, cm: &str| {
            spec(
                &base
                    .replace("NAME", name)
                    .replace("KEY", key)
                    .replace("CM", cm),
            )
        };
        assert!(check_names(&s("db", "password", "cm")).is_ok());
        assert!(matches!(
            check_names(&s("'../../kube-system/secrets/x'", "password", "cm")),
            Err(RenderError::Name {
                field: "spec.server.passwordSecret.name",
                value
            }) if value == "../../kube-system/secrets/x"
        ));
        assert!(matches!(
            check_names(&s("db", "'..'", "cm")),
            Err(RenderError::Key {
                field: "spec.server.passwordSecret.key",
                ..
            })
        ));
        assert!(matches!(
            check_names(&s(
                "db",
                "password",
                "'../../kube-system/configmaps/coredns'"
            )),
            Err(RenderError::Name {
                field: "spec.target.sidecar.configMapName",
                ..
            })
        ));
        let sa = spec(
            "poolSize: 1\nserver: {host: db}\nclientAuth: {passwordsSecret: users}\n\
             target: {deployment: {podTemplate: {serviceAccountName: 'x/y'}}}\n",
        );
        assert!(matches!(
            check_names(&sa),
            Err(RenderError::Name {
                field: "spec.target.deployment.podTemplate.serviceAccountName",
                ..
            })
        ));
    }
}
