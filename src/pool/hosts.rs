//! The server hosts one pooler knows, each with its own circuit breaker and role record,
//! shared by every pool that uses it; and a pool's route: its hosts, which roles fit, and the
//! order a login tries them in (listed or shuffled, hosts known to fit first, hosts known not
//! to fit last, so a login prefers the others but still finds a promoted standby).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::Rng;

use super::settings::RouteSpec;
use crate::config::{HostAddr, LoadBalanceHosts, TargetSessionAttrs};
use crate::events::Events;
use crate::metrics::Metrics;
use crate::resilience::{BreakerConfig, CircuitBreaker};
use crate::server::{HostRecord, Role, Topology};

/// A host that answered but did not fit is logged in to again (to see whether it was
/// promoted) at most this often by one login loop; a report of its new role wakes the loop
/// sooner. Short, so a promotion is found within a fraction of a second; the logins it costs
/// go to a server that is up and answering.
pub const RECHECK: Duration = Duration::from_millis(250);

/// One server host: its breaker (a down host fails fast) and what it is.
pub struct Host {
    pub record: Arc<HostRecord>,
    pub breaker: CircuitBreaker,
}

/// Every host of the pooler by address, made on first use.
pub struct Hosts {
    map: Mutex<HashMap<HostAddr, Arc<Host>>>,
    topology: Arc<Topology>,
    breaker: BreakerConfig,
}

impl Hosts {
    pub fn new(breaker: BreakerConfig) -> Hosts {
        Hosts {
            map: Mutex::new(HashMap::new()),
            topology: Arc::new(Topology::default()),
            breaker,
        }
    }

    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    /// The host at `addr`, made (with a closed breaker and no role known) on first use.
    pub fn get(&self, addr: &HostAddr) -> Arc<Host> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(addr.clone())
            .or_insert_with(|| {
                // Config::validate has checked the settings; the defaults are the fallback.
                let breaker = CircuitBreaker::new(&self.breaker)
                    .or_else(|_| CircuitBreaker::new(&Default::default()))
                    .expect("the default breaker settings are valid");
                Arc::new(Host {
                    record: Arc::new(HostRecord::new(addr.clone(), self.topology.clone())),
                    breaker,
                })
            })
            .clone()
    }

    fn all(&self) -> Vec<Arc<Host>> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.values().cloned().collect()
    }

    /// Publishes each role learned since the last call: `droidpool_server_role`, and a
    /// `[POOL]` line when a host's role changed. Whichever pool notices a change first
    /// publishes it, once.
    pub fn publish_roles(&self, metrics: &Metrics, events: &Events) {
        for host in self.all() {
            let Some((now, before)) = host.record.take_change() else {
                continue;
            };
            let name = host.record.name.as_str();
            for role in [Role::PRIMARY, Role::STANDBY] {
                let on = role.label() == now.label();
                metrics
                    .servers
                    .role
                    .with_label_values(&[name, role.label()])
                    .set(i64::from(on));
            }
            // A change of role, not the first one learned: the event lines are a contract, and
            // a pooler with one host must print what it always printed.
            match before.map(Role::label) {
                Some(was) if was != now.label() => {
                    tracing::warn!(host = name, role = now.label(), was, "server role changed");
                    events.host_role(name, now.label(), was);
                }
                Some(_) => {}
                None => tracing::info!(host = name, role = now.label(), "server role"),
            }
        }
    }
}

/// A pool's hosts and which of them fit.
pub struct Route {
    pub spec: RouteSpec,
    pub hosts: Vec<Arc<Host>>,
}

impl Route {
    pub fn new(spec: RouteSpec, hosts: &Hosts) -> Route {
        let list = spec.hosts.iter().map(|a| hosts.get(a)).collect();
        Route { spec, hosts: list }
    }

    pub fn tsa(&self) -> TargetSessionAttrs {
        self.spec.tsa
    }

    /// Whether a server on `host` may serve this pool now: its host is still one of the
    /// pool's and not known to be of a role that does not fit.
    pub fn admits(&self, host: &HostRecord) -> Result<(), super::CloseReason> {
        if !self.hosts.iter().any(|h| h.record.addr == host.addr) {
            return Err(super::CloseReason::Retired);
        }
        match host.role() {
            Some(r) if !r.fits(self.spec.tsa) => Err(super::CloseReason::Role),
            _ => Ok(()),
        }
    }

