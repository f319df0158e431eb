//! Hot reload (file change, Kubernetes ConfigMap symlink swap, broken files) and the SQL admin
//! console through psql, against the real binary and a real PostgreSQL.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::task::block_in_place;

use crate::support::metrics::{metric, scrape, wait_metrics};
use crate::support::tools::pg_tool;
use crate::support::{self, Pooler, DB};

const USER: &str = "droid";

/// A ConfigMap-like volume: `dir/..data -> versionN`, `dir/droid-pool.yaml -> ..data/droid-pool.yaml`.
fn configmap_version(dir: &Path, version: &str, yaml: &str) {
    let v = dir.join(version);
    std::fs::create_dir_all(&v).unwrap();
    std::fs::write(v.join("droid-pool.yaml"), yaml).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    // rename(2) swaps the link atomically, as the kubelet does.
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    let file = dir.join("droid-pool.yaml");
    if std::fs::symlink_metadata(&file).is_err() {
        std::os::unix::fs::symlink("..data/droid-pool.yaml", &file).unwrap();
    }
}

fn pool_size(text: &str) -> Option<f64> {
    metric(text, "droidpool_pool_size", &[("user", USER)])
}

fn servers_open(text: &str) -> f64 {
    ["active", "idle", "login", "used"]
        .iter()
        .filter_map(|s| metric(text, "droidpool_servers", &[("state", s)]))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_swap_resizes_the_pool_without_dropping_clients() {
    let pg = support::shared();
    let dir = tempfile::tempdir().unwrap();
    configmap_version(dir.path(), "v1", "pool:\n  size: 5\n");
    let file = dir.path().join("droid-pool.yaml");
    let pooler = block_in_place(|| Pooler::start(pg, &["--config", file.to_str().unwrap()]));
    // Five clients in a transaction at once open five servers.
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(pooler.connect(USER, DB).await);
    }
    for c in &clients {
        c.batch_execute("begin; select 1").await.unwrap();
    }
    for c in &clients {
        c.batch_execute("commit").await.unwrap();
    }
    wait_metrics(&pooler, Duration::from_secs(5), "5 servers", |t| {
        servers_open(t) == 5.0
    })
    .await;
    assert_eq!(
        metric(&scrape(&pooler), "droidpool_config_generation", &[]),
        Some(1.0)
    );

    // The kubelet swaps ..data: the pool shrinks to 2, idle servers retire, nobody is dropped.
    configmap_version(dir.path(), "v2", "pool:\n  size: 2\n");
    wait_metrics(
        &pooler,
        Duration::from_secs(5),
        "pool size 2, generation 2",
        |t| pool_size(t) == Some(2.0) && metric(t, "droidpool_config_generation", &[]) == Some(2.0),
    )
    .await;
    wait_metrics(&pooler, Duration::from_secs(5), "at most 2 servers", |t| {
        servers_open(t) <= 2.0
    })
    .await;
    // Simple queries: without --track-prepared, a statement prepared on one server does not
    // exist on the next one.
    for (i, c) in clients.iter().enumerate() {
        let rows = c.simple_query(&format!("select {i}")).await.unwrap();
        let got = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        });
        assert_eq!(got, Some(i.to_string()), "client {i} still served");
    }

    // A broken file is refused and the running configuration stays.
    configmap_version(dir.path(), "v3", "pool:\n  size: [\n");
    wait_metrics(&pooler, Duration::from_secs(5), "a rejected reload", |t| {
        metric(
            t,
            "droidpool_config_reloads_total",
            &[("result", "rejected")],
        ) >= Some(1.0)
    })
    .await;
    let t = scrape(&pooler);
    assert_eq!(pool_size(&t), Some(2.0));
    assert_eq!(metric(&t, "droidpool_config_generation", &[]), Some(2.0));
    assert!(
        pooler.stderr().contains("config reload rejected"),
        "{}",
        pooler.stderr()
    );
    for c in &clients {
        c.simple_query("select 1").await.unwrap();
    }

    // Growing applies at once, through POST /reload too.
    configmap_version(dir.path(), "v4", "pool:\n  size: 7\n");
    let (code, _) = block_in_place(|| pooler.admin_post("/reload"));
    assert_eq!(code, 202);
    wait_metrics(&pooler, Duration::from_secs(5), "pool size 7", |t| {
        pool_size(t) == Some(7.0)
    })
    .await;
    assert!(!pooler.has_exited());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_mode() {
    let pg = support::shared();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, "pool:\n  size: 1\n  mode: session\n").unwrap();
    let pooler = block_in_place(|| Pooler::start(pg, &["--config", file.to_str().unwrap()]));
    // Write the new mode, then SIGHUP at once (before the file poller may notice).
    std::fs::write(&file, "pool:\n  size: 1\n  mode: transaction\n").unwrap();
    pooler.signal("HUP");
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let text = scrape(&pooler);
        if metric(&text, "droidpool_config_generation", &[]) == Some(2.0) {
            break;
        }
        assert!(Instant::now() < until, "no reload after SIGHUP:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Transaction mode now: two clients share the one server in turn.
    let a = pooler.connect(USER, DB).await;
    let b = pooler.connect(USER, DB).await;
    a.simple_query("select 1").await.unwrap();
    b.simple_query("select 1").await.unwrap();
    a.simple_query("select 1").await.unwrap();
}

