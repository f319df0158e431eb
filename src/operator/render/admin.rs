//! The admin Secret of a PoolConfig, as objects and config: its two keys (the bearer token of
//! the poolers' control routes, and the secret unknown users' mock SCRAM salts derive from),
//! the read-only volume that carries them into a pooler, and the settings that point at them.
//! The values are made elsewhere (`operator::admin_secret`); nothing here holds one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Pod, Secret, Volume, VolumeMount};
use k8s_openapi::ByteString;
use kube::{Resource, ResourceExt};

use super::meta::meta_of;
use super::volumes::{secret_volume, volume};
use crate::config::Config;
use crate::operator::crd::PoolConfig;

/// Where poolers find the admin Secret's keys (each key a file).
pub const ADMIN_DIR: &str = "/var/run/droid-pool/admin";
/// The key (and file) of the control routes' bearer token (`admin.token_file`).
pub const TOKEN_KEY: &str = "token";
/// The key (and file) the mock salts derive from (`auth.mock_secret_file`).
pub const MOCK_SECRET_KEY: &str = "mock-secret";
/// The volume's name in a pooler pod.
pub const ADMIN_VOLUME: &str = "admin";

/// `<name>-admin`: one per PoolConfig, whatever its target (the sidecar helper mounts it by
/// the PoolConfig's name).
pub fn admin_secret_name(pc: &PoolConfig) -> String {
    format!("{}-admin", pc.name_any())
}

/// The admin Secret with these values, owned by `pc` (deleting the PoolConfig deletes it);
/// `None` while `pc` has no uid.
pub fn admin_secret(pc: &PoolConfig, token: &str, mock_secret: &str) -> Option<Secret> {
    let owner = pc.controller_owner_ref(&())?;
    let data = BTreeMap::from([
        (TOKEN_KEY.into(), ByteString(token.as_bytes().to_vec())),
        (
            MOCK_SECRET_KEY.into(),
            ByteString(mock_secret.as_bytes().to_vec()),
        ),
    ]);
    Some(Secret {
        metadata: meta_of(pc, admin_secret_name(pc), &owner),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    })
}

/// The volume and mount of the admin Secret in a deployed pooler pod.
pub(super) fn admin_volume(pc: &PoolConfig) -> (Volume, VolumeMount) {
    let mut v = secret_volume(ADMIN_VOLUME, &admin_secret_name(pc), None);
    if let Some(s) = v.secret.as_mut() {
        // Only the two keys the pooler reads, whatever else someone adds to the Secret.
        s.items = Some(
            [TOKEN_KEY, MOCK_SECRET_KEY]
                .map(|k| k8s_openapi::api::core::v1::KeyToPath {
                    key: k.into(),
                    path: k.into(),
                    ..Default::default()
                })
                .to_vec(),
        );
    }
    (v, volume(ADMIN_VOLUME, ADMIN_DIR))
}

/// Points the pooler at the mounted keys.
pub(super) fn admin_files(c: &mut Config) {
    let dir = PathBuf::from(ADMIN_DIR);
    c.admin.token_file = Some(dir.join(TOKEN_KEY));
    c.auth.mock_secret_file = Some(dir.join(MOCK_SECRET_KEY));
}

/// Whether a container of `pod` has Secret `name` mounted read-only at [`ADMIN_DIR`]
/// (directly or in a projected volume): the pooler in it finds the files the config points
/// at, and may be sent the token (it can read it anyway).
pub fn mounts_admin_secret(pod: &Pod, name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let holds = |v: &Volume| {
        v.secret
            .as_ref()
            .is_some_and(|s| s.secret_name.as_deref() == Some(name))
            || v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.secret.as_ref().is_some_and(|s| s.name == name))
            })
    };
    let volumes: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| holds(v))
        .map(|v| v.name.as_str())
        .collect();
    let containers = spec.containers.iter();
    containers
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| {
            m.mount_path.trim_end_matches('/') == ADMIN_DIR
                && m.sub_path.is_none()
                && volumes.contains(&m.name.as_str())
        })
}

#[cfg(test)]
mod tests {
    use super::super::{deployment, preview, render, render_with, Facts};
    use super::*;
    use crate::operator::crd::{DeploymentTarget, Target};

    fn object(yaml: &str) -> PoolConfig {
        let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        let mut pc = PoolConfig::new("orders", serde_json::from_value(value).unwrap());
        pc.metadata.namespace = Some("shop".into());
        pc.metadata.uid = Some("0a1b".into());
        pc
    }

    fn deployed() -> PoolConfig {
        object("poolSize: 3\nserver: {host: db}\nclientAuth: {passwordsSecret: users}\ntarget: {deployment: {}}\n")
    }

    fn target(pc: &PoolConfig) -> &DeploymentTarget {
        match &pc.spec.target {
            Target::Deployment(t) => t,
            Target::Sidecar(_) => unreachable!("a deployment"),
        }
    }

