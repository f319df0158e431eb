//! The deterministic simulation of the relay: several clients, each a [`Relay`] driven as
//! the session task drives it, a pool of model PostgreSQL servers, and a seeded scheduler
//! that interleaves every step (a client's bytes reaching the pooler, the pooler's bytes
//! reaching a server, a server's answer coming back) and splits every message at random
//! byte boundaries. The oracle: every client receives exactly what it receives running its
//! program directly against the model ([`super::direct`]); after every step the invariants
//! hold (no server back in the pool with replies owed or a transaction open, no statement
//! the relay believes a server holds missing there, the relay's buffers within their
//! bounds). A failing run names its seed and, shrunk, the program that fails.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod report;

pub use report::{Report, ServerLog};

use super::direct::{self, DirectRun};
use super::model::{ModelDb, ModelServer};
use super::program::{ClientProgram, End, Program, Rules};
use crate::config::{Config, PoolMode, SessionState};
use crate::events::{EventLevel, Events};
use crate::metrics::Metrics;
use crate::params::{ClientParams, Params};
use crate::protocol::frame::{self, Frame};
use crate::protocol::{backend, frontend, sqlstate};
use crate::relay::{
    Check, Departed, Event, Input, Io, Keep, Leave, Next, Peer, Policy, Relay, Reset, ServerFault,
};
use crate::server::ServerState;

/// A pooling setup the simulation runs programs through.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub name: &'static str,
    pub mode: PoolMode,
    /// `pool.session_state`.
    pub state: SessionState,
    pub track: bool,
    pub pool_size: usize,
    pub rules: Rules,
    pub limits: Limits,
}

/// The pool's statement bounds (`None`: the default), low for scenarios of eviction and of
/// the per-client bound.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `pool.max_prepared_statements`.
    pub max_prepared: Option<usize>,
    /// `pool.max_client_prepared_statements`.
    pub max_client_prepared: Option<usize>,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_prepared: None,
        max_client_prepared: None,
    };
}

/// How a run departs from the plain one ([`run_with`]).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// What the clients must receive, where the pooler answers by design otherwise than the
    /// direct run (`None`: the direct run).
    pub expected: Option<Vec<DirectRun>>,
    /// Each client's first write comes with its startup packet: the relay starts with it
    /// buffered (its `leftover`) and runs it before the client writes anything more.
    pub pipelined_startup: bool,
    /// The pool forgets what unseen work left on a server before handing it on (the
    /// clean-up disabled, as before `relay::cleanup`): a check that the simulation finds
    /// the leak.
    pub forget_unseen: bool,
    /// A server whose session-mode or pinned client left goes back without the reset the
    /// machine asks for ([`Leave::Reset`]): a check that the simulation finds the leak.
    pub skip_leave_reset: bool,
    /// The servers answer the pooler's pin check with "nothing left" (the check's answer
    /// ignored): a check that the simulation finds the leak.
    pub blind_pin_check: bool,
    /// The pool forgets the settings a server holds before handing it on (the settings sync
    /// skipped): a check that the simulation finds the leak.
    pub forget_settings: bool,
    /// Every server taken again comes due for its idle check (`relay::check`), and every third
    /// check fails (a statement the model rejects): the server is replaced as the session
    /// task replaces it, the client's messages waiting meanwhile.
    pub check_idle: bool,
}

