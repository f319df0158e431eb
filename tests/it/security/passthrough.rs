//! SCRAM passthrough: a pooler that holds only SCRAM verifiers (copied from `pg_authid`, or
//! looked up with auth_query) and no server password logs each role in to PostgreSQL as
//! itself, with the ClientKey its own proof gave. A wrong password opens nothing on the
//! server; a user whose login gave nothing usable gets a clear error, never someone else's
//! session. PostgreSQL asks these roles for SCRAM (`droid_scram` in the harness's pg_hba).

use super::{refused, status, userlist_line, write};
use crate::core::code;
use crate::support::pg::SCRAM_GROUP;
use crate::support::{self, Pooler, DB};

/// Creates (or resets) a role that must prove `password` with SCRAM; returns the verifier
/// PostgreSQL stored for it.
fn scram_role(name: &str, password: &str) -> String {
    let pg = support::shared();
    pg.psql_db(
        "postgres",
        &format!(
            "DO $$ BEGIN \
               IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN \
                 CREATE ROLE {name} LOGIN IN ROLE {SCRAM_GROUP}; END IF; END $$; \
             SET password_encryption = 'scram-sha-256'; \
             ALTER ROLE {name} PASSWORD '{password}'"
        ),
    );
    pg.psql_db(
        "postgres",
        &format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{name}'"),
    )
}

/// Backends PostgreSQL has for these roles now.
fn backends_of(roles: &[&str]) -> i64 {
    let list = roles
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(",");
    support::shared()
        .psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename IN ({list})"
        ))
        .parse()
        .expect("a count")
}

/// Each role logs in with its own password and is itself on the server; a wrong password
/// (and another role's password) gets 28P01 with nothing opened on the server.
async fn each_role_is_itself(pooler: &Pooler, roles: [(&str, &str); 2]) {
    let names = [roles[0].0, roles[1].0];
    let err = refused(
        &pooler.conn_string_pw(roles[0].0, "wrong-password", DB),
        "a wrong password must fail",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    let err = refused(
        &pooler.conn_string_pw(roles[0].0, roles[1].1, DB),
        "another role's password must fail",
    )
    .await;
    assert_eq!(code(&err), "28P01", "{err}");
    assert_eq!(
        backends_of(&names),
        0,
        "no server login before a right proof"
    );
    assert_eq!(status(pooler)["pools"], serde_json::json!([]));
    let mut held = Vec::new();
    for (role, password) in roles {
        let client = support::connect(&pooler.conn_string_pw(role, password, DB)).await;
        let row = client
            .query_one("select current_user::text, session_user::text", &[])
            .await
            .expect("a query as the role itself");
        assert_eq!(row.get::<_, String>(0), role);
        assert_eq!(row.get::<_, String>(1), role);
        held.push(client);
    }
    // The server sessions are the roles' own.
    assert!(backends_of(&names) >= 2);
}

/// The acceptance case with the users file as the only credential source.
#[tokio::test]
async fn roles_log_in_as_themselves_from_userlist_verifiers() {
    let roles = [("pt_alice", "alice-pw-1"), ("pt_bob", "bob-pw-2")];
    let mut list = String::new();
    for (role, password) in roles {
        list.push_str(&userlist_line(role, &scram_role(role, password)));
    }
    let dir = tempfile::tempdir().unwrap();
    let users = write(dir.path(), "userlist.txt", &list);
    assert!(!list.contains("alice-pw-1") && list.contains("SCRAM-SHA-256$"));
    let yaml = format!("auth:\n  method: scram-sha-256\n  users_file: {users}\n");
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    each_role_is_itself(&pooler, roles).await;
    // Another database: a new pool of the same user uses what the user proved.
    let client = support::connect(&pooler.conn_string_pw("pt_bob", "bob-pw-2", "postgres")).await;
    let row = client
        .query_one("select current_user::text", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "pt_bob");
}

/// The acceptance case with auth_query as the only credential source.
#[tokio::test]
async fn roles_log_in_as_themselves_from_auth_query() {
    let roles = [("pq_alice", "alice-pw-3"), ("pq_bob", "bob-pw-4")];
    for (role, password) in roles {
        scram_role(role, password);
    }
    support::shared().psql_db(
        "postgres",
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pt_lookup') THEN \
           CREATE ROLE pt_lookup LOGIN SUPERUSER; END IF; END $$",
    );
    let yaml = "auth:\n  method: scram-sha-256\n  auth_user: pt_lookup\n";
    let pooler = Pooler::start_with_config(support::shared(), yaml, &[]);
    each_role_is_itself(&pooler, roles).await;
}

/// A user whose login gave nothing a server login can use (md5 against an md5 hash) gets a
/// FATAL naming what is missing, at once; never a session as another role.
#[tokio::test]
async fn a_user_without_a_usable_credential_is_told_what_is_missing() {
    scram_role("pt_carol", "carol-pw-5");
    let md5 = droid_pool::auth::md5_stored("pt_carol", "carol-pw-5");
    let dir = tempfile::tempdir().unwrap();
    let users = write(dir.path(), "userlist.txt", &userlist_line("pt_carol", &md5));
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\n  user_methods:\n    \
         pt_carol: md5\n"
    );
    let pooler = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let started = std::time::Instant::now();
    let err = refused(
        &pooler.conn_string_pw("pt_carol", "carol-pw-5", DB),
        "md5 proves nothing a SCRAM server login can use",
    )
    .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "no hang"
    );
    assert_eq!(code(&err), "28000", "{err}");
    let text = format!("{err:?}");
    assert!(
        text.contains("no server credential for user \\\"pt_carol\\\"")
            || text.contains("no server credential for user \"pt_carol\""),
        "{text}"
    );
    assert_eq!(backends_of(&["pt_carol"]), 0);
}
