//! Clients behind reverse proxies (`--trusted-proxy`): only when the peer is a proxy
//! we trust is its `Forwarded` (RFC 7239) or `X-Forwarded-For` header believed, and
//! then the client is the rightmost hop that is not one of our proxies (hops to its
//! left were written by the client and prove nothing).

use std::net::IpAddr;

use axum::http::HeaderMap;

use crate::error::{Error, Result};

/// An address block such as `10.0.0.0/8`, `::1/128` or a lone address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    pub fn parse(text: &str) -> std::result::Result<Cidr, String> {
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let net: IpAddr = addr.parse().map_err(|_| format!("`{}` is not an IP address or CIDR block", crate::error::shorten(text)))?;
        let net = net.to_canonical();
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| format!("`/{p}` is not a prefix length of 0 to {max}"))?,
        };
        Ok(Cidr { net, prefix })
    }

    /// Whether `ip` lies in the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                masked(u32::from(n) as u128, 32, self.prefix) == masked(u32::from(a) as u128, 32, self.prefix)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => masked(u128::from(n), 128, self.prefix) == masked(u128::from(a), 128, self.prefix),
            _ => false,
        }
    }
}

/// The top `prefix` bits of a `width`-bit address.
fn masked(bits: u128, width: u32, prefix: u8) -> u128 {
    let host_bits = width - prefix as u32;
    if host_bits >= 128 {
        0
    } else {
        bits >> host_bits
    }
}

/// The proxies whose forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// Parses the `--trusted-proxy` values.
    pub fn parse(values: &[String]) -> Result<TrustedProxies> {
        values.iter().map(|v| Cidr::parse(v).map_err(|m| Error::bad("trusted-proxy", m))).collect::<Result<Vec<_>>>().map(TrustedProxies)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client's address for a request from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let mut nearest = peer;
        for hop in forwarded_hops(headers).iter().rev() {
            match hop {
                Some(ip) if self.trusts(*ip) => nearest = *ip,
                Some(ip) => return *ip,
                // `unknown` or an obfuscated name: nothing left of it can be placed,
                // so the last proxy that forwarded it stands for the client.
                None => return nearest,
            }
        }
        nearest
    }
}

/// The hops of `Forwarded` (its `for=` values) or, without it, `X-Forwarded-For`,
/// leftmost first; `None` for a hop that is not an address.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let forwarded: Vec<&str> = headers.get_all("forwarded").iter().filter_map(|v| v.to_str().ok()).collect();
    if !forwarded.is_empty() {
        return forwarded
            .iter()
            .flat_map(|v| v.split(','))
            .filter_map(|element| {
                element.split(';').find_map(|pair| {
                    let (k, v) = pair.split_once('=')?;
                    k.trim().eq_ignore_ascii_case("for").then(|| node_address(v.trim().trim_matches('"')))
                })
            })
            .collect();
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|hop| node_address(hop.trim()))
        .collect()
}

/// The address of a node: `1.2.3.4`, `1.2.3.4:80`, `[::1]`, `[::1]:80` or a bare IPv6.
fn node_address(node: &str) -> Option<IpAddr> {
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split(']').next()?.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let (host, port) = node.rsplit_once(':')?;
    port.chars().all(|c| c.is_ascii_digit()).then(|| host.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_contain_their_addresses() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains(ip("10.1.200.3")) && !c.contains(ip("10.2.0.1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("127.0.0.1").unwrap().contains(ip("::ffff:127.0.0.1")));
        assert!(Cidr::parse("fd00::/8").unwrap().contains(ip("fd12::1")));
        assert!(!Cidr::parse("fd00::/8").unwrap().contains(ip("10.0.0.1")));
        assert!(Cidr::parse("10.0.0.0/33").is_err() && Cidr::parse("proxy.local").is_err());
    }

    #[test]
    fn only_a_trusted_peer_is_believed() {
        let none = TrustedProxies::default();
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(none.client(ip("127.0.0.1"), &h), ip("127.0.0.1"));
        let lo = TrustedProxies::parse(&["127.0.0.1/32".into()]).unwrap();
        assert_eq!(lo.client(ip("127.0.0.1"), &h), ip("203.0.113.9"));
        assert_eq!(lo.client(ip("198.51.100.7"), &h), ip("198.51.100.7"));
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let p = TrustedProxies::parse(&["10.0.0.0/8".into()]).unwrap();
        // The client claimed to be 1.1.1.1; our two proxies saw 203.0.113.9.
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9"), ("x-forwarded-for", "10.0.0.2")]);
        assert_eq!(p.client(ip("10.0.0.1"), &h), ip("203.0.113.9"));
        let f = headers(&[("forwarded", "for=1.1.1.1;proto=https, for=\"[2001:db8::7]:4711\""), ("forwarded", "for=10.0.0.2")]);
        assert_eq!(p.client(ip("10.0.0.1"), &f), ip("2001:db8::7"));
        // Forwarded wins over X-Forwarded-For; an obfuscated hop stops the walk.
        let both = headers(&[("forwarded", "for=_hidden, for=10.0.0.3"), ("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(p.client(ip("10.0.0.1"), &both), ip("10.0.0.3"));
        // Every hop trusted: the leftmost is the client.
        assert_eq!(p.client(ip("10.0.0.1"), &headers(&[("x-forwarded-for", "10.9.9.9")])), ip("10.9.9.9"));
        assert_eq!(p.client(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
    }
}
