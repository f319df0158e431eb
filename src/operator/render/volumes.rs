//! The read-only volumes that carry Secrets and their mounts into a pooler pod.

use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource, Volume, VolumeMount};

/// A read-only mount of volume `name` at `mount`.
pub(super) fn volume(name: &str, mount: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: mount.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// A volume of Secret `secret` (only key `item`, if given), readable by owner and group.
pub(super) fn secret_volume(name: &str, secret: &str, item: Option<&str>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: item.map(|key| {
                vec![KeyToPath {
                    key: key.into(),
                    path: key.into(),
                    ..KeyToPath::default()
                }]
            }),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}
