//! Authentication that reveals nothing: whether a user exists cannot be read off the method
//! the pooler asks for, nor off the SCRAM salt or iteration count. An unknown user's salt is
//! derived from its name and a secret that follows the configuration, so it is the same at
//! every attempt, on every replica and after a restart, as a real user's is.

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::backend::{self, AuthRequest};
use droid_pool::protocol::frame::{self, begin, finish};
use droid_pool::protocol::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{userlist_line, write};
use crate::support::{Pooler, DB};

async fn next_frame(s: &mut TcpStream, buf: &mut BytesMut) -> droid_pool::protocol::Frame {
    loop {
        if let Some(f) = frame::cut(buf, 1 << 20).expect("frame") {
            return f;
        }
        assert!(s.read_buf(buf).await.expect("read") > 0, "closed");
    }
}

/// What the pooler answers a startup for `user`: the authentication request's code, and for
/// SCRAM the salt and iteration count of its server-first message.
async fn first_challenge(port: u16, user: &str) -> (i32, Option<String>) {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut out = BytesMut::new();
    frontend::startup_message(&mut out, &[("user", user), ("database", DB)]);
    s.write_all(&out).await.unwrap();
    let mut buf = BytesMut::new();
    let f = next_frame(&mut s, &mut buf).await;
    assert_eq!(f.tag, backend::AUTHENTICATION_TAG);
    let req = backend::parse_auth(f.body()).expect("auth request");
    let code = i32::from_be_bytes([f.body()[0], f.body()[1], f.body()[2], f.body()[3]]);
    if !matches!(req, AuthRequest::Sasl { .. }) {
        return (code, None);
    }
    let client_first = b"n,,n=,r=fyko+d2lbbFgONRv9qkxdawL";
    let mut m = BytesMut::new();
    let at = begin(&mut m, frontend::PASSWORD_TAG);
    m.put_slice(b"SCRAM-SHA-256\0");
    m.put_i32(client_first.len() as i32);
    m.put_slice(client_first);
    finish(&mut m, at);
    s.write_all(&m).await.unwrap();
    let f = next_frame(&mut s, &mut buf).await;
    let AuthRequest::SaslContinue { data } = backend::parse_auth(f.body()).expect("continue")
    else {
        panic!("expected SASLContinue");
    };
    let text = String::from_utf8_lossy(data);
    let salt_iter: Vec<&str> = text
        .split(',')
        .filter(|f| f.starts_with("s=") || f.starts_with("i="))
        .collect();
    (code, Some(salt_iter.join(",")))
}

/// A users file with `scram_user` (a SCRAM verifier) and `md5_user` (an md5 hash).
fn mixed_users(dir: &std::path::Path) -> String {
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let md5 = droid_pool::auth::md5_stored("md5_user", "md5_pass");
    let lines = [
        userlist_line("scram_user", &verifier),
        userlist_line("md5_user", &md5),
    ];
    write(dir, "userlist.txt", &lines.concat())
}

#[tokio::test]
async fn unknown_users_look_like_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let users = mixed_users(dir.path());
    // SCRAM: three attempts for an unknown name see one salt, as a real user's does.
    let yaml = format!("auth:\n  method: scram-sha-256\n  users_file: {users}\n");
    let pooler = Pooler::start_with_config(crate::support::shared(), &yaml, &[]);
    let known = first_challenge(pooler.port(), "scram_user").await;
    let mut unknown = Vec::new();
    for _ in 0..3 {
        unknown.push(first_challenge(pooler.port(), "nobody_here").await);
    }
    assert!(unknown.windows(2).all(|w| w[0] == w[1]), "{unknown:?}");
    assert_eq!(known, first_challenge(pooler.port(), "scram_user").await);
    assert_ne!(unknown[0], known, "another name, another salt");
    assert_eq!(unknown[0].0, known.0, "the same method");
    let other = first_challenge(pooler.port(), "nobody_else").await;
    assert_ne!(other, unknown[0], "each name its own salt");
}