    /// Positions in `hosts`, in the order a login tries them.
    pub fn order<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.hosts.len()).collect();
        if self.spec.lb == LoadBalanceHosts::Random {
            order.shuffle(rng);
        }
        let tsa = self.spec.tsa;
        // A stable sort: the listed (or drawn) order holds within each rank.
        order.sort_by_key(|&i| rank(tsa, self.hosts[i].record.role()));
        order
    }

    /// Every host's breaker is open or half-open: no login may start on its own.
    pub fn all_open(&self) -> bool {
        self.hosts.iter().all(|h| !h.breaker.is_closed())
    }

    /// The shortest time until some host's breaker admits a probe.
    pub fn retry_after(&self, now: Instant) -> Duration {
        self.hosts
            .iter()
            .map(|h| h.breaker.retry_after(now))
            .min()
            .unwrap_or_default()
    }
}

/// 0: known to fit (for prefer-standby: a standby), 1: unknown, 2: known not to fit (for
/// prefer-standby: a primary, the fallback). `any` keeps the listed order.
fn rank(tsa: TargetSessionAttrs, role: Option<Role>) -> u8 {
    match (tsa, role) {
        (TargetSessionAttrs::Any, _) => 0,
        (_, None) => 1,
        (TargetSessionAttrs::PreferStandby, Some(r)) => {
            if r.standby {
                0
            } else {
                2
            }
        }
        (t, Some(r)) => {
            if r.fits(t) {
                0
            } else {
                2
            }
        }
    }
}

/// When a host known not to fit `tsa` may be logged in to again, if not yet.
pub fn recheck_at(host: &HostRecord, tsa: TargetSessionAttrs, now: Instant) -> Option<Instant> {
    let misfit = host.role().is_some_and(|r| !r.fits(tsa));
    let at = host.learned_at()? + RECHECK;
    (misfit && at > now).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn route(tsa: TargetSessionAttrs, lb: LoadBalanceHosts, hosts: &Hosts) -> Route {
        let spec = RouteSpec {
            dbname: "db".into(),
            hosts: ["a:1", "b:1", "c:1"]
                .iter()
                .map(|h| HostAddr::parse(h).unwrap())
                .collect(),
            tsa,
            lb,
        };
        Route::new(spec, hosts)
    }

    #[test]
    fn known_fits_first_known_misfits_last() {
        let hosts = Hosts::new(BreakerConfig::default());
        let rw = route(
            TargetSessionAttrs::ReadWrite,
            LoadBalanceHosts::Disable,
            &hosts,
        );
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        assert_eq!(
            rw.order(&mut rng),
            vec![0, 1, 2],
            "nothing known: as listed"
        );
        let now = Instant::now();
        rw.hosts[0].record.learned(Role::STANDBY, now);
        rw.hosts[2].record.learned(Role::PRIMARY, now);
        assert_eq!(rw.order(&mut rng), vec![2, 1, 0]);
        let ps = route(
            TargetSessionAttrs::PreferStandby,
            LoadBalanceHosts::Disable,
            &hosts,
        );
        assert_eq!(
            ps.order(&mut rng),
            vec![0, 1, 2],
            "the standby first, the primary last"
        );
        let any = route(TargetSessionAttrs::Any, LoadBalanceHosts::Disable, &hosts);
        assert_eq!(any.order(&mut rng), vec![0, 1, 2]);
        // The standby is rechecked only after RECHECK; a host that fits never waits.
        assert_eq!(
            recheck_at(&rw.hosts[0].record, rw.tsa(), now),
            Some(now + RECHECK)
        );
        assert_eq!(
            recheck_at(&rw.hosts[0].record, rw.tsa(), now + RECHECK),
            None
        );
        assert_eq!(recheck_at(&rw.hosts[2].record, rw.tsa(), now), None);
        assert!(rw.admits(&rw.hosts[2].record).is_ok());
        assert_eq!(
            rw.admits(&rw.hosts[0].record),
            Err(super::super::CloseReason::Role)
        );
        assert!(ps.admits(&rw.hosts[2].record).is_ok());
    }

    #[test]
    fn random_order_rotates_among_equals() {
        let hosts = Hosts::new(BreakerConfig::default());
        let r = route(TargetSessionAttrs::Any, LoadBalanceHosts::Random, &hosts);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut firsts = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let o = r.order(&mut rng);
            assert_eq!(o.len(), 3);
            firsts.insert(o[0]);
        }
        assert_eq!(firsts.len(), 3, "every host comes first sometimes");
    }
}
