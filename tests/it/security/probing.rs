//! Authentication that reveals nothing: whether a user exists cannot be read off the method
//! the pooler asks for, nor off the SCRAM salt (an unknown user's is derived from its name and
//! a per-process secret, so it is the same at every attempt, as a real user's is).

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

#[tokio::test]
async fn unknown_users_look_like_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let verifier = postgres_protocol::password::scram_sha_256(b"scram_pass");
    let lines = [
        userlist_line("scram_user", &verifier),
        userlist_line(
            "md5_user",
            &droid_pool::auth::md5_stored("md5_user", "md5_pass"),
        ),
    ]
    .concat();
    let users = write(dir.path(), "userlist.txt", &lines);
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
    drop(pooler);

    // md5 mode: an unknown user is asked as a user stored with a SCRAM verifier is (SCRAM,
    // PostgreSQL's default password_encryption), not for md5.
    let yaml = format!("auth:\n  method: md5\n  users_file: {users}\n");
    let pooler = Pooler::start_with_config(crate::support::shared(), &yaml, &[]);
    let scram_known = first_challenge(pooler.port(), "scram_user").await;
    let ghost = first_challenge(pooler.port(), "nobody_here").await;
    assert_eq!(scram_known.0, 10, "SASL for the SCRAM-stored user");
    assert_eq!(ghost.0, scram_known.0, "and for the unknown one");
    let md5_known = first_challenge(pooler.port(), "md5_user").await;
    assert_eq!(md5_known.0, 5, "md5 for the md5-stored user");
}
