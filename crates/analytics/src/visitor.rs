//! Cookieless visitor identity: a keyed hash of (daily salt, site, client IP, User-Agent), and the
//! salt rotation schedule as pure functions of the time.
//!
//! ```
//! use analytics::visitor::{Salt, UtcDay, salts_to_try, visitor_id};
//!
//! let salt = Salt::from_bytes(&[7; 16]).unwrap();
//! let id = visitor_id(&salt, "site-1", "203.0.113.9".parse().unwrap(), "Mozilla/5.0");
//! assert_eq!(id.to_string().len(), 16);
//!
//! // At 00:10 UTC, today's salt and yesterday's are both tried.
//! let now = 20_000 * 86_400_000 + 10 * 60_000;
//! assert_eq!(salts_to_try(now), [UtcDay::from_days(20_000), UtcDay::from_days(19_999)]);
//! ```
//!
//! **The hash.** SipHash-2-4 from the `siphasher` crate, keyed with the salt. SipHash is a
//! pseudo-random function designed for short inputs under a secret 128-bit key, which is exactly
//! this use: without the salt nobody can tell which (IP, User-Agent) produced an id, and once the
//! salt is deleted not even Tally can. Plausible uses the same construction, so ids behave alike.
//! The crate is small, pure Rust, without `unsafe` in its hashing path, and kept by the maintainer
//! of several widely used crypto crates; BLAKE3 would do too but brings SIMD builds for no gain on
//! inputs this short. The id is 64 bits: a collision needs about four billion visitors to one
//! site on one day.
//!
//! **The inputs** are framed with length prefixes, so no two different (site, IP, User-Agent)
//! triples hash the same bytes; an IPv4 address is hashed as its IPv4-mapped IPv6 form so that the
//! two spellings of one client agree.
//!
//! **Rotation.** The salt of UTC day D is created at D 00:00 and is *today's* salt until D+1 00:00;
//! it is then *yesterday's* salt until D+2 00:00 and is deleted at D+3 00:00 (stored with a TTL
//! 72 hours after its day starts: the previous salt is kept 48 hours after it rotates, the last
//! 24 of them only as a margin for nodes whose clocks lag).
//!
//! **Which salt an event uses** ([`salts_to_try`]): an event computes its id under today's salt and
//! under yesterday's. If a visit that is still live (less than 30 minutes idle) is found under
//! either id, today's first, the event joins it with that id, so a visit that spans midnight is one
//! visit; otherwise the event starts a new visit under today's id. Storage of salts is the schema's
//! `Salt` entity, outside this module.

use std::fmt;
use std::hash::Hasher;
use std::net::IpAddr;

use rand::CryptoRng;
use siphasher::sip::SipHasher24;

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// How long a salt is stored after its day starts: one day current, 48 hours kept after rotation.
pub const SALT_TTL_MS: i64 = 3 * DAY_MS;

/// A secret salt: 16 bytes from a cryptographically secure generator, the SipHash key.
///
/// `Debug` never prints the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Salt([u8; Salt::LEN]);

/// Why bytes are not a salt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SaltError {
    /// The salt has the wrong length.
    #[error("a salt has {expected} bytes, not {actual}")]
    Length {
        /// [`Salt::LEN`].
        expected: usize,
        /// What was given.
        actual: usize,
    },
    /// The salt is all zeros, which no working generator produces.
    #[error("a salt of all zeros is refused")]
    AllZero,
}

impl Salt {
    /// Length of a salt, in bytes (SipHash's key length).
    pub const LEN: usize = 16;

    /// A fresh salt from `rng`, which must be a cryptographically secure generator.
    pub fn generate<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut bytes = [0u8; Self::LEN];
        // A CSPRNG yielding sixteen zero bytes has probability 2^-128; looping keeps
        // `from_bytes` and `generate` agreeing that such a salt does not exist.
        while bytes == [0; Self::LEN] {
            rng.fill_bytes(&mut bytes);
        }
        Salt(bytes)
    }

    /// A fresh salt from the thread's CSPRNG (ChaCha, seeded and reseeded from the OS).
    pub fn random() -> Self {
        Self::generate(&mut rand::rng())
    }

    /// A salt read back from storage.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SaltError> {
        let array: [u8; Self::LEN] =
            bytes.try_into().map_err(|_| SaltError::Length { expected: Self::LEN, actual: bytes.len() })?;
        if array == [0; Self::LEN] {
            return Err(SaltError::AllZero);
        }
        Ok(Salt(array))
    }

    /// The bytes, for storage.
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }
}

