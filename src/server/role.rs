//! What a server is (primary or standby, read-only by default or not): learned at login from
//! the `in_hot_standby` and `default_transaction_read_only` ParameterStatus (PostgreSQL 14+)
//! or, where they are not reported, by asking; and the record of one host that every
//! connection to it keeps current, so every pool sees a promotion as soon as one connection
//! reports it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::BytesMut;
use tokio::sync::watch;

use super::{read_frame, ServerConn, ServerError};
use crate::config::{HostAddr, TargetSessionAttrs};
use crate::params::Params;
use crate::protocol::{backend, frontend};

/// A server's role as libpq's `target_session_attrs` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// In recovery: a hot standby.
    pub standby: bool,
    /// `default_transaction_read_only` on.
    pub read_only: bool,
}

impl Role {
    pub const PRIMARY: Role = Role {
        standby: false,
        read_only: false,
    };
    pub const STANDBY: Role = Role {
        standby: true,
        read_only: false,
    };

    /// The role a login reported, if the server reports both parameters (PostgreSQL 14+).
    pub fn from_params(p: &Params) -> Option<Role> {
        let on = |name: &str| p.get(name).map(|v| v == "on");
        Some(Role {
            standby: on("in_hot_standby")?,
            read_only: on("default_transaction_read_only")?,
        })
    }

    /// Whether a server in this role fits `want`; `prefer-standby` takes any server (a
    /// standby is only tried first).
    pub fn fits(self, want: TargetSessionAttrs) -> bool {
        use TargetSessionAttrs as T;
        match want {
            T::Any | T::PreferStandby => true,
            T::ReadWrite => !self.standby && !self.read_only,
            T::ReadOnly => self.standby || self.read_only,
            T::Primary => !self.standby,
            T::Standby => self.standby,
        }
    }

    /// The metric and event label: `primary` or `standby`.
    pub fn label(self) -> &'static str {
        if self.standby {
            "standby"
        } else {
            "primary"
        }
    }

    fn encode(self) -> u8 {
        1 | (u8::from(self.standby) << 1) | (u8::from(self.read_only) << 2)
    }

    fn decode(b: u8) -> Option<Role> {
        (b & 1 != 0).then_some(Role {
            standby: b & 2 != 0,
            read_only: b & 4 != 0,
        })
    }
}

/// What servers that do not report their role are asked (libpq asks `SHOW
/// transaction_read_only` for the same purpose). The server's default, not this session's
/// setting: a client's `SET default_transaction_read_only` says nothing about the host.
const ASK_ROLE: &str = "SELECT pg_catalog.pg_is_in_recovery(), (SELECT reset_val FROM \
                        pg_catalog.pg_settings WHERE name = 'default_transaction_read_only')";

/// Asks an idle server its role. The caller bounds it in time.
pub async fn ask_role(conn: &mut ServerConn) -> Result<Role, ServerError> {
    let mut out = BytesMut::new();
    frontend::query(&mut out, ASK_ROLE);
    conn.stream.send(&out).await?;
    let mut role = None;
    let mut failed = None;
    loop {
        let f = read_frame(conn).await?;
        match f.tag {
            backend::DATA_ROW_TAG => {
                let cols = backend::parse_data_row(f.body())?;
                if let [Some(recovery), Some(read_only)] = cols[..] {
                    role = Some(Role {
                        standby: recovery == b"t",
                        read_only: read_only == b"on",
                    });
                }
            }
            backend::PARAMETER_STATUS_TAG => {
                let (k, v) = backend::parse_parameter_status(f.body())?;
                conn.set_param(k, v);
            }
            backend::ERROR_RESPONSE_TAG => failed = Some(backend::parse_error(f.body())?),
            backend::READY_FOR_QUERY_TAG => {
                if let Some(e) = failed {
                    return Err(ServerError::Rejected(e));
                }
                if f.body() != [backend::TX_IDLE] {
                    return Err(ServerError::Protocol(
                        "role query left a transaction".into(),
                    ));
                }
                return role
                    .ok_or_else(|| ServerError::Protocol("no answer to the role query".into()));
            }
            _ => {}
        }
    }
}

