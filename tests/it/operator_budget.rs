//! The operator's budget as a pooler holds it: the file the operator renders for
//! `maxServerConnections` once every pooler reads `pool.max_db_connections` keeps two users'
//! pools of one database within the pooler's share together, whether the server login is
//! each client's user or one `server.user` (pools are per client user either way). The
//! limit itself, across pools, is `limits::database_limit_spans_pools`.

use std::time::Duration;

use droid_pool::operator::crd::PoolConfigSpec;
use droid_pool::operator::render::{render_with, Facts};

use crate::core::create_db;
use crate::limits::{backends, in_transaction, pool_status, query_later, trust_role, until};
use crate::support::{self, Pooler};

/// A sidecar PoolConfig with a budget of 4 over two poolers: a share of 2 each.
fn rendered(server: &str) -> String {
    let yaml = format!(
        "maxServerConnections: 4\nserver: {server}\n\
         target: {{sidecar: {{configMapName: c, podSelector: {{matchLabels: {{app: w}}}}}}}}\n"
    );
    let value: serde_json::Value = serde_yaml::from_str(&yaml).expect("spec YAML");
    let spec: PoolConfigSpec = serde_json::from_value(value).expect("spec");
    let facts = Facts {
        db_limit_readable: true,
        ..Facts::default()
    };
    let r = render_with(&spec, 2, facts).expect("render");
    assert_eq!(r.sizing.pool_size, 2);
    r.yaml
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_share_spans_users_of_a_database() {
    let pg = support::shared();
    for r in ["lim_s1", "lim_s2"] {
        trust_role(r);
    }
    for (db, server) in [
        ("lim_share_own", "{host: 127.0.0.1}"),
        ("lim_share_one", "{host: 127.0.0.1, user: lim_s1}"),
    ] {
        create_db(pg, db);
        let pooler = Pooler::start_with_config(pg, &rendered(server), &[]);
        // lim_s2's pool logs in first; lim_s1's two transactions then take the share, the
        // second by closing lim_s2's idle server.
        let other = pooler.connect("lim_s2", db).await;
        let _a = in_transaction(&pooler, "lim_s1", db).await;
        let b = in_transaction(&pooler, "lim_s1", db).await;
        let other = query_later(other);
        until(
            &format!("lim_s2 waiting ({server})"),
            Duration::from_secs(5),
            || pool_status(&pooler, db, "lim_s2")["clients_waiting"] == 1,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(backends(db), 2, "{server}: more than the share");
        b.batch_execute("commit").await.expect("commit");
        let (r, _, _) = other.await.expect("task");
        r.expect("served once lim_s1 released a server");
        assert!(backends(db) <= 2);
    }
}
