//! The Kubernetes objects that carry a rendered config: the ConfigMap (both targets) and, for
//! the deployment target, the Deployment, Service and PodDisruptionBudget of the poolers.
//! All are owned by their PoolConfig, so deleting it deletes them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, HTTPGetAction,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::admin::admin_volume;
use super::meta::{labels, meta_of, selector_labels};
use super::volumes::{secret_volume, volume};
use super::Rendered;
use crate::operator::crd::{DeploymentTarget, PodTemplate, PoolConfig, ServiceType, Target};

/// The ConfigMap key of the pooler config; pods mount the whole ConfigMap (no `subPath`, which
/// would freeze the file) at `CONFIG_DIR`.
pub const CONFIG_KEY: &str = "droid-pool.yaml";
pub const CONFIG_DIR: &str = "/etc/droid-pool";
/// Where the server password Secret is mounted; the file is named by the Secret key.
pub const SERVER_PASSWORD_DIR: &str = "/var/run/droid-pool/server";
/// Where the client passwords Secret (one key per user) is mounted.
pub const CLIENT_PASSWORDS_DIR: &str = "/var/run/droid-pool/client-passwords";
/// Where deployed poolers find the users file of `spec.clientAuth.usersSecret`.
pub const CLIENT_USERS_DIR: &str = "/var/run/droid-pool/client-users";
/// Pod template annotation: hash of the settings that need a restart.
pub const RESTART_CHECKSUM_ANNOTATION: &str = "droidpool.io/restart-checksum";
/// ConfigMap annotation: hash of the whole rendered config.
const CONFIG_HASH_ANNOTATION: &str = "droidpool.io/config-hash";
pub const PG_PORT: u16 = 6432;
pub const ADMIN_PORT: u16 = 9127;
/// The pooler runs as this unprivileged user whatever the image says.
const POOLER_UID: i64 = 65532;

/// The controller owner reference to `pc`; `None` while it has no uid (not yet stored).
fn owner(pc: &PoolConfig) -> Option<OwnerReference> {
    pc.controller_owner_ref(&())
}

/// The ConfigMap with the rendered config, named `name`.
pub fn config_map(pc: &PoolConfig, name: &str, r: &Rendered) -> Option<ConfigMap> {
    let mut meta = meta_of(pc, name.to_owned(), &owner(pc)?);
    meta.annotations = Some(BTreeMap::from([(
        CONFIG_HASH_ANNOTATION.into(),
        r.hash.clone(),
    )]));
    Some(ConfigMap {
        metadata: meta,
        data: Some(BTreeMap::from([(CONFIG_KEY.into(), r.yaml.clone())])),
        ..ConfigMap::default()
    })
}

fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("admin".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: i32::from(port),
        protocol: Some("TCP".into()),
        ..ContainerPort::default()
    }
}

/// The ConfigMap (whole, at `CONFIG_DIR`), the admin Secret and the Secrets the spec names, as
/// files. The admin Secret is mounted whether or not the config points at it yet: the
/// operator writes those settings only for pods that have it.
fn volumes(pc: &PoolConfig, config_map: &str) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.into(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let mut mounts = vec![volume("config", CONFIG_DIR)];
    let (admin, admin_mount) = admin_volume(pc);
    volumes.push(admin);
    mounts.push(admin_mount);
    if let Some(s) = &pc.spec.server.password_secret {
        volumes.push(secret_volume("server-password", &s.name, Some(&s.key)));
        mounts.push(volume("server-password", SERVER_PASSWORD_DIR));
    }
    if let Some(name) = pc
        .spec
        .client_auth
        .as_ref()
        .and_then(|a| a.passwords_secret.as_ref())
    {
        volumes.push(secret_volume("client-passwords", name, None));
        mounts.push(volume("client-passwords", CLIENT_PASSWORDS_DIR));
    }
    if let Some(u) = pc
        .spec
        .client_auth
        .as_ref()
        .and_then(|a| a.users_secret.as_ref())
    {
        volumes.push(secret_volume("client-users", &u.name, Some(&u.key)));
        mounts.push(volume("client-users", CLIENT_USERS_DIR));
    }
    (volumes, mounts)
}

/// The ServiceAccount the operator creates for the pooler pods: their own, not the
/// namespace's `default`, and without an API token (a pooler never calls the Kubernetes API).
pub fn service_account_name(pc: &PoolConfig) -> String {
    format!("{}-pooler", pc.name_any())
}

/// The pod template settings of a deployment target, if any.
fn template(pc: &PoolConfig) -> Option<&PodTemplate> {
    match &pc.spec.target {
        Target::Deployment(t) => t.pod_template.as_deref(),
        Target::Sidecar(_) => None,
    }
}

/// The poolers' ServiceAccount (see `service_account_name`); none when the pod template
/// names one of the user's.
pub fn service_account(pc: &PoolConfig) -> Option<ServiceAccount> {
    if template(pc).is_some_and(|t| t.service_account_name.is_some()) {
        return None;
    }
    Some(ServiceAccount {
        metadata: meta_of(pc, service_account_name(pc), &owner(pc)?),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    })
}

