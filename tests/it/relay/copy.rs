//! COPY in every mode: FROM STDIN and TO STDOUT, through psql and through raw protocol
//! messages (simple and extended query), with errors in the middle of the data and CopyFail.
//! What the client sees is compared with what PostgreSQL sends directly.

use std::time::Duration;

use crate::core::within;
use crate::support::raw::{self, Raw};
use crate::support::tools::{pg_tool, run_tool, text};
use crate::support::{self, Pooler, DB};

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::frame::{begin, finish};
use droid_pool::protocol::frontend;

const USER: &str = "droid";
const MODES: [&str; 3] = ["session", "transaction", "statement"];

fn copy_data(row: &str) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::COPY_DATA_TAG);
    b.put_slice(row.as_bytes());
    finish(&mut b, at);
    b
}

fn copy_done() -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::COPY_DONE_TAG);
    finish(&mut b, at);
    b
}

fn copy_fail(why: &str) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::COPY_FAIL_TAG);
    b.put_slice(why.as_bytes());
    b.put_u8(0);
    finish(&mut b, at);
    b
}

/// What the client sees of one exchange: tags, with SQLSTATEs after errors and the first
/// column of data rows.
fn describe(frames: &[droid_pool::protocol::Frame]) -> String {
    let mut out = String::new();
    for f in frames {
        out.push(f.tag as char);
        match f.tag {
            b'E' => out += &format!("({})", raw::sqlstate(f)),
            b'D' => out += &format!("({})", raw::first_col(f).unwrap_or_default()),
            b'Z' => out += &format!("({})", f.body()[0] as char),
            _ => {}
        }
    }
    out
}

/// Each case: messages written at once, then the replies read up to the ReadyForQuery count
/// given. The table is emptied first.
fn cases(table: &str) -> Vec<(&'static str, Vec<u8>, usize)> {
    let copy_in = format!("copy {table} from stdin");
    vec![
        (
            "simple COPY FROM STDIN",
            raw::batch(&[
                raw::query(&copy_in),
                copy_data("1\n2\n"),
                copy_data("3\n"),
                copy_done(),
            ]),
            1,
        ),
        (
            "simple COPY with bad data",
            raw::batch(&[
                raw::query(&copy_in),
                copy_data("1\nnot a number\n"),
                copy_data("3\n"),
                copy_done(),
            ]),
            1,
        ),
        (
            "simple COPY ended by CopyFail",
            raw::batch(&[raw::query(&copy_in), copy_data("1\n"), copy_fail("no more")]),
            1,
        ),
        (
            "extended COPY as libpq sends it (Sync before the data, and after CopyDone)",
            raw::batch(&[
                raw::parse("", &copy_in),
                raw::bind("", "", &[]),
                raw::execute(""),
                raw::sync(),
                copy_data("4\n5\n"),
                copy_done(),
                raw::sync(),
            ]),
            1,
        ),
        (
            "extended COPY with bad data",
            raw::batch(&[
                raw::parse("", &copy_in),
                raw::bind("", "", &[]),
                raw::execute(""),
                raw::sync(),
                copy_data("x\n"),
                copy_done(),
                raw::sync(),
            ]),
            1,
        ),
        (
            "extended COPY ended by CopyFail",
            raw::batch(&[
                raw::parse("", &copy_in),
                raw::bind("", "", &[]),
                raw::execute(""),
                raw::sync(),
                copy_data("6\n"),
                copy_fail("stop"),
                raw::sync(),
            ]),
            1,
        ),
        (
            "COPY TO STDOUT",
            raw::batch(&[raw::query(&format!(
                "copy (select * from {table} order by 1) to stdout"
            ))]),
            1,
        ),
        (
            "extended COPY TO STDOUT",
            raw::batch(&[
                raw::parse(
                    "",
                    &format!("copy (select count(*) from {table}) to stdout"),
                ),
                raw::bind("", "", &[]),
                raw::execute(""),
                raw::sync(),
            ]),
            1,
        ),
        (
            "afterwards",
            raw::batch(&[raw::query(&format!("select count(*) from {table}"))]),
            1,
        ),
    ]
}

async fn run_cases(port: u16, table: &str) -> Vec<String> {
    let mut c = Raw::connect(port, USER, DB).await;
    c.send(&raw::query(&format!("truncate {table}"))).await;
    c.until_ready().await;
    let mut out = Vec::new();
    for (name, bytes, readies) in cases(table) {
        c.send(&bytes).await;
        let mut frames = Vec::new();
        for _ in 0..readies {
            frames.extend(c.until_ready().await);
        }
        assert!(
            c.silent_for(Duration::from_millis(100)).await,
            "{name}: more than {readies} ReadyForQuery"
        );
        out.push(format!("{name}: {}", describe(&frames)));
    }
    out
}

#[tokio::test]
async fn copy_through_every_mode_matches_postgres() {
    let pg = support::shared();
    pg.psql("create table if not exists relay_copy (n int)");
    let direct = run_cases(pg.port, "relay_copy").await;
    for mode in MODES {
        for track in [false, true] {
            let mut args = vec!["--pool-size", "1", "--mode", mode];
            if track {
                args.push("--track-prepared");
            }
            let pooler = Pooler::start(pg, &args);
            let through = within(30, mode, run_cases(pooler.port(), "relay_copy")).await;
            for (d, t) in direct.iter().zip(&through) {
                assert_eq!(t, d, "{mode} track={track}");
            }
            if mode != "session" {
                assert_eq!(pooler.servers_active(), 0, "{mode}: {}", pooler.status());
            }
        }
    }
}

/// `psql -c "\copy t from stdin"` in statement mode (it hung before), and in the others.
#[tokio::test]
async fn psql_copy_from_stdin_in_every_mode() {
    let pg = support::shared();
    pg.psql("create table if not exists relay_psql_copy (n int, s text)");
    for mode in MODES {
        pg.psql("truncate relay_psql_copy");
        let pooler = Pooler::start(pg, &["--pool-size", "1", "--mode", mode]);
        let port = pooler.port().to_string();
        let mut data = String::new();
        for i in 0..5000 {
            data += &format!("{i}\trow {i}\n");
        }
        let out = within(
            20,
            "psql \\copy",
            tokio::task::spawn_blocking(move || {
                run_tool(
                    pg_tool("psql")
                        .args(["-h", "127.0.0.1", "-p", &port, "-U", USER, "-d", DB])
                        .args([
                            "-v",
                            "ON_ERROR_STOP=1",
                            "-c",
                            "\\copy relay_psql_copy from stdin",
                        ]),
                    Some(&data),
                )
            }),
        )
        .await
        .expect("psql ran");
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{mode}: {stderr}");
        assert!(stdout.contains("COPY 5000"), "{mode}: {stdout}");
        let out = run_tool(
            pg_tool("psql")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &pooler.port().to_string(),
                    "-U",
                    USER,
                ])
                .args([
                    "-d",
                    DB,
                    "-At",
                    "-c",
                    "\\copy (select count(*) from relay_psql_copy) to stdout",
                ]),
            None,
        );
        let (stdout, stderr) = text(&out);
        assert_eq!(stdout.trim(), "5000", "{mode}: {stderr}");
    }
}
