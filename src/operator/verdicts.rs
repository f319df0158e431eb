//! The verdicts of a reconciliation that rendered and applied a config: `Ready` from what the
//! poolers report having loaded, `ConfigRendered` and `Degraded` with the reasons behind the
//! rendered settings (where a budget's share is held, whether the admin token is in force).
//! Pure, so each rule is unit-tested.

use super::loaded::Reports;
use super::render::{self, Readers, Rendered, ADMIN_DIR};
use super::status::{Verdict, CONFIG_RENDERED, DEGRADED, READY};
use crate::config::READS_ADMIN_TOKEN_FILE;

/// Whether the config may point at the admin Secret's files: every pooler pod mounts it
/// (`unmounted == 0`), and every running pooler reads the settings (`readers`, kept once
/// written while nobody answers, as for the budget).
pub(super) fn admin_files(unmounted: usize, readers: &[Readers], written: bool) -> bool {
    unmounted == 0 && readers.iter().all(|r| r.all_read(written))
}

/// Where the admin token is, or why the config does not point at it yet: a pod that would not
/// find the files (an application pod template without the mount), or a pooler that would
/// refuse the setting (an older image).
pub(super) fn admin_note(
    in_force: bool,
    secret: &str,
    unmounted: usize,
    readers: &Readers,
) -> String {
    let off = "the poolers' control routes are off";
    let setting = READS_ADMIN_TOKEN_FILE;
    if in_force {
        format!("admin token in Secret {secret}")
    } else if unmounted > 0 {
        format!(
            "{off}: {unmounted} pooler pod(s) do not mount Secret {secret} at {ADMIN_DIR} (the \
             chart's droid-pool.sidecar helper mounts it when given poolConfig)"
        )
    } else if readers.older > 0 {
        format!(
            "{off}: {} of {} running poolers do not read {setting} (an older image)",
            readers.older, readers.asked
        )
    } else if readers.failing > 0 {
        format!(
            "{off}: {} pooler pod(s) keep failing to start",
            readers.failing
        )
    } else {
        format!("{off}: no running pooler has said yet that it reads {setting}")
    }
}

/// `Ready` once the running poolers have loaded config `hash` (and, for a Deployment, its
/// rollout verdict is Ready): each was asked which config it has loaded.
pub(super) fn loaded_verdict(
    rollout: Option<Verdict>,
    reports: &Reports,
    hash: &str,
    cm: &str,
) -> Verdict {
    if let Some(v) = rollout.as_ref().filter(|v| !v.status) {
        return v.clone();
    }
    let l = reports.loaded(hash);
    let of = format!(
        "{}/{} running poolers have loaded config {hash}",
        l.current, l.asked
    );
    match (l.asked, l.all(), rollout) {
        (_, false, _) => Verdict::new(
            READY,
            false,
            "ConfigNotLoaded",
            format!("{of} (a pod's mounted ConfigMap follows within about a minute)"),
        ),
        (0, true, None) => Verdict::new(
            READY,
            true,
            "ConfigPublished",
            format!("ConfigMap {cm} holds the config; no selected pooler runs yet"),
        ),
        (_, true, None) => Verdict::new(READY, true, "ConfigLoaded", of),
        (_, true, Some(v)) => Verdict::new(READY, true, v.reason, format!("{}; {of}", v.message)),
    }
}

/// `ConfigRendered` and `Degraded` for a config that rendered and was applied; with a budget,
/// the message says where the share is held and why (`readers`), then where the admin token is
/// or why the config does not point at it yet (`admin`, from [`admin_note`]).
pub(super) fn rendered_verdicts(
    rendered: &Rendered,
    readers: &render::Readers,
    admin: &str,
) -> (Verdict, Verdict) {
    let s = rendered.sizing;
    let scope = readers
        .explain(s.scope)
        .map_or_else(String::new, |why| format!("; {why}"));
    let rendered_v = Verdict::new(
        CONFIG_RENDERED,
        true,
        "Rendered",
        format!(
            "pool size {} for {} pooler(s), config {}{scope}; {admin}",
            s.pool_size, s.poolers, rendered.hash
        ),
    );
    let degraded = if s.over_budget {
        Verdict::new(
            DEGRADED,
            true,
            "BudgetExceeded",
            format!(
                "maxServerConnections is below the {} poolers: each keeps 1 connection",
                s.poolers
            ),
        )
    } else {
        Verdict::new(DEGRADED, false, "AsExpected", "no problem found".into())
    };
    (rendered_v, degraded)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The admin files are written only where every pod has them and every pooler reads
    /// them; once written, a moment without answers does not take them out.
    #[test]
    fn admin_files_need_the_mount_and_readers() {
        let reading = Readers {
            asked: 2,
            reading: 2,
            ..Readers::default()
        };
        let older = Readers {
            reading: 1,
            older: 1,
            ..reading
        };
        let silent = Readers::default();
        assert!(admin_files(0, &[reading, reading], false));
        assert!(!admin_files(1, &[reading, reading], true));
        assert!(!admin_files(0, &[reading, older], true));
        assert!(!admin_files(0, &[silent, silent], false));
        assert!(admin_files(0, &[silent, silent], true));
        let note = admin_note(false, "w-admin", 2, &reading);
        assert!(
            note.contains("2 pooler pod(s) do not mount Secret w-admin"),
            "{note}"
        );
        let note = admin_note(false, "w-admin", 0, &older);
        assert!(
            note.contains("1 of 2 running poolers do not read admin.token_file"),
            "{note}"
        );
        assert_eq!(
            admin_note(true, "w-admin", 0, &older),
            "admin token in Secret w-admin"
        );
    }
}