    /// Deployed poolers always mount the admin Secret's two keys read-only; the config
    /// points at them only when the facts allow (every pod mounts them, every pooler reads
    /// the settings), and otherwise holds no key a 0.1.0 pooler would refuse.
    #[test]
    fn deployed_poolers_mount_the_admin_secret_and_point_at_it_when_allowed() {
        let pc = deployed();
        let plain = render(&pc.spec, 1).unwrap();
        assert!(!plain.yaml.contains("token_file"), "{}", plain.yaml);
        assert!(!plain.yaml.contains("mock_secret"), "{}", plain.yaml);
        let d = deployment(&pc, target(&pc), "orders-config", &plain).unwrap();
        let pod = d.spec.unwrap().template.spec.unwrap();
        let v = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == ADMIN_VOLUME)
            .unwrap();
        let s = v.secret.unwrap();
        assert_eq!(s.secret_name.as_deref(), Some("orders-admin"));
        let keys: Vec<_> = s.items.unwrap().into_iter().map(|i| i.key).collect();
        assert_eq!(keys, [TOKEN_KEY, MOCK_SECRET_KEY]);
        let m = pod.containers[0].volume_mounts.as_ref().unwrap();
        let m = m.iter().find(|m| m.name == ADMIN_VOLUME).unwrap();
        assert_eq!(
            (m.mount_path.as_str(), m.read_only),
            (ADMIN_DIR, Some(true))
        );

        let facts = Facts {
            admin_files: true,
            ..Facts::default()
        };
        let on = render_with(&pc.spec, 1, facts).unwrap();
        assert!(
            on.yaml
                .contains("token_file: /var/run/droid-pool/admin/token"),
            "{}",
            on.yaml
        );
        assert!(on
            .yaml
            .contains("mock_secret_file: /var/run/droid-pool/admin/mock-secret"));
        // A reload re-reads both files: no restart is needed for them.
        assert_eq!(on.restart_checksum, plain.restart_checksum);
        assert_ne!(on.hash, plain.hash);
    }

    /// The pooler itself loads the rendered file with the Secret's keys as files: the token
    /// and the mock secret are what the Secret holds.
    #[test]
    fn the_pooler_loads_the_rendered_files_from_the_secret() {
        let pc = deployed();
        let facts = Facts {
            admin_files: true,
            ..Facts::default()
        };
        let r = render_with(&pc.spec, 1, facts).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let secret = admin_secret(&pc, &"t".repeat(64), &"m".repeat(64)).unwrap();
        for (key, value) in secret.data.unwrap() {
            std::fs::write(dir.path().join(key), value.0).unwrap();
        }
        std::fs::create_dir(dir.path().join("client")).unwrap();
        let text = r
            .yaml
            .replace(ADMIN_DIR, &dir.path().display().to_string())
            .replace(
                "/var/run/droid-pool/client-passwords",
                &dir.path().join("client").display().to_string(),
            );
        let file = dir.path().join("droid-pool.yaml");
        std::fs::write(&file, text).unwrap();
        let cli = <crate::config::Cli as clap::Parser>::parse_from([
            "droid-pool",
            "--config",
            file.to_str().unwrap(),
        ]);
        let c = Config::load(&cli).unwrap();
        assert_eq!(
            c.admin.token.as_ref().map(|t| t.expose().to_owned()),
            Some("t".repeat(64))
        );
        assert_eq!(
            c.auth.mock_secret.as_ref().map(|t| t.expose().to_owned()),
            Some("m".repeat(64))
        );
    }

    #[test]
    fn the_secret_is_owned_and_previewed_without_values() {
        let pc = deployed();
        let s = admin_secret(&pc, "tok", "mock").unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("orders-admin"));
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("0a1b", Some(true)));
        let data = s.data.unwrap();
        assert_eq!(data[TOKEN_KEY].0, b"tok");
        assert_eq!(data[MOCK_SECRET_KEY].0, b"mock");
        let objects = preview(&pc, 1).unwrap();
        let secret = objects.iter().find(|o| o["kind"] == "Secret").unwrap();
        assert_eq!(secret["metadata"]["name"], "orders-admin");
        assert!(secret.get("data").is_none(), "{secret}");
        let mut unstored = pc.clone();
        unstored.metadata.uid = None;
        assert!(admin_secret(&unstored, "a", "b").is_none());
    }

    fn pod(volumes: serde_json::Value, mount: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app"}],
                     "initContainers": [{"name": "pooler", "restartPolicy": "Always",
                         "volumeMounts": [{"name": "a", "mountPath": mount, "readOnly": true}]}],
                     "volumes": volumes}
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_mounts_the_admin_secret_only_at_the_admin_dir() {
        let direct = serde_json::json!([{"name": "a", "secret": {"secretName": "w-admin"}}]);
        assert!(mounts_admin_secret(
            &pod(direct.clone(), ADMIN_DIR),
            "w-admin"
        ));
        assert!(!mounts_admin_secret(
            &pod(direct.clone(), "/tmp"),
            "w-admin"
        ));
        assert!(!mounts_admin_secret(&pod(direct, ADMIN_DIR), "x-admin"));
        let projected = serde_json::json!([{"name": "a", "projected": {"sources": [
            {"configMap": {"name": "c"}}, {"secret": {"name": "w-admin"}}]}}]);
        assert!(mounts_admin_secret(&pod(projected, ADMIN_DIR), "w-admin"));
        let other = serde_json::json!([{"name": "a", "emptyDir": {}}]);
        assert!(!mounts_admin_secret(&pod(other, ADMIN_DIR), "w-admin"));
        assert!(!mounts_admin_secret(&Pod::default(), "w-admin"));
    }
}
