//! Failures a real API server does not produce on demand (500s, a dropped connection, a
//! renewal that keeps failing), scripted with `tower-test` in place of the API server. Only
//! these tests fake the API; everything else in this binary runs against kube-apiserver.

use std::sync::Arc;
use std::time::{Duration, Instant};

use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::leader::{self, Elector, LeaseConfig};
use droid_pool::operator::metrics::Metrics;
use droid_pool::operator::reconcile::{error_policy, reconcile, Context};
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (Client, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "shop"), handle)
}

fn context(client: Client) -> Arc<Context> {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "droid-pool-operator".into(),
            instance: None,
        },
    );
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let pdb = ApiResource {
        group: "policy".into(),
        version: "v1".into(),
        api_version: "policy/v1".into(),
        kind: "PodDisruptionBudget".into(),
        plural: "poddisruptionbudgets".into(),
    };
    let allow = droid_pool::operator::policy::Allowlist::restrictive();
    Arc::new(Context::new(client, recorder, metrics, pdb, allow))
}

/// A stored sidecar PoolConfig without selector or Secrets: its reconcile makes exactly
/// these calls, in order: look up the ConfigMap's name, look for and create the admin Secret,
/// apply the ConfigMap, look for a Deployment left from a deployment target, apply the
/// status, then post Events.
fn pool_config() -> Arc<PoolConfig> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "generation": 1},
            "spec": {"poolSize": 4, "server": {"host": "db"},
                     "target": {"sidecar": {"configMapName": "web-pool"}}}
        }))
        .expect("PoolConfig"),
    )
}

fn status(code: u16) -> Response<Body> {
    let reason = if code == 404 {
        "NotFound"
    } else {
        "InternalError"
    };
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": "scripted failure", "reason": reason, "code": code});
    Response::builder()
        .status(code)
        .body(Body::from(body.to_string().into_bytes()))
        .expect("response")
}

fn ok(body: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .body(Body::from(body.to_string().into_bytes()))
        .expect("response")
}

/// Answers the next request with `response` after checking its method and path.
async fn expect(handle: &mut ApiHandle, method: Method, path_part: &str, response: Response<Body>) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request for {path_part}"))
        .expect("request");
    assert_eq!(req.method(), method, "{}", req.uri());
    assert!(
        req.uri().path().contains(path_part),
        "{} lacks {path_part}",
        req.uri()
    );
    send.send_response(response);
}

/// No takeover: the ConfigMap's name is looked up before the apply (free here); then the
/// admin Secret is looked for (none) and created, the server echoing what it was sent.
async fn expect_name_free(handle: &mut ApiHandle) {
    expect(handle, Method::GET, "/configmaps/web-pool", status(404)).await;
    expect(handle, Method::GET, "/secrets/web-admin", status(404)).await;
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .expect("a request for the admin Secret")
        .expect("request");
    assert_eq!(req.method(), Method::POST, "{}", req.uri());
    assert!(req.uri().path().ends_with("/secrets"), "{}", req.uri());
    let body = req.into_body().collect_bytes().await.expect("body");
    send.send_response(ok(serde_json::from_slice(&body).expect("Secret JSON")));
}

