//! The platform's resolver for boxes: boxd forwards every name that is not
//! the environment's as a `dns:udp`/`dns:tcp` stream (`psbx_wire::dns`), and
//! the server asks its configured upstreams (`boxes.egress.resolvers`; by
//! default the host's own, from `/etc/resolv.conf`) and relays the answer
//! byte for byte. Boxes never reach a resolver over their network card.
//!
//! A box's queries are metered (review-2 M4): at most [`PER_BOX`] under way,
//! and a [`Bucket`] of [`BURST`] queries and [`PER_SECOND`] more each second
//! (a query past it is refused before anything is sent upstream: boxd
//! answers SERVFAIL), so that one box cannot use up the upstreams' own
//! limits (a VPC resolver's 1024 packets per second per interface) for the
//! server and every other box.
//!
//! "Public DNS only" is the upstreams' property: a resolver that also serves
//! the operator's private zones (a VPC's, an office's) answers them to boxes
//! too, so such a host should name public resolvers here.

use crate::meter::Bucket;
use psbx_wire::dns::{Transport, ask, read_framed, write_framed};
use psbx_wire::frame::code;
use psbx_wire::mux::Incoming;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;

/// How long boxd may take to send its query once the stream is open.
const QUERY_WAIT: Duration = Duration::from_secs(5);
/// Queries one box may have under way at once; more are refused.
pub const PER_BOX: usize = 64;
/// Queries one box may send at once.
pub const BURST: u32 = 100;
/// Queries one box may send each second after its burst.
pub const PER_SECOND: u32 = 50;

/// The upstreams from configuration: `a.b.c.d`, `a.b.c.d:port`, `[v6]:port`
/// or a bare IPv6 address; `None` when none are configured.
pub fn configured(key: &str, list: &[String]) -> Result<Option<Vec<SocketAddr>>, String> {
    if list.is_empty() {
        return Ok(None);
    }
    list.iter()
        .map(|text| {
            let text = text.trim();
            text.parse::<SocketAddr>()
                .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| {
                    format!(
                        "{key}: {text:?} is not a resolver address (such as 1.1.1.1 or 1.1.1.1:53)"
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The `nameserver`s of a resolv.conf text, on port 53.
pub fn from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        // An IPv6 address may carry a zone (`fe80::1%eth0`): not supported.
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The relay of one box: its queries share a budget of [`PER_BOX`] and
/// its rate.
#[derive(Clone)]
pub struct Relay {
    upstreams: Arc<Vec<SocketAddr>>,
    budget: Arc<Semaphore>,
    rate: Arc<Mutex<Bucket>>,
}

impl Relay {
    pub fn new(upstreams: Arc<Vec<SocketAddr>>) -> Self {
        Self {
            upstreams,
            budget: Arc::new(Semaphore::new(PER_BOX)),
            rate: Arc::new(Mutex::new(Bucket::new(BURST, f64::from(PER_SECOND)))),
        }
    }

    /// Answers one query stream (call it for a DNS target only).
    pub async fn serve(&self, incoming: Incoming, transport: Transport) {
        if !self
            .rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            return incoming.refuse(
                code::TOO_MANY_STREAMS,
                &format!("this box sends more than {PER_SECOND} DNS queries a second"),
            );
        }
        let Ok(_permit) = self.budget.clone().try_acquire_owned() else {
            return incoming.refuse(
                503,
                &format!("this box has {PER_BOX} DNS queries under way already"),
            );
        };
        let mut stream = incoming.accept();
        let Ok(Ok(query)) = tokio::time::timeout(QUERY_WAIT, read_framed(&mut stream)).await else {
            return stream.reset("no DNS query came");
        };
        match ask(&self.upstreams, &query, transport).await {
            Some(answer) => {
                if write_framed(&mut stream, &answer).await.is_ok() {
                    let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
                }
            }
            // boxd answers SERVFAIL.
            None => stream.reset("no resolver answered"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_resolvers_take_ports_and_default_to_53() {
        let list = [
            "198.51.100.53",
            "198.51.100.54:5353",
            "2001:db8::53",
            "[2001:db8::1]:53",
        ]
        .map(str::to_owned);
        let got = configured("boxes.egress.resolvers", &list)
            .unwrap()
            .unwrap();
        assert_eq!(
            got,
            vec![
                "198.51.100.53:53".parse::<SocketAddr>().unwrap(),
                "198.51.100.54:5353".parse().unwrap(),
                "[2001:db8::53]:53".parse().unwrap(),
                "[2001:db8::1]:53".parse().unwrap(),
            ]
        );
        assert_eq!(configured("k", &[]).unwrap(), None);
        let e = configured("boxes.egress.resolvers", &["dns.google".to_owned()]).unwrap_err();
        assert!(
            e.contains("boxes.egress.resolvers") && e.contains("dns.google"),
            "{e}"
        );
    }

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# x\nsearch lan\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\n\
                    nameserver 2001:db8::53\noptions edns0\n";
        assert_eq!(
            from_resolv_conf(text),
            vec![
                "10.255.255.53:53".parse::<SocketAddr>().unwrap(),
                "[2001:db8::53]:53".parse().unwrap()
            ]
        );
    }
}
