//! Server logins accept only what proves the server: a SCRAM exchange must end with the
//! server's signature checked before AuthenticationOk is believed. PostgreSQL always sends a
//! valid one, so the hostile server here is a scripted peer on a socket (a stand-in for an
//! impostor on the pod network; no PostgreSQL can be made to misbehave this way).

use std::time::Duration;

use base64::Engine;
use bytes::{BufMut, BytesMut};
use droid_pool::protocol::backend::{self, AuthRequest};
use droid_pool::protocol::frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::core::code;
use crate::support::{Pooler, DB};

/// Reads one tagged message (or, with `startup`, the untagged startup packet).
async fn read_msg(s: &mut TcpStream, buf: &mut BytesMut, startup: bool) -> Option<Vec<u8>> {
    loop {
        if startup && buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() >= len {
                return Some(buf.split_to(len).to_vec());
            }
        } else if let Ok(Some(f)) = frame::cut(buf, 1 << 20) {
            return Some(f.bytes.to_vec());
        }
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

/// An impostor: asks for SCRAM, plays the first half honestly, then answers the client's
/// proof with AuthenticationOk and no SASLFinal, and offers a ready session. Counts the
/// sessions it got as far as ReadyForQuery.
async fn impostor(listener: TcpListener) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut buf = BytesMut::new();
            read_msg(&mut s, &mut buf, true).await?;
            let mut out = BytesMut::new();
            backend::auth_request(
                &mut out,
                &AuthRequest::Sasl {
                    mechanisms: vec!["SCRAM-SHA-256"],
                },
            );
            s.write_all(&out).await.ok()?;
            let first = read_msg(&mut s, &mut buf, false).await?;
            let text = String::from_utf8_lossy(&first);
            let nonce = text.split("r=").nth(1)?.split(',').next()?.to_owned();
            let salt = base64::engine::general_purpose::STANDARD.encode(b"impostor-salt");
            let server_first = format!("r={nonce}IMPOSTOR,s={salt},i=4096");
            out.clear();
            backend::auth_request(
                &mut out,
                &AuthRequest::SaslContinue {
                    data: server_first.as_bytes(),
                },
            );
            s.write_all(&out).await.ok()?;
            read_msg(&mut s, &mut buf, false).await?;
            out.clear();
            backend::auth_ok(&mut out);
            backend::parameter_status(&mut out, "server_version", "16.0");
            backend::backend_key_data(&mut out, 1, 2);
            backend::ready_for_query(&mut out, backend::TX_IDLE);
            s.write_all(&out).await.ok()?;
            // Answer one query, as if the session were real.
            read_msg(&mut s, &mut buf, false).await?;
            out.clear();
            out.put_u8(b'I');
            out.put_u32(4);
            backend::ready_for_query(&mut out, backend::TX_IDLE);
            s.write_all(&out).await.ok()?;
            tokio::time::sleep(Duration::from_secs(5)).await;
            Some(())
        });
    }
}

#[tokio::test]
async fn a_server_that_skips_its_scram_signature_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(impostor(listener));
    let yaml = format!("server:\n  password: any\n  user: droid\n  database: {DB}\n");
    let pooler = Pooler::start_for_server(port, &yaml);
    let err = match pooler.try_connect("droid", DB).await {
        Ok(c) => match c.simple_query("select 1").await {
            Ok(_) => panic!("a session on a server that never proved itself"),
            Err(e) => e,
        },
        Err(e) => e,
    };
    assert_eq!(code(&err), "28000", "{err}");
    let message = err.as_db_error().map(|e| e.message().to_owned());
    assert!(
        message.as_deref().is_some_and(|m| m.contains("signature")),
        "{err:?}"
    );
}