#[tokio::test]
async fn api_errors_are_counted_and_retried_with_growing_backoff() {
    let (client, mut handle) = mock_client();
    let ctx = context(client);
    let pc = pool_config();
    let run = tokio::spawn(reconcile(pc.clone(), ctx.clone()));
    expect_name_free(&mut handle).await;
    expect(
        &mut handle,
        Method::PATCH,
        "/configmaps/web-pool",
        status(500),
    )
    .await;
    // The failure goes to status (Degraded) and an Event, best effort: both fail too.
    expect(
        &mut handle,
        Method::PATCH,
        "/poolconfigs/web/status",
        status(500),
    )
    .await;
    expect(&mut handle, Method::POST, "/events", status(500)).await;
    let err = run.await.expect("task").expect_err("a 500 is an error");
    assert_eq!(err.metric_label(), "api");
    assert!(err.to_string().contains("scripted failure"), "{err}");
    let text = ctx.metrics.render();
    assert!(text.contains("droid_pool_operator_reconcile_failures_total{reason=\"api\"} 1"));
    let delays: Vec<Action> = (0..4)
        .map(|_| error_policy(pc.clone(), &err, ctx.clone()))
        .collect();
    let secs = |s| Action::requeue(Duration::from_secs(s));
    assert_eq!(delays, [secs(1), secs(2), secs(4), secs(8)]);

    // A success resets the backoff.
    let run = tokio::spawn(reconcile(pc.clone(), ctx.clone()));
    expect_name_free(&mut handle).await;
    expect(
        &mut handle,
        Method::PATCH,
        "/configmaps/web-pool",
        ok(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-pool"}
        })),
    )
    .await;
    // No pooler Deployment left over from a deployment target.
    expect(&mut handle, Method::GET, "/deployments/web", status(404)).await;
    let stored = serde_json::to_value(pc.as_ref()).expect("json");
    expect(
        &mut handle,
        Method::PATCH,
        "/poolconfigs/web/status",
        ok(stored),
    )
    .await;
    expect(
        &mut handle,
        Method::POST,
        "/events",
        ok(json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": "2026-01-01T00:00:00.000000Z"
        })),
    )
    .await;
    assert_eq!(run.await.expect("task").expect("ok"), secs(300));
    assert_eq!(error_policy(pc, &err, ctx), secs(1));
}

#[tokio::test]
async fn a_dropped_connection_and_a_conflict_have_their_own_labels() {
    let (client, mut handle) = mock_client();
    let ctx = context(client);
    let run = tokio::spawn(reconcile(pool_config(), ctx.clone()));
    let (_, send) = handle.next_request().await.expect("request");
    send.send_error(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    let (_, send) = handle.next_request().await.expect("status request");
    send.send_error(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    let (_, send) = handle.next_request().await.expect("event request");
    send.send_error(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    let err = run.await.expect("task").expect_err("transport error");
    assert_eq!(err.metric_label(), "transport");

    let run = tokio::spawn(reconcile(pool_config(), ctx.clone()));
    expect_name_free(&mut handle).await;
    expect(
        &mut handle,
        Method::PATCH,
        "/configmaps/web-pool",
        status(409),
    )
    .await;
    expect(&mut handle, Method::PATCH, "/status", status(500)).await;
    expect(&mut handle, Method::POST, "/events", status(500)).await;
    let err = run.await.expect("task").expect_err("conflict");
    assert_eq!(err.metric_label(), "conflict");
    let text = ctx.metrics.render();
    for reason in ["transport", "conflict"] {
        let line = format!("droid_pool_operator_reconcile_failures_total{{reason=\"{reason}\"}} 1");
        assert!(text.contains(&line), "{line} missing in\n{text}");
    }
}

#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down_before_its_lease_runs_out() {
    let (client, mut handle) = mock_client();
    let cfg = LeaseConfig {
        lease_duration: Duration::from_secs(1),
        retry_period: Duration::from_millis(100),
        ..LeaseConfig::new("shop".into(), "droid-pool-operator".into(), "me".into())
    };
    let elector = Elector::new(client, cfg);
    let started = Instant::now();
    let hold = tokio::spawn(async move { leader::hold(&elector, &CancellationToken::new()).await });
    // Every renewal attempt meets an unavailable API server.
    let answer = tokio::spawn(async move {
        while let Some((_, send)) = handle.next_request().await {
            send.send_response(status(503));
        }
    });
    let kept = tokio::time::timeout(Duration::from_secs(5), hold)
        .await
        .expect("hold returns")
        .expect("task");
    assert!(!kept, "must step down");
    // It gave up before the lease expired for the others (1 s): never two leaders.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    answer.abort();
}