pub(crate) fn psql(pooler: &Pooler, user: &str, db: &str, sql: &str) -> (bool, String, String) {
    psql_at(pooler.port(), user, db, sql)
}

/// [`psql`] against the pooler listening on `port` (for a thread of its own).
pub(crate) fn psql_at(port: u16, user: &str, db: &str, sql: &str) -> (bool, String, String) {
    let out = pg_tool("psql")
        .args([
            "-X",
            "-A",
            "-F",
            "|",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            user,
            "-d",
            db,
            "-c",
            sql,
        ])
        .output()
        .expect("run psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_console_through_psql() {
    let pg = support::shared();
    let yaml = format!(
        "auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\nserver:\n  password: console-test-s3cret\npool:\n  size: 3\n"
    );
    let pooler = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let app = pooler.connect(USER, DB).await;
    app.simple_query("select 1").await.unwrap();

    let (ok, out, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW POOLS"));
    assert!(ok, "{err}");
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with(
            "database|user|cl_active|cl_waiting|sv_active|sv_idle|sv_used|sv_login|maxwait|pool_mode"
        ),
        "{header}"
    );
    let row = lines.next().unwrap();
    assert!(row.starts_with(&format!("{DB}|{USER}|")), "{out}");
    assert!(row.contains("|transaction|3"), "{row}");

    let (ok, out, _) = block_in_place(|| psql(&pooler, USER, "pgbouncer", "show stats;"));
    assert!(ok);
    assert!(
        out.starts_with("database|total_xact_count|total_query_count"),
        "{out}"
    );
    let (ok, out, _) = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW CLIENTS"));
    assert!(ok);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("C|")).count(),
        1,
        "{out}"
    );
    let (ok, out, _) = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW SERVERS"));
    assert!(ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("S|") && l.ends_with("|idle|0|")),
        "{out}"
    );
    let (ok, out, _) = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW VERSION"));
    assert!(ok && out.contains("droid-pool "), "{out}");
    let (ok, out, _) = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW CONFIG"));
    assert!(ok);
    assert!(out.contains("pool.size|3"), "{out}");
    assert!(out.contains("server.password|<redacted>"), "{out}");
    assert!(
        !out.contains("console-test-s3cret"),
        "a secret leaked: {out}"
    );

    // PAUSE holds new transactions until RESUME; the session itself stays.
    let (ok, out, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "PAUSE"));
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "PAUSE");
    let (code, _) = block_in_place(|| pooler.admin_get("/readyz"));
    assert_eq!(code, 503, "paused means not ready");
    let held = tokio::spawn(async move {
        let started = Instant::now();
        app.simple_query("select 2").await.unwrap();
        started.elapsed()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "a transaction ran while paused");
    let (ok, _, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "RESUME"));
    assert!(ok, "{err}");
    let waited = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("released by RESUME")
        .unwrap();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    let (code, _) = block_in_place(|| pooler.admin_get("/readyz"));
    assert_eq!(code, 200);

    // Errors are SQL errors, and only console users get in.
    let (ok, _, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW NOTHING"));
    assert!(!ok && err.contains("ERROR"), "{err}");
    let (ok, _, err) = block_in_place(|| psql(&pooler, "postgres", "droidpool", "SHOW POOLS"));
    assert!(
        !ok && err.contains("may not use the admin console"),
        "{err}"
    );
    let (ok, out, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "RELOAD"));
    assert!(ok && out.trim() == "RELOAD", "{out} {err}");
}

