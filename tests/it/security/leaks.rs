//! Passwords, verifiers and the auth user's password never appear in the pooler's output,
//! `/metrics`, `/status` or the console's SHOW CONFIG, after logins that succeed and fail,
//! auth_query lookups and a reload.

use super::{userlist_line, write};
use crate::support::{self, Pooler, DB};

#[tokio::test]
async fn no_secret_in_output_metrics_or_status() {
    let dir = tempfile::tempdir().unwrap();
    let verifier = postgres_protocol::password::scram_sha_256(b"verifier_pw");
    let users = write(
        dir.path(),
        "userlist.txt",
        &format!(
            "{}{}",
            userlist_line("scram_user", "scram_pass"),
            userlist_line("vuser", &verifier)
        ),
    );
    let pwdir = dir.path().join("pw");
    std::fs::create_dir(&pwdir).unwrap();
    std::fs::write(pwdir.join("md5_user"), "md5_pass\n").unwrap();
    let yaml = format!(
        "auth:\n  method: scram-sha-256\n  users_file: {users}\n  passwords_dir: {}\n  \
         auth_user: postgres\n  auth_password: auth_secret_pw\n\
         server:\n  password: scram_pass\nadmin:\n  console_users: [scram_user]\n",
        pwdir.display()
    );
    let p = Pooler::start_with_config(support::shared(), &yaml, &[]);
    let ok = support::connect(&p.conn_string_pw("scram_user", "scram_pass", DB)).await;
    ok.simple_query("select 1").await.unwrap();
    for (user, pw) in [
        ("scram_user", "wrong_secret_pw"),
        ("md5_user", "md5_pass"),
        ("vuser", "verifier_pw"),
        ("ghost", "ghost_secret_pw"),
    ] {
        // Some of these log in to the pooler and then fail at PostgreSQL: both paths count.
        if let Ok(c) = support::try_connect(&p.conn_string_pw(user, pw, DB)).await {
            let _ = c.simple_query("select 1").await;
        }
    }
    let console =
        support::connect(&p.conn_string_pw("scram_user", "scram_pass", "droidpool")).await;
    let mut shown = String::new();
    for m in console.simple_query("SHOW CONFIG").await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            for i in 0..r.len() {
                shown.push_str(r.get(i).unwrap_or(""));
                shown.push('\n');
            }
        }
    }
    assert!(
        shown.contains("auth.auth_password"),
        "SHOW CONFIG lists settings: {shown}"
    );
    let (code, body) = p.admin_post("/reload");
    assert!(code / 100 == 2, "{code} {body}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let everything = [
        p.all_lines().join("\n"),
        p.stderr(),
        p.admin_get("/metrics").1,
        p.admin_get("/status").1,
        shown,
    ];
    let key_part = verifier
        .rsplit('$')
        .next()
        .unwrap()
        .split(':')
        .next()
        .unwrap();
    for secret in [
        "scram_pass",
        "wrong_secret_pw",
        "md5_pass",
        "verifier_pw",
        "auth_secret_pw",
        "ghost_secret_pw",
        key_part,
    ] {
        for (i, text) in everything.iter().enumerate() {
            assert!(
                !text.contains(secret),
                "{secret:?} leaked in source {i}:\n{text}"
            );
        }
    }
}
