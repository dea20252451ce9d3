//! Who may hold a connection to the `/metrics` server: at most [`Limits::per_peer`] from one
//! peer and [`Limits::total`] in all, so one client (or one host's worth of clients) can never
//! fill the server and a scrape from anywhere else is always let in.
//!
//! A peer is an IPv4 address, or an IPv6 /64 (one host is usually given a whole /64, so counting
//! single IPv6 addresses would let it open a connection from each); an IPv4-mapped IPv6 address
//! is its IPv4 address.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr},
    sync::{Arc, Mutex},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many connections may be open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub total: usize,
    pub per_peer: usize,
}

/// The connections open now, by peer.
#[derive(Clone, Debug)]
pub struct Peers {
    limits: Limits,
    total: Arc<Semaphore>,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One admitted connection: its place is given back when this is dropped.
#[derive(Debug)]
pub struct Admitted {
    _total: OwnedSemaphorePermit,
    peer: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// Why a connection was turned away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This peer holds its share already.
    Peer,
    /// Every place is taken.
    Full,
}

/// The key a peer's connections are counted under.
fn peer_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Peers {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            total: Arc::new(Semaphore::new(limits.total)),
            open: Arc::default(),
        }
    }

    /// Admits a connection from `ip`, or says why not.
    pub fn admit(&self, ip: IpAddr) -> Result<Admitted, Refused> {
        let peer = peer_of(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(peer).or_insert(0);
        if *n >= self.limits.per_peer {
            return Err(Refused::Peer);
        }
        let Ok(permit) = self.total.clone().try_acquire_owned() else {
            if *n == 0 {
                open.remove(&peer);
            }
            return Err(Refused::Full);
        };
        *n += 1;
        Ok(Admitted {
            _total: permit,
            peer,
            open: self.open.clone(),
        })
    }

    /// Connections open now from `ip`'s peer.
    pub fn open_from(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&peer_of(ip)).copied().unwrap_or(0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_peer_cannot_take_every_place() {
        let p = Peers::new(Limits {
            total: 5,
            per_peer: 2,
        });
        let a: Vec<_> = (0..2).map(|_| p.admit(ip("10.0.0.1")).unwrap()).collect();
        assert_eq!(p.admit(ip("10.0.0.1")).unwrap_err(), Refused::Peer);
        // The same host by its IPv4-mapped IPv6 address is the same peer.
        assert_eq!(p.admit(ip("::ffff:10.0.0.1")).unwrap_err(), Refused::Peer);
        let b: Vec<_> = (0..2).map(|_| p.admit(ip("10.0.0.2")).unwrap()).collect();
        let c = p.admit(ip("10.0.0.3")).unwrap();
        assert_eq!(p.admit(ip("10.0.0.4")).unwrap_err(), Refused::Full);
        assert_eq!(
            p.open_from(ip("10.0.0.4")),
            0,
            "a refused peer holds nothing"
        );
        // A place given back is free again, for any peer.
        drop(c);
        assert_eq!(p.open_from(ip("10.0.0.3")), 0);
        let d = p.admit(ip("10.0.0.4")).unwrap();
        drop((a, b, d));
        assert!(p.open.lock().unwrap().is_empty());
    }

    #[test]
    fn an_ipv6_host_is_its_64() {
        let p = Peers::new(Limits {
            total: 10,
            per_peer: 1,
        });
        let _a = p.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            p.admit(ip("2001:db8:1:2:ffff::9")).unwrap_err(),
            Refused::Peer
        );
        let _b = p.admit(ip("2001:db8:1:3::1")).unwrap();
    }
}
