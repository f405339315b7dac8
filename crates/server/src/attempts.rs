//! The sign-in and unlock rate limits ([`Attempts`]): per client address (IPv6 by /64) and per
//! account or shared link, each a burst of N and then N a minute, on `governor`'s GCRA buckets.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

/// Sign-in and unlock attempts allowed per minute (after a burst of as many), per client address
/// and per account or link, unless configured otherwise.
pub const DEFAULT_ATTEMPTS_PER_MINUTE: u32 = 10;

/// A limiter keeps the keys it saw within about a minute; past this many it forgets the idle ones
/// at once, so a flood of addresses costs time, not memory.
const TIDY_ABOVE_KEYS: usize = 10_000;

type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock>;

/// The sign-in and unlock rate limits: GCRA buckets from `governor`, one per client address and
/// one per account (or shared link).
pub struct Attempts {
    per_client: Keyed<IpAddr>,
    per_account: Keyed<String>,
    clock: DefaultClock,
}

impl std::fmt::Debug for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempts").field("clients", &self.per_client.len()).finish_non_exhaustive()
    }
}

impl Attempts {
    /// Limits of `per_minute` attempts a minute, after a burst of as many.
    pub fn new(per_minute: u32) -> Attempts {
        let n = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
        Attempts {
            per_client: RateLimiter::keyed(Quota::per_minute(n)),
            per_account: RateLimiter::keyed(Quota::per_minute(n)),
            clock: DefaultClock::default(),
        }
    }

    /// Takes one attempt from `client` on `account`: `Err` with how long to wait when either is
    /// out of attempts. A client that is refused takes nothing from the account, so one client
    /// cannot lock an account by itself.
    pub fn check(&self, client: IpAddr, account: &str) -> Result<(), Duration> {
        if self.per_client.len() > TIDY_ABOVE_KEYS {
            self.per_client.retain_recent();
            self.per_client.shrink_to_fit();
        }
        if self.per_account.len() > TIDY_ABOVE_KEYS {
            self.per_account.retain_recent();
            self.per_account.shrink_to_fit();
        }
        let now = self.clock.now();
        self.per_client.check_key(&client_bucket(client)).map_err(|n| n.wait_time_from(now))?;
        let account: String = account.chars().take(256).collect();
        self.per_account.check_key(&account.to_lowercase()).map_err(|n| n.wait_time_from(now))
    }
}

/// The bucket of a client address: itself for IPv4, its /64 for IPv6 (one subscriber's prefix).
fn client_bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(segments.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_limited_per_client_and_per_account() {
        let a = Attempts::new(2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(a.check(ip("192.0.2.1"), "x@example.com").is_ok());
        assert!(a.check(ip("192.0.2.1"), "y@example.com").is_ok());
        let wait = a.check(ip("192.0.2.1"), "z@example.com").unwrap_err();
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(30), "{wait:?}");
        // A refused client took nothing from z's account.
        assert!(a.check(ip("192.0.2.2"), "Z@example.com").is_ok());
        assert!(a.check(ip("192.0.2.3"), "z@example.com").is_ok());
        assert!(a.check(ip("192.0.2.4"), "z@example.com").is_err(), "the account's own limit, any case");
        // One IPv6 subscriber is one /64.
        assert!(a.check(ip("2001:db8:1:2::1"), "v6a@example.com").is_ok());
        assert!(a.check(ip("2001:db8:1:2:ffff::9"), "v6b@example.com").is_ok());
        assert!(a.check(ip("2001:db8:1:2:abcd::7"), "v6c@example.com").is_err());
        assert!(a.check(ip("2001:db8:1:3::1"), "v6c@example.com").is_ok());
    }
}
