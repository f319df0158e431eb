//! The machine alone, where a schedule the simulation's model never makes must be set up by
//! hand.

use std::time::Instant;

use bytes::BytesMut;

use super::{error_fields, Io, Keep, Next, Peer, Policy, Relay};
use crate::config::{Config, EventLevel, PoolMode};
use crate::events::Events;
use crate::metrics::Metrics;
use crate::params::ClientParams;
use crate::protocol::{backend, frontend};
use crate::server::ServerState;

struct Wire {
    received: BytesMut,
}

impl Io for Wire {
    fn now(&mut self) -> Instant {
        Instant::now()
    }

    fn direct(&self) -> bool {
        true
    }

    fn offer_client(&mut self, bytes: &[u8]) -> usize {
        self.received.extend_from_slice(bytes);
        bytes.len()
    }

    fn seed(&mut self) -> f64 {
        0.5
    }
}

impl Wire {
    fn new() -> Wire {
        Wire {
            received: BytesMut::new(),
        }
    }

    /// What the client got: taken at once, or queued.
    fn to_client(&self, r: &Relay) -> BytesMut {
        let mut all = self.received.clone();
        all.extend_from_slice(r.transmit(Peer::Client));
        all
    }
}

fn relay(mode: PoolMode) -> Relay {
    let policy = Policy::new(&Config::default(), mode, Default::default());
    let metrics = std::sync::Arc::new(Metrics::new());
    let events = Events::new(EventLevel::Off);
    Relay::new(
        1,
        ClientParams::default(),
        policy,
        BytesMut::new(),
        metrics,
        events,
    )
}

/// Sends `select 1` through `r` on `srv` and returns the client's wire.
fn run_query(r: &mut Relay, srv: &mut ServerState) -> Wire {
    let mut wire = Wire {
        received: BytesMut::new(),
    };
    frontend::query(r.client_in(), "select 1");
    assert_eq!(
        r.on_client(None, &mut wire).unwrap(),
        Next::NeedServer {
            tag: frontend::QUERY_TAG,
            spare: None,
        }
    );
    r.hold(srv, None, Instant::now(), &NoneDeparted, None);
    assert_eq!(r.on_client(Some(srv), &mut wire).unwrap(), Next::Done);
    r.transmitted(Peer::Server);
    wire
}

/// The server's answer to `select 1` (no rows, for brevity) and its ReadyForQuery, and in the
/// same read the FATAL of a fast shutdown that reached the backend right after.
fn reply_then_fatal(rbuf: &mut BytesMut) -> usize {
    let tag = b"SELECT 0\0";
    rbuf.extend_from_slice(&[backend::COMMAND_COMPLETE_TAG]);
    rbuf.extend_from_slice(&(tag.len() as u32 + 4).to_be_bytes());
    rbuf.extend_from_slice(tag);
    backend::ready_for_query(rbuf, backend::TX_IDLE);
    let answered = rbuf.len();
    let mut fatal = error_fields(
        "57P01",
        "terminating connection due to administrator command".into(),
    );
    fatal.severity = "FATAL".into();
    backend::error_response(rbuf, &fatal);
    answered
}

/// A query run in `mode`, its answer and a FATAL read in one go and handled: the relay, the
/// server, the client's wire, the answer's length and the bytes read.
fn answered_then_fatal(mode: PoolMode) -> (Relay, ServerState, Wire, usize, usize) {
    let mut r = relay(mode);
    let mut srv = ServerState::new();
    let mut wire = run_query(&mut r, &mut srv);
    let answered = reply_then_fatal(&mut srv.rbuf);
    let total = srv.rbuf.len();
    r.on_server(&mut srv, &mut wire).unwrap();
    (r, srv, wire, answered, total)
}

/// In transaction mode a server message after the transaction's ReadyForQuery is no
/// client's: the client gets its answer, not the FATAL, and the bytes stay in the server's
/// buffer (the pool closes a server returned with bytes unread).
#[test]
fn what_a_server_sends_after_its_transaction_stays_with_the_server() {
    let (mut r, mut srv, mut wire, answered, total) = answered_then_fatal(PoolMode::Transaction);
    let fatal_len = total - answered;
    assert!(r.release_ready(&srv));
    let to_client = wire.to_client(&r);
    assert_eq!(
        to_client.len(),
        answered,
        "the client got exactly its answer"
    );
    assert_eq!(to_client.last(), Some(&backend::TX_IDLE));
    assert_eq!(srv.rbuf.len(), fatal_len, "the FATAL stays unread");
    assert_eq!(srv.rbuf[0], backend::ERROR_RESPONSE_TAG);
    // Read again before the release: still not the client's.
    r.on_server(&mut srv, &mut wire).unwrap();
    assert_eq!(srv.rbuf.len(), fatal_len);
}

/// In session mode the client owns its backend: the FATAL is its to see.
#[test]
fn a_session_client_sees_its_backend_end() {
    let (r, srv, wire, answered, total) = answered_then_fatal(PoolMode::Session);
    let to_client = wire.to_client(&r);
    assert_eq!(to_client.len(), total);
    assert_eq!(to_client[answered], backend::ERROR_RESPONSE_TAG);
    assert!(srv.rbuf.is_empty());
}