/// PAUSE holds a new transaction without spending its `query_wait_timeout`: the wait for a
/// server starts at RESUME, and from then on the deadline applies as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_deadline_starts_after_pause() {
    let pg = support::shared();
    let yaml =
        format!("auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\npool:\n  size: 1\n  query_wait_timeout: 1s\nserver:\n  connect_timeout: 500ms\n");
    let pooler =
        block_in_place(|| Pooler::start_with_config(pg, &yaml, &["--mode", "transaction"]));
    let holder = pooler.connect(USER, DB).await;
    let waiter = pooler.connect(USER, DB).await;

    let (ok, out, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "PAUSE"));
    assert!(ok && out.trim() == "PAUSE", "{out} {err}");
    // Two transactions held by the PAUSE. After RESUME the one server serves one of them
    // while the other waits: that wait must get its own second, not what is left of one
    // that started before the PAUSE.
    let run = |c: tokio_postgres::Client, sql: &'static str| {
        tokio::spawn(async move {
            let r = c.simple_query(sql).await;
            (r.map(|m| m.len()).map_err(|e| crate::core::code(&e)), c)
        })
    };
    let held_a = run(holder, "select pg_sleep(0.4)");
    let held_b = run(waiter, "select 'after pause'");
    // Paused for 2.5 times the wait timeout.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !held_a.is_finished() && !held_b.is_finished(),
        "answered while paused"
    );
    let (ok, _, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "RESUME"));
    assert!(ok, "{err}");
    let mut clients = Vec::new();
    for held in [held_a, held_b] {
        let (r, c) = tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("served after RESUME")
            .unwrap();
        // Row, complete and ready: answered, not timed out.
        assert_eq!(
            r,
            Ok(3),
            "a query held by PAUSE was not served after RESUME"
        );
        clients.push(c);
    }
    let (waiter, holder) = (clients.pop().unwrap(), clients.pop().unwrap());

    // After RESUME the deadline counts: with the only server held, 57014 after about 1 s.
    holder.simple_query("BEGIN").await.expect("begin");
    let t0 = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), waiter.simple_query("select 1"))
        .await
        .expect("the wait ends")
        .expect_err("no server within 1 s");
    let took = t0.elapsed();
    assert_eq!(crate::core::code(&err), "57014");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "timed out after {took:?}, want about 1 s"
    );
    holder.simple_query("COMMIT").await.expect("commit");
}

/// With `pool.min_size` and a configured server user and database, startup completes only
/// after the first server login, and the warm minimum is kept open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_is_connected_before_startup() {
    let pg = support::shared();
    let yaml =
        format!("server:\n  user: {USER}\n  database: {DB}\npool:\n  min_size: 2\n  size: 4\n");
    let pooler = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let lines = pooler.lines();
    let server = lines.iter().position(|l| l == "[POOL] server 1 connected");
    let listening = lines
        .iter()
        .position(|l| l.starts_with("[POOL] listening on"));
    assert!(
        server.is_some() && server < listening,
        "the first login comes before startup completes: {lines:?}"
    );
    let (code, _) = block_in_place(|| pooler.admin_get("/startupz"));
    assert_eq!(code, 200);
    wait_metrics(&pooler, Duration::from_secs(5), "2 warm servers", |t| {
        metric(t, "droidpool_servers", &[("state", "idle")]) == Some(2.0)
    })
    .await;
}