/// md5 mode: an unknown name gets the challenge known users get. With every user stored as
/// plaintext (a passwords directory) that is md5 for all; with SCRAM-only and md5-capable
/// users mixed, unknown names are split between SCRAM and md5 in about the same proportion,
/// each name always the same way.
#[tokio::test]
async fn md5_mode_challenges_unknown_names_as_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let pwdir = dir.path().join("pw");
    std::fs::create_dir(&pwdir).unwrap();
    std::fs::write(pwdir.join("plain_user"), "plain_pass\n").unwrap();
    let yaml = format!(
        "auth:\n  method: md5\n  passwords_dir: {}\n",
        pwdir.display()
    );
    let pooler = Pooler::start_with_config(crate::support::shared(), &yaml, &[]);
    assert_eq!(first_challenge(pooler.port(), "plain_user").await.0, 5);
    for ghost in ["nobody_here", "admin", "x"] {
        assert_eq!(
            first_challenge(pooler.port(), ghost).await.0,
            5,
            "md5 for the unknown {ghost}, as for the plaintext-stored user"
        );
    }
    drop(pooler);

    let users = mixed_users(dir.path());
    let yaml = format!("auth:\n  method: md5\n  users_file: {users}\n");
    let pooler = Pooler::start_with_config(crate::support::shared(), &yaml, &[]);
    assert_eq!(first_challenge(pooler.port(), "scram_user").await.0, 10);
    assert_eq!(first_challenge(pooler.port(), "md5_user").await.0, 5);
    let mut sasl = 0;
    for i in 0..40 {
        let name = format!("ghost_{i}");
        let code = first_challenge(pooler.port(), &name).await.0;
        assert!(code == 5 || code == 10, "{code}");
        assert_eq!(
            first_challenge(pooler.port(), &name).await.0,
            code,
            "{name} is challenged the same way every time"
        );
        sasl += usize::from(code == 10);
    }
    assert!(
        (8..=32).contains(&sasl),
        "{sasl} of 40 unknown names got SCRAM; half the known users do"
    );
}

/// A SCRAM verifier text with `iterations`.
fn verifier_text(password: &str, iterations: u32) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let v = droid_pool::auth::salts::verifier_with_salt(
        password,
        b"0123456789abcdef".to_vec(),
        iterations,
    );
    format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        b64.encode(&v.salt),
        b64.encode(v.stored_key),
        b64.encode(v.server_key)
    )
}

/// Two poolers started from one configuration (two replicas behind a Service), and one of
/// them again after a restart, give a made-up name the same salt; and its iteration count is
/// the real users' (here not PostgreSQL's default). A plaintext-stored user's salt is the
/// same on both too.
#[tokio::test]
async fn replicas_and_restarts_give_a_made_up_name_one_salt() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        userlist_line("scram_user", &verifier_text("scram_pass", 8192)),
        userlist_line("plain_user", "plain_pass"),
    ]
    .concat();
    let users = write(dir.path(), "userlist.txt", &lines);
    let yaml = format!("auth:\n  method: scram-sha-256\n  users_file: {users}\n");
    let shared = crate::support::shared();
    let a = Pooler::start_with_config(shared, &yaml, &[]);
    let b = Pooler::start_with_config(shared, &yaml, &[]);
    let known = first_challenge(a.port(), "scram_user").await;
    assert!(known.1.as_deref().unwrap().contains("i=8192"), "{known:?}");
    let ghost_a = first_challenge(a.port(), "made_up_name").await;
    let ghost_b = first_challenge(b.port(), "made_up_name").await;
    assert_eq!(ghost_a, ghost_b, "one salt on both replicas");
    assert!(
        ghost_a.1.as_deref().unwrap().ends_with("i=8192"),
        "the real users' iteration count: {ghost_a:?}"
    );
    let plain_a = first_challenge(a.port(), "plain_user").await;
    assert_eq!(plain_a, first_challenge(b.port(), "plain_user").await);
    assert!(
        plain_a.1.as_deref().unwrap().ends_with("i=8192"),
        "{plain_a:?}"
    );
    drop(a);
    let again = Pooler::start_with_config(shared, &yaml, &[]);
    assert_eq!(
        first_challenge(again.port(), "made_up_name").await,
        ghost_a,
        "the same salt after a restart"
    );
    assert_eq!(first_challenge(again.port(), "plain_user").await, plain_a);
    // A configured mock secret gives other salts (the operator generates one per PoolConfig).
    let secret = write(dir.path(), "mock", &"s".repeat(40));
    let yaml = format!("{yaml}  mock_secret_file: {secret}\n");
    let c = Pooler::start_with_config(shared, &yaml, &[]);
    let d = Pooler::start_with_config(shared, &yaml, &[]);
    let ghost_c = first_challenge(c.port(), "made_up_name").await;
    assert_ne!(ghost_c, ghost_a);
    assert_eq!(ghost_c, first_challenge(d.port(), "made_up_name").await);
}