/// A client that sent nothing after its startup packet keeps no buffer: the login's read
/// buffer is not carried into the session (it would cost every idle client its capacity).
#[test]
fn an_idle_client_keeps_no_login_buffer() {
    let policy = Policy::new(
        &Config::default(),
        PoolMode::Transaction,
        Default::default(),
    );
    let metrics = std::sync::Arc::new(Metrics::new());
    let events = Events::new(EventLevel::Off);
    let login_buf = BytesMut::with_capacity(8192);
    let mut r = Relay::new(
        1,
        ClientParams::default(),
        policy,
        login_buf,
        metrics.clone(),
        events,
    );
    assert_eq!(r.client_in().capacity(), 0);
    let mut leftover = BytesMut::with_capacity(8192);
    frontend::query(&mut leftover, "select 1");
    let r = Relay::new(
        2,
        ClientParams::default(),
        policy,
        leftover,
        metrics,
        events,
    );
    assert!(
        r.client_buffered() > 0,
        "bytes sent behind the startup packet are kept"
    );
}

/// The backend a transaction's first message signals by pid is named to the driver as the
/// server not to take, in each form a driver sends it; a plain query names none, and its
/// verdict is not read again once a server is held.
#[test]
fn a_signalled_backend_is_named_as_the_server_to_spare() {
    use crate::config::SessionState;
    let first = |msgs: &[BytesMut]| {
        let policy = Policy::new(
            &Config::default(),
            PoolMode::Transaction,
            SessionState::Track,
        );
        let mut r = Relay::new(
            1,
            ClientParams::default(),
            policy,
            BytesMut::new(),
            std::sync::Arc::new(Metrics::new()),
            Events::new(EventLevel::Off),
        );
        for m in msgs {
            r.client_in().extend_from_slice(m);
        }
        let mut wire = Wire {
            received: BytesMut::new(),
        };
        let next = r.on_client(None, &mut wire).unwrap();
        assert!(matches!(next, Next::NeedServer { .. }), "{next:?}");
        r
    };
    let spare = |r: Relay| r.spare().map(|p| p.get());
    let q = |sql: &str| {
        let mut b = BytesMut::new();
        frontend::query(&mut b, sql);
        b
    };
    assert_eq!(
        spare(first(&[q("select pg_terminate_backend(4242)")])),
        Some(4242)
    );
    assert_eq!(spare(first(&[q("select pg_cancel_backend($1)")])), None);
    assert_eq!(spare(first(&[q("select 1")])), None);
    assert_eq!(
        spare(first(&[q("select '(pg_terminate_backend(4242))'")])),
        None
    );
    // An unnamed Parse whose Bind carries the pid.
    let mut parse = BytesMut::new();
    frontend::parse(&mut parse, b"", "select pg_terminate_backend($1::int)");
    let mut bind = BytesMut::new();
    let at = crate::protocol::frame::begin(&mut bind, frontend::BIND_TAG);
    bind.extend_from_slice(b"\0\0\0\0\0\x01\0\0\0\x044242\0\0");
    crate::protocol::frame::finish(&mut bind, at);
    assert_eq!(spare(first(&[parse.clone(), bind.clone()])), Some(4242));
    // Without its Bind in the buffer, nothing to read the pid from.
    assert_eq!(spare(first(&[parse])), None);
    // A named Parse with its Bind in the same batch (pgjdbc past its prepare threshold);
    // a Bind of another statement carries no pid of this one.
    let bind_to = |stmt: &[u8]| {
        let mut b = BytesMut::new();
        let at = crate::protocol::frame::begin(&mut b, frontend::BIND_TAG);
        b.extend_from_slice(b"\0");
        b.extend_from_slice(stmt);
        b.extend_from_slice(b"\0\0\0\0\x01\0\0\0\x044242\0\0");
        crate::protocol::frame::finish(&mut b, at);
        b
    };
    let mut named = BytesMut::new();
    frontend::parse(&mut named, b"S_1", "select pg_terminate_backend($1)");
    assert_eq!(spare(first(&[named.clone(), bind_to(b"S_1")])), Some(4242));
    assert_eq!(spare(first(&[named, bind_to(b"S_2")])), None);
    assert_eq!(bind_to(b""), bind);
}

/// No client has left.
struct NoneDeparted;

impl super::Departed for NoneDeparted {
    fn mark(&self) -> u64 {
        0
    }

    fn since(&self, _: u64) -> Option<(Vec<u64>, u64)> {
        None
    }
}

/// Queues an answer for the client, as a refused Query does.
fn queue_answer(r: &mut Relay) {
    frontend::query(r.client_in(), "select 1");
    r.refuse(
        frontend::QUERY_TAG,
        &error_fields("53300", "refused".into()),
    );
    assert!(!r.transmit(Peer::Client).is_empty());
}