/// The pooler container's security context: what the `restricted` Pod Security profile
/// demands (no privilege escalation, every capability dropped, RuntimeDefault seccomp on the
/// pod), plus a read-only root filesystem.
fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// The pooler container and its volumes.
fn pod_spec(pc: &PoolConfig, t: &DeploymentTarget, config_map: &str, r: &Rendered) -> PodSpec {
    let (volumes, mounts) = volumes(pc, config_map);
    // The kubelet's SIGKILL must come after the pooler's own drain deadline.
    let grace = r.config.drain.timeout.as_secs_f64().ceil() as i64 + 5;
    let tmpl = t.pod_template.as_deref().cloned().unwrap_or_default();
    let spread = tmpl.topology_spread_constraints.unwrap_or_else(|| {
        vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "kubernetes.io/hostname".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(selector_labels(pc)),
                ..LabelSelector::default()
            }),
            ..TopologySpreadConstraint::default()
        }]
    });
    PodSpec {
        termination_grace_period_seconds: Some(grace),
        service_account_name: Some(
            tmpl.service_account_name
                .unwrap_or_else(|| service_account_name(pc)),
        ),
        automount_service_account_token: Some(false),
        affinity: tmpl.affinity,
        topology_spread_constraints: Some(spread),
        tolerations: tmpl.tolerations,
        node_selector: tmpl.node_selector,
        priority_class_name: tmpl.priority_class_name,
        image_pull_secrets: tmpl.image_pull_secrets,
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(POOLER_UID),
            run_as_group: Some(POOLER_UID),
            fs_group: Some(POOLER_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        containers: vec![Container {
            name: "droid-pool".into(),
            image: Some(t.image.clone()),
            command: Some(vec!["/usr/local/bin/droid-pool".into()]),
            args: Some(vec![
                "--config".into(),
                format!("{CONFIG_DIR}/{CONFIG_KEY}"),
            ]),
            ports: Some(vec![port("postgres", PG_PORT), port("admin", ADMIN_PORT)]),
            startup_probe: Some(http_probe("/startupz", 1, 60)),
            liveness_probe: Some(http_probe("/livez", 10, 3)),
            // Three misses (6 s) before a pod leaves the endpoints: one slow probe under load
            // must not take a pooler out of the Service.
            readiness_probe: Some(http_probe("/readyz", 2, 3)),
            resources: t.resources.clone(),
            volume_mounts: Some(mounts),
            security_context: Some(container_security()),
            ..Container::default()
        }],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// The Deployment of poolers, named like the PoolConfig. `replicas` is left out when the spec
/// leaves it to an autoscaler, so this apply never fights one.
pub fn deployment(
    pc: &PoolConfig,
    t: &DeploymentTarget,
    config_map: &str,
    r: &Rendered,
) -> Option<Deployment> {
    let annotations = BTreeMap::from([
        (
            RESTART_CHECKSUM_ANNOTATION.into(),
            r.restart_checksum.clone(),
        ),
        ("prometheus.io/scrape".into(), "true".into()),
        ("prometheus.io/port".into(), ADMIN_PORT.to_string()),
        ("prometheus.io/path".into(), "/metrics".into()),
    ]);
    Some(Deployment {
        metadata: meta_of(pc, pc.name_any(), &owner(pc)?),
        spec: Some(DeploymentSpec {
            replicas: t.replicas,
            selector: LabelSelector {
                match_labels: Some(selector_labels(pc)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(merged(
                        template(pc).and_then(|t| t.labels.as_ref()),
                        labels(pc),
                    )),
                    annotations: Some(merged(
                        template(pc).and_then(|t| t.annotations.as_ref()),
                        annotations,
                    )),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(pc, t, config_map, r)),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    })
}

/// The user's entries, then the operator's over them (its own win on a clash).
fn merged(
    user: Option<&BTreeMap<String, String>>,
    ours: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = user.cloned().unwrap_or_default();
    out.extend(ours);
    out
}

/// The Service in front of the poolers.
pub fn service(pc: &PoolConfig, t: &DeploymentTarget) -> Option<Service> {
    let mut metadata = meta_of(pc, pc.name_any(), &owner(pc)?);
    metadata.annotations = t.service.annotations.clone();
    let external = t.service.type_ != ServiceType::ClusterIP;
    Some(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(format!("{:?}", t.service.type_)),
            load_balancer_source_ranges: t.service.load_balancer_source_ranges.clone(),
            external_traffic_policy: t
                .service
                .external_traffic_policy
                .filter(|_| external)
                .map(|p| format!("{p:?}")),
            selector: Some(selector_labels(pc)),
            ports: Some(vec![ServicePort {
                name: Some("postgres".into()),
                port: i32::from(t.service.port),
                target_port: Some(IntOrString::String("postgres".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

/// The PodDisruptionBudget (as policy/v1; the reconciler sends it as policy/v1beta1 to servers
/// that predate v1, the spec fields used here being the same in both).
pub fn pdb(pc: &PoolConfig, t: &DeploymentTarget) -> Option<PodDisruptionBudget> {
    Some(PodDisruptionBudget {
        metadata: meta_of(pc, pc.name_any(), &owner(pc)?),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(t.pod_disruption_budget.max_unavailable)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(pc)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    })
}
