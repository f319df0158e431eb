//! Least privilege for PoolConfigs: the images and ServiceAccounts a PoolConfig may name are
//! limited to allowlists given to the operator (`--allowed-images`,
//! `--allowed-service-accounts`). Whoever may create a PoolConfig could otherwise run any
//! image as any ServiceAccount of the namespace through the operator. A PoolConfig outside the
//! lists is refused before anything is read, rendered or applied for it.

use kube::ResourceExt;

use super::crd::{PoolConfig, Target, DEFAULT_IMAGE};

/// `Refusal::reason` of an image outside the allowlist.
pub const IMAGE_NOT_ALLOWED: &str = "ImageNotAllowed";
/// `Refusal::reason` of a ServiceAccount outside the allowlist.
pub const SERVICE_ACCOUNT_NOT_ALLOWED: &str = "ServiceAccountNotAllowed";

/// One allowlist entry: `*` stands for any run of characters (none too); every other
/// character for itself. `ghcr.io/droid-pool/droid-pool:*` allows every tag of that
/// repository and nothing of another one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    pub fn matches(&self, s: &str) -> bool {
        glob(self.0.as_bytes(), s.as_bytes())
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Wildcard match with `*` only; the classic two-pointer walk that backtracks to the last
/// star, linear in practice and never recursive (a hostile spec cannot make it blow up).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

/// Why an allowlist cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("{0}: an empty pattern allows nothing; leave it out")]
    Empty(&'static str),
}

/// What PoolConfigs may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    images: Vec<Pattern>,
    /// Matched against `NAME`, or `NAMESPACE/NAME` when the pattern holds a `/`.
    service_accounts: Vec<Pattern>,
}

