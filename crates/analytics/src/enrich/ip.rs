//! Client addresses: CIDR ranges (trusted proxies, a site's excluded ranges) and which address of
//! a request is the client's.
//!
//! Forwarding headers are written by whoever sent the request, so they are believed only when the
//! TCP peer is a proxy the operator listed as trusted. Even then, `X-Forwarded-For` is read from
//! the right: each trusted proxy appends the address it received from, so the right-most address
//! that is not a trusted proxy is the first one no trusted party vouches for, and that is the
//! client. Everything to its left could have been sent by the client itself. The ranges use the
//! `ipnet` crate, the usual CIDR type of the Rust networking ecosystem.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::event::RequestHeaders;

/// A list of CIDR ranges, IPv4 and IPv6.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpRanges(Vec<IpNet>);

/// A range that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an IP address or CIDR range")]
pub struct IpRangeError(pub String);

impl IpRanges {
    /// No ranges.
    pub fn new() -> Self {
        IpRanges(Vec::new())
    }

    /// Parses ranges such as `10.0.0.0/8`, `2001:db8::/32`, or single addresses.
    pub fn parse<'a>(ranges: impl IntoIterator<Item = &'a str>) -> Result<Self, IpRangeError> {
        let mut nets = Vec::new();
        for text in ranges {
            let text = text.trim();
            let net = match text.parse::<IpNet>() {
                Ok(net) => net.trunc(),
                Err(_) => text.parse::<IpAddr>().map(IpNet::from).map_err(|_| IpRangeError(text.to_owned()))?,
            };
            nets.push(net);
        }
        Ok(IpRanges(nets))
    }

    /// Whether `ip` is in any range; an IPv4-mapped IPv6 address counts as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The ranges in CIDR notation (`10.0.0.0/8`, `192.0.2.7/32`), sorted, without repeats.
    pub fn texts(&self) -> Vec<String> {
        let mut texts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        texts.sort();
        texts.dedup();
        texts
    }

    /// Whether there are no ranges.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `ip`, with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as dual-stack sockets report IPv4
/// peers) turned into its IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// The client's address: the peer's, unless the peer is a trusted proxy; then, in order, the
/// right-most untrusted address of `X-Forwarded-For`, `CF-Connecting-IP`, `X-Real-IP`, and the peer
/// when none of those holds an address.
pub fn client_ip(peer: IpAddr, headers: &RequestHeaders, trusted_proxies: &IpRanges) -> IpAddr {
    let peer = canonical(peer);
    if !trusted_proxies.contains(peer) {
        return peer;
    }
    if let Some(ip) = from_forwarded_for(headers, trusted_proxies) {
        return ip;
    }
    for name in ["cf-connecting-ip", "x-real-ip"] {
        if let Some(ip) = headers.get(name).and_then(parse_addr) {
            return ip;
        }
    }
    peer
}

/// Walks `X-Forwarded-For` (all its lines, in order, as one list) from the right. A malformed entry
/// ends the walk without an answer: past it nothing can be trusted to be an address at all.
fn from_forwarded_for(headers: &RequestHeaders, trusted: &IpRanges) -> Option<IpAddr> {
    let entries: Vec<&str> = headers.get_all("x-forwarded-for").flat_map(|v| v.split(',')).collect();
    let mut leftmost = None;
    for entry in entries.iter().rev() {
        let ip = parse_addr(entry)?;
        if !trusted.contains(ip) {
            return Some(ip);
        }
        leftmost = Some(ip);
    }
    // Every hop is a trusted proxy: the left-most is where the chain starts.
    leftmost
}

/// Parses one forwarded address: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]:443`.
fn parse_addr(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, _) = rest.split_once(']')?;
        return inside.parse::<IpAddr>().ok().map(canonical);
    }
    let (host, port) = text.rsplit_once(':')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}
