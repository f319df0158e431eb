//! Admission and deadline behaviour of one pool, under paused time.

use super::*;
use crate::config::Config;

/// A pool whose one server is logging in to a listener that never answers.
fn stuck_pool(listener: &std::net::TcpListener, max_waiting: usize) -> Pool {
    let mut cfg = Config::default();
    cfg.pool.size = 1;
    let settings = PoolSettings {
        max_waiting,
        query_wait_timeout: Duration::from_secs(1),
        ..PoolSettings::from_config(&cfg)
    };
    let port = listener.local_addr().unwrap().port();
    let target = ServerTarget {
        host: "127.0.0.1".into(),
        port,
        user: "u".into(),
        database: "d".into(),
        secret: crate::server::TargetSecret::Configured(Default::default()),
        connect_timeout: Duration::from_secs(3600),
        tls: Default::default(),
        allow_cleartext: false,
    };
    let key = PoolKey {
        database: "d".into(),
        user: "u".into(),
    };
    let backend = Arc::new(Backend::from_config(&cfg));
    let spec = RouteSpec {
        dbname: "d".into(),
        hosts: vec![crate::config::HostAddr {
            host: "127.0.0.1".into(),
            port,
        }],
        tsa: Default::default(),
        lb: Default::default(),
    };
    let route = Route::new(spec, &backend.hosts);
    Pool::new(
        &key,
        false,
        target,
        route,
        settings,
        PoolDeps {
            events: Events::new(crate::config::EventLevel::Off),
            counters: Arc::new(Counters::default()),
            metrics: Arc::new(Metrics::new()),
            backend,
            lifecycle: Arc::new(crate::lifecycle::Lifecycle::new(
                prometheus::IntGauge::new("drain_state", "test").unwrap(),
            )),
            limits: Vec::new(),
        },
    )
}

/// Admission is bounded in count (53300 at once beyond the cap) and in time (57014 at the
/// deadline), deterministically under paused time.
#[tokio::test(start_paused = true)]
async fn admission_cap_and_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pool = stuck_pool(&listener, 2);
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let p = pool.clone();
            tokio::spawn(async move { p.checkout().await.map(|_| ()) })
        })
        .collect();
    // Let both join the queue.
    while pool.snapshot().clients_waiting < 2 {
        tokio::task::yield_now().await;
    }
    let started = tokio::time::Instant::now();
    tokio::time::advance(Duration::from_millis(400)).await;
    let snap = pool.snapshot();
    assert!(
        (0.4..0.5).contains(&snap.max_wait_seconds),
        "maxwait is the oldest waiter's wait: {snap:?}"
    );
    let refused = pool.checkout().await.map(|_| ()).unwrap_err();
    assert_eq!(refused.sqlstate(), "53300", "{refused}");
    for w in waiting {
        let e = w.await.unwrap().unwrap_err();
        assert_eq!(e.sqlstate(), "57014", "{e}");
    }
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    // A waiter that gave up left the queue: there is room again.
    assert_eq!(pool.snapshot().clients_waiting, 0);
    assert_eq!(pool.snapshot().max_wait_seconds, 0.0);
}

/// One sweep serves waiters with different deadlines: after a reload shortens the wait, a
/// later waiter times out first, at its own deadline (before the next maintenance tick), and
/// the earlier one at its own.
#[tokio::test(start_paused = true)]
async fn sweep_answers_each_waiter_at_its_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pool = stuck_pool(&listener, 10);
    pool.update(PoolSettings {
        query_wait_timeout: Duration::from_secs(10),
        ..pool.settings()
    });
    let started = tokio::time::Instant::now();
    let wait = |p: Pool| {
        tokio::spawn(async move {
            let e = p.checkout().await.map(|_| ()).unwrap_err();
            (e.sqlstate().to_string(), tokio::time::Instant::now())
        })
    };
    let long = wait(pool.clone());
    while pool.snapshot().clients_waiting < 1 {
        tokio::task::yield_now().await;
    }
    tokio::time::advance(Duration::from_millis(2100)).await;
    pool.update(PoolSettings {
        query_wait_timeout: Duration::from_millis(500),
        ..pool.settings()
    });
    let short = wait(pool.clone());
    let (code, at) = short.await.unwrap();
    assert_eq!(code, "57014");
    assert_eq!(
        at - started,
        Duration::from_millis(2600),
        "the later waiter's own deadline"
    );
    assert_eq!(
        pool.snapshot().clients_waiting,
        1,
        "the first is still waiting"
    );
    let (code, at) = long.await.unwrap();
    assert_eq!(code, "57014");
    assert_eq!(at - started, Duration::from_secs(10));
    assert_eq!(pool.snapshot().clients_waiting, 0);
}

