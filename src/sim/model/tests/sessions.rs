//! Sessions and the database between them: notifications, advisory locks, a session ended
//! from outside.

use bytes::BytesMut;

use super::{bind, bytes, parse, q, session, short};
use crate::sim::model::{ModelDb, ModelServer};

#[test]
fn notifications_reach_idle_listeners_of_the_same_database() {
    let mut db = ModelDb::with_tables(["t"]);
    let (mut a, mut b) = (ModelServer::new(1), ModelServer::new(2));
    let mut out = BytesMut::new();
    a.feed(&mut db, &bytes(&[q("listen c"), q("begin")]), &mut out);
    b.feed(
        &mut db,
        &bytes(&[q("notify c, 'hi'; notify c, 'hi'")]),
        &mut out,
    );
    out.clear();
    a.poll_async(&mut db, &mut out);
    assert!(out.is_empty(), "not delivered inside a transaction");
    a.feed(&mut db, &bytes(&[q("commit")]), &mut out);
    assert_eq!(
        short(&mut out),
        ["C:COMMIT", "A", "Z:I"],
        "once, before ReadyForQuery"
    );
    b.feed(&mut db, &bytes(&[q("notify c")]), &mut out);
    out.clear();
    a.poll_async(&mut db, &mut out);
    assert_eq!(short(&mut out), ["A"], "an idle session gets it at once");
}

#[test]
fn an_advisory_lock_waits_for_its_holder_and_can_be_cancelled() {
    let mut db = ModelDb::with_tables(["t"]);
    let (mut a, mut b) = (ModelServer::new(1), ModelServer::new(2));
    let mut out = BytesMut::new();
    a.feed(
        &mut db,
        &bytes(&[q("select pg_advisory_lock(5)")]),
        &mut out,
    );
    out.clear();
    b.feed(
        &mut db,
        &bytes(&[q("select pg_advisory_lock(5); select 2")]),
        &mut out,
    );
    assert!(
        b.is_blocked() && out.is_empty(),
        "RowDescription waits in the buffer"
    );
    b.poll_async(&mut db, &mut out);
    assert!(b.is_blocked());
    a.feed(
        &mut db,
        &bytes(&[q("select pg_advisory_unlock(5)")]),
        &mut out,
    );
    out.clear();
    b.poll_async(&mut db, &mut out);
    assert_eq!(
        short(&mut out),
        ["T", "D:[]", "C:SELECT 1", "T", "D:[2]", "C:SELECT 1", "Z:I"]
    );
    assert!(db.holds_lock(2, 5));
    a.feed(
        &mut db,
        &bytes(&[q("select pg_advisory_lock(5)")]),
        &mut out,
    );
    assert!(a.is_blocked());
    out.clear();
    a.cancel(&mut db, &mut out);
    assert_eq!(short(&mut out), ["T", "E:57014", "Z:I"]);
    b.disconnect(&mut db);
    assert!(!db.holds_lock(2, 5));
}

#[test]
fn terminated_from_outside_a_session_sends_fatal_and_lets_go() {
    let mut s = session();
    s.query("select pg_advisory_lock(1)");
    s.send(&[parse("a", "select 1"), bind("", "a", &[])]);
    let mut out = BytesMut::new();
    s.s.terminate(&mut s.db, &mut out);
    assert_eq!(
        short(&mut out),
        ["1", "2", "E:57P01"],
        "what was buffered goes with it"
    );
    assert!(s.s.is_closed() && !s.db.holds_lock(7, 1));
}