/// A session-mode server whose client left is `used` while the reset query runs, then idle;
/// both in /metrics and in the console-compatible pgbouncer_exporter family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_is_used_while_its_reset_runs() {
    let pg = support::shared();
    let yaml =
        "pool:\n  mode: session\n  reset_query: SELECT pg_sleep(1.5)\n  max_waiting_clients: 37\n";
    let pooler = block_in_place(|| Pooler::start_with_config(pg, yaml, &[]));
    let client = pooler.connect(USER, DB).await;
    client.simple_query("SELECT 1").await.expect("query");
    let t = scrape(&pooler);
    assert_eq!(
        metric(&t, "droidpool_servers", &[("state", "active")]),
        Some(1.0)
    );
    assert_eq!(
        metric(&t, "droidpool_servers", &[("state", "used")]),
        Some(0.0)
    );
    drop(client);
    wait_metrics(&pooler, Duration::from_secs(1), "the server used", |t| {
        metric(t, "droidpool_servers", &[("state", "used")]) == Some(1.0)
            && metric(t, "droidpool_servers", &[("state", "active")]) == Some(0.0)
            && metric(
                t,
                "pgbouncer_pools_server_used_connections",
                &[("user", USER)],
            ) == Some(1.0)
    })
    .await;
    wait_metrics(
        &pooler,
        Duration::from_secs(5),
        "the server idle after its reset",
        |t| {
            metric(t, "droidpool_servers", &[("state", "used")]) == Some(0.0)
                && metric(t, "droidpool_servers", &[("state", "idle")]) == Some(1.0)
        },
    )
    .await;
}