/// The pool publishes its policy with a generation: a reload that changes what a client's
/// transactions run under (here the mode) is read by the next checkout; one that changes
/// nothing of it (here the wait) leaves the generation, so no client reads it again.
#[tokio::test(start_paused = true)]
async fn the_pool_publishes_its_policy_by_generation() {
    use crate::config::PoolMode;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pool = stuck_pool(&listener, 1);
    let (first, policy) = pool.policy();
    assert_eq!(policy.mode, PoolMode::Transaction);
    assert_eq!(pool.policy_generation(), first);
    pool.update(PoolSettings {
        query_wait_timeout: Duration::from_secs(5),
        ..pool.settings()
    });
    assert_eq!(pool.policy_generation(), first, "the policy did not change");
    let mut cfg = Config::default();
    cfg.pool.size = 1;
    cfg.pool.mode = PoolMode::Session;
    pool.update(PoolSettings {
        policy: PoolSettings::from_config(&cfg).policy,
        ..pool.settings()
    });
    let (now, policy) = pool.policy();
    assert_ne!(now, first, "a changed policy has a new generation");
    assert_eq!(pool.policy_generation(), now);
    assert_eq!(policy.mode, PoolMode::Session);
}

/// A client's hand-over slot serves its waits one after the other: a wait given up counts as
/// left (the queue's live count drops), the next wait on the same slot is answered at its
/// own deadline, and a wait the pool drops by name (a KILL) is answered with nothing.
#[tokio::test(start_paused = true)]
async fn a_slot_serves_one_wait_after_another() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pool = stuck_pool(&listener, 10);
    // The client's slot, made by its first wait.
    let mut slot: Option<Arc<Handoff>> = None;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let ticket = || Ticket {
        owner: 7,
        stop: &stop,
    };
    let queue = |slot: &mut Option<Arc<Handoff>>| match pool.checkout_or_queue(
        Instant::now(),
        ticket(),
        slot,
    ) {
        Ok(Err(wait)) => wait,
        other => panic!("queued: {:?}", other.map(|r| r.map(|_| ()))),
    };
    let first = queue(&mut slot);
    let handoff = slot.clone().expect("made by the first wait");
    {
        let waiting = pool.waiting(&handoff, first);
        // Given up before any answer.
        drop(waiting);
    }
    let live = || {
        pool.lock()
            .waiters
            .iter()
            .filter(|w| !w.is_closed())
            .count()
    };
    assert_eq!(live(), 0, "a wait given up counts as left");

    let started = tokio::time::Instant::now();
    let second = queue(&mut slot);
    assert!(
        slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, &handoff)),
        "the slot is kept for the next wait"
    );
    assert_eq!(live(), 1);
    let e = pool
        .waiting(&handoff, second)
        .await
        .unwrap()
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.sqlstate(), "57014", "{e}");
    // (The wait's start is the caller's std clock; the timer's resolution is a millisecond.)
    let took = started.elapsed();
    assert!(
        (Duration::from_secs(1)..Duration::from_millis(1010)).contains(&took),
        "at its own deadline: {took:?}"
    );

    let third = queue(&mut slot);
    pool.drop_waiters_of(&[7]);
    assert!(
        pool.waiting(&handoff, third).await.is_none(),
        "dropped by name: nothing"
    );
}
