//! A server's reply reaches a client that is still streaming as soon as it would directly.
//!
//! A client pipelines rows into an insert whose second row fails, as asyncpg's `executemany`
//! does (a Bind and an Execute per row, one Sync at the end; asyncpg's
//! `test_executemany_server_failure_during_writes`), and begins no row once the error has
//! arrived. A tap in front of PostgreSQL counts the rows that reach PostgreSQL after its error
//! reached whoever sends to it: directly the client, which finishes at most the row it is
//! writing; through the pooler the pooler, which may finish what it has read of the client's
//! stream and must then pass the error on before it reads the client again. The tap counts in
//! the order it sees bytes, not in time, so a loaded machine does not move the count.
//!
//! A pooler that reads on while the client's socket stays readable learns that the server's
//! socket became readable only when its runtime's I/O driver runs: after its cooperative
//! budget (128 reads and writes) is spent, tens of rows here.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use droid_pool::protocol::{backend, frame};

use crate::support::raw::{self, Raw};
use crate::support::{self, Pooler, DB};

const USER: &str = "droid";
const TABLE: &str = "relay_fairness";
/// The text of each row after the first two, as in asyncpg's test.
const ROW_TEXT: usize = 32 * 1024;
/// `client.buffer_size`: above a row, so the pooler holds each row whole and reads the client
/// in chunks of rows.
const BUFFER: usize = 64 * 1024;
/// The most rows a run sends if the error never stops it.
const MAX_ROWS: usize = 1024;
/// How long the client waits after the first two rows: PostgreSQL has answered them before
/// the stream is under way (else the pooler might have passed on 1,024 requests first, and
/// then waits for replies, reading the server).
const ANSWERED: Duration = Duration::from_millis(50);
/// What the tap queues for PostgreSQL before it reads the sender no further: more than the
/// pooler passes on before the error reaches it, so the tap never slows the pooler.
const TAP_QUEUE: usize = 16 << 20;
/// Runs per setup. A pooler that reads on while the client streams passes on many rows in
/// about half the runs (in the rest the client's socket ran dry just then, or the error came
/// just before the pooler's budget ran out), so 30 runs fail it all but surely.
const RUNS: usize = 30;
/// Runs that may exceed the bound: the tap notes the count just before it passes the error
/// on, and if it is paused in between (or reads slower than the sender writes), the sender
/// writes on meanwhile.
const SPARE_RUNS: usize = 3;
const POLL: Duration = Duration::from_micros(20);
/// What the sender must have sent after PostgreSQL's error came before the tap passes it on
/// (or after `HOLD_AT_MOST`): the error meets the sender mid-stream, as in asyncpg's test.
const HOLD: usize = 1 << 20;
const HOLD_AT_MOST: Duration = Duration::from_millis(500);

/// A relay in front of PostgreSQL that reports, for each ErrorResponse it passes on, how many
/// bytes the sender sent after it, up to the ReadyForQuery that ends the batch.
struct Tap {
    port: u16,
    after: mpsc::Receiver<usize>,
}

impl Tap {
    fn start(upstream: u16) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the tap");
        // Room for what a sender writes while the tap is not running (a loaded machine).
        socket2::SockRef::from(&listener)
            .set_recv_buffer_size(8 << 20)
            .expect("receive buffer");
        let port = listener.local_addr().expect("tap address").port();
        let (tx, after) = mpsc::channel();
        std::thread::spawn(move || {
            for down in listener.incoming() {
                let Ok(down) = down else { continue };
                let up = TcpStream::connect(("127.0.0.1", upstream)).expect("connect upstream");
                let tx = tx.clone();
                std::thread::spawn(move || Link::new(down, up).run(&tx));
            }
        });
        Tap { port, after }
    }

    /// The bytes the sender sent after the last run's error reached it.
    fn after(&self) -> usize {
        self.after
            .recv_timeout(Duration::from_secs(30))
            .expect("the tap saw an error and the ReadyForQuery after it")
    }
}

/// Reads what `from` holds now, at most `max` bytes, into `to`; returns the bytes read, or
/// `None` once it closed.
fn read_now(from: &mut TcpStream, to: &mut Vec<u8>, max: usize) -> Option<usize> {
    let mut buf = [0u8; 64 * 1024];
    let mut total = 0;
    while total < max {
        let room = buf.len().min(max - total);
        match from.read(&mut buf[..room]) {
            Ok(0) => return None,
            Ok(n) => {
                to.extend_from_slice(&buf[..n]);
                total += n;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return None,
        }
    }
    Some(total)
}

fn send_all(to: &mut TcpStream, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match to.write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => return,
        }
    }
}

