//! The CRD's schema, enforced by the real 1.20 API server: bad PoolConfigs are refused with a
//! message naming the field. Kubernetes 1.20 does not evaluate CEL (`x-kubernetes-validations`,
//! enforced from 1.25) and drops the key; for those rules the last test shows the operator's
//! own check (`ConfigRendered=False`, reason `InvalidSpec`).

use droid_pool::operator::crd::PoolConfig;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

use crate::support::{self, condition, eventually, Running};

fn object(name: &str, spec: Value) -> PoolConfig {
    serde_json::from_value(json!({
        "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
        "metadata": {"name": name}, "spec": spec
    }))
    .expect("PoolConfig JSON")
}

/// A valid spec with `change` merged over it (a `null` removes a key).
fn spec(change: Value) -> Value {
    let mut s = json!({
        "poolSize": 5,
        "server": {"host": "db"},
        "target": {"sidecar": {"configMapName": "c"}}
    });
    for (k, v) in change.as_object().expect("object").clone() {
        if v.is_null() {
            s.as_object_mut().expect("object").remove(&k);
        } else {
            s[k] = v;
        }
    }
    s
}

#[tokio::test]
async fn server_rejects_schema_invalid_objects() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "schema").await;
    let api = Api::<PoolConfig>::namespaced(client.clone(), &ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // Raw JSON, bypassing our own types, so the server alone judges. Each case: the spec and
    // a piece of the server's message.
    let cases = [
        (spec(json!({"maxServerConnections": 10})), "oneOf"),
        (spec(json!({"poolSize": null})), "oneOf"),
        (spec(json!({"mode": "bogus"})), "spec.mode"),
        (spec(json!({"poolSize": 0})), "spec.poolSize"),
        (
            spec(json!({"queryWaitTimeout": "5 seconds"})),
            "spec.queryWaitTimeout",
        ),
        (spec(json!({"target": {}})), "spec.target"),
        (
            spec(json!({"target": {"sidecar": {"configMapName": "c"}, "deployment": {}}})),
            "spec.target",
        ),
        (spec(json!({"server": null})), "spec.server"),
        (
            spec(json!({"server": {"host": "db", "port": 70000}})),
            "spec.server.port",
        ),
        (
            spec(json!({"target": {"deployment": {"service": {"type": "Ingress"}}}})),
            "spec.target.deployment.service.type",
        ),
        (
            spec(json!({"clientAuth": {"method": "password"}})),
            "spec.clientAuth.method",
        ),
        // Exactly one of host, hosts and cloudNativePG.
        (spec(json!({"server": {"port": 5432}})), "oneOf"),
        (
            spec(json!({"server": {"host": "db", "hosts": ["db-1:5432"]}})),
            "oneOf",
        ),
        (
            spec(json!({"server": {"hosts": ["a:1"], "targetSessionAttrs": "writable"}})),
            "spec.server.targetSessionAttrs",
        ),
        (
            spec(json!({"failover": {"holdTimeout": "ten seconds"}})),
            "spec.failover.holdTimeout",
        ),
        (
            spec(json!({"databases": {"ro": {"poolSize": 0}}})),
            "spec.databases.ro.poolSize",
        ),
    ];
    for (i, (bad, needle)) in cases.into_iter().enumerate() {
        let raw = json!({"apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
                         "metadata": {"name": format!("bad-{i}")}, "spec": bad});
        let dynamic: kube::api::DynamicObject = serde_json::from_value(raw).expect("json");
        let dyn_api = Api::<kube::api::DynamicObject>::namespaced_with(
            client.clone(),
            &ns,
            &kube::core::ApiResource::erase::<PoolConfig>(&()),
        );
        match dyn_api.create(&dry, &dynamic).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "case {i}: {}", s.message);
                assert!(
                    s.message.contains(needle),
                    "case {i}: {needle:?} not in {}",
                    s.message
                );
            }
            other => panic!("case {i} ({needle}) was not refused: {other:?}"),
        }
    }
    // The valid one passes a server-side dry run, and a dry run stores nothing.
    api.create(&dry, &object("good", spec(json!({}))))
        .await
        .expect("valid PoolConfig accepted");
    assert!(api.get_opt("good").await.expect("get").is_none());
}

#[tokio::test]
async fn rules_1_20_cannot_check_are_checked_by_the_operator() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "cel-skew").await;
    let op = Running::start(&client, &ns).await;
    let api = Api::<PoolConfig>::namespaced(client.clone(), &ns);
    // CEL: "maxServerConnections with a sidecar target needs target.sidecar.podSelector".
    // A 1.25+ server refuses this object; 1.20 stores it.
    let skew = spec(json!({"poolSize": null, "maxServerConnections": 10}));
    api.create(&PostParams::default(), &object("no-selector", skew))
        .await
        .expect("1.20 does not evaluate CEL, so it accepts the object");
    let pc = eventually("InvalidSpec", || async {
        let pc = api.get("no-selector").await.ok()?;
        (condition(&pc, "ConfigRendered") == Some(("False".into(), "InvalidSpec".into())))
            .then_some(pc)
    })
    .await;
    let msg = &pc.status.as_ref().expect("status").conditions[1].message;
    assert!(msg.contains("podSelector"), "{msg}");
    assert_eq!(
        condition(&pc, "Degraded"),
        Some(("True".into(), "InvalidSpec".into()))
    );
    op.stop().await;
}

/// The README's two examples (kept in `deploy/examples/`) are accepted by the server and render
/// into a config the pooler accepts.
#[tokio::test]
async fn readme_examples_are_valid() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "examples").await;
    let readme = include_str!("../../README.md");
    let examples = [
        include_str!("../../deploy/examples/poolconfig-sidecar.yaml"),
        include_str!("../../deploy/examples/poolconfig-deployment.yaml"),
        include_str!("../../deploy/examples/poolconfig-shared.yaml"),
    ];
    let api = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::core::ApiResource::erase::<PoolConfig>(&()),
    );
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for text in examples {
        assert!(readme.contains(text), "README lacks the example:\n{text}");
        let mut raw: Value = serde_yaml::from_str(text).expect("example YAML");
        raw["metadata"]["namespace"] = ns.clone().into();
        let obj: kube::api::DynamicObject = serde_json::from_value(raw.clone()).expect("object");
        api.create(&dry, &obj)
            .await
            .expect("the server accepts the example");
        let pc: PoolConfig = serde_json::from_value(raw).expect("typed");
        droid_pool::operator::render::render(&pc.spec, 3).expect("the example renders");
    }
}