#[test]
fn an_idle_clients_output_goes_once_written_and_a_warm_or_busy_ones_stays() {
    for (keep, freed) in [(Keep::None, true), (Keep::Warm, false), (Keep::All, false)] {
        let mut r = relay(PoolMode::Transaction);
        queue_answer(&mut r);
        r.end_round(keep);
        assert!(
            !r.transmit(Peer::Client).is_empty(),
            "{keep:?}: nothing queued is dropped before it is written"
        );
        r.transmitted(Peer::Client);
        assert!(r.transmit(Peer::Client).is_empty());
        assert_eq!(r.client.cout.capacity() == 0, freed, "{keep:?}");
        // The mark lasts one write: the next round's output, the client busy, is kept.
        queue_answer(&mut r);
        r.end_round(Keep::All);
        r.transmitted(Peer::Client);
        assert!(r.client.cout.capacity() > 0, "{keep:?}, then a busy round");
    }
}

/// A query taken to a server due for its idle check: the check goes first, alone.
fn checked_query(r: &mut Relay, srv: &mut ServerState, wire: &mut Wire) -> Instant {
    frontend::query(r.client_in(), "select 1");
    assert!(matches!(
        r.on_client(None, wire).unwrap(),
        Next::NeedServer { .. }
    ));
    let now = Instant::now();
    let check = super::Check {
        sql: "select 'checked'",
        within: std::time::Duration::from_secs(3),
    };
    r.hold(srv, None, now, &NoneDeparted, Some(check));
    assert_eq!(r.on_client(Some(srv), wire).unwrap(), Next::Done);
    let mut sent = BytesMut::new();
    frontend::query(&mut sent, "select 'checked'");
    assert_eq!(r.transmit(Peer::Server), &sent[..], "the check alone");
    r.transmitted(Peer::Server);
    assert!(r.stand(Some(srv)).checking());
    now
}

/// The check's answer is the pooler's: nothing reaches the client, and then its query goes.
#[test]
fn a_passed_check_lets_the_waiting_query_go() {
    let mut r = relay(PoolMode::Transaction);
    let mut srv = ServerState::new();
    let mut wire = Wire::new();
    let now = checked_query(&mut r, &mut srv, &mut wire);
    assert_eq!(
        r.deadline(&srv),
        Some((now + std::time::Duration::from_secs(3), super::Kind::Check)),
        "the check's answer is awaited within its bound"
    );
    let tag = b"SELECT 1\0";
    srv.rbuf.extend_from_slice(&[backend::COMMAND_COMPLETE_TAG]);
    srv.rbuf
        .extend_from_slice(&(tag.len() as u32 + 4).to_be_bytes());
    srv.rbuf.extend_from_slice(tag);
    backend::ready_for_query(&mut srv.rbuf, backend::TX_IDLE);
    r.on_server(&mut srv, &mut wire).unwrap();
    assert!(
        wire.to_client(&r).is_empty(),
        "the check's answer is not the client's"
    );
    assert!(!r.stand(Some(&srv)).checking());
    assert_eq!(r.deadline(&srv), None, "no deadline once it passed");
    assert_eq!(r.on_client(Some(&mut srv), &mut wire).unwrap(), Next::Done);
    let mut sent = BytesMut::new();
    frontend::query(&mut sent, "select 1");
    assert_eq!(
        r.transmit(Peer::Server),
        &sent[..],
        "the client's query follows"
    );
}

/// A check answered with an error, or that leaves a transaction open, fails: the driver is
/// told with the reason, and after the server's loss the client's query waits for the next.
#[test]
fn a_failed_check_says_why_and_keeps_the_query() {
    for (status, error) in [(backend::TX_IDLE, true), (b'T', false)] {
        let mut r = relay(PoolMode::Transaction);
        let mut srv = ServerState::new();
        let mut wire = Wire::new();
        checked_query(&mut r, &mut srv, &mut wire);
        if error {
            backend::error_response(
                &mut srv.rbuf,
                &error_fields("22012", "division by zero".into()),
            );
        }
        backend::ready_for_query(&mut srv.rbuf, status);
        match r.on_server(&mut srv, &mut wire) {
            Err(super::ServerFault::CheckFailed(why)) if error => {
                assert_eq!(why, "division by zero (22012)")
            }
            Err(super::ServerFault::CheckFailed(why)) => {
                assert_eq!(why, "it left a transaction open")
            }
            other => panic!("{other:?}"),
        }
        assert!(wire.to_client(&r).is_empty(), "the client is never told");
        r.handle(Some(&mut srv), super::Input::ServerLeft, &mut wire);
        assert!(r.transmit(Peer::Server).is_empty());
        assert!(
            matches!(
                r.on_client(None, &mut wire).unwrap(),
                Next::NeedServer { .. }
            ),
            "the query waits for another server"
        );
    }
}

/// No answer in time: the timeout says to replace the server, not to end the session.
#[test]
fn an_unanswered_check_times_out_into_a_replacement() {
    let mut r = relay(PoolMode::Transaction);
    let mut srv = ServerState::new();
    let mut wire = Wire::new();
    checked_query(&mut r, &mut srv, &mut wire);
    let fired = r.handle(
        Some(&mut srv),
        super::Input::Timeout(super::Kind::Check),
        &mut wire,
    );
    assert!(matches!(
        fired,
        Some(super::Event::TimedOut(super::TimedOut::CheckFailed))
    ));
}