/// The hash of the config file in force, as the operator computes it of what it wrote: in
/// /status and as `droidpool_config_info{hash}`, following a reload even when only a comment
/// changed (a new operator version's first line). /status also lists the settings this
/// pooler reads that 0.1.0 refuses, which the operator checks before writing one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loaded_config_files_hash_is_reported() {
    let pg = support::shared();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    let first = "# written by 0.1.0\npool:\n  size: 2\n";
    std::fs::write(&file, first).unwrap();
    let pooler = block_in_place(|| Pooler::start(pg, &["--config", file.to_str().unwrap()]));
    let hash_of = |text: &str| droid_pool::config::fnv1a_hex(text.as_bytes());
    let status = |p: &Pooler| -> serde_json::Value {
        let (code, body) = block_in_place(|| p.admin_get("/status"));
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    };
    assert_eq!(status(&pooler)["config_hash"], hash_of(first));
    assert_eq!(
        status(&pooler)["capabilities"],
        serde_json::json!([
            "pool.max_db_connections",
            "admin.token_file",
            "auth.mock_secret_file"
        ])
    );
    let text = scrape(&pooler);
    assert_eq!(
        metric(&text, "droidpool_config_info", &[("hash", &hash_of(first))]),
        Some(1.0),
        "{text}"
    );
    let second = "# written by 0.2.0\npool:\n  size: 2\n";
    std::fs::write(&file, second).unwrap();
    pooler.signal("HUP");
    let until = Instant::now() + Duration::from_secs(5);
    while status(&pooler)["config_hash"] != hash_of(second) {
        assert!(
            Instant::now() < until,
            "hash not updated: {}",
            status(&pooler)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = scrape(&pooler);
    assert_eq!(
        metric(
            &text,
            "droidpool_config_info",
            &[("hash", &hash_of(second))]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "droidpool_config_info", &[("hash", &hash_of(first))]),
        None,
        "{text}"
    );
}

/// What the operator writes (and so what the chart's PoolConfigs get) prints no line per
/// transaction: 1,000 transactions, none of them in the log. The CLI's defaults still print
/// the seed's lines (two per transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_configs_print_no_per_transaction_lines() {
    let pg = support::shared();
    let dir = tempfile::tempdir().unwrap();
    let pc = dir.path().join("pc.yaml");
    std::fs::write(
        &pc,
        "apiVersion: droidpool.io/v1alpha1\nkind: PoolConfig\nmetadata: {name: t, namespace: x}\n\
         spec:\n  poolSize: 2\n  server: {host: 127.0.0.1}\n  target: {sidecar: {configMapName: t}}\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_droid-pool-operator"))
        .arg("render")
        .arg(&pc)
        .output()
        .expect("droid-pool-operator render");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // The render prints several objects (the admin Secret, the ConfigMap...): the ConfigMap.
    let cm: serde_yaml::Value = text
        .trim_start_matches("---\n")
        .split("\n---\n")
        .map(|doc| serde_yaml::from_str::<serde_yaml::Value>(doc).unwrap())
        .find(|doc| doc["kind"].as_str() == Some("ConfigMap"))
        .expect("a ConfigMap in the render");
    let rendered = cm["data"]["droid-pool.yaml"]
        .as_str()
        .expect("the rendered config")
        .to_owned();
    assert!(rendered.contains("events: lifecycle"), "{rendered}");

    let run = |p: Pooler| async move {
        let c = p.connect(USER, DB).await;
        for _ in 0..1000 {
            c.simple_query("select 1").await.expect("query");
        }
        drop(c);
        assert!(
            block_in_place(|| p.wait_for(
                |l| l.iter().any(|l| l.contains("disconnected")),
                Duration::from_secs(5)
            )),
            "{:?}",
            p.lines()
        );
        p.lines()
    };
    let per_txn = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.contains(" uses server ") || l.contains(" released server "))
            .count()
    };
    let rendered_lines = run(block_in_place(|| {
        Pooler::start_with_config(pg, &rendered, &[])
    }))
    .await;
    assert_eq!(per_txn(&rendered_lines), 0, "{rendered_lines:?}");
    assert!(
        rendered_lines.iter().any(|l| l.contains(" connected")),
        "{rendered_lines:?}"
    );
    let cli_lines = run(block_in_place(|| {
        Pooler::start(pg, &["--pool-size", "2", "--mode", "transaction"])
    }))
    .await;
    assert!(per_txn(&cli_lines) >= 2000, "{}", per_txn(&cli_lines));
}

/// PgBouncer's `SHOW DATABASES`, `USERS`, `LISTS`, `STATE` and `TOTALS`, with the column
/// (and, for LISTS and TOTALS, row) names PgBouncer 1.18 prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_shows_pgbouncers_columns() {
    let pg = support::shared();
    let yaml = format!("auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\npool:\n  size: 3\n");
    let pooler = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let app = pooler.connect(USER, DB).await;
    app.simple_query("select 1").await.unwrap();
    let show = |what: &str| {
        let (ok, out, err) =
            block_in_place(|| psql(&pooler, USER, "droidpool", &format!("SHOW {what}")));
        assert!(ok, "{err}");
        out
    };
    let dbs = show("DATABASES");
    let mut lines = dbs.lines();
    assert_eq!(
        lines.next().unwrap(),
        "name|host|port|database|force_user|pool_size|min_pool_size|reserve_pool|pool_mode|\
         max_connections|current_connections|paused|disabled"
    );
    let row: Vec<&str> = lines.next().unwrap().split('|').collect();
    assert_eq!((row[0], row[5], row[8]), (DB, "3", "transaction"), "{dbs}");
    assert_eq!((row[11], row[12]), ("0", "0"), "{dbs}");
    assert!(show("USERS").starts_with(&format!(
        "name|pool_mode|pool_size|reserve_pool_size|max_user_connections|current_connections|\
         max_user_client_connections|current_client_connections\n{USER}|transaction|3|0|0|"
    )));
    let lists = show("LISTS");
    let names: Vec<&str> = lists
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once('|').map(|(k, _)| k))
        .collect();
    assert_eq!(
        names,
        [
            "databases",
            "users",
            "pools",
            "free_clients",
            "used_clients",
            "login_clients",
            "free_servers",
            "used_servers",
            "dns_names",
            "dns_zones",
            "dns_queries",
            "dns_pending"
        ]
    );
    let totals = show("TOTALS");
    let rows: BTreeMap<&str, u64> = totals
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once('|'))
        .map(|(k, v)| (k, v.trim().parse().unwrap()))
        .collect();
    for k in [
        "total_xact_count",
        "total_query_count",
        "total_client_bytes",
        "total_server_bytes",
        "total_xact_time",
        "total_query_time",
        "total_wait_time",
        "avg_xact_count",
        "avg_query_count",
        "avg_client_bytes",
        "avg_server_bytes",
        "avg_xact_time",
        "avg_query_time",
        "avg_wait_time",
    ] {
        assert!(rows.contains_key(k), "{k} missing: {totals}");
    }
    assert!(rows["total_query_count"] >= 1, "{totals}");
    assert!(show("STATE").contains("paused|no"));
}

