//! Admission of connections that have not logged in yet: at most `max_pending` in all and
//! `max_per_ip` from one address, so sockets that never finish their startup cannot take the
//! slots real clients need. Beyond the per-address cap a new connection is refused at once;
//! beyond the total cap the oldest pending login is ended instead, so a flood from many
//! addresses cannot lock real clients out either (its sockets only evict each other).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

/// Why a pending login was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its address already has `max_per_ip` logins pending: refused at accept.
    PerIp,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Pending logins by arrival: the first is the oldest.
    by_age: BTreeMap<u64, (IpAddr, CancellationToken)>,
    per_ip: HashMap<IpAddr, usize>,
}

/// The pending logins of one listener.
#[derive(Debug, Default)]
pub struct PendingLogins {
    state: Mutex<State>,
}

/// One admitted login; dropping it (login done, failed or abandoned) frees its slot.
#[derive(Debug)]
pub struct Pending {
    logins: Arc<PendingLogins>,
    id: u64,
    ip: IpAddr,
    /// Fired when a newer login needed the slot: the login ends with 53300.
    evicted: CancellationToken,
}

impl Pending {
    /// Completes when this login was ended to make room for a newer one.
    pub async fn evicted(&self) {
        self.evicted.cancelled().await
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut st = self.logins.lock();
        if st.by_age.remove(&self.id).is_some() {
            st.release_ip(self.ip);
        }
    }
}

impl State {
    fn release_ip(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }
}

impl PendingLogins {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `ip`, or refuses it. Returns the admission and how many older
    /// pending logins were ended to make room (each told 53300 by its own task).
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        max_pending: usize,
        max_per_ip: usize,
    ) -> Result<(Pending, usize), Refusal> {
        let mut st = self.lock();
        if st.per_ip.get(&ip).copied().unwrap_or(0) >= max_per_ip {
            return Err(Refusal::PerIp);
        }
        let mut evicted = 0;
        while st.by_age.len() >= max_pending.max(1) {
            let Some((_, (old_ip, token))) = st.by_age.pop_first() else {
                break;
            };
            st.release_ip(old_ip);
            token.cancel();
            evicted += 1;
        }
        st.next += 1;
        let id = st.next;
        let token = CancellationToken::new();
        st.by_age.insert(id, (ip, token.clone()));
        *st.per_ip.entry(ip).or_insert(0) += 1;
        let pending = Pending {
            logins: self.clone(),
            id,
            ip,
            evicted: token,
        };
        Ok((pending, evicted))
    }

    /// Logins pending now.
    pub fn len(&self) -> usize {
        self.lock().by_age.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    #[test]
    fn per_address_cap_refuses_new_ones() {
        let logins = Arc::new(PendingLogins::default());
        let a = logins.admit(ip(2), 10, 2).unwrap();
        let b = logins.admit(ip(2), 10, 2).unwrap();
        assert_eq!(logins.admit(ip(2), 10, 2).unwrap_err(), Refusal::PerIp);
        // Another address is not affected.
        let c = logins.admit(ip(3), 10, 2).unwrap();
        drop(a);
        let d = logins.admit(ip(2), 10, 2).unwrap();
        assert_eq!(logins.len(), 3);
        drop((b, c, d));
        assert!(logins.is_empty());
        assert!(logins.lock().per_ip.is_empty());
    }

    #[test]
    fn total_cap_ends_the_oldest_login() {
        let logins = Arc::new(PendingLogins::default());
        let (first, _) = logins.admit(ip(2), 2, 10).unwrap();
        let (second, _) = logins.admit(ip(3), 2, 10).unwrap();
        let (third, evicted) = logins.admit(ip(4), 2, 10).unwrap();
        assert_eq!(evicted, 1);
        assert!(first.evicted.is_cancelled());
        assert!(!second.evicted.is_cancelled() && !third.evicted.is_cancelled());
        assert_eq!(logins.len(), 2);
        // The evicted login's own drop frees nothing twice.
        drop(first);
        assert_eq!(logins.len(), 2);
        assert_eq!(logins.lock().per_ip.get(&ip(2)), None);
        drop((second, third));
        assert!(logins.is_empty());
    }
}