/// A PoolConfig the allowlist refuses: a condition reason and a message naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl Allowlist {
    /// From the flags' patterns; none given for images means [`default_images`].
    pub fn new(images: &[String], service_accounts: &[String]) -> Result<Self, PolicyError> {
        let parse = |list: &[String], flag: &'static str| {
            list.iter()
                .map(|p| p.trim())
                .map(|p| match p {
                    "" => Err(PolicyError::Empty(flag)),
                    p => Ok(Pattern(p.to_owned())),
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let images = if images.is_empty() {
            default_images()
        } else {
            images.to_vec()
        };
        Ok(Allowlist {
            images: parse(&images, "--allowed-images")?,
            service_accounts: parse(service_accounts, "--allowed-service-accounts")?,
        })
    }

    /// The operator's defaults: its own image repository (any tag or digest) and no
    /// ServiceAccount but the one it makes for each PoolConfig.
    pub fn restrictive() -> Self {
        Allowlist {
            images: default_images().into_iter().map(Pattern).collect(),
            service_accounts: Vec::new(),
        }
    }

    pub fn images(&self) -> &[Pattern] {
        &self.images
    }

    pub fn service_accounts(&self) -> &[Pattern] {
        &self.service_accounts
    }

    /// Whether `pc` may be rendered. A sidecar target names neither (its pods are the
    /// application's own); a deployment target's image must be allowed, and so must a
    /// `podTemplate.serviceAccountName`. Leaving that unset is always allowed: the operator
    /// then makes the pods a ServiceAccount of their own without an API token.
    pub fn check(&self, pc: &PoolConfig) -> Result<(), Refusal> {
        let Target::Deployment(t) = &pc.spec.target else {
            return Ok(());
        };
        if !self.images.iter().any(|p| p.matches(&t.image)) {
            return Err(Refusal {
                reason: IMAGE_NOT_ALLOWED,
                message: format!(
                    "spec.target.deployment.image {:?} is not among the images this operator \
                     may run ({}): nothing was applied",
                    t.image,
                    list(&self.images)
                ),
            });
        }
        let sa = t
            .pod_template
            .as_ref()
            .and_then(|p| p.service_account_name.as_deref());
        if let Some(sa) = sa {
            let ns = pc.namespace().unwrap_or_default();
            let qualified = format!("{ns}/{sa}");
            let allowed = self.service_accounts.iter().any(|p| {
                let subject = if p.0.contains('/') { &qualified } else { sa };
                p.matches(subject)
            });
            if !allowed {
                return Err(Refusal {
                    reason: SERVICE_ACCOUNT_NOT_ALLOWED,
                    message: format!(
                        "spec.target.deployment.podTemplate.serviceAccountName {sa:?} is not \
                         among the ServiceAccounts this operator may run poolers as ({}): \
                         nothing was applied; leave it unset for a ServiceAccount of the \
                         pooler's own",
                        list(&self.service_accounts)
                    ),
                });
            }
        }
        Ok(())
    }
}

fn list(patterns: &[Pattern]) -> String {
    if patterns.is_empty() {
        return "none".into();
    }
    patterns
        .iter()
        .map(|p| p.0.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every tag and digest of the repository of [`DEFAULT_IMAGE`].
pub fn default_images() -> Vec<String> {
    let repo = DEFAULT_IMAGE
        .rsplit_once(':')
        .map_or(DEFAULT_IMAGE, |(r, _)| r);
    vec![format!("{repo}:*"), format!("{repo}@*")]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pc(target: serde_json::Value) -> PoolConfig {
        let spec = serde_json::json!({"poolSize": 1, "server": {"host": "db"}, "target": target});
        let mut pc = PoolConfig::new("orders", serde_json::from_value(spec).unwrap());
        pc.metadata.namespace = Some("shop".into());
        pc
    }

    fn deployed(image: &str, sa: Option<&str>) -> PoolConfig {
        let mut d = serde_json::json!({"image": image});
        if let Some(sa) = sa {
            d["podTemplate"] = serde_json::json!({"serviceAccountName": sa});
        }
        pc(serde_json::json!({"deployment": d}))
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn glob_stars_match_any_run_and_nothing_else_is_special() {
        let m = |p: &str, s: &str| Pattern(p.into()).matches(s);
        assert!(m("a:*", "a:1.2"));
        assert!(m("a:*", "a:"));
        assert!(!m("a:*", "a"));
        assert!(!m("a:*", "ab:1"));
        assert!(m("*", ""));
        assert!(m("*/pool:*", "ghcr.io/x/pool:1"));
        assert!(m("a*b*c", "aXbYbc"));
        assert!(!m("a*b*c", "aXbYbd"));
        assert!(m("exact", "exact"));
        assert!(!m("exact", "exactly"));
        // `?`, `[` and `.` are literal.
        assert!(!m("a?", "ab"));
        assert!(m("a.b", "a.b"));
        assert!(!m("a.b", "aXb"));
        // A pathological pattern stays fast (no exponential backtracking).
        let long = "a".repeat(5000);
        assert!(!m(&format!("{}b", "*a".repeat(50)), &long));
    }

    /// By default only the operator's own repository runs, under no borrowed ServiceAccount.
    #[test]
    fn the_default_allows_the_operators_own_image_only() {
        let a = Allowlist::new(&[], &[]).unwrap();
        assert_eq!(a, Allowlist::restrictive());
        assert_eq!(a.check(&deployed(DEFAULT_IMAGE, None)), Ok(()));
        let digest = "ghcr.io/droid-pool/droid-pool@sha256:0123";
        assert_eq!(a.check(&deployed(digest, None)), Ok(()));
        for image in [
            "attacker.example/exfil:latest",
            "ghcr.io/droid-pool/droid-pool-evil:1",
            "ghcr.io/droid-pool/droid-pool",
            "docker.io/ghcr.io/droid-pool/droid-pool:0.1.0",
        ] {
            let r = a.check(&deployed(image, None)).unwrap_err();
            assert_eq!(r.reason, IMAGE_NOT_ALLOWED, "{image}");
            assert!(r.message.contains(image), "{}", r.message);
            assert!(r.message.contains("ghcr.io/droid-pool/droid-pool:*"));
        }
        let r = a
            .check(&deployed(DEFAULT_IMAGE, Some("cloud-admin")))
            .unwrap_err();
        assert_eq!(r.reason, SERVICE_ACCOUNT_NOT_ALLOWED);
        assert!(r.message.contains("\"cloud-admin\""), "{}", r.message);
        assert!(r.message.contains("(none)"), "{}", r.message);
        // Sidecars run in the application's own pods: nothing to check.
        let side = pc(serde_json::json!({"sidecar": {"configMapName": "c"}}));
        assert_eq!(a.check(&side), Ok(()));
    }

    #[test]
    fn service_accounts_match_by_name_or_namespace_and_name() {
        let a = Allowlist::new(
            &strings(&["registry.internal/pool:*"]),
            &strings(&["pooler-*", "shop/reports"]),
        )
        .unwrap();
        let ok = |sa| a.check(&deployed("registry.internal/pool:2", Some(sa)));
        assert_eq!(ok("pooler-a"), Ok(()));
        assert_eq!(ok("reports"), Ok(()));
        assert!(ok("default").is_err());
        let mut other = deployed("registry.internal/pool:2", Some("reports"));
        other.metadata.namespace = Some("billing".into());
        assert_eq!(
            a.check(&other).unwrap_err().reason,
            SERVICE_ACCOUNT_NOT_ALLOWED
        );
        // The flag replaced the default images.
        assert_eq!(
            a.check(&deployed(DEFAULT_IMAGE, None)).unwrap_err().reason,
            IMAGE_NOT_ALLOWED
        );
        assert_eq!(
            Allowlist::new(&strings(&["a", " "]), &[]),
            Err(PolicyError::Empty("--allowed-images"))
        );
    }
}