/// Changes of any host's role: a counter every connection compares against cheaply, and a
/// channel that wakes whoever waits for a change (a held login, a pool's maintenance).
#[derive(Debug)]
pub struct Topology {
    epoch: AtomicU64,
    tx: watch::Sender<u64>,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            epoch: AtomicU64::new(1),
            tx: watch::channel(1).0,
        }
    }
}

impl Topology {
    /// Bumped by every change of a host's role and of a pool's hosts.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn bump(&self) {
        let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        self.tx.send_replace(e);
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

/// One host as every connection to it sees it: its role as last learned, and when.
#[derive(Debug)]
pub struct HostRecord {
    pub addr: HostAddr,
    /// `host:port`, as metrics and events name it.
    pub name: String,
    role: AtomicU8,
    /// The role last published to metrics and events (0: none yet).
    published: AtomicU8,
    learned_at: Mutex<Option<Instant>>,
    topology: Arc<Topology>,
}

impl HostRecord {
    pub fn new(addr: HostAddr, topology: Arc<Topology>) -> HostRecord {
        HostRecord {
            name: addr.name(),
            addr,
            role: AtomicU8::new(0),
            published: AtomicU8::new(0),
            learned_at: Mutex::new(None),
            topology,
        }
    }

    /// The role last learned, if any.
    pub fn role(&self) -> Option<Role> {
        Role::decode(self.role.load(Ordering::Acquire))
    }

    /// When a login last learned the role.
    pub fn learned_at(&self) -> Option<Instant> {
        *self.learned_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what a login (or a question) found at `now`.
    pub fn learned(&self, role: Role, now: Instant) {
        *self.learned_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        self.set(role);
    }

    /// A connection reported `in_hot_standby` (promotion turns it off without a reconnect).
    pub fn reported_hot_standby(&self, on: bool) {
        let read_only = self.role().is_some_and(|r| r.read_only);
        self.set(Role {
            standby: on,
            read_only,
        });
    }

    fn set(&self, role: Role) {
        if self.role.swap(role.encode(), Ordering::AcqRel) != role.encode() {
            self.topology.bump();
        }
    }

    /// The role to publish if it changed since the last publication: `(now, before)`.
    pub fn take_change(&self) -> Option<(Role, Option<Role>)> {
        let now = self.role.load(Ordering::Acquire);
        let before = self.published.swap(now, Ordering::AcqRel);
        (now != before).then(|| Role::decode(now).map(|r| (r, Role::decode(before))))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_fit_as_libpq_says() {
        use TargetSessionAttrs as T;
        let ro_primary = Role {
            standby: false,
            read_only: true,
        };
        let table = [
            (T::Any, [true, true, true]),
            (T::ReadWrite, [true, false, false]),
            (T::ReadOnly, [false, true, true]),
            (T::Primary, [true, true, false]),
            (T::Standby, [false, false, true]),
            (T::PreferStandby, [true, true, true]),
        ];
        for (want, fits) in table {
            let got = [Role::PRIMARY, ro_primary, Role::STANDBY].map(|r| r.fits(want));
            assert_eq!(got, fits, "{want:?}");
        }
        let mut p = Params::default();
        p.set("in_hot_standby", "on");
        assert_eq!(Role::from_params(&p), None, "both parameters are needed");
        p.set("default_transaction_read_only", "off");
        assert_eq!(Role::from_params(&p), Some(Role::STANDBY));
    }

    #[test]
    fn a_change_bumps_the_epoch_once_and_is_published_once() {
        let topo = Arc::new(Topology::default());
        let mut rx = topo.subscribe();
        let h = HostRecord::new(HostAddr::parse("db:5432").unwrap(), topo.clone());
        let e0 = topo.epoch();
        h.learned(Role::STANDBY, Instant::now());
        assert_eq!(topo.epoch(), e0 + 1);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        h.learned(Role::STANDBY, Instant::now());
        assert_eq!(topo.epoch(), e0 + 1, "same role: no change");
        assert_eq!(h.take_change(), Some((Role::STANDBY, None)));
        assert_eq!(h.take_change(), None);
        h.reported_hot_standby(false);
        assert_eq!(h.role(), Some(Role::PRIMARY));
        assert_eq!(h.take_change(), Some((Role::PRIMARY, Some(Role::STANDBY))));
        assert!(rx.has_changed().unwrap());
    }
}
