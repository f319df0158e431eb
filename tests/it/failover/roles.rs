//! Which host a pool uses: libpq's `target_session_attrs` over `server.hosts` and
//! `databases:` aliases, against a real primary and standby.

use std::time::{Duration, Instant};

use tokio::task::block_in_place;
use tokio_postgres::error::SqlState;

use super::{hosts_yaml, role_lines, whoami, USER};
use crate::support::metrics::{metric, scrape};
use crate::support::{shared_pair, Pooler, DB};

/// `read-write` finds the primary whether it is listed first or last (and `any` takes the
/// first host listed, a standby here); the roles are announced and exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_finds_the_primary_whatever_the_host_order() {
    let pair = shared_pair().lock().await;
    let (p, s) = (pair.primary().port, pair.standby().port);
    for order in [[p, s], [s, p]] {
        let yaml = hosts_yaml(&order, "  target_session_attrs: read-write\n");
        let pooler = block_in_place(|| Pooler::start_with_hosts(&yaml));
        let c = pooler.connect(USER, DB).await;
        for _ in 0..3 {
            assert_eq!(whoami(&c).await.unwrap(), (p, false), "hosts {order:?}");
        }
        if order[0] == s {
            // The standby was tried first, found out and left; both roles are known now, and
            // no event line says so (no host changed its role).
            assert!(role_lines(&pooler).is_empty(), "{:?}", role_lines(&pooler));
            let t = block_in_place(|| scrape(&pooler));
            let role = |port: u16, role: &str| {
                let host = format!("127.0.0.1:{port}");
                metric(
                    &t,
                    "droidpool_server_role",
                    &[("host", &host), ("role", role)],
                )
            };
            assert_eq!(role(s, "standby"), Some(1.0), "{t}");
            assert_eq!(role(s, "primary"), Some(0.0));
            assert_eq!(role(p, "primary"), Some(1.0));
        }
    }
    // `any` (the default) uses the first host that answers, whatever it is.
    let pooler = block_in_place(|| Pooler::start_with_hosts(&hosts_yaml(&[s, p], "")));
    let c = pooler.connect(USER, DB).await;
    assert_eq!(whoami(&c).await.unwrap(), (s, true));
    assert!(role_lines(&pooler).is_empty());
}