/// The differential test's six setups, plus a pool of one for the tracked modes.
pub const SETUPS: &[Setup] = &[
    Setup {
        name: "session",
        mode: PoolMode::Session,
        state: SessionState::Off,
        track: false,
        pool_size: 2,
        rules: Rules::session(3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "transaction",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: false,
        pool_size: 2,
        rules: Rules::transaction(false, 3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "transaction-tracked",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: true,
        pool_size: 2,
        rules: Rules::transaction(true, 3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "transaction-tracked-pool-1",
        mode: PoolMode::Transaction,
        state: SessionState::Off,
        track: true,
        pool_size: 1,
        rules: Rules::transaction(true, 3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "statement",
        mode: PoolMode::Statement,
        state: SessionState::Off,
        track: false,
        pool_size: 2,
        rules: Rules::statement(false, 3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "statement-tracked",
        mode: PoolMode::Statement,
        state: SessionState::Off,
        track: true,
        pool_size: 2,
        rules: Rules::statement(true, 3).small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "transaction-unseen-track",
        mode: PoolMode::Transaction,
        state: SessionState::Track,
        track: true,
        pool_size: 1,
        rules: Rules::transaction(true, 3).with_unseen().small(),
        limits: Limits::DEFAULT,
    },
    Setup {
        name: "transaction-unseen-pin",
        mode: PoolMode::Transaction,
        state: SessionState::Pin,
        track: false,
        pool_size: 1,
        rules: Rules::transaction(false, 3).with_unseen().small(),
        limits: Limits::DEFAULT,
    },
    // `pool.session_state: track`: a client's SET of a reported setting follows it to each
    // server it takes (the settings sync), and none reaches another client.
    Setup {
        name: "transaction-track-reported",
        mode: PoolMode::Transaction,
        state: SessionState::Track,
        track: true,
        pool_size: 2,
        rules: Rules {
            reported_settings: true,
            ..Rules::transaction(true, 3).small()
        },
        limits: Limits::DEFAULT,
    },
    // `pool.session_state: pin`: SET, LISTEN, temp tables and advisory locks keep the client
    // on its server, the pin check lets it go once nothing is left, and the server is reset
    // when a pinned client leaves.
    Setup {
        name: "transaction-pin",
        mode: PoolMode::Transaction,
        state: SessionState::Pin,
        track: false,
        pool_size: 2,
        rules: Rules {
            session_state: true,
            ..Rules::transaction(false, 3).small()
        },
        limits: Limits::DEFAULT,
    },
];

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub client: Option<usize>,
    pub what: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.client {
            Some(c) => write!(f, "client {c}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

fn fail(client: Option<usize>, what: impl Into<String>) -> Failure {
    Failure {
        client,
        what: what.into(),
    }
}

/// What a run did, for the throughput report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub steps: u64,
    pub clients: u64,
    /// Idle checks made ([`Options::check_idle`]).
    pub checks: u64,
}

/// The virtual clock: every step advances it a little.
struct Clock {
    base: Instant,
    offset: Duration,
}

/// The relay's I/O in the simulation: the virtual clock, and a client socket that takes a
/// random part of what it is offered (the rest the relay copies, as with a full socket).
struct SimIo<'a> {
    clock: &'a Clock,
    rng: &'a mut StdRng,
    received: &'a mut BytesMut,
}

impl Io for SimIo<'_> {
    fn now(&mut self) -> Instant {
        self.clock.base + self.clock.offset
    }

    fn direct(&self) -> bool {
        true
    }

    fn seed(&mut self) -> f64 {
        self.rng.gen_range(-1.0..=1.0)
    }

    fn offer_client(&mut self, bytes: &[u8]) -> usize {
        let n = match self.rng.gen_range(0..4) {
            0 => 0,
            1 => self.rng.gen_range(0..=bytes.len()),
            _ => bytes.len(),
        };
        self.received.extend_from_slice(&bytes[..n]);
        n
    }
}

/// One server connection of the pool: what the relay sees of it, the model behind it, and
/// the bytes in flight either way.
struct SimServer {
    state: ServerState,
    model: ModelServer,
    to_model: BytesMut,
    from_model: BytesMut,
    holder: Option<usize>,
    /// Which server connection of the run this is ([`Report::servers`]).
    conn: usize,
    /// Never taken since its login: not due for an idle check.
    fresh: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Writing (or about to write) its program.
    Running,
    /// Its message in front needs a server and the pool has none free.
    WaitingServer,
    /// Sent Terminate, or its session ended.
    Done,
}

/// One client: its relay, its program and what it has received.
struct SimClient<'p> {
    relay: Relay,
    program: &'p ClientProgram,
    expected: DirectRun,
    next_write: usize,
    /// Bytes written by the client and not yet read by the pooler.
    outbox: BytesMut,
    /// Bytes the client received and has not cut into messages yet, and the messages.
    received: BytesMut,
    frames: Vec<Frame>,
    /// Messages the client waits for before its next write.
    wait_for: usize,
    server: Option<usize>,
    phase: Phase,
    /// It departed from the direct run in a documented way ([`direct::Departure::Ends`]):
    /// compared up to there, it then writes the rest of its program without waiting.
    departed: bool,
}

/// One simulation run of a program through a setup.
pub struct Sim<'p> {
    setup: Setup,
    rng: StdRng,
    clock: Clock,
    db: ModelDb,
    servers: Vec<SimServer>,
    idle: Vec<usize>,
    waiters: VecDeque<usize>,
    /// Clients handed a server while they waited: their message in front runs next.
    resume: Vec<usize>,
    clients: Vec<SimClient<'p>>,
    steps: u64,
    /// Prints every message between pooler and servers (`DROID_SIM_TRACE`, for replays).
    trace: bool,
    /// What each server connection of the run was sent, and the most statements it held.
    traffic: Vec<ServerLog>,
    /// [`Options::forget_unseen`].
    forget_unseen: bool,
    /// [`Options::skip_leave_reset`].
    skip_leave_reset: bool,
    /// [`Options::blind_pin_check`].
    blind_pin_check: bool,
    /// [`Options::forget_settings`].
    forget_settings: bool,
    /// [`Options::check_idle`], and the checks made so far.
    check_idle: bool,
    checks: u64,
    /// The clients that left having prepared statements, as the pool records them.
    departures: Departures,
}

/// The clients that left having prepared statements (`pool::orphans`): the next client to
/// hold a server closes its copies of theirs.
#[derive(Default)]
struct Departures(Vec<u64>);

impl Departed for Departures {
    fn mark(&self) -> u64 {
        self.0.len() as u64
    }

    fn since(&self, seen: u64) -> Option<(Vec<u64>, u64)> {
        let seen = usize::try_from(seen).unwrap_or(usize::MAX);
        let gone = self.0.get(seen..).filter(|g| !g.is_empty())?;
        Some((gone.to_vec(), self.0.len() as u64))
    }
}

/// Server `id`'s protocol state as after its login: what the model reports at startup, as
/// the pooler's server login reads it from ParameterStatus.
fn logged_in(id: usize, model: &ModelServer) -> ServerState {
    let mut state = ServerState::new();
    state.id = id as u64 + 1;
    for (k, v) in model.reported_params() {
        state.set_param(k, v);
    }
    state.note_login();
    state
}

/// The messages in `bytes`, one line each (tag and the start of the body), for traces.
fn describe(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut rest = bytes;
    while rest.len() >= frame::HEADER_LEN {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize + 1;
        let end = len.min(rest.len());
        let body = String::from_utf8_lossy(&rest[frame::HEADER_LEN..end]);
        let body: String = body.chars().take(70).collect();
        out.push_str(&format!("\n    {} {body:?}", rest[0] as char));
        rest = &rest[end..];
    }
    out
}

/// The metrics every simulation reports to (the registry is costly to build, and nothing
/// reads it).
fn metrics() -> Arc<Metrics> {
    thread_local! {
        static METRICS: Arc<Metrics> = Arc::new(Metrics::new());
    }
    METRICS.with(Arc::clone)
}

/// The most steps a run may take before it counts as stuck.
const MAX_STEPS: u64 = 200_000;

/// Runs `program` through `setup` with the schedule of `seed`.
pub fn run(setup: &Setup, program: &Program, seed: u64) -> Result<Stats, Failure> {
    run_report(setup, program, seed).map(|r| r.stats)
}

/// [`run`], and what the servers were sent, for checks beyond agreement with the direct run.
pub fn run_report(setup: &Setup, program: &Program, seed: u64) -> Result<Report, Failure> {
    run_with(setup, program, seed, &Options::default())
}

/// [`run_report`] with `options`.
pub fn run_with(
    setup: &Setup,
    program: &Program,
    seed: u64,
    options: &Options,
) -> Result<Report, Failure> {
    let expected = match &options.expected {
        Some(e) => e.clone(),
        None => direct::run_program(program),
    };
    let mut sim = Sim::new(setup, program, expected, seed);
    sim.forget_unseen = options.forget_unseen;
    sim.skip_leave_reset = options.skip_leave_reset;
    sim.blind_pin_check = options.blind_pin_check;
    sim.forget_settings = options.forget_settings;
    sim.check_idle = options.check_idle;
    if options.pipelined_startup {
        sim.startup_pipelined()?;
    }
    sim.run()?;
    let stats = Stats {
        steps: sim.steps,
        clients: program.clients.len() as u64,
        checks: sim.checks,
    };
    Ok(Report::new(stats, std::mem::take(&mut sim.traffic)))
}

impl<'p> Sim<'p> {
    fn new(setup: &Setup, program: &'p Program, expected: Vec<DirectRun>, seed: u64) -> Self {
        let mut cfg = Config::default();
        cfg.pool.track_prepared = setup.track;
        cfg.pool.size = setup.pool_size;
        if let Some(max) = setup.limits.max_prepared {
            cfg.pool.max_prepared_statements = max;
        }
        if let Some(max) = setup.limits.max_client_prepared {
            cfg.pool.max_client_prepared_statements = max;
        }
        // Small buffers, so that large values go through the pieces path.
        cfg.client.buffer_size = 8 * 1024;
        cfg.pool.session_state = setup.state;
        let policy = Policy::new(&cfg, setup.mode, setup.state);
        let events = Events::new(EventLevel::Off);
        // What every client is told at login: the servers' startup settings (the pool's
        // ParameterStatus values), which a settings sync brings back on a server.
        let mut login = Params::default();
        for (k, v) in ModelServer::new(0).reported_params() {
            login.set(k, v);
        }
        let login = std::sync::Arc::new(login);
        let clients = program
            .clients
            .iter()
            .zip(expected)
            .enumerate()
            .map(|(i, (p, expected))| SimClient {
                relay: Relay::new(
                    i as u64 + 1,
                    ClientParams::new(login.clone()),
                    policy,
                    BytesMut::new(),
                    metrics(),
                    events,
                ),
                program: p,
                expected,
                next_write: 0,
                outbox: BytesMut::new(),
                received: BytesMut::new(),
                frames: Vec::new(),
                wait_for: 0,
                server: None,
                phase: Phase::Running,
                departed: false,
            })
            .collect();
        Sim {
            setup: *setup,
            rng: StdRng::seed_from_u64(seed),
            clock: Clock {
                base: Instant::now(),
                offset: Duration::ZERO,
            },
            db: direct::database(program.clients.len()),
            servers: Vec::new(),
            idle: Vec::new(),
            waiters: VecDeque::new(),
            resume: Vec::new(),
            clients,
            steps: 0,
            trace: std::env::var_os("DROID_SIM_TRACE").is_some(),
            traffic: Vec::new(),
            forget_unseen: false,
            skip_leave_reset: false,
            blind_pin_check: false,
            forget_settings: false,
            check_idle: false,
            checks: 0,
            departures: Departures::default(),
        }
    }

    /// Each client's first write becomes what its relay was made with, as the session task
    /// hands the relay what the client sent behind its startup packet; the relay runs it first.
    fn startup_pipelined(&mut self) -> Result<(), Failure> {
        for c in 0..self.clients.len() {
            self.client_writes(c)?;
            let cl = &mut self.clients[c];
            let first = cl.outbox.split();
            cl.relay.client_in().extend_from_slice(&first);
            self.resume.push(c);
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Failure> {
        loop {
            self.steps += 1;
            if self.steps > MAX_STEPS {
                return Err(fail(None, "more steps than a program needs: a livelock"));
            }
            self.clock.offset += Duration::from_micros(self.rng.gen_range(1..500));
            let actions = self.actions();
            if actions.is_empty() {
                return self.at_rest();
            }
            let a = actions[self.rng.gen_range(0..actions.len())];
            self.step(a)?;
            self.check_invariants()?;
        }
    }

    /// What can happen now.
    fn actions(&self) -> Vec<Action> {
        let mut out: Vec<Action> = self.resume.iter().map(|&c| Action::Resume(c)).collect();
        for (i, c) in self.clients.iter().enumerate() {
            if c.phase == Phase::Done {
                continue;
            }
            let room = match c.phase {
                // Waiting for a server, the driver reads on while the buffer has room.
                Phase::WaitingServer => c.relay.stand(None).room(),
                _ => c.relay.stand(None).read_client(),
            };
            if !c.outbox.is_empty() && room {
                out.push(Action::ClientBytes(i));
            }
            if c.outbox.is_empty() && c.frames.len() >= c.wait_for && c.phase == Phase::Running {
                out.push(Action::ClientWrites(i));
            }
        }
        for (s, srv) in self.servers.iter().enumerate() {
            if !srv.to_model.is_empty() {
                out.push(Action::ToModel(s));
            }
            if !srv.from_model.is_empty() && srv.holder.is_some() {
                out.push(Action::FromModel(s));
            }
        }
        out
    }

    fn step(&mut self, a: Action) -> Result<(), Failure> {
        match a {
            Action::Resume(c) => {
                self.resume.retain(|&r| r != c);
                self.drive_client(c)
            }
            Action::ClientWrites(c) => self.client_writes(c),
            Action::ClientBytes(c) => {
                let cl = &mut self.clients[c];
                let n = self.rng.gen_range(1..=cl.outbox.len());
                let bytes = cl.outbox.split_to(n);
                cl.relay.client_in().extend_from_slice(&bytes);
                if cl.phase == Phase::WaitingServer {
                    return Ok(());
                }
                self.drive_client(c)
            }
            Action::ToModel(s) => {
                let srv = &mut self.servers[s];
                let n = self.rng.gen_range(1..=srv.to_model.len());
                let bytes = srv.to_model.split_to(n);
                let before = srv.from_model.len();
                srv.model.feed(&mut self.db, &bytes, &mut srv.from_model);
                self.traffic[srv.conn].note(&bytes, srv.model.prepared_names().count());
                if self.trace && srv.from_model.len() > before {
                    eprintln!("server {s} answers:{}", describe(&srv.from_model[before..]));
                }
                Ok(())
            }
            Action::FromModel(s) => {
                let srv = &mut self.servers[s];
                let n = self.rng.gen_range(1..=srv.from_model.len());
                let bytes = srv.from_model.split_to(n);
                srv.state.rbuf.extend_from_slice(&bytes);
                let c = srv.holder.expect("only a held server's answer is read");
                self.drive_server(c, s)
            }
        }
    }

    /// The client writes its next write (and the fence after it), or Terminate at the end.
    fn client_writes(&mut self, c: usize) -> Result<(), Failure> {
        let cl = &mut self.clients[c];
        let Some(w) = cl.program.writes.get(cl.next_write) else {
            frontend::terminate(&mut cl.outbox);
            cl.wait_for = usize::MAX;
            cl.next_write += 1;
            return Ok(());
        };
        w.encode(&mut cl.outbox);
        let flushes = cl.program.writes[..cl.next_write]
            .iter()
            .filter(|w| w.end == End::Flush)
            .count();
        let wait_for = match w.end {
            End::Flush => cl.expected.after_flush.get(flushes).copied().unwrap_or(0),
            End::Fence => self.fence_count(c),
        };
        let cl = &mut self.clients[c];
        cl.wait_for = if cl.departed { 0 } else { wait_for };
        cl.next_write += 1;
        Ok(())
    }

    /// How many messages the client has once its current fence is answered: the direct
    /// run's count at the fence's ReadyForQuery.
    fn fence_count(&self, c: usize) -> usize {
        let cl = &self.clients[c];
        let fences = cl.program.writes[..cl.next_write + 1]
            .iter()
            .filter(|w| w.end == End::Fence)
            .count();
        let mut seen = 0;
        for (i, f) in cl.expected.messages.iter().enumerate() {
            if f.tag == backend::EMPTY_QUERY_RESPONSE_TAG {
                seen += 1;
                if seen == fences {
                    return i + 2;
                }
            }
        }
        cl.expected.messages.len()
    }

    /// Feeds what the client sent to its relay, doing what the relay asks, as the session
    /// task does (`client::session::Session::on_client`).
    fn drive_client(&mut self, c: usize) -> Result<(), Failure> {
        loop {
            let held = self.clients[c].server;
            let next = self
                .with_relay(c, |relay, servers, io| {
                    relay.on_client(held.map(|s| &mut servers[s].state), io)
                })
                .map_err(|e| fail(Some(c), format!("the relay ended the session: {e}")))?;
            match next {
                Next::Done => break,
                Next::FlushServer => self.flush_server(c),
                Next::Quit => {
                    self.flush_server(c);
                    self.flush_client(c)?;
                    self.end_session(c);
                    return Ok(());
                }
                // The model has no listening connection: the programs send no LISTEN
                // (and drop no database).
                Next::FreeDatabase(_) => {}
                Next::Subscribe(batch) => {
                    let e = crate::relay::error_fields("0A000", "LISTEN is not modelled".into());
                    let input = Input::Subscribed {
                        subs: &batch.subs,
                        results: vec![Err(e)],
                    };
                    self.with_relay(c, |relay, _, io| relay.handle(None, input, io));
                }
                Next::NeedServer { .. } => {
                    if !self.take_server(c) {
                        self.clients[c].phase = Phase::WaitingServer;
                        self.waiters.push_back(c);
                        return self.finish_round(c);
                    }
                }
            }
        }
        self.finish_round(c)
    }

    /// Feeds what server `s` sent to its holder `c`'s relay.
    fn drive_server(&mut self, c: usize, s: usize) -> Result<(), Failure> {
        let res = self.with_relay(c, |relay, servers, io| {
            relay.on_server(&mut servers[s].state, io)
        });
        match res {
            Ok(()) => {}
            Err(ServerFault::CheckFailed(_)) => return self.replace_server(c, s),
            Err(e) => return Err(fail(Some(c), format!("server fault: {e}"))),
        }
        self.finish_round(c)?;
        if self.servers[s].model.is_closed()
            && self.servers[s].from_model.is_empty()
            && self.servers[s].holder == Some(c)
        {
            return self.server_gone(c, s);
        }
        if self.clients[c].relay.stand(None).pending() && self.clients[c].phase == Phase::Running {
            return self.drive_client(c);
        }
        Ok(())
    }

    /// Server `s`, just taken by `c`, failed its idle check: closed, and `c`'s waiting
    /// messages take another (`client::session::Session::replace_server`).
    fn replace_server(&mut self, c: usize, s: usize) -> Result<(), Failure> {
        self.with_relay(c, |relay, servers, io| {
            relay.handle(Some(&mut servers[s].state), Input::ServerLeft, io)
        });
        self.clients[c].server = None;
        self.close_server(s);
        self.finish_round(c)?;
        self.drive_client(c)
    }

    /// The held server closed (after a FATAL): the session ends, with 08006 unless the
    /// client already has the server's own FATAL.
    fn server_gone(&mut self, c: usize, s: usize) -> Result<(), Failure> {
        let cl = &mut self.clients[c];
        cl.server = None;
        cl.phase = Phase::Done;
        self.note_departure(c);
        {
            let ending = self.with_relay(c, |relay, _, io| relay.finish(None, io, true));
            if ending.tell_server_lost {
                let mut e = crate::relay::error_fields(
                    sqlstate::CONNECTION_FAILURE,
                    "server connection lost".into(),
                );
                e.severity = "FATAL".into();
                backend::error_response(&mut self.clients[c].received, &e);
            }
        }
        // The pool discards the dead server: its slot is free for a new one.
        self.close_server(s);
        self.cut_frames(c)
    }

    /// Runs `f` on client `c`'s relay, with the servers and the simulation's I/O.
    fn with_relay<R>(
        &mut self,
        c: usize,
        f: impl FnOnce(&mut Relay, &mut [SimServer], &mut SimIo<'_>) -> R,
    ) -> R {
        let Sim {
            clients,
            servers,
            rng,
            clock,
            ..
        } = self;
        let cl = &mut clients[c];
        let mut io = SimIo {
            clock,
            rng,
            received: &mut cl.received,
        };
        f(&mut cl.relay, servers, &mut io)
    }

    /// Writes what the relay queued for its server.
    fn flush_server(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        if let Some(s) = cl.server {
            if self.trace && !cl.relay.transmit(Peer::Server).is_empty() {
                eprintln!(
                    "client {c} to server {s}:{}",
                    describe(cl.relay.transmit(Peer::Server))
                );
            }
            self.servers[s]
                .to_model
                .extend_from_slice(cl.relay.transmit(Peer::Server));
        }
        cl.relay.transmitted(Peer::Server);
    }

    /// Delivers what the relay queued for its client.
    fn flush_client(&mut self, c: usize) -> Result<(), Failure> {
        let cl = &mut self.clients[c];
        cl.received
            .extend_from_slice(cl.relay.transmit(Peer::Client));
        cl.relay.transmitted(Peer::Client);
        self.cut_frames(c)
    }

    fn cut_frames(&mut self, c: usize) -> Result<(), Failure> {
        let cl = &mut self.clients[c];
        loop {
            match frame::cut(&mut cl.received, usize::MAX) {
                Ok(Some(f)) => {
                    let i = cl.frames.len();
                    let ends = !cl.departed
                        && cl.expected.messages.get(i).is_some_and(|e| {
                            direct::documented(e, &f, &cl.frames) == Some(direct::Departure::Ends)
                        });
                    if ends {
                        cl.departed = true;
                        cl.wait_for = 0;
                        cl.expected.messages.truncate(i);
                    }
                    cl.frames.push(f);
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(fail(Some(c), format!("client got a broken message: {e}"))),
            }
        }
    }

    /// The end of a round (`Session::finish_round`): the server's bytes out, the server
    /// back to the pool when the relay says so, the client's bytes out.
    fn finish_round(&mut self, c: usize) -> Result<(), Failure> {
        self.flush_server(c);
        self.maybe_release(c);
        let cl = &mut self.clients[c];
        // Freed between transactions as the session frees them.
        let keep = if cl.server.is_some() {
            Keep::All
        } else {
            Keep::None
        };
        cl.relay.end_round(keep);
        self.flush_client(c)
    }

    fn maybe_release(&mut self, c: usize) {
        let Some(s) = self.clients[c].server else {
            return;
        };
        // As the session task does: a change of pin first (the model follows none), then
        // the release.
        let released = self.with_relay(c, |relay, servers, io| loop {
            match relay.poll(Some(&servers[s].state), io) {
                Some(Event::Release(_)) => break true,
                Some(_) => {}
                None => break false,
            }
        });
        if !released {
            return;
        }
        self.clients[c].server = None;
        if self.servers[s].state.rbuf.is_empty() {
            self.give_back(s);
        } else {
            // As the pool does with a server that spoke after its transaction ended.
            self.close_server(s);
        }
    }

    /// A server goes back to the pool: to the first client waiting for one (as the pool
    /// hands it to its first waiter), else to the idle list.
    fn give_back(&mut self, s: usize) {
        self.servers[s].holder = None;
        self.servers[s].state.trim_buffers();
        self.idle.push(s);
        while let Some(w) = self.waiters.pop_front() {
            if self.clients[w].phase != Phase::WaitingServer {
                continue;
            }
            self.clients[w].phase = Phase::Running;
            if self.take_server(w) {
                // Its message in front is handled on a step of its own, as the driver
                // resumes after its wait.
                self.resume.push(w);
            }
            break;
        }
    }

    /// Takes a free server (or makes one, up to the pool's size) for client `c`.
    fn take_server(&mut self, c: usize) -> bool {
        let s = match self.idle.pop() {
            Some(s) => s,
            None if self.servers.len() < self.setup.pool_size => {
                let id = self.servers.len();
                let model = ModelServer::new(1000 + id as i32).blind(self.blind_pin_check);
                self.traffic.push(ServerLog::default());
                self.servers.push(SimServer {
                    state: logged_in(id, &model),
                    model,
                    to_model: BytesMut::new(),
                    from_model: BytesMut::new(),
                    holder: None,
                    conn: self.traffic.len() - 1,
                    fresh: true,
                });
                id
            }
            None => return false,
        };
        self.servers[s].holder = Some(c);
        if self.forget_unseen {
            self.servers[s].state.unseen = None;
        }
        if self.forget_settings {
            // What the server reports and holds taken for what it logged in with: no sync.
            let state = &mut self.servers[s].state;
            let statements = std::mem::take(&mut state.statements);
            let unseen = state.unseen;
            state.reset_as_new();
            state.statements = statements;
            state.unseen = unseen;
        }
        let now = self.clock.base + self.clock.offset;
        let policy = *self.clients[c].relay.policy();
        let due = self.check_idle && !std::mem::replace(&mut self.servers[s].fresh, false);
        let check = due.then(|| {
            self.checks += 1;
            Check {
                sql: if self.checks % 3 == 0 {
                    "CHECK THAT FAILS"
                } else {
                    "SELECT 1"
                },
                within: std::time::Duration::from_secs(1),
            }
        });
        self.clients[c].relay.hold(
            &mut self.servers[s].state,
            Some(policy),
            now,
            &self.departures,
            check,
        );
        self.clients[c].server = Some(s);
        true
    }

    /// The session ends (Terminate): its server goes back, reset first, or is closed, as the
    /// relay decides.
    fn end_session(&mut self, c: usize) {
        let server = self.clients[c].server.take();
        let leave = self.with_relay(c, |relay, servers, io| {
            relay
                .finish(server.map(|s| &servers[s].state), io, true)
                .leave
        });
        self.clients[c].phase = Phase::Done;
        self.note_departure(c);
        if let Some(s) = server {
            match leave {
                _ if self.servers[s].model.is_closed() => self.close_server(s),
                Some(Leave::Return) => self.give_back(s),
                Some(Leave::Reset { .. }) if self.skip_leave_reset => self.give_back(s),
                Some(Leave::Reset { .. }) => self.reset(s),
                Some(Leave::Close) | None => self.close_server(s),
            }
        }
    }

    /// A client that prepared statements left (the session's end, `Session`'s drop):
    /// its servers' copies of them are for the next clients to close.
    fn note_departure(&mut self, c: usize) {
        let relay = &self.clients[c].relay;
        if relay.left_statements() {
            self.departures.0.push(relay.id());
        }
    }

    /// Session mode's reset before a server is used again (`pool.reset_query`, DISCARD ALL
    /// by default), run to its end through the machine the pooler's reset task drives
    /// ([`Reset`]) before the check-in; a reset that fails closes the server.
    fn reset(&mut self, s: usize) {
        let srv = &mut self.servers[s];
        let mut answered = BytesMut::new();
        let pending = srv.to_model.split();
        srv.model.feed(&mut self.db, &pending, &mut answered);
        let mut q = BytesMut::new();
        let mut reset = Reset::start("DISCARD ALL", &mut q);
        srv.model.feed(&mut self.db, &q, &mut srv.state.rbuf);
        self.traffic[srv.conn].note(&pending, 0);
        self.traffic[srv.conn].note(&q, 0);
        match reset.on_server(&mut srv.state) {
            Ok(true) => self.give_back(s),
            _ => self.close_server(s),
        }
    }

    /// Closes a server: its model session ends, and its slot in the pool is free again.
    fn close_server(&mut self, s: usize) {
        let srv = &mut self.servers[s];
        srv.model.disconnect(&mut self.db);
        srv.model = ModelServer::new(2000 + s as i32).blind(self.blind_pin_check);
        self.traffic.push(ServerLog::default());
        srv.conn = self.traffic.len() - 1;
        srv.state = logged_in(s, &srv.model);
        srv.to_model.clear();
        srv.from_model.clear();
        srv.holder = None;
        srv.fresh = true;
        self.give_back(s);
    }

    /// Nothing more can happen: every client must be done, with what it expected.
    fn at_rest(&mut self) -> Result<(), Failure> {
        for (i, cl) in self.clients.iter().enumerate() {
            let upto = if cl.departed {
                cl.expected.messages.len()
            } else {
                cl.frames.len()
            };
            if let Some(d) = direct::first_difference(&cl.expected.messages, &cl.frames[..upto]) {
                return Err(fail(Some(i), d));
            }
            if cl.departed {
                continue;
            }
            if cl.phase != Phase::Done && !cl.expected.closed && !cl.expected.stalled {
                return Err(fail(
                    Some(i),
                    format!("stuck in {:?} after write {}", cl.phase, cl.next_write),
                ));
            }
        }
        Ok(())
    }

    /// The invariants, after every step.
    fn check_invariants(&self) -> Result<(), Failure> {
        for &s in &self.idle {
            let srv = &self.servers[s];
            // Bytes still on their way to it may only be ones that owe nothing (a Flush, COPY
            // data a finished COPY drops): the model must not have answered anything.
            if !srv.state.replies.is_empty()
                || !srv.state.rbuf.is_empty()
                || !srv.from_model.is_empty()
            {
                return Err(fail(
                    None,
                    format!("server {s} is back in the pool owing replies"),
                ));
            }
            if srv.model.tx_status() != backend::TX_IDLE || srv.model.in_copy_in() {
                return Err(fail(
                    None,
                    format!("server {s} is back in the pool inside a transaction or a COPY"),
                ));
            }
            for name in srv.state.statements.names() {
                let name = String::from_utf8_lossy(name);
                if !srv.model.has_prepared(&name) {
                    return Err(fail(
                        None,
                        format!("the relay believes server {s} holds {name}, which it lacks"),
                    ));
                }
            }
        }
        for (i, cl) in self.clients.iter().enumerate() {
            let bound = cl.relay.policy().max_message() + cl.relay.policy().buffer();
            if cl.relay.client_buffered() > bound {
                return Err(fail(Some(i), "client buffer past its bound"));
            }
            // What the client received must so far agree with the direct run.
            let n = cl.frames.len().min(cl.expected.messages.len());
            if let Some(d) = direct::first_difference(&cl.expected.messages[..n], &cl.frames[..n]) {
                return Err(fail(Some(i), d));
            }
            if cl.frames.len() > cl.expected.messages.len() && !cl.departed {
                return Err(fail(Some(i), "received more than directly"));
            }
        }
        Ok(())
    }
}

/// One thing that can happen.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// A client handed a server after waiting goes on.
    Resume(usize),
    /// The client's next write (or Terminate).
    ClientWrites(usize),
    /// Some of the client's written bytes reach the pooler.
    ClientBytes(usize),
    /// Some of the pooler's bytes reach server `s`.
    ToModel(usize),
    /// Some of server `s`'s answer reaches the pooler.
    FromModel(usize),
}