impl fmt::Debug for Salt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Salt(…)")
    }
}

/// A visitor id: 64 bits, written as 16 lower-case hex digits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VisitorId(u64);

impl VisitorId {
    /// The id as a number.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// An id from its number.
    pub fn from_u64(value: u64) -> Self {
        VisitorId(value)
    }

    /// The id as written: 16 lower-case hex digits, with no allocation.
    pub fn hex(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            let nibble = (self.0 >> (60 - 4 * i)) & 0xf;
            *b = b"0123456789abcdef"[nibble as usize];
        }
        out
    }

    /// Parses 16 hex digits.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(text, 16).ok().map(VisitorId)
    }
}

/// Written as its text: the form the Stats API and exports show.
impl serde::Serialize for VisitorId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for VisitorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The visitor id of a client on a site under `salt`.
pub fn visitor_id(salt: &Salt, site_id: &str, ip: IpAddr, user_agent: &str) -> VisitorId {
    let mut hasher = SipHasher24::new_with_key(&salt.0);
    let ip = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    hasher.write(&(site_id.len() as u64).to_le_bytes());
    hasher.write(site_id.as_bytes());
    hasher.write(&ip.octets());
    hasher.write(&(user_agent.len() as u64).to_le_bytes());
    hasher.write(user_agent.as_bytes());
    VisitorId(hasher.finish())
}

/// The most days from the epoch a [`UtcDay`] holds, either way: those an `i64` of milliseconds
/// reaches, which keeps every calendar computation far from overflow.
const MAX_DAYS: i64 = i64::MAX / DAY_MS;

/// A UTC calendar day, counted from 1970-01-01; written `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UtcDay(i64);

impl UtcDay {
    /// The day `days` after 1970-01-01, clamped to the days an `i64` of milliseconds can reach.
    pub fn from_days(days: i64) -> Self {
        UtcDay(days.clamp(-MAX_DAYS, MAX_DAYS))
    }

    /// The day holding the instant `unix_ms`.
    pub fn from_unix_ms(unix_ms: i64) -> Self {
        UtcDay(unix_ms.div_euclid(DAY_MS))
    }

    /// Days since 1970-01-01.
    pub fn days(self) -> i64 {
        self.0
    }

    /// The first millisecond of the day.
    pub fn start_ms(self) -> i64 {
        self.0.saturating_mul(DAY_MS)
    }

    /// The day before.
    pub fn previous(self) -> Self {
        UtcDay::from_days(self.0 - 1)
    }

    /// Parses `YYYY-MM-DD` (years 0000 to 9999), checking that the day exists.
    pub fn parse(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let s = text.get(r)?;
            if !s.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
            return None;
        }
        Some(UtcDay(days_from_civil(y, m, d)))
    }

    /// (year, month, day) of this day.
    pub fn civil(self) -> (i64, i64, i64) {
        civil_from_days(self.0)
    }
}

impl fmt::Display for UtcDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.civil();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The day whose salt is current at `now_ms`: new visits take their id under it.
pub fn current_salt_day(now_ms: i64) -> UtcDay {
    UtcDay::from_unix_ms(now_ms)
}

/// The salts an event at `now_ms` computes ids under, in the order to look for a live visit:
/// today's, then yesterday's (see the module docs for the rule).
pub fn salts_to_try(now_ms: i64) -> [UtcDay; 2] {
    let today = current_salt_day(now_ms);
    [today, today.previous()]
}

/// The salts that must exist in storage at `now_ms`: today's, yesterday's, and the day before's,
/// which is kept until its TTL as a margin for lagging clocks.
pub fn salts_to_keep(now_ms: i64) -> [UtcDay; 3] {
    let today = current_salt_day(now_ms);
    [today, today.previous(), today.previous().previous()]
}

/// When the salt of `day` may be deleted: its TTL, in milliseconds since the epoch.
pub fn salt_expires_at_ms(day: UtcDay) -> i64 {
    day.start_ms().saturating_add(SALT_TTL_MS)
}

/// The next rotation after `now_ms`: the next UTC midnight.
pub fn next_rotation_ms(now_ms: i64) -> i64 {
    UtcDay::from_unix_ms(now_ms).start_ms().saturating_add(DAY_MS)
}

#[cfg(test)]
mod tests;