/// An alias with `prefer-standby` reads from the standby, from the primary while the standby
/// is down, and `read-write` and `standby` aliases on the same pooler go where they must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_standby_alias_reads_from_the_standby_then_the_primary() {
    let pair = shared_pair().lock().await;
    let (p, s) = (pair.primary().port, pair.standby().port);
    let yaml = format!(
        "{}databases:\n  app:\n    dbname: {DB}\n    target_session_attrs: read-write\n  \
         app_ro:\n    dbname: {DB}\n    target_session_attrs: prefer-standby\n    \
         load_balance_hosts: random\n    pool_size: 2\n  app_standby:\n    dbname: {DB}\n    \
         target_session_attrs: standby\n",
        hosts_yaml(&[p, s], "")
    );
    let pooler = block_in_place(|| Pooler::start_with_hosts(&yaml));
    let ro = pooler.connect(USER, "app_ro").await;
    let rw = pooler.connect(USER, "app").await;
    let sb = pooler.connect(USER, "app_standby").await;
    for _ in 0..5 {
        assert_eq!(
            whoami(&ro).await.unwrap(),
            (s, true),
            "reads go to the standby"
        );
        assert_eq!(whoami(&rw).await.unwrap(), (p, false));
    }
    assert_eq!(whoami(&sb).await.unwrap(), (s, true));
    let ro_db: String = ro
        .query_one("select current_database()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(ro_db, DB, "the alias's dbname");

    block_in_place(|| pair.standby().stop());
    // The idle server on the standby is gone with it; the next read finds the primary.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let r = whoami(&ro).await;
        seen.push(r.as_ref().map(|x| *x).map_err(|e| e.to_string()));
        if matches!(r, Ok((port, false)) if port == p) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reads never reached the primary: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // At most the read that met the dying server failed; the rest went to the primary.
    assert!(seen.len() <= 2, "{seen:?}");
    for _ in 0..3 {
        assert_eq!(whoami(&ro).await.unwrap(), (p, false));
    }
    // A standby-only alias has nothing to use meanwhile: 57P03 at once (no hold).
    let t0 = Instant::now();
    let err = whoami(&sb).await.expect_err("no standby");
    assert_eq!(err.code(), Some(&SqlState::CANNOT_CONNECT_NOW), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    block_in_place(|| {
        pair.standby().start();
        pair.wait_streaming();
    });
}

/// Nothing fits (only a standby where a primary is needed): a login through the pooler gets
/// 57P03 at once without the hold; with it, the client waits the hold out and then gets
/// 57P03, and a client arriving beyond `max_waiting_clients` is refused at once (53300).
/// Clients here are new (their login needs a server); clients already connected see the same
/// answers to their transactions (see `switchover`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_fits_is_57p03_at_once_or_after_the_hold() {
    let pair = shared_pair().lock().await;
    let s = pair.standby().port;
    let primary_only = "  target_session_attrs: primary\n";
    let pooler = block_in_place(|| Pooler::start_with_hosts(&hosts_yaml(&[s], primary_only)));
    let t0 = Instant::now();
    let err = pooler
        .try_connect(USER, DB)
        .await
        .expect_err("only a standby");
    assert_eq!(err.code(), Some(&SqlState::CANNOT_CONNECT_NOW), "{err}");
    let db = err.as_db_error().expect("an error from the pooler");
    assert!(
        db.message()
            .contains("no server fits target_session_attrs primary"),
        "{db:?}"
    );
    assert!(
        db.message()
            .contains(&format!("127.0.0.1:{s} is a standby")),
        "{db:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());

    let held = format!(
        "{primary_only}pool:\n  max_waiting_clients: 1\nfailover:\n  hold_timeout: 1500ms\n"
    );
    let pooler = block_in_place(|| Pooler::start_with_hosts(&hosts_yaml(&[s], &held)));
    let conn = pooler.conn_string(USER, DB);
    let t0 = Instant::now();
    let waiting = tokio::spawn(async move {
        let r = crate::support::try_connect(&conn).await.map(drop);
        (r, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = pooler
        .try_connect(USER, DB)
        .await
        .expect_err("the queue is full");
    assert_eq!(err.code(), Some(&SqlState::TOO_MANY_CONNECTIONS), "{err}");
    let (res, waited) = waiting.await.unwrap();
    let err = res.expect_err("still no primary");
    assert_eq!(err.code(), Some(&SqlState::CANNOT_CONNECT_NOW), "{err}");
    let msg = err
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(msg.contains("failover.hold_timeout"), "{err:?}");
    assert!(
        waited >= Duration::from_millis(1400),
        "held for the hold: {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

/// A server that does not report its role (PostgreSQL before 14) is asked, as libpq asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_not_reported_is_asked() {
    use droid_pool::server::{ask_role, login, Role, ServerTarget};
    let pair = shared_pair().lock().await;
    for (port, want) in [
        (pair.primary().port, Role::PRIMARY),
        (pair.standby().port, Role::STANDBY),
    ] {
        let target = ServerTarget {
            host: "127.0.0.1".into(),
            port,
            user: USER.into(),
            database: DB.into(),
            secret: droid_pool::server::TargetSecret::Configured(Default::default()),
            connect_timeout: Duration::from_secs(5),
            tls: Default::default(),
            allow_cleartext: false,
        };
        let mut conn = login(&target).await.expect("login");
        assert_eq!(
            Role::from_params(conn.params()),
            Some(want),
            "PostgreSQL 14+ reports it"
        );
        assert_eq!(ask_role(&mut conn).await.expect("asked"), want);
    }
}

/// Logins PostgreSQL counted at `port` (`pg_stat_database.sessions`, all databases), read
/// over a new direct connection (itself one more).
async fn sessions_at(port: u16) -> i64 {
    let c = crate::support::connect(&crate::support::conn_string(port, USER, DB)).await;
    let row = c
        .query_one("select sum(sessions)::int8 from pg_stat_database", &[])
        .await
        .unwrap();
    row.get(0)
}

/// With no hold, every client that finds only a standby is told 57P03 at once; the pooler
/// rechecks the standby for each (after `RECHECK`), over the standby connection an earlier
/// login kept rather than a login of its own, so a long outage costs the standby one login
/// per pool, not one per client (and a promotion's first server is that connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_is_rechecked_without_logging_in_again() {
    let pair = shared_pair().lock().await;
    let s = pair.standby().port;
    let yaml = hosts_yaml(&[s], "  target_session_attrs: primary\n");
    let pooler = block_in_place(|| Pooler::start_with_hosts(&yaml));
    let before = sessions_at(s).await;
    const CLIENTS: i64 = 8;
    for _ in 0..CLIENTS {
        let err = pooler
            .try_connect(USER, DB)
            .await
            .expect_err("only a standby");
        assert_eq!(err.code(), Some(&SqlState::CANNOT_CONNECT_NOW), "{err}");
        // Longer than a recheck's interval: every client rechecks.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A session's count reaches the statistics within a second (at its end at the latest).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let logins = sessions_at(s).await - before - 1;
    assert!(
        (1..=2).contains(&logins),
        "{CLIENTS} clients rechecked the standby with {logins} logins"
    );
}