/// `PAUSE db` holds only that database's new transactions; `DISABLE db` refuses its new
/// clients with PostgreSQL's 55000; both through the console and `POST /console`, which
/// needs the same authorisation as `/drain`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pauses_and_disables_one_database() {
    let pg = support::shared();
    crate::core::create_db(pg, "console_other");
    let yaml =
        format!("auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\npool:\n  size: 2\n  mode: transaction\n");
    let pooler = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    let a = pooler.connect(USER, DB).await;
    let b = pooler.connect(USER, "console_other").await;
    let (ok, out, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "PAUSE console_other"));
    assert!(ok && out.trim() == "PAUSE", "{out} {err}");
    // The other database is served; the paused one waits.
    assert_eq!(a.simple_query("select 1").await.unwrap().len(), 3);
    let held = tokio::spawn(async move { (b.simple_query("select 2").await.map(|r| r.len()), b) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!held.is_finished(), "a paused database was served");
    let dbs = block_in_place(|| psql(&pooler, USER, "droidpool", "SHOW DATABASES")).1;
    assert!(
        dbs.lines()
            .any(|l| l.starts_with("console_other|") && l.ends_with("|1|0")),
        "{dbs}"
    );
    // Over HTTP, as /drain: RESUME that database.
    let (code, body) =
        block_in_place(|| http_post_body(pooler.admin_port(), "/console", "RESUME console_other"));
    assert_eq!((code, body.trim()), (200, "RESUME"));
    let (r, b) = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.unwrap(), 3);

    // DISABLE: connected clients stay, new ones are refused with 55000.
    let (ok, _, err) = block_in_place(|| psql(&pooler, USER, "droidpool", "DISABLE console_other"));
    assert!(ok, "{err}");
    let refused = tokio_postgres::connect(
        &pooler.conn_string(USER, "console_other"),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(crate::core::code(&refused), "55000", "{refused}");
    assert_eq!(b.simple_query("select 3").await.unwrap().len(), 3);
    let (code, _) =
        block_in_place(|| http_post_body(pooler.admin_port(), "/console", "ENABLE console_other"));
    assert_eq!(code, 200);
    let again = pooler.connect(USER, "console_other").await;
    assert_eq!(again.simple_query("select 4").await.unwrap().len(), 3);
    let (code, body) = block_in_place(|| http_post_body(pooler.admin_port(), "/console", "FROB"));
    assert_eq!(code, 400, "{body}");
}

pub(crate) fn http_post_body(port: u16, path: &str, body: &str) -> (u16, String) {
    crate::support::pooler::http_request_body(port, "POST", path, body)
}