/// One connection through the tap: the sender (`down`) to PostgreSQL (`up`) and back.
struct Link {
    down: TcpStream,
    up: TcpStream,
    /// The sender's bytes not yet written to PostgreSQL, from `passed` on.
    queue: Vec<u8>,
    passed: usize,
    /// PostgreSQL's bytes not yet passed back whole.
    replies: Vec<u8>,
    /// The sender's bytes read so far, and their count when the last error was passed on.
    received: usize,
    mark: Option<usize>,
    /// Since when, and from which count, an error waits for the sender to stream.
    hold: Option<(usize, std::time::Instant)>,
}

impl Link {
    fn new(down: TcpStream, up: TcpStream) -> Link {
        for s in [&down, &up] {
            s.set_nonblocking(true).expect("non-blocking");
            s.set_nodelay(true).expect("nodelay");
        }
        Link {
            down,
            up,
            queue: Vec::new(),
            passed: 0,
            replies: Vec::new(),
            received: 0,
            mark: None,
            hold: None,
        }
    }

    fn run(mut self, tx: &mpsc::Sender<usize>) {
        while let Some(busy) = self.step(tx) {
            if !busy {
                std::thread::sleep(POLL);
            }
        }
    }

    /// Moves what each side has now; returns whether anything moved, `None` once a side
    /// closed.
    fn step(&mut self, tx: &mpsc::Sender<usize>) -> Option<bool> {
        // A little at a time, so PostgreSQL gets the rows as they come.
        let room = TAP_QUEUE.saturating_sub(self.queue.len() - self.passed);
        let mut busy = self.read_sender(room.min(256 << 10))?;
        if self.passed < self.queue.len() {
            match self.up.write(&self.queue[self.passed..]) {
                Ok(n) => {
                    self.passed += n;
                    busy = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return None,
            }
            if self.passed == self.queue.len() {
                self.passed = 0;
                self.queue.clear();
            }
        }
        busy |= read_now(&mut self.up, &mut self.replies, usize::MAX)? > 0;
        let mut at = 0;
        while let Some(total) = frame::complete_len(&self.replies[at..], 1 << 30).expect("frame") {
            match self.replies[at] {
                backend::ERROR_RESPONSE_TAG => {
                    // The error is passed on once the sender streams (as in asyncpg's test,
                    // where it comes mid-stream), or after a while if it does not.
                    let (from, since) = *self
                        .hold
                        .get_or_insert((self.received, std::time::Instant::now()));
                    if self.received - from < HOLD && since.elapsed() < HOLD_AT_MOST {
                        break;
                    }
                    self.hold = None;
                    // What the sender sent before the error reached it is not counted: all
                    // that has arrived (its socket buffers hold bytes written before).
                    self.read_sender(usize::MAX)?;
                    self.mark = Some(self.received);
                }
                backend::READY_FOR_QUERY_TAG => {
                    if let Some(m) = self.mark.take() {
                        let _ = tx.send(self.received - m);
                    }
                }
                _ => {}
            }
            send_all(&mut self.down, &self.replies[at..at + total]);
            at += total;
        }
        self.replies.drain(..at);
        Some(busy)
    }

    fn read_sender(&mut self, max: usize) -> Option<bool> {
        let n = read_now(&mut self.down, &mut self.queue, max)?;
        self.received += n;
        Some(n > 0)
    }
}

/// One `executemany` on `port`: the insert prepared, then rows pipelined, each begun only if
/// the server's error has not arrived, then the Sync. Returns the rows sent.
async fn executemany(port: u16) -> usize {
    let mut c = Raw::connect(port, USER, DB).await;
    let insert = format!("insert into {TABLE} values ($1, $2)");
    c.send(&raw::batch(&[raw::parse("ins", &insert), raw::sync()]))
        .await;
    assert_eq!(raw::tags(&c.until_ready().await), "1Z");
    let (stream, answers) = c.into_parts();
    let stream = stream.into_std().expect("std stream");
    tokio::task::spawn_blocking(move || pipeline(stream, answers))
        .await
        .expect("pipeline thread")
}

/// A row: its Bind and Execute.
fn row(text: &str, key: &str) -> Vec<u8> {
    raw::batch(&[
        raw::bind("", "ins", &[Some(text), Some(key)]),
        raw::execute(""),
    ])
}

fn pipeline(mut stream: TcpStream, answers: BytesMut) -> usize {
    stream.set_nonblocking(true).expect("non-blocking");
    // The first two keys collide: the second row fails, as in asyncpg's test.
    let first = [row("a", "0"), row("a", "0")];
    let rest = row(&"a".repeat(ROW_TEXT), "1");
    let mut answers = answers.to_vec();
    let mut sent = 0;
    let mut pending: &[u8] = &[];
    loop {
        // The socket as it is now (a read, not a wakeup), before each row.
        assert!(read_now(&mut stream, &mut answers, usize::MAX).is_some());
        if pending.is_empty() {
            if has_error(&answers) || sent == MAX_ROWS {
                break;
            }
            if sent == first.len() {
                // PostgreSQL answers the first two rows before the stream is under way; the
                // tap passes its error on mid-stream.
                std::thread::sleep(ANSWERED);
            }
            pending = first.get(sent).unwrap_or(&rest);
            sent += 1;
        }
        match stream.write(pending) {
            Ok(n) => pending = &pending[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => panic!("send a row: {e}"),
        }
    }
    stream.set_nonblocking(false).expect("blocking");
    stream.write_all(&raw::sync()).expect("send the Sync");
    let mut answers = BytesMut::from(&answers[..]);
    let mut tags = String::new();
    while !tags.ends_with('Z') {
        while let Some(f) = frame::cut(&mut answers, 1 << 30).expect("frame") {
            tags.push(f.tag as char);
        }
        let mut buf = [0u8; 4096];
        if !tags.ends_with('Z') {
            let n = stream.read(&mut buf).expect("read the answers");
            assert!(n > 0, "closed after {tags}");
            answers.extend_from_slice(&buf[..n]);
        }
    }
    assert_eq!(
        tags, "2C2EZ",
        "the first row in, the second refused, the rest skipped"
    );
    sent
}

/// Whether the answers so far hold an ErrorResponse.
fn has_error(mut answers: &[u8]) -> bool {
    while let Ok(Some(total)) = frame::complete_len(answers, 1 << 30) {
        if answers[0] == backend::ERROR_RESPONSE_TAG {
            return true;
        }
        answers.advance(total);
    }
    false
}

/// Per run, sorted: the rows the client sent, and the bytes that reached the server after
/// the error reached the sender.
async fn runs(port: u16, tap: &Tap) -> (Vec<usize>, Vec<usize>) {
    let (mut rows, mut after) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        rows.push(executemany(port).await);
        after.push(tap.after());
    }
    rows.sort_unstable();
    after.sort_unstable();
    (rows, after)
}

/// Bytes after the error as rows (the Sync that ends the batch is not one).
fn as_rows(after: &[usize]) -> Vec<usize> {
    let size = row(&"a".repeat(ROW_TEXT), "1").len();
    after
        .iter()
        .map(|b| b.saturating_sub(raw::sync().len()).div_ceil(size))
        .collect()
}

#[tokio::test]
async fn a_streaming_client_sees_the_error_as_soon_as_directly() {
    let pg = support::shared();
    pg.psql(&format!(
        "create table if not exists {TABLE} (a text, b int primary key); \
         grant all on {TABLE} to {USER}"
    ));
    let tap = Tap::start(pg.port);
    let (sent, direct) = runs(tap.port, &tap).await;
    let direct_rows = as_rows(&direct);
    eprintln!("direct: rows sent {sent:?}, rows after the error {direct_rows:?}");
    // The pooler may finish the read it holds when the error arrives (the read buffer grows
    // to twice `client.buffer_size` while it holds part of a row), with the row that read
    // completes: as a direct client finishes the row it is writing.
    let bound = direct[RUNS - 1 - SPARE_RUNS] + 2 * BUFFER + ROW_TEXT;
    for mode in ["session", "transaction"] {
        let yaml = format!(
            "client:\n  buffer_size: {BUFFER}\npool:\n  mode: {mode}\n  track_prepared: true\n"
        );
        let pooler = Pooler::start_for_server(tap.port, &yaml);
        let (sent, through) = runs(pooler.port(), &tap).await;
        let rows = as_rows(&through);
        eprintln!("{mode}: rows sent {sent:?}, rows after the error {rows:?}");
        assert!(
            through[RUNS - 1 - SPARE_RUNS] <= bound,
            "{mode}: the pooler passed on {rows:?} rows ({through:?} bytes) of the client's \
             stream after the server's error reached it; directly the client sent \
             {direct_rows:?} ({direct:?} bytes; bound {bound} bytes)"
        );
    }
}
