//! Country of a client, from an MMDB file or from the country header a CDN adds.
//!
//! **The reader:** the `maxminddb` crate, MaxMind's format reader maintained by a MaxMind engineer,
//! pure Rust, reading the whole file into memory (no memory map, so no `unsafe` on Tally's side).
//! It reads GeoLite2/GeoIP2 Country and City files (`country.iso_code`) and the CC0
//! `ip-location-db` country files (`country_code`). The file is named in configuration and read at
//! start-up; nothing is downloaded.
//!
//! **CDN headers,** when configured, win over the file: the CDN saw the client's own connection.
//! Values that are not two letters, and the placeholders `XX` (unknown) and `T1` (Tor), are no
//! country.

use std::net::IpAddr;
use std::path::Path;

use crate::event::RequestHeaders;

/// Country headers of common CDNs, in the order they are tried.
pub const CDN_COUNTRY_HEADERS: &[&str] =
    &["cf-ipcountry", "cloudfront-viewer-country", "x-vercel-ip-country", "x-country-code", "fastly-client-country"];

/// An ISO 3166-1 alpha-2 country code, upper-case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CountryCode([u8; 2]);

impl CountryCode {
    /// Parses two ASCII letters, in any case; the placeholders `XX`, `ZZ` and `T1` are refused.
    pub fn parse(text: &str) -> Option<Self> {
        let b = text.trim().as_bytes();
        if b.len() != 2 || !b.iter().all(u8::is_ascii_alphabetic) {
            return None;
        }
        let code = [b[0].to_ascii_uppercase(), b[1].to_ascii_uppercase()];
        if &code == b"XX" || &code == b"ZZ" {
            return None;
        }
        Some(CountryCode(code))
    }

    /// The code.
    pub fn as_str(&self) -> &str {
        // Both bytes are ASCII letters by construction.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl std::fmt::Display for CountryCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an MMDB file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the MMDB file: {0}")]
pub struct GeoError(String);

/// An MMDB country database in memory.
pub struct GeoDb {
    reader: maxminddb::Reader<Vec<u8>>,
}

impl std::fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoDb").field("database_type", &self.reader.metadata().database_type).finish()
    }
}

#[derive(serde::Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    country: Option<Names<'a>>,
    #[serde(borrow)]
    registered_country: Option<Names<'a>>,
    country_code: Option<&'a str>,
}

#[derive(serde::Deserialize)]
struct Names<'a> {
    iso_code: Option<&'a str>,
}

impl GeoDb {
    /// Reads the file at `path`.
    pub fn open(path: &Path) -> Result<Self, GeoError> {
        let bytes = std::fs::read(path).map_err(|e| GeoError(format!("{}: {e}", path.display())))?;
        Self::from_bytes(bytes)
    }

    /// Uses an MMDB image already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GeoError> {
        let reader = maxminddb::Reader::from_source(bytes).map_err(|e| GeoError(e.to_string()))?;
        Ok(GeoDb { reader })
    }

    /// The country of `ip`, if the file knows it. A lookup error (an IPv6 address in an IPv4-only
    /// file, a damaged record) is no country rather than a failure: the event still counts.
    pub fn country(&self, ip: IpAddr) -> Option<CountryCode> {
        let found = self.reader.lookup(crate::enrich::ip::canonical(ip)).ok()?;
        let record: Record<'_> = found.decode().ok()??;
        let code = record
            .country_code
            .or(record.country.and_then(|c| c.iso_code))
            .or(record.registered_country.and_then(|c| c.iso_code))?;
        CountryCode::parse(code)
    }
}

/// Where countries come from: CDN headers (when enabled), then an MMDB file (when configured).
#[derive(Debug, Default)]
pub struct CountryResolver {
    /// The database, if configured.
    pub db: Option<GeoDb>,
    /// Header names to read, lower-case; empty to ignore headers.
    pub headers: Vec<String>,
}

impl CountryResolver {
    /// The country of a client at `ip` whose request carried `headers`.
    pub fn country(&self, ip: IpAddr, headers: &RequestHeaders) -> Option<CountryCode> {
        self.headers
            .iter()
            .find_map(|name| headers.get(name).and_then(CountryCode::parse))
            .or_else(|| self.db.as_ref().and_then(|db| db.country(ip)))
    }
}
